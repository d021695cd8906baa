"""bot.request: request words (English, Chinese, pasted PyTorch) and corrections -> spec."""
from __future__ import annotations

import pytest
from generated import canon, error, expr, shapes

from bot import ir
from bot import spec as specmod
from bot.generators.interface import GenerationError
from bot.request import ASK_OP, parse_request
from runner import protocol

ALL = ["float16", "bfloat16", "float32"]
DEFAULT_SHAPES = [[4096, 4096], [5333, 497]]


def dtypes(spec: dict) -> list[str]:
    first = spec["inputs"][0]["dtypes"]
    assert all(i["dtypes"] == first for i in spec["inputs"])
    return first


# ---------------------------------------------------------------- the requests of the brief

def test_add_two_fp16_matrices():
    spec, notes = parse_request("add two fp16 matrices of shape 4096x4096")
    assert expr(spec) == canon("x + y")
    assert [i["name"] for i in spec["inputs"]] == ["x", "y"]
    assert shapes(spec) == {"x": [[4096, 4096]], "y": [[4096, 4096]]}
    assert dtypes(spec) == ["float16"]
    assert spec["name"] == "add"
    assert notes == []


def test_chinese_addition_request_uses_defaults_and_says_so():
    spec, notes = parse_request("帮我生成一个加法算子")
    assert expr(spec) == canon("x + y")
    assert dtypes(spec) == ALL
    assert shapes(spec)["x"] == DEFAULT_SHAPES
    assert any("dtype" in n for n in notes) and any("5333x497" in n for n in notes)


def test_typed_expression_with_dtype_and_shape():
    spec, _ = parse_request("relu(x + y) for bf16 8192x8192")
    assert expr(spec) == canon("relu(x + y)")
    assert spec["expression"] == "relu(x + y)"
    assert dtypes(spec) == ["bfloat16"]
    assert shapes(spec) == {"x": [[8192, 8192]], "y": [[8192, 8192]]}
    assert spec["name"] == "relu_add"


def test_softmax_over_last_dim():
    spec, _ = parse_request("softmax over the last dim of a 1024x4096 fp32 tensor")
    assert expr(spec) == canon("softmax(x)")
    assert dtypes(spec) == ["float32"]
    assert shapes(spec) == {"x": [[1024, 4096]]}
    assert spec["outputs"][0]["shapes"] == [[1024, 4096]]


def test_rmsnorm_with_weight_and_eps():
    spec, notes = parse_request("rmsnorm with weight, eps 1e-6")
    assert expr(spec) == canon("rmsnorm(x, weight, eps=1e-06)")
    assert shapes(spec) == {"x": DEFAULT_SHAPES, "weight": [[4096], [497]]}
    assert spec["params"] == {"eps": 1e-06}
    assert not any("eps" in n for n in notes)


def test_three_cases_times_three_dtype_variants():
    spec, _ = parse_request("add two matrices on 1x32, 160x1024, 5333x497, each in fp16, fp32, bf16")
    assert shapes(spec)["x"] == [[1, 32], [160, 1024], [5333, 497]]
    assert dtypes(spec) == ["float16", "float32", "bfloat16"]
    assert len(protocol.cases(spec)) == 3 and len(protocol.dtype_variants(spec)) == 3


# ---------------------------------------------------------------- pasted PyTorch functions

FUSED = '''def fused(x, bias):
    y = x + bias
    return torch.nn.functional.gelu(y, approximate="tanh")
'''


def test_pasted_function_inlines_locals_and_infers_a_bias_vector():
    spec, notes = parse_request(FUSED)
    assert spec["name"] == "fused"
    assert expr(spec) == canon("gelu(x + bias, approximate='tanh')")
    assert shapes(spec) == {"x": DEFAULT_SHAPES, "bias": [[4096], [497]]}
    assert spec["params"] == {"approximate": "tanh"}
    assert any("bias" in n and "[N]" in n for n in notes)


def test_pasted_function_in_a_fence_with_imports_and_a_scalar_parameter():
    text = ("make this fast for bf16 2048x8192\n```python\nimport torch\nimport torch.nn.functional as F\n\n"
            "def rms(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:\n"
            "    return F.rms_norm(x, (x.shape[-1],), w, eps)\n```")
    spec, notes = parse_request(text)
    assert spec["name"] == "rms"
    assert expr(spec) == canon("rmsnorm(x, w, eps=1e-6)")
    assert [i["name"] for i in spec["inputs"]] == ["x", "w"]
    assert shapes(spec) == {"x": [[2048, 8192]], "w": [[8192]]}
    assert dtypes(spec) == ["bfloat16"]
    assert spec["params"] == {"eps": 1e-6}
    assert notes == []


def test_pasted_scalar_default_becomes_a_constant_and_a_param():
    spec, _ = parse_request("def scaled_softmax(x, scale: float = 0.5):\n    return torch.softmax(x * scale, dim=-1)")
    assert expr(spec) == canon("softmax(x * 0.5)")
    assert spec["params"] == {"scale": 0.5}
    assert [i["name"] for i in spec["inputs"]] == ["x"]


def test_pasted_function_with_docstring_augmented_assignment_and_casts():
    text = ('```\ndef f(x, y):\n    """Fused add + silu."""\n    z = x.float()\n    z += y\n'
            '    return (z * torch.sigmoid(z)).to(x.dtype)\n```')
    spec, notes = parse_request(text)
    assert expr(spec) == canon("(x + y) * sigmoid(x + y)")
    assert any("casts" in n for n in notes)


def test_pasted_layer_norm_without_eps_notes_the_default():
    spec, notes = parse_request("def ln(x, w, b):\n    return F.layer_norm(x, x.shape[-1:], w, b)")
    assert expr(spec) == canon("layernorm(x, w, b, eps=1e-05)")
    assert shapes(spec)["b"] == [[4096], [497]]
    assert any("eps" in n for n in notes)


@pytest.mark.parametrize("code, words", [
    ("def h(x, y):\n    return x.relu()", ["y", "not used"]),
    ("def h(x):\n    if x.sum() > 0:\n        x = -x\n    return x", ["line 2", "not supported"]),
    ("def h(x, y):\n    return lgamma(x) @ y", ["lgamma", ir.SUPPORTED_TEXT]),
    ("def h(x, eps: float):\n    return x / eps", ["eps", "default"]),
    ("def h(x):\n    return torch.mode(x, dim=1)", ["mode"]),
    ("def h(x):\n    return x + w", ["w", "not one of its parameters"]),
])
def test_pasted_functions_that_cannot_be_converted(code, words):
    message = error(code)
    assert all(w in message for w in words), message


# ---------------------------------------------------------------- shapes of broadcast inputs

@pytest.mark.parametrize("text, name", [
    ("x + bias, bias of shape 4096, x of shape 1024x4096", "bias"),
    ("x + b with b: [4096] and x: [1024, 4096]", "b"),
    ("x 1024x4096 and b 4096, compute relu(x + b)", "b"),
])
def test_request_names_an_input_shape(text, name):
    spec, _ = parse_request(text)
    assert shapes(spec) == {"x": [[1024, 4096]], name: [[4096]]}


@pytest.mark.parametrize("text, shape", [
    ("relu of a 1000000 tensor", [1000000]),           # the phrasing the refusal of a bare number suggests
    ("sigmoid of a 1024 element vector", [1024]),
    ("gelu on an 8192-element vector", [8192]),
    ("relu on 4096 elements", [4096]),
])
def test_a_one_dim_shape_said_as_a_count(text, shape):
    spec, _ = parse_request(text)
    assert shapes(spec) == {"x": [shape]}


@pytest.mark.parametrize("text, want", [
    ("attention with q 2x32x64x16 and k, v 2x8x64x16, grouped-query",
     {"q": [[2, 32, 64, 16]], "k": [[2, 8, 64, 16]], "v": [[2, 8, 64, 16]]}),
    ("x + y + z with x, y 64x128 and z 128", {"x": [[64, 128]], "y": [[64, 128]], "z": [[128]]}),
    ("x + b, b is 1-d, x 64x128", {"x": [[64, 128]], "b": [[128]]}),
])
def test_a_shape_after_a_list_of_names_is_each_ones(text, want):
    spec, _ = parse_request(text)
    assert shapes(spec) == want


@pytest.mark.parametrize("text, expression, want", [
    ("swiglu of x and y 1024x1024", "silu(x) * y", {"x": [[1024, 1024]], "y": [[1024, 1024]]}),
    ("swiglu on 16x4096 with hidden 11008", "silu(x @ w1) * (x @ w2)",
     {"x": [[16, 4096]], "w1": [[4096, 11008]], "w2": [[4096, 11008]]}),
    ("geglu on 8x2048 with intermediate size 8192", "gelu(x @ w1) * (x @ w2)",
     {"x": [[8, 2048]], "w1": [[2048, 8192]], "w2": [[2048, 8192]]}),
])
def test_gated_activations_in_words(text, expression, want):
    spec, _ = parse_request(text)
    assert expr(spec) == canon(expression) and shapes(spec) == want


@pytest.mark.parametrize("text, want", [
    ("F.batch_norm(x, rm, rv, training=False) for 8x16x4x4", {"x": [[8, 16, 4, 4]], "rm": [[16]], "rv": [[16]]}),
    ("F.group_norm(x, 4, w, b) for 2x8x5x5", {"x": [[2, 8, 5, 5]], "w": [[8]], "b": [[8]]}),
    ("F.layer_norm(x, (5, 5), w, b) for 2x8x5x5", {"x": [[2, 8, 5, 5]], "w": [[5, 5]], "b": [[5, 5]]}),
])
def test_a_typed_norms_parameters_take_its_channels_or_normalized_dims(text, want):
    spec, _ = parse_request(text)
    assert shapes(spec) == want


def test_input_said_to_be_a_vector_gets_the_last_dim():
    spec, _ = parse_request("gelu(x + b) where b is a vector")
    assert expr(spec) == canon("gelu(x + b)")
    assert shapes(spec) == {"x": DEFAULT_SHAPES, "b": [[4096], [497]]}


def test_only_the_vector_shape_named_keeps_default_rows():
    spec, notes = parse_request("gelu(x + b) where b is 1024")
    assert shapes(spec) == {"x": [[4096, 1024], [5333, 1024]], "b": [[1024], [1024]]}
    assert any("4096x1024" in n for n in notes)


def test_one_inputs_matrix_shape_named_is_the_others_shape_too():
    spec, notes = parse_request("mse loss between x and y with y 128x512")
    assert shapes(spec) == {"x": [[128, 512]], "y": [[128, 512]]}
    assert "no shape named for x: using 128x512, the shape given" in notes


@pytest.mark.parametrize("text", ["x * y", "a + b"])
def test_other_inputs_have_the_first_inputs_shape(text):
    spec, notes = parse_request(text + " for 1024x4096")
    assert all(s == [[1024, 4096]] for s in shapes(spec).values())


def test_add_a_bias_in_words():
    spec, _ = parse_request("add bias then gelu, 1024x4096")
    assert expr(spec) == canon("gelu(x + bias)")
    assert shapes(spec)["bias"] == [[4096]]


# ---------------------------------------------------------------- English phrasings

@pytest.mark.parametrize("text, expected", [
    ("subtract two tensors", "x - y"),
    ("difference of two tensors", "x - y"),
    ("multiply two tensors", "x * y"),
    ("elementwise product of two tensors", "x * y"),
    ("divide two tensors", "x / y"),
    ("scale x by 0.5", "x * 0.5"),
    ("matrix times scalar 2.5, 4096x4096", "x * 2.5"),
    ("multiply by a scalar value 2", "x * 2.0"),
    ("divide x by 4", "x / 4.0"),
    ("exp", "exp(x)"),
    ("natural log of x", "log(x)"),
    ("square root", "sqrt(x)"),
    ("rsqrt", "rsqrt(x)"),
    ("absolute value", "abs(x)"),
    ("negate x", "neg(x)"),
    ("x squared", "x ** 2"),
    ("pow 2", "x ** 2"),
    ("relu", "relu(x)"),
    ("gelu", "gelu(x)"),
    ("gelu tanh approximation", "gelu(x, approximate='tanh')"),
    ("silu", "silu(x)"),
    ("swish", "silu(x)"),
    ("sigmoid", "sigmoid(x)"),
    ("tanh", "tanh(x)"),
    ("maximum of two tensors", "maximum(x, y)"),
    ("minimum of x and y", "minimum(x, y)"),
    ("clamp x to [-1, 1]", "clamp(x, -1.0, 1.0)"),
    ("clip between 0 and 6", "clamp(x, 0.0, 6.0)"),
    ("where x > 0 take x, else y", "where(x > 0, x, y)"),
    ("add two tensors then relu", "relu(x + y)"),
    ("x * sigmoid(x) for fp16", "x * sigmoid(x)"),
])
def test_pointwise_phrasings(text, expected):
    spec, _ = parse_request(text)
    assert expr(spec) == canon(expected)


@pytest.mark.parametrize("text, expected", [
    ("sum over the last dim", "sum(x)"),
    ("row-wise mean", "mean(x)"),
    ("max along the last axis", "max(x)"),
    ("min over dim -1", "min(x)"),
    ("sum over dim 1 of a 1024x4096 tensor", "sum(x)"),
    ("log softmax", "log_softmax(x)"),
    ("log-softmax row-wise", "log_softmax(x)"),
    ("softmax of x * 0.5", "softmax(x * 0.5)"),
    ("sum(exp(x)) over the last dim of 8192x1024", "sum(exp(x))"),
    ("layer norm", "layernorm(x, weight, bias, eps=1e-5)"),
    ("layernorm with weight and bias, eps 1e-6", "layernorm(x, weight, bias, eps=1e-6)"),
    ("layernorm without bias", "layernorm(x, weight, eps=1e-5)"),
    ("layer norm without weight or bias", "layernorm(x, eps=1e-5)"),
    ("RMS norm", "rmsnorm(x, weight, eps=1e-6)"),
    ("rmsnorm without weight", "rmsnorm(x, eps=1e-6)"),
    ("rmsnorm(x, w, eps=1e-5)", "rmsnorm(x, w, eps=1e-5)"),
])
def test_row_operation_phrasings(text, expected):
    spec, _ = parse_request(text)
    assert expr(spec) == canon(expected)


def test_norm_weight_and_bias_match_the_last_dim_in_every_case():
    spec, notes = parse_request("layernorm on 1x32, 160x1024 and 8x128x64")
    assert shapes(spec) == {"x": [[1, 32], [160, 1024], [8, 128, 64]],
                            "weight": [[32], [1024], [64]], "bias": [[32], [1024], [64]]}
    assert any("weight or bias" in n for n in notes) and any("1e-05" in n for n in notes)


# ---------------------------------------------------------------- Chinese

@pytest.mark.parametrize("text, expected", [
    ("相加", "x + y"), ("减法", "x - y"), ("相减", "x - y"), ("乘法", "x * y"), ("相乘", "x * y"),
    ("除法", "x / y"), ("指数", "exp(x)"), ("对数", "log(x)"), ("平方根", "sqrt(x)"), ("绝对值", "abs(x)"),
    ("激活 ReLU", "relu(x)"), ("relu激活", "relu(x)"), ("按行求和", "sum(x)"), ("沿最后一维平均", "mean(x)"),
    ("按行均值", "mean(x)"), ("按行最大值", "max(x)"), ("沿第0维最小值", "min(x, dim=0)"), ("softmax", "softmax(x)"),
    ("归一化指数", "softmax(x)"), ("对数softmax", "log_softmax(x)"), ("层归一化", "layernorm(x, weight, bias, eps=1e-5)"),
    ("RMS归一化", "rmsnorm(x, weight, eps=1e-6)"), ("均方根归一化", "rmsnorm(x, weight, eps=1e-6)"),
    ("加法 + ReLU", "relu(x + y)"),
])
def test_chinese_operator_words(text, expected):
    spec, _ = parse_request(text)
    assert expr(spec) == canon(expected)


def test_chinese_request_with_shape_and_dtype():
    spec, notes = parse_request("两个 4096x4096 的 fp16 矩阵相加")
    assert expr(spec) == canon("x + y")
    assert shapes(spec) == {"x": [[4096, 4096]], "y": [[4096, 4096]]}
    assert dtypes(spec) == ["float16"]
    assert notes == []


@pytest.mark.parametrize("text, expected", [("relu 半精度", ["float16"]), ("relu 单精度", ["float32"]),
                                            ("层归一化 bf16 形状 1024x4096", ["bfloat16"])])
def test_chinese_dtype_words(text, expected):
    assert dtypes(parse_request(text)[0]) == expected


# ---------------------------------------------------------------- dtypes and shapes

@pytest.mark.parametrize("word, dtype", [
    ("fp16", "float16"), ("float16", "float16"), ("half", "float16"), ("bf16", "bfloat16"),
    ("bfloat16", "bfloat16"), ("fp32", "float32"), ("float32", "float32"), ("float", "float32"),
    ("torch.float16", "float16"),
])
def test_dtype_spellings(word, dtype):
    assert dtypes(parse_request(f"relu for {word}")[0]) == [dtype]


@pytest.mark.parametrize("text", ["relu in all dtypes", "relu, each dtype", "relu for fp16/bf16/fp32"])
def test_every_dtype(text):
    assert sorted(dtypes(parse_request(text)[0])) == sorted(ALL)


@pytest.mark.parametrize("words, shape", [
    ("4096x4096", [4096, 4096]), ("4096 x 4096", [4096, 4096]), ("4096×4096", [4096, 4096]),
    ("(4096, 4096)", [4096, 4096]), ("[4096, 4096]", [4096, 4096]), ("shape 4096", [4096]),
    ("8x128x1024", [8, 128, 1024]), ("2x8x128x64", [2, 8, 128, 64]), ("4k x 4k", [4096, 4096]),
    ("8K x 8K", [8192, 8192]), ("1024 by 4096", [1024, 4096]),
])
def test_shape_spellings(words, shape):
    spec, _ = parse_request(f"relu on {words}")
    assert shapes(spec) == {"x": [shape]}


def test_defaults_are_three_dtypes_two_shapes_and_each_is_noted():
    spec, notes = parse_request("relu")
    assert dtypes(spec) == ALL
    assert shapes(spec)["x"] == DEFAULT_SHAPES
    assert notes == ["no shape named: using 4096x4096 and an odd 5333x497 (no block size divides it)",
                     "no dtype named: testing float16, bfloat16 and float32"]
    assert spec["defaults_used"] == notes


@pytest.mark.parametrize("text, domains", [
    ("log(x) + y", {"x": "positive", "y": "normal"}),
    ("sqrt", {"x": "positive"}),
    ("rsqrt(x * y)", {"x": "positive", "y": "positive"}),
    ("x / y", {"x": "normal", "y": "nonzero"}),
    # the sqrt of a sum of squares is finite for any values: x only divides, nonzero
    ("x / sqrt(mean(x * x) + 1e-6)", {"x": "nonzero"}),
    # compared with 1 and -1: drawn as those, each branch taken; log keeps z positive
    ("where(y == 1.0, x, where(y != -1.0, 0.0, -x)) + where(z == 1.0, log(z), 0.0)",
     {"y": "sign", "x": "normal", "z": "positive"}),
    # compared with 0 (a mask of ones): half its values 0; a denominator stays nonzero
    ("where(m == 0.0, -inf, x) + where(d != 0, 1.0 / d, 0.0)", {"m": "zeros", "x": "normal", "d": "nonzero"}),
])
def test_input_domains_follow_the_expression(text, domains):
    spec, _ = parse_request(text)
    assert {i["name"]: i["domain"] for i in spec["inputs"]} == domains


@pytest.mark.parametrize("text, feedback", [
    ("cumsum(x * m, dim=1) for 8x16 where m is a bool tensor", ()), ("x * m, m: bool", ()),
    ("x * m with a boolean mask m", ()), ("relu(x) * m (m 是布尔掩码)", ()), ("x * m", ["m is bool"]),
    ("where(m, x, 0.0)", ()), ("masked_fill(x, m, 0.0)", ()), ("x * m with x 64x64, m 64x64 bool", ()),
    ("x * m with x 64x64 and m 64 boolean mask", ()),
    # under ~ (torch's ~ of a float tensor is an error), alone or joined with a comparison
    ("x.masked_fill(~m, 0.0)", ()), ("where(~m & (x > 0), x, 0.0) for fp16 64x64", ()),
    # moved first (a triangle, a transpose, a flip of the mask is a mask)
    ("where(~torch.tril(m), 0.0, x) for 8x8", ()), ("where(~m.T, 0.0, x) for 8x8", ()),
    ("where(torch.flip(m, dims=[1]), x, 0.0) for 8x8", ()),
])
def test_an_input_said_bool_or_standing_as_where_s_condition_is_a_mask(text, feedback):
    spec, _ = parse_request(text, feedback)
    inputs = {i["name"]: i for i in spec["inputs"]}
    assert inputs["m"]["domain"] == "mask" and set(inputs["m"]["dtypes"]) == {"bool"}
    assert inputs["x"]["domain"] == "normal" and "bool" not in inputs["x"]["dtypes"]


@pytest.mark.parametrize("text, expression", [
    ("x.masked_fill(~(m > 0), 0.0)", "where((m > 0.0) == 0.0, 0.0, x)"),
    ("where((a > 0) | ~(b < 1), x, 0.0)", "where(where(a > 0.0, a > 0.0, (b < 1.0) == 0.0), x, 0.0)"),
])
def test_a_typed_expression_may_invert_and_join_masks(text, expression):
    spec, _ = parse_request(text)
    assert spec["expression"] == expression and all(i["domain"] == "normal" for i in spec["inputs"])


def test_spec_fields_and_validation():
    spec, notes = parse_request("softmax for fp16 1024x4096", backend="cuda")
    assert spec["backend"] == "cuda"
    assert spec["request"] == "softmax for fp16 1024x4096"
    assert spec["description"] == "softmax of x over the last dim"
    assert spec["params"] == {} and spec["defaults_used"] == notes == []
    assert specmod.validate(spec) == spec
    assert parse_request("relu")[0]["backend"] is None


@pytest.mark.parametrize("text, name", [
    ("add", "add"), ("relu(x + y)", "relu_add"), ("softmax", "softmax"), ("rmsnorm", "rmsnorm"),
    ("scale x by 2", "scale"), (FUSED, "fused"),
])
def test_spec_names(text, name):
    assert parse_request(text)[0]["name"] == name


def test_multiply_matrices_is_read_as_elementwise_and_noted():
    spec, notes = parse_request("multiply two fp16 matrices")
    assert expr(spec) == canon("x * y")
    assert any("elementwise" in n and "'matmul'" in n for n in notes)


# ---------------------------------------------------------------- corrections

def test_feedback_replaces_dtypes_and_shapes_then_appends_shapes():
    spec, notes = parse_request("add two fp16 matrices of shape 4096x4096",
                                ["use bf16 only", "shape 2048x2048", "also 1x32 and 160x1024"])
    assert dtypes(spec) == ["bfloat16"]
    assert shapes(spec)["x"] == [[2048, 2048], [1, 32], [160, 1024]]
    assert notes == []


def test_later_feedback_wins():
    spec, _ = parse_request("relu", ["fp32", "bf16", "shape 64x64", "shape 128x128"])
    assert dtypes(spec) == ["bfloat16"]
    assert shapes(spec)["x"] == [[128, 128]]


def test_feedback_sets_eps():
    spec, notes = parse_request("rmsnorm with weight", ["eps 1e-5"])
    assert expr(spec) == canon("rmsnorm(x, weight, eps=1e-5)")
    assert spec["params"]["eps"] == 1e-5
    assert not any("eps" in n for n in notes)


def test_feedback_replaces_the_operator_and_keeps_the_rest():
    spec, _ = parse_request("relu for fp16 1024x4096", ["make it gelu(x + y)"])
    assert expr(spec) == canon("gelu(x + y)")
    assert spec["name"] == "gelu_add"
    assert dtypes(spec) == ["float16"]
    assert shapes(spec) == {"x": [[1024, 4096]], "y": [[1024, 4096]]}


def test_feedback_on_shapes_recomputes_a_bias_vector():
    spec, _ = parse_request("x + b, x 1024x4096, b 4096", ["shape 2048x2048"])
    assert shapes(spec) == {"x": [[2048, 2048]], "b": [[2048]]}
    spec, _ = parse_request("x + b, x 1024x4096, b 4096", ["also 160x1024"])
    assert shapes(spec) == {"x": [[1024, 4096], [160, 1024]], "b": [[4096], [1024]]}


@pytest.mark.parametrize("correction", ["y is a vector", "y 4096"])
def test_feedback_about_one_inputs_shape(correction):
    spec, _ = parse_request("x + y for 1024x4096", [correction])
    assert shapes(spec) == {"x": [[1024, 4096]], "y": [[4096]]}


def test_feedback_that_says_nothing_usable_is_refused():
    message = error("relu", ["looks good but make it nicer"])
    assert "could not apply" in message and "shape" in message and "dtype" in message


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize("text, what", [
    ("einsum ij,jk->ik", "matrix multiplication"),
    ("nll_loss2d of the logits", "this loss"),
    ("deformable conv2d with kernel 3", "this convolution"),
    ("rotary embedding of q", "rotary position embedding"),
    ("scatter add into x", "scatter"),
    ("prelu", "prelu"),
])
def test_out_of_scope_operations_say_what_is_supported(text, what):
    message = error(text)
    assert what in message and "not supported" in message and ir.SUPPORTED_TEXT in message


@pytest.mark.parametrize("text, words", [
    ("column-wise layernorm", ["dim -2", "last dim"]),
    ("softmax over all elements", ["all elements", "the last"]),
])
def test_row_ops_over_other_dims_and_whole_tensor_reductions_are_refused(text, words):
    message = error(text)
    assert all(w in message for w in words) and ir.SUPPORTED_TEXT in message


@pytest.mark.parametrize("text", ["softmax over dim 0 of a 1024x4096 tensor", "softmax(x, dim=0) for 1024x4096"])
def test_softmax_over_another_dim_is_written_out_as_reductions_that_keep_it(text):
    spec, _ = parse_request(text)
    assert spec["expression"] == ("exp(x - max(x, dim=0, keepdim=True)) / sum(exp(x - max(x, dim=0, keepdim=True)), "
                                  "dim=0, keepdim=True)")


@pytest.mark.parametrize("text", ["hello", "", "   ", "please help"])
def test_no_operation_asks_which_one(text):
    message = error(text)
    assert ASK_OP in message and ir.SUPPORTED_TEXT in message


@pytest.mark.parametrize("text, words", [
    ("relu for 0x4096", ["[0, 4096]", "positive"]),
    ("relu for -5x4096", ["[-5, 4096]", "positive"]),
    ("relu for 1000000x1000000", ["1,000,000,000,000 elements", "limit"]),
    ("relu for 2x2x2x2x2", ["rank 5", "1 to 4"]),
])
def test_absurd_shapes_are_refused(text, words):
    message = error(text)
    assert all(w in message for w in words), message


@pytest.mark.parametrize("text, dtype", [
    ("relu in int8", "int8"), ("fp8 gelu", "fp8"), ("add two float64 tensors", "float64"),
])
def test_unknown_dtypes_are_refused(text, dtype):
    message = error(text)
    assert dtype in message and "float16" in message and "bfloat16" in message


@pytest.mark.parametrize("text, words", [
    ("relu of x + y", ["relu(x + y)"]),
    ("exp and log", ["which order", "log(exp(x))"]),     # "exp then log" says it: log(exp(x))
    ("softmax and sum", ["softmax and sum", "Which one"]),
    ("clamp x", ["bounds", "clamp x to [-1, 1]"]),
    ("where", ["condition", "where(x > 0, x, y)"]),
    ("layernorm with bias but no weight", ["weight and bias"]),
])
def test_ambiguous_requests_ask_a_question(text, words):
    message = error(text)
    assert all(w in message for w in words), message


def test_unsupported_function_in_a_typed_expression():
    message = error("lgamma(x) for fp16")
    assert "lgamma" in message and ir.SUPPORTED_TEXT in message


@pytest.mark.parametrize("text, expression", [
    ("relu(x[:, 1:5]) for 64x128", "relu(x[:, 1:5])"),
    ("x[:, ::2] + 1 for 64x128", "x[:, ::2] + 1.0"),
    ("relu(x[..., 0]) for 8x16x4", "relu(x.select(-1, 0))"),
    ("x[-1] * 2 for 64x128", "x.select(0, -1) * 2.0"),
])
def test_typed_slices_are_read_with_their_expression(text, expression):
    spec, _ = parse_request(text)
    assert spec["expression"] == expression


def test_a_typed_index_the_ir_does_not_read_is_refused_saying_what_is():
    assert "slices with number bounds" in error("x[y > 0] * 2 for x 64 and y 64")


def test_bad_backend_is_refused():
    with pytest.raises(GenerationError, match="backend"):
        parse_request("relu", backend="tpu")


@pytest.mark.parametrize("text, expected", [
    ("relu for input/output in fp16", "relu(x)"),
    ("log-softmax of the logits", "log_softmax(x)"),
    ("add two tensors, (fp16) please", "x + y"),
])
def test_prose_is_not_read_as_an_expression(text, expected):
    assert expr(parse_request(text)[0]) == canon(expected)


def test_reduction_names_do_not_clash_with_generated_code():
    from bot import lower_torch
    from bot.ops import registry
    from bot.spec import parse_expression
    for request in ("mean of x over the last dim", "sum of x row-wise", "max over the last dim"):
        spec, _ = parse_request(request)
        assert spec["name"].endswith("_last_dim")
        node = parse_expression(spec)      # the generated files take the name (none clashes)
        assert f"def {spec['name']}(" in registry.kernel_source(spec, node, {})
        assert f"def {spec['name']}(" in lower_torch.reference_source(spec, node)
