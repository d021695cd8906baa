"""bot.request for the issue 6 catalog operators (bot.ops.matmul, bot.ops.loss): matmul with its epilogue,
batched matmul, reductions over any dim, argmax/argmin, fused add + rmsnorm and cross entropy, in
English and Chinese, typed as expressions and pasted as PyTorch."""
from __future__ import annotations

import pytest
from generated import canon, error, expr, shapes

from bot import ir
from bot.request import SUPPORTED, parse_request

SQUARE = {"a": [[4096, 4096]], "b": [[4096, 4096]]}
DEFAULT_MM = {"a": [[4096, 4096], [1000, 700]], "b": [[4096, 4096], [700, 1500]]}


def dtypes(spec: dict) -> dict[str, list[str]]:
    return {i["name"]: i["dtypes"] for i in spec["inputs"]}


# ---------------------------------------------------------------- matmul

@pytest.mark.parametrize("text", [
    "matmul 4096x4096 by 4096x4096", "matrix multiply M=4096 N=4096 K=4096", "GEMM 4096^3", "gemm 4096³",
    "matrix multiplication of shape 4096x4096x4096", "a @ b for 4096x4096 by 4096x4096", "mm m=4096, n=4096, k=4096",
    "matmul of two 4096x4096 matrices", "matmul 4096x4096 @ 4096x4096", "矩阵乘 4096x4096 乘 4096x4096",
    "矩阵乘法 4096^3", "矩阵乘 形状 4096x4096x4096",
])
def test_matmul_phrasings_and_size_spellings(text):
    spec, _ = parse_request(text + " fp16")
    assert expr(spec) == canon("a @ b")
    assert shapes(spec) == SQUARE
    assert spec["name"] == "matmul" and spec["matmul"] is True and spec["tf32"] is False
    assert spec["outputs"][0]["shapes"] == [[4096, 4096]]


@pytest.mark.parametrize("text, a, b", [
    ("matmul 1024x4096 by 4096x2048", [1024, 4096], [4096, 2048]),
    ("matmul M=1024 N=2048 K=4096", [1024, 4096], [4096, 2048]),
    ("matmul 1024x2048x4096", [1024, 4096], [4096, 2048]),
    ("matmul a: [1024, 4096], b: [4096, 2048]", [1024, 4096], [4096, 2048]),
    ("matmul a 1024x4096 and b 4096x2048", [1024, 4096], [4096, 2048]),
])
def test_matmul_sizes_are_m_n_k_or_both_operands(text, a, b):
    spec, notes = parse_request(text)
    assert shapes(spec) == {"a": [a], "b": [b]}
    assert spec["outputs"][0]["shapes"] == [[a[0], b[1]]]


def test_a_three_dim_matmul_shape_is_read_as_m_n_k_and_noted():
    assert "read 1024x2048x4096 as M x N x K" in parse_request("matmul 1024x2048x4096")[1]


def test_matmul_cases_keep_their_written_order():
    spec, _ = parse_request("matmul 1000x1500x700 and 4096^3, also M=64 N=32 K=16")
    assert shapes(spec)["a"] == [[1000, 700], [4096, 4096], [64, 16]]


def test_matmul_defaults_are_two_sizes_in_fp16_and_bf16_and_noted():
    spec, notes = parse_request("matmul")
    assert shapes(spec) == DEFAULT_MM
    assert dtypes(spec)["a"] == ["float16", "bfloat16"]
    assert notes == ["no shape named: using M=4096 N=4096 K=4096 and an odd M=1000 N=1500 K=700 "
                     "(no block size divides it)",
                     "no dtype named: testing float16 and bfloat16 (float32 when asked for: fp32, or tf32 to allow TF32)"]


@pytest.mark.parametrize("text, expected_dtypes, tf32", [
    ("matmul fp32", ["float32"], False),
    ("matmul with tf32", ["float32"], True),
    ("matmul, allow TF32", ["float32"], True),
    ("matmul fp16 and tf32", ["float16", "float32"], True),
    ("matmul fp32 without tf32", ["float32"], False),
    ("matmul(a, b, tf32=True)", ["float32"], True),
    ("矩阵乘 允许 tf32", ["float32"], True),
])
def test_tf32_is_float32_allowing_tf32(text, expected_dtypes, tf32):
    spec, _ = parse_request(text)
    assert dtypes(spec)["a"] == expected_dtypes
    assert expr(spec) == canon(f"matmul(a, b, tf32={tf32})")
    assert spec["tf32"] is tf32 and spec["params"] == ({"tf32": True} if tf32 else {})


def test_tf32_outside_a_matmul_is_an_unsupported_dtype():
    assert "tf32" in error("relu in tf32")


@pytest.mark.parametrize("text, expected", [
    ("matmul with bias", "a @ b + bias"),
    ("matmul + bias + relu", "relu(a @ b + bias)"),
    ("gemm with bias and gelu", "gelu(a @ b + bias)"),
    ("matmul then gelu tanh approximation", "gelu(a @ b, approximate='tanh')"),
    ("matmul with silu", "silu(a @ b)"),
    ("matmul, sigmoid activation", "sigmoid(a @ b)"),
    ("matmul with tanh", "tanh(a @ b)"),
    ("matmul plus residual", "a @ b + residual"),
    ("matmul with residual", "a @ b + residual"),
    ("matmul scaled by 0.5", "(a @ b) * 0.5"),
    ("matmul scaled by alpha 0.5", "(a @ b) * 0.5"),
    ("matmul times 0.5", "(a @ b) * 0.5"),
    ("matmul with bias, relu, scale by 0.5 and a residual", "relu(a @ b + bias) * 0.5 + residual"),
    ("matmul with bias and relu, scaled by 0.5, plus residual", "relu(a @ b + bias) * 0.5 + residual"),
    ("matmul without bias, relu", "relu(a @ b)"),
    ("矩阵乘 + 偏置 + ReLU 激活", "relu(a @ b + bias)"),
    ("矩阵乘 偏置 gelu 激活 缩放 0.5 残差", "gelu(a @ b + bias) * 0.5 + residual"),
    ("矩阵乘法 加 残差", "a @ b + residual"),
    ("矩阵乘 乘以 0.5", "(a @ b) * 0.5"),
    # a row op over the product's output, after it or said of it
    ("matmul with bias and relu then softmax", "softmax(relu(a @ b + bias))"),
    ("log softmax of the matmul", "log_softmax(a @ b)"),
])
def test_matmul_epilogue_words(text, expected):
    spec, _ = parse_request(text)
    assert expr(spec) == canon(expected)


def test_epilogue_inputs_get_n_and_m_n_shapes_and_the_name_lists_the_epilogue():
    spec, notes = parse_request("matmul with bias, relu, scaled by 0.5, plus residual, 1024x4096 by 4096x2048")
    assert shapes(spec) == {"a": [[1024, 4096]], "b": [[4096, 2048]], "bias": [[2048]], "residual": [[1024, 2048]]}
    assert spec["name"] == "matmul_bias_relu_scale_residual"
    assert spec["params"] == {"scale": 0.5}
    assert spec["description"].startswith("matrix multiplication a @ b with epilogue")
    assert any("bias" in n and "[N]" in n for n in notes)


@pytest.mark.parametrize("text", [
    "relu(a @ b + bias) * 0.5 + residual for fp16 1024x4096 by 4096x2048",
    "relu(matmul(a, b) + bias) * 0.5 + residual, fp16, M=1024 N=2048 K=4096",
])
def test_typed_matmul_expression(text):
    spec, _ = parse_request(text)
    assert expr(spec) == canon("relu(a @ b + bias) * 0.5 + residual")
    assert shapes(spec)["residual"] == [[1024, 2048]] and shapes(spec)["bias"] == [[2048]]


def test_typed_bare_matmul_takes_its_epilogue_and_names_from_words():
    spec, _ = parse_request("x @ w with bias and relu for 1024x4096 by 4096x4096")
    assert expr(spec) == canon("relu(x @ w + bias)")
    assert shapes(spec) == {"x": [[1024, 4096]], "w": [[4096, 4096]], "bias": [[4096]]}


@pytest.mark.parametrize("text, expected, given, out", [
    # every input's shape by name: taken as it is (a transposed operand as it lies in memory)
    ("swiglu: silu(x @ w1) * (x @ w2) with x 2048x4096, w1 4096x11008, w2 4096x11008 fp16",
     "silu(x @ w1) * (x @ w2)", {"x": [2048, 4096], "w1": [4096, 11008], "w2": [4096, 11008]}, [2048, 11008]),
    ("a.T @ b with a 1024x4096 and b 1024x2048", "a.T @ b", {"a": [1024, 4096], "b": [1024, 2048]}, [4096, 2048]),
    ("relu(x @ w + b) with x 128x256, w 256x512, b 512", "relu(x @ w + b)",
     {"x": [128, 256], "w": [256, 512], "b": [512]}, [128, 512]),
    ("(x @ w1) @ w2 with x 64x128, w1 128x256, w2 256x32", "(x @ w1) @ w2",
     {"x": [64, 128], "w1": [128, 256], "w2": [256, 32]}, [64, 32]),
    ("torch.einsum('ij,jk->ik', a, b) with a 8x8 and b 8x16", "a @ b", {"a": [8, 8], "b": [8, 16]}, [8, 16]),
    # operands as they lie in memory where a transpose or a shared weight leaves no M, N, K to say
    ("a @ b.T for 512x256 by 512x256", "a @ b.T", {"a": [512, 256], "b": [512, 256]}, [512, 512]),
    ("a.T @ b for 256x512 by 256x128", "a.T @ b", {"a": [256, 512], "b": [256, 128]}, [512, 128]),
    # a batch of matrices by one weight, in words ('3D' and '4D' say what the shapes do)
    ("3D tensor matrix multiplication 16x1024x2048 by 2048x768", "a @ b", {"a": [16, 1024, 2048], "b": [2048, 768]},
     [16, 1024, 768]),
    ("4D tensor-matrix multiplication 8x16x256x512 by 512x768", "a @ b", {"a": [8, 16, 256, 512], "b": [512, 768]},
     [8, 16, 256, 768]),
    # problem sizes: every product of the expression is that problem's
    ("silu(x @ w1) * (x @ w2) for 2048x4096 by 4096x11008", "silu(x @ w1) * (x @ w2)",
     {"x": [2048, 4096], "w1": [4096, 11008], "w2": [4096, 11008]}, [2048, 11008]),
])
def test_typed_matmul_expressions_with_shapes_by_name_or_problem(text, expected, given, out):
    spec, _ = parse_request(text)
    assert expr(spec) == canon(expected)
    assert shapes(spec) == {n: [s] for n, s in given.items()}
    assert spec["outputs"][0]["shapes"] == [out]
    assert spec["name"] == "swiglu" or not text.startswith("swiglu")


@pytest.mark.parametrize("text, words", [
    ("(x @ w1) @ w2", ["multiplies a product again", "x 64x128, w1 128x256"]),
    ("(x @ w) * (w @ x) for 64x128 by 128x64", ["w is an operand of two products", "by name"]),
    ("relu(x @ w) with x 128x256, w 128x512", ["K = 256", "K = 128"]),
    ("matmul 1024x4096", ["1024x4096", "M, N and K", "4096x4096x4096"]),
    ("matmul 1024x4096 by 2048x4096", ["do not multiply", "4096", "2048"]),
    ("matmul M=4096 N=4096", ["M, N and K"]),
    ("matmul then layernorm", ["epilogue", "layernorm", "relu(a @ b + bias) * 0.5 + residual"]),
    ("softmax then matmul", ["softmax before the product", "softmax(a @ b)", "softmax(a) @ b"]),
    ("matmul then softmax, then add bias", ["softmax before bias"]),
    ("matmul with an activation", ["which activation", "relu"]),
    ("matmul with relu and gelu", ["relu and gelu", "which one"]),
    ("bmm 4096^3", ["batch count", "batch 32 of 512x512x512"]),
])
def test_matmul_requests_that_need_an_answer(text, words):
    message = error(text)
    assert all(w in message for w in words), message


# ---------------------------------------------------------------- batched matmul

@pytest.mark.parametrize("text", [
    "batched matmul 32x512x512 by 32x512x512", "bmm, batch 32 of 512x512x512", "batched gemm batch size 32, 512^3",
    "bmm B=32 M=512 N=512 K=512", "matmul 32x512x512x512", "32 batches of 512x512x512 matmul",
    "批量矩阵乘 32x512x512 乘 32x512x512", "批量矩阵乘 批量 32 形状 512x512x512",
])
def test_batched_matmul_phrasings(text):
    spec, _ = parse_request(text)
    assert expr(spec) == canon("a @ b")
    assert shapes(spec) == {"a": [[32, 512, 512]], "b": [[32, 512, 512]]}
    assert spec["name"] == "bmm" and spec["outputs"][0]["shapes"] == [[32, 512, 512]]


def test_batched_matmul_defaults_and_epilogue():
    spec, notes = parse_request("bmm with bias and residual")
    assert expr(spec) == canon("a @ b + bias + residual")
    assert shapes(spec) == {"a": [[32, 512, 512], [3, 1000, 700]], "b": [[32, 512, 512], [3, 700, 1500]],
                            "bias": [[512], [1500]], "residual": [[32, 512, 512], [3, 1000, 1500]]}
    assert any("B=32 M=512 N=512 K=512" in n for n in notes)


# ---------------------------------------------------------------- matmul corrections

def test_matmul_corrections_read_sizes_as_m_n_k():
    spec, _ = parse_request("matmul with bias", ["shape 2048x1024x512", "also 64^3"])
    assert shapes(spec) == {"a": [[2048, 512], [64, 64]], "b": [[512, 1024], [64, 64]], "bias": [[1024], [64]]}


@pytest.mark.parametrize("correction, expected_dtypes, tf32", [
    ("bf16 only", ["bfloat16"], False), ("also fp32", ["float16", "bfloat16", "float32"], False),
    ("allow tf32", ["float32"], True),
])
def test_matmul_dtype_corrections(correction, expected_dtypes, tf32):
    spec, _ = parse_request("matmul 4096^3", [correction])
    assert dtypes(spec)["a"] == expected_dtypes and spec["tf32"] is tf32


def test_no_tf32_correction():
    spec, _ = parse_request("matmul with tf32", ["no tf32"])
    assert spec["tf32"] is False and dtypes(spec)["a"] == ["float32"]


def test_switching_between_matmul_and_other_operators_drops_the_other_kind_of_cases():
    spec, _ = parse_request("relu for 1024x4096", ["make it a @ b"])
    assert shapes(spec) == DEFAULT_MM
    spec, _ = parse_request("matmul 4096^3", ["make it relu(x + y)"])
    assert shapes(spec)["x"] == [[4096, 4096], [5333, 497]]


# ---------------------------------------------------------------- reductions over a dim

@pytest.mark.parametrize("text, dims, name", [
    ("sum over dims 1 and 2 of 8x16x32", (1, 2), "sum_dims1_2"),
    ("mean over the last two dims of 8x64x56x56, keeping the dims", (-2, -1), "mean_dimsneg2_neg1"),
    ("max over axes (0, 1) of 4x6x9", (0, 1), "max_dims0_1"),
    ("x.amax(dim=(0, 1)) on 4x6x9", (0, 1), "max_dims0_1"),        # "max" alone shadowed a builtin
])
def test_reductions_over_several_named_dims(text, dims, name):
    spec, _ = parse_request(text)
    node = ir.parse(spec["expression"])
    assert node.attr("dim") == dims and spec["name"] == name


@pytest.mark.parametrize("text, expected, name", [
    ("sum over dim 0 of a 8192x8192 tensor", "sum(x, dim=0)", "sum_dim0"),
    ("mean along axis 1 of 8x128x64", "mean(x, dim=1)", "mean_dim1"),
    ("max over the first dim", "max(x, dim=0)", "max_dim0"),
    ("min over dim -2", "min(x, dim=-2)", "min_dim_neg2"),
    ("sum over the second to last dim", "sum(x, dim=-2)", "sum_dim_neg2"),
    ("column-wise sum", "sum(x, dim=-2)", "sum_dim_neg2"),
    ("mean(x, dim=0)", "mean(x, dim=0)", "mean_dim0"),
    ("沿第0维求和", "sum(x, dim=0)", "sum_dim0"),
    ("按维度1求平均 8x128x64", "mean(x, dim=1)", "mean_dim1"),
    ("第一维 最大值", "max(x, dim=0)", "max_dim0"),
    ("沿第二维求最小值 8x128x64", "min(x, dim=1)", "min_dim1"),
])
def test_reductions_over_a_named_dim(text, expected, name):
    spec, _ = parse_request(text)
    assert expr(spec) == canon(expected)
    assert spec["name"] == name and spec["params"]["dim"] == ir.parse(expected).attr("dim")
    assert spec["reduce"]["dim"] == ir.parse(expected).attr("dim")


@pytest.mark.parametrize("text", ["sum over dim 1 of a 1024x4096 tensor", "sum along axis -1", "沿最后一维求和",
                                  "sum(x, dim=1) for 1024x4096", "row-wise sum"])
def test_a_dim_that_is_the_last_one_keeps_the_last_dim_form_and_name(text):
    spec, _ = parse_request(text)
    assert expr(spec) == canon("sum(x)") and spec["name"] == "sum_last_dim" and "dim" not in spec["params"]


def test_dim_correction_applies_to_a_reduction():
    spec, _ = parse_request("sum over dim 0 of 8x64x32", ["over dim 1"])
    assert expr(spec) == canon("sum(x, dim=1)")


@pytest.mark.parametrize("text, words", [
    ("argmax over dim 0 and dim 1", ["0, 1", "one dim"]),      # sum, mean, max, min take several
    ("sum over dim 2 of a 1024x4096 tensor", ["dim 2", "2 dims"]),
])
def test_reduction_dims_that_cannot_be_used(text, words):
    message = error(text)
    assert all(w in message for w in words), message


# ---------------------------------------------------------------- prod, var, std, logsumexp and norms in words

@pytest.mark.parametrize("text, expected", [
    ("logsumexp over the last dim of a 4096x1024 fp16 tensor", "logsumexp(x, dim=-1)"),
    ("log-sum-exp of each row", "logsumexp(x, dim=-1)"),
    ("variance over dim 1 (unbiased) of 8x16x4", "var(x, dim=1)"),
    ("population variance over dim 0", "var(x, dim=0, correction=0)"),
    ("std with correction 0 over the last dim", "std(x, dim=-1, correction=0)"),
    ("sample standard deviation of each column", "std(x, dim=-2)"),
    ("L2 norm of each row", "norm(x, p=2.0, dim=-1)"),
    ("Euclidean norm over dim 0", "norm(x, p=2.0, dim=0)"),
    ("max norm of each row", "norm(x, p=float('inf'), dim=-1)"),
    ("L3 norm over the last dim", "norm(x, p=3.0, dim=-1)"),
    ("Frobenius norm of x", "norm(x, p=2.0, dim=None)"),
    ("L1 normalize the rows", "x / clamp(norm(x, p=1.0, dim=-1, keepdim=True), 1e-12)"),
    ("normalize x by its L2 norm over dim 0", "x / clamp(norm(x, p=2.0, dim=0, keepdim=True), 1e-12)"),
    ("normalize each row by its L2 norm", "x / clamp(norm(x, p=2.0, dim=-1, keepdim=True), 1e-12)"),
    ("normalize the columns by their L1 norm", "x / clamp(norm(x, p=1.0, dim=-2, keepdim=True), 1e-12)"),
    ("L2 normalize the rows with eps 1e-6", "x / clamp(norm(x, p=2.0, dim=-1, keepdim=True), 1e-6)"),
    ("L2 normalize over all elements", "x / clamp(norm(x, p=2.0, dim=None), 1e-12)"),
    ("product over the last dim", "prod(x, dim=-1)"),
    ("variance of exp(x) over dim 0", "var(exp(x), dim=0)"),
    ("variance of each row keeping the dim", "var(x, dim=-1, keepdim=True)"),
    ("行方差", "var(x, dim=-1)"),
    ("按列求标准差", "std(x, dim=-2)"),
    ("总体方差 第0维", "var(x, dim=0, correction=0)"),
    ("对数求和指数 按行", "logsumexp(x, dim=-1)"),
    ("L2 范数 按行", "norm(x, p=2.0, dim=-1)"),
    ("无穷范数 按列", "norm(x, p=float('inf'), dim=-2)"),
    ("F范数", "norm(x, p=2.0, dim=None)"),
    ("L1 归一化 按行", "x / clamp(norm(x, p=1.0, dim=-1, keepdim=True), 1e-12)"),
    ("乘积 按行", "prod(x, dim=-1)"),
])
def test_fused_reductions_in_words(text, expected):
    spec, _ = parse_request(text)
    assert expr(spec) == canon(expected)


def test_defaults_of_var_and_normalize_in_words_are_torchs_and_noted():
    assert any("correction=1" in n and "torch.var" in n for n in parse_request("variance of each row")[1])
    assert not any("correction" in n for n in parse_request("population variance of each row")[1])
    assert any("1e-12" in n for n in parse_request("L2 normalize the rows")[1])


@pytest.mark.parametrize("text, expected", [
    ("sum over dim 0 keeping the dim", "sum(x, dim=0, keepdim=True)"),
    ("argmax of each row, keepdim", "argmax(x, dim=-1, keepdim=True)"),
    ("product of x and y", "x * y"),
    ("elementwise product of x and y", "x * y"),
    ("layer norm", "layernorm(x, weight, bias, eps=1e-5)"),
    ("rms norm", "rmsnorm(x, weight, eps=1e-6)"),
])
def test_words_beside_the_fused_reductions_keep_their_meaning(text, expected):
    assert expr(parse_request(text)[0]) == canon(expected)


@pytest.mark.parametrize("text, words", [
    ("norm of each row", ["which 'norm'", "L2 norm", "layer norm"]),
    ("normalize the rows", ["which 'normalize'", "L2 normalize"]),
    ("L2 norm", ["norm over which dim"]),
    ("L1 and L2 norm of each row", ["L1, L2", "Which one"]),
    ("L0 norm of each row", ["positive order"]),
    ("unbiased variance with correction 0 of each row", ["corrections 0 and 1", "Which one"]),
    ("variance over all elements keeping the dim", ["keeping the dim", "name a dim"]),
])
def test_fused_reductions_in_words_that_are_refused(text, words):
    message = error(text)
    assert all(w in message for w in words), message


@pytest.mark.parametrize("text, correction, expected", [
    ("variance over dim 1 of 8x16x4", "std instead", "std(x, dim=1)"),
    ("Frobenius norm of x", "over dim 0", "norm(x, p=2.0, dim=0)"),
    ("L2 normalize the rows", "over dim 0", "x / clamp(norm(x, p=2.0, dim=0, keepdim=True), 1e-12)"),
])
def test_corrections_to_fused_reductions_in_words(text, correction, expected):
    assert expr(parse_request(text, [correction])[0]) == canon(expected)


# ---------------------------------------------------------------- any / all

@pytest.mark.parametrize("text, expected", [
    ("torch.any(x > 0, dim=1) for 8x16x4", "any(x > 0, dim=1)"),
    ("def f(x):\n    return x.all()\nfor 8x16", "all(x, dim=None)"),
    ("def f(x, y):\n    return (x > y).all(dim=-1, keepdim=True)\nfor 8x16", "all(x > y, dim=-1, keepdim=True)"),
    ("any over the last dim of 8x16", "any(x, dim=-1)"),
    ("logical all over dim 0 of 8x16", "all(x, dim=0)"),
    ("any of x > 0.5 over the last dim for 8x16", "any(x > 0.5, dim=-1)"),
    ("全部为真 第0维 8x16", "all(x, dim=0)"),
])
def test_any_and_all_phrasings(text, expected):
    spec, _ = parse_request(text)
    assert expr(spec) == canon(expected)
    assert set(spec["outputs"][0]["dtypes"]) == {"bool"}


@pytest.mark.parametrize("text, words", [
    ("torch.any(x, dim=(0, 1)) for 8x16x4", ["one dim"]),
    ("def f(m):\n    return m.any(dim=1)\nfor 8x16, m is bool", ["mask alone", "any(x > 0, dim=-1)"]),
    ("relu for any shape", ["'any'"]),
])
def test_any_and_all_that_are_refused(text, words):
    message = error(text)
    assert all(w in message for w in words), message



@pytest.mark.parametrize("text, expected", [
    ("argmax over the last dim of 4096x4096 fp16", "argmax(x, dim=-1)"),
    ("argmax of each row", "argmax(x, dim=-1)"),
    ("arg max row-wise", "argmax(x, dim=-1)"),
    ("index of the maximum over dim 0", "argmax(x, dim=0)"),
    ("argmin over dim 0", "argmin(x, dim=0)"),
    ("torch.argmax(x, dim=0)", "argmax(x, dim=0)"),
    ("按行最大值索引", "argmax(x, dim=-1)"),
    ("沿第0维求最小值索引", "argmin(x, dim=0)"),
    ("最大值的下标 按行", "argmax(x, dim=-1)"),
])
def test_argmax_argmin_phrasings(text, expected):
    spec, _ = parse_request(text)
    assert expr(spec) == canon(expected)


def test_argmax_returns_int64_indices_and_is_named_by_its_dim():
    spec, _ = parse_request("argmax over the last dim of 4096x4096 fp16")
    assert spec["name"] == "argmax_last_dim"
    assert spec["outputs"][0] == {"name": "out", "dtypes": ["int64"], "shapes": [[4096]]}
    assert parse_request("argmin over dim 0")[0]["name"] == "argmin_dim0"


def test_argmax_of_an_expression_is_a_chain():
    spec, _ = parse_request("argmax of x + y over the last dim for 64x128")
    assert spec["expression"] == "argmax(x + y, dim=-1)" and spec["chain"] == 2


# ---------------------------------------------------------------- fused add + rmsnorm

@pytest.mark.parametrize("text", [
    "fused add rmsnorm", "add + rmsnorm with weight", "residual add then rmsnorm", "fused add + RMSNorm",
    "加法+RMSNorm 融合", "残差相加 + RMS归一化",
])
def test_fused_add_rmsnorm_phrasings(text):
    spec, _ = parse_request(text + " for 1024x4096")
    assert expr(spec) == canon("rmsnorm(x + residual, weight, eps=1e-6)")
    assert shapes(spec) == {"x": [[1024, 4096]], "residual": [[1024, 4096]], "weight": [[4096]]}


def test_fused_add_rmsnorm_defaults_are_noted():
    spec, notes = parse_request("fused add rmsnorm")
    assert any("eps" in n for n in notes) and any("weight" in n for n in notes) and any("5333x497" in n for n in notes)
    assert spec["name"] == "rmsnorm_add"


# ---------------------------------------------------------------- cross entropy

@pytest.mark.parametrize("text, logits", [
    ("cross entropy over 4096x32000 logits", [4096, 32000]),
    ("cross-entropy loss for logits of shape 8192x50257", [8192, 50257]),
    ("CrossEntropy over the last dim of 1024x32000", [1024, 32000]),
    ("softmax cross entropy, 1024x32000, reduction mean", [1024, 32000]),
    ("cross_entropy(logits, target) for 1024x32000", [1024, 32000]),
    ("交叉熵 形状 4096x32000", [4096, 32000]),
    ("交叉熵损失 4096x32000 取平均", [4096, 32000]),
])
def test_cross_entropy_phrasings(text, logits):
    spec, _ = parse_request(text + " fp16")
    assert expr(spec) == canon("cross_entropy(logits, target)")
    assert spec["inputs"] == [
        {"name": "logits", "dtypes": ["float16"], "shapes": [logits], "domain": "normal"},
        {"name": "target", "dtypes": ["int64"], "shapes": [logits[:1]], "domain": "index", "index_of": "logits"},
    ]
    assert spec["outputs"][0]["shapes"] == [[]] and spec["name"] == "cross_entropy"


@pytest.mark.parametrize("text", [
    "cross entropy per row", "cross entropy, reduction none", "cross entropy with no reduction",
    "per-sample cross-entropy loss", "cross_entropy(logits, target, reduction='none')", "交叉熵 逐行", "交叉熵 不归约",
])
def test_cross_entropy_without_reduction(text):
    spec, notes = parse_request(text)
    assert expr(spec) == canon("cross_entropy(logits, target, reduction='none')")
    assert spec["name"] == "cross_entropy_per_row" and spec["params"] == {"reduction": "none"}
    assert not any("reduction" in n for n in notes)


def test_cross_entropy_defaults_one_int64_target_dtype_per_variant_and_notes():
    spec, notes = parse_request("cross entropy with int64 targets")
    assert dtypes(spec) == {"logits": ["float16", "bfloat16", "float32"], "target": ["int64"] * 3}
    assert shapes(spec)["target"] == [[4096], [5333]]
    assert any("reduction='mean'" in n for n in notes)
    assert any("float16, bfloat16 and float32" in n for n in notes)


@pytest.mark.parametrize("text, expression", [
    ("cross entropy of 64x50 logits with ignore_index=0", "cross_entropy(logits, target, ignore_index=0)"),
    ("nll loss of 64x50 log-probs ignoring class -1, summed", "nll_loss(log_probs, target, reduction='sum', ignore_index=-1)"),
    ("交叉熵 64x50 忽略索引 3", "cross_entropy(logits, target, ignore_index=3)"),
    ("cross entropy of 64x50 logits with class weights, ignore_index 0",
     "cross_entropy(logits, target, weight=weight, ignore_index=0)"),
])
def test_cross_entropy_ignore_index_in_words(text, expression):
    spec, _ = parse_request(text)
    assert spec["expression"] == expression
    assert next(i for i in spec["inputs"] if i["name"] == "target")["padding"] == int(expression.split("=")[-1][:-1])
    if "weight" in expression:
        assert next(i for i in spec["inputs"] if i["name"] == "weight")["shapes"] == [[50]]


@pytest.mark.parametrize("text, words", [
    ("cross entropy with label smoothing", ["label smoothing with its value", "mean", "none"]),
    ("cross entropy with an ignore index", ["ignore index", "mean", "none", "'ignore_index 0'"]),
    ("cross entropy with a weight 50", ["'weight'", "'class weights'"]),
    ("cross entropy then relu", ["relu", "cross_entropy(logits * 0.5, target)"]),
    ("cross entropy over dim 0", ["dim 0", "last dim"]),
])
def test_cross_entropy_requests_that_are_refused(text, words):
    message = error(text)
    assert all(w in message for w in words), message


# ---------------------------------------------------------------- pasted PyTorch

@pytest.mark.parametrize("code, expected", [
    ("def mm(a, b):\n    return torch.matmul(a, b)", "a @ b"),
    ("def mm(a, b):\n    return a @ b", "a @ b"),
    ("def mm(x, w, bias):\n    y = x @ w + bias\n    return F.gelu(y)", "gelu(x @ w + bias)"),
    ("def colsum(x):\n    return x.sum(dim=0)", "sum(x, dim=0)"),
    ("def am(x):\n    return torch.argmax(x, dim=0)", "argmax(x, dim=0)"),
    ("def mx(x):\n    values, idx = torch.max(x, dim=0)\n    return values", "max(x, dim=0)"),
    ("def am(x):\n    values, idx = x.max(0)\n    return idx", "argmax(x, dim=0)"),
    ("def loss(logits, target):\n    return F.cross_entropy(logits, target)", "cross_entropy(logits, target)"),
    ("def loss(logits, labels):\n    return F.cross_entropy(logits, labels, reduction='none')",
     "cross_entropy(logits, labels, reduction='none')"),
])
def test_pasted_functions(code, expected):
    spec, _ = parse_request(code)
    assert expr(spec) == canon(expected)


def test_pasted_bmm_with_sizes_in_the_words():
    spec, _ = parse_request("make this fast for fp16, batch 8 of 128^3\n```python\ndef f(a, b):\n"
                            "    return torch.bmm(a, b)\n```")
    assert shapes(spec) == {"a": [[8, 128, 128]], "b": [[8, 128, 128]]}
    assert dtypes(spec)["a"] == ["float16"]


def test_pasted_cross_entropy_target_first_still_takes_cases_from_the_logits():
    spec, _ = parse_request("for 1024x32000\ndef loss(target, logits):\n    return F.cross_entropy(logits, target)")
    assert shapes(spec) == {"target": [[1024]], "logits": [[1024, 32000]]}
    assert dtypes(spec)["target"] == ["int64"] * 3


# ---------------------------------------------------------------- the supported list

@pytest.mark.parametrize("text", ["deformable conv2d", "einsum ij,jk->ik", "hello", "rotary embedding of q"])
def test_unsupported_requests_list_what_is_supported(text):
    message = error(text)
    assert SUPPORTED in message
    assert all(w in message for w in ("matmul", "bmm", "argmax", "cross entropy", "rmsnorm (also fused with an add)",
                                      ir.SUPPORTED_TEXT))


# ---------------------------------------------------------------- everyday words

@pytest.mark.parametrize("text, expected", [
    ("softmax with temperature 0.7 over the last dim for 4096x32000 bf16", "softmax(x / 0.7)"),
    ("log softmax with a temperature of 2 for 64x1000", "log_softmax(x / 2.0)"),
    ("温度为0.5的softmax 64x1000", "softmax(x / 0.5)"),
    ("squared relu for 4096x4096", "relu(x) ** 2"),
    ("relu squared of x for 64x64", "relu(x) ** 2"),
    ("outer product of a 1000 and b 2000", "a.reshape(-1, 1) * b"),
    ("bias + gelu for x 4096x4096 and bias 4096 fp16", "gelu(x + bias)"),
    ("bias_gelu for x 64x64 and bias 64", "gelu(x + bias)"),
    ("bias relu for x 64x64 and bias 64", "relu(x + bias)"),
    ("upsample 2x nearest on 8x64x28x28", "F.interpolate(x, scale_factor=2, mode='nearest')"),
    ("kl divergence between log probs 64x1000 and probs 64x1000", "F.kl_div(x, y)"),
])
def test_everyday_words(text, expected):
    spec, _ = parse_request(text)
    assert expr(spec) == canon(expected)


@pytest.mark.parametrize("text, words", [
    ("bilinear upsample by 2 on 8x64x28x28", "'bilinear' interpolates between values"),
    ("relu bias for x 64x64 and bias 64", "could not place 'bias'"),      # which comes first is not said
])
def test_everyday_words_refused_naming_why(text, words):
    assert words in error(text)


@pytest.mark.parametrize("text, expected, out", [
    # the dim counts in what the reduction runs over: the lookup's [4, 7, 16], not the ids' [4, 7]
    ("def f(ids, w):\n    return F.embedding(ids, w).sum(1)\nwith ids 4x7 and w 50x16", "sum(embedding(ids, w), dim=1)",
     [4, 16]),
    ("def f(ids, w):\n    return F.embedding(ids, w).mean(-1)\nwith ids 4x7 and w 50x16",
     "mean(embedding(ids, w), dim=-1)", [4, 7]),
    ("torch.cumsum(x.unsqueeze(1) * y, dim=2) with x 4x8 and y 5x8", "cumsum(x.unsqueeze(1) * y, dim=-1)", [4, 5, 8]),
])
def test_a_dim_counts_in_the_shape_of_what_it_runs_over(text, expected, out):
    spec, _ = parse_request(text)
    assert expr(spec) == canon(expected)
    assert spec["outputs"][0]["shapes"] == [out]


@pytest.mark.parametrize("text, expected", [
    ("mean over the batch dim of 32x128", "mean(x, dim=0)"),
    ("argmax over channels of 8x64x32x32", "argmax(x, dim=1)"),
    ("softmax over the channels of 8x64x32", "exp(x - max(x, dim=1, keepdim=True)) / "
                                              "sum(exp(x - max(x, dim=1, keepdim=True)), dim=1, keepdim=True)"),
    ("max along the channel dim of 8x64x32x32", "max(x, dim=1)"),
])
def test_channel_dims_in_words(text, expected):
    spec, _ = parse_request(text)
    assert expr(spec) == canon(expected)
