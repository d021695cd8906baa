"""Training kernels (bot.training, bot.autodiff): the generated kernel.py's autograd.Function, run
under Triton's interpreter, gives the forward and every input's gradient that PyTorch's autograd gives
through the generated reference on float64 inputs, broadcast inputs' gradients summed down to their
shape; an op without a gradient rule is refused, naming it."""
from __future__ import annotations

import pytest
import torch
from generated import load

from bot import autodiff, ir, lower_torch, training
from bot.ops import norm_grad
from bot.ops.node import IRError
from bot.spec import SpecError, parse_expression, validate
from runner import protocol

CASES = [
    ("relu(x) * y", {"x": [5, 9], "y": [5, 9]}),
    ("gelu(x * w + b)", {"x": [2, 3, 10], "w": [10], "b": [10]}),          # w, b summed over two dims
    ("gelu(x, approximate='tanh') - silu(x) / (1.0 + abs(y))", {"x": [6, 10], "y": [6, 1]}),   # y: kept dim
    ("clamp(x, -0.5, 0.5) + maximum(x, y) + where(x > y, tanh(x), sigmoid(y) ** 2.0)", {"x": [4, 8], "y": [4, 8]}),
    ("sin(x) * cos(y)", {"x": [4, 9], "y": [4, 9]}),
    ("floor(x * 3.0) * y + ceil(y)", {"x": [4, 9], "y": [4, 9]}),      # floor and ceil pass no gradient
    ("softmax(x * 2.0)", {"x": [4, 33]}),
    ("log_softmax(x)", {"x": [4, 33]}),
    ("rmsnorm(x + r, w, eps=1e-06)", {"x": [5, 33], "r": [5, 33], "w": [33]}),
    ("layernorm(x, w, b, eps=1e-05)", {"x": [5, 33], "w": [33], "b": [33]}),
    # the fused norm backward (bot.ops.norm_grad): leading dims; several programs of several row tiles each
    ("rmsnorm(x, w, eps=1e-06)", {"x": [3, 5, 33], "w": [33]}),
    ("layernorm(x, w, eps=1e-05)", {"x": [300, 17], "w": [17]}),
    ("rmsnorm(x, eps=1e-06)", {"x": [7, 40]}),
    ("layernorm(R, N, sms, eps=1e-05)", {"R": [6, 24], "N": [24], "sms": [24]}),     # inputs named as launcher locals
    ("relu(ctx) * x + d_x", {"ctx": [3, 8], "x": [3, 8], "d_x": [3, 8]}),      # and as the Function's
    ("a * 2.0 + b * 3.0", {"a": [4, 9], "b": [4, 9]}),     # gradients that read neither input: the upstream's
    ("relu(a @ b + bias)", {"a": [8, 16], "b": [16, 12], "bias": [12]}),
    ("gelu(a @ w.T) * 2.0", {"a": [8, 16], "w": [12, 16]}),             # F.linear's layout
    ("a.mT @ b", {"a": [3, 16, 8], "b": [16, 12]}),                     # b shared: summed over the batch
    ("tril(a @ b)", {"a": [9, 16], "b": [16, 7]}),                       # the triangle's gradient only
    ("relu(triu(a @ b, diagonal=2)) * 3.0", {"a": [2, 6, 8], "b": [2, 8, 11]}),
    ("tril(a @ b.mT, diagonal=-1)", {"a": [10, 5], "b": [10, 5]}),
    ("sum(relu(x) * y, dim=-1)", {"x": [5, 33], "y": [5, 33]}),          # the upstream broadcast back
    ("mean(x, dim=0)", {"x": [6, 9]}),
    ("mean(x * 2.0, dim=1, keepdim=True)", {"x": [3, 7, 5]}),
    # several dims at once, at the root and kept inside an expression
    ("sum(x * y, dim=(0, 1))", {"x": [3, 4, 5], "y": [3, 4, 5]}),
    ("var(x, dim=[-1, 1], keepdim=True) * 2.0 + max(x, dim=(0, 1), keepdim=True)", {"x": [3, 4, 5]}),
    ("x / logsumexp(x, dim=(1, 2), keepdim=True)", {"x": [2, 3, 4]}),
    ("prod(x, dim=1) + prod(x * 0.5, dim=None)", {"x": [12, 3]}),
    # slices and selects: up in its place, zeros beside it
    ("relu(x[:, 2:5]) * y", {"x": [4, 9], "y": [4, 3]}),
    ("x.narrow(0, 1, 3) * 2.0 + x[:3, 2:]", {"x": [5, 3]}),
    ("x[:, -1] * x[:, 0] + x[:, 1:].sum(-1)", {"x": [6, 4]}),
    # chunk and split pieces: up in the piece's place; a view broadcast by what it meets: up summed first
    ("x.chunk(2, dim=-1)[0] * sigmoid(x.chunk(2, dim=-1)[1])", {"x": [4, 8]}),        # F.glu
    ("x.split(3, dim=0)[1] * 2.0", {"x": [7, 3]}),
    ("x.reshape(-1, 1) * y", {"x": [4], "y": [4, 6]}),                                 # torch.outer
    ("b.expand(5, -1) * x + x[:, :1].expand_as(x)", {"b": [1, 7], "x": [5, 7]}),       # up summed back
    # remaps: up moved back (flip, roll, a constant pad's crop), a triangle's kept part
    ("flip(x, dims=[0, 1]) * roll(y, shifts=(2, -1), dims=(1, 0))", {"x": [4, 7], "y": [4, 7]}),
    ("tril(relu(x), diagonal=1) + pad(y, (1, -2), mode='constant', value=0.0)", {"x": [6, 6], "y": [6, 7]}),
    ("atan(x) * fmod(x * 5.0, y)", {"x": [4, 9], "y": [4, 9]}),
    ("interpolate(x, scale_factor=(2, 4)) * y", {"x": [2, 3, 3, 5], "y": [2, 3, 6, 20]}),      # up summed by blocks
    ("interpolate(relu(x), scale_factor=(2,))", {"x": [2, 3, 7]}),
    # strided slices: up's elements s apart, zeros between, before and after
    ("x[..., ::2] * x[..., 1::2]", {"x": [3, 10]}),                   # interleaved pairs (GPT-J RoPE)
    ("relu(x[:, 1:8:3]) * y", {"x": [4, 11], "y": [4, 3]}),           # zeros after the span
    ("x[1::2, :] * 2.0", {"x": [7, 3]}),                              # the span cut to x's size
    # p-norms: 2 (F.normalize), 1, inf (ties split), 3, 0.5; a zero row passes no gradient, as torch
    ("normalize(x, p=2.0, dim=-1) * y", {"x": [4, 9], "y": [4, 9]}),
    ("norm(x, p=1, dim=0) + norm(x, p=float('inf'), dim=0)", {"x": [6, 5]}),
    ("norm(x * 2.0, p=3.0, dim=(1, 2), keepdim=True) * x", {"x": [2, 3, 4]}),
    ("norm(x, p=0.5, dim=None)", {"x": [3, 7]}),
    ("norm(relu(x), dim=-1)", {"x": [5, 1]}),
    # inside an expression: the upstream summed down to the result's shape, dropped dims put back
    ("sum(x * w, dim=-1) + b", {"x": [5, 9], "w": [9], "b": [5]}),
    ("max(x, dim=1) * y - logsumexp(x, dim=(0, 1))", {"x": [4, 7], "y": [4]}),
    ("exp(x) / sum(exp(x), dim=-1, keepdim=True)", {"x": [5, 9]}),
    ("(x - mean(x, dim=0, keepdim=True)) * y", {"x": [6, 7], "y": [6, 7]}),
    ("x * rsqrt(mean(x * x, dim=1, keepdim=True) + 1e-05) + max(x, dim=1, keepdim=True)", {"x": [4, 12]}),
    ("sum(x, dim=None)", {"x": [6, 9]}),
    ("mean(x, dim=None) * y", {"x": [6, 9], "y": [3]}),
    ("cumsum(x * y, dim=1) + cumsum(x, dim=0, exclusive=True, reverse=True)", {"x": [5, 9], "y": [5, 9]}),
    # zeros (relu's): before a scan's first zero, at it, and past it
    ("cumprod(relu(x) * 2.0, dim=0)", {"x": [7, 5]}),
    ("cumprod(relu(x), dim=1, reverse=True)", {"x": [4, 9]}),
    ("cumprod(relu(x) * 2.0, dim=0, exclusive=True)", {"x": [7, 5]}),
    ("cumprod(relu(x), dim=1, exclusive=True, reverse=True)", {"x": [4, 9]}),
    # each output's gradient to the element its value came from: relu's zeros tie (the latest wins)
    ("cummax(relu(x), dim=-1)", {"x": [3, 37]}),
    ("cummin(x * y, dim=0, reverse=True)", {"x": [9, 4], "y": [9, 4]}),
    ("cummax(x, dim=1, reverse=True) + cummin(x, dim=1)", {"x": [2, 5, 3]}),
    ("logcumsumexp(x * 3.0, dim=1) * y", {"x": [3, 40], "y": [3, 40]}),              # up of both signs
    ("logcumsumexp(x, dim=0, reverse=True)", {"x": [9, 4]}),
    # today's formulas of the pointwise ops: a probability's loss, a per-channel slope, a rounding
    ("binary_cross_entropy(sigmoid(x), y)", {"x": [6, 7], "y": [6, 7]}),
    ("poisson_nll_loss(x, y, reduction='sum')", {"x": [6, 7], "y": [6, 7]}),
    ("multilabel_soft_margin_loss(x, y)", {"x": [6, 7], "y": [6, 7]}),
    ("prelu(x, w) + round(y) * x", {"x": [2, 3, 4], "w": [3], "y": [2, 3, 4]}),
    ("transpose(relu(x), 0, 1) * y + permute(z, (2, 0, 1)).flatten(1)", {"x": [4, 6], "y": [6, 4], "z": [2, 2, 6]}),
    ("sigmoid(x.unflatten(1, (3, 4))) * w", {"x": [2, 12], "w": [2, 3, 4]}),
    ("max(x * y, dim=-1)", {"x": [5, 33], "y": [5, 33]}),             # to the largest, as torch.amax
    ("min(x, dim=0, keepdim=True)", {"x": [7, 5]}),
    ("logsumexp(x, dim=1)", {"x": [4, 33]}),
    ("var(x, dim=-1)", {"x": [5, 33]}),
    ("std(x, dim=None, correction=0)", {"x": [6, 9]}),
    ("group_norm(x, 2, w, b, eps=1e-05)", {"x": [3, 4, 5, 6], "w": [4], "b": [4]}),
    ("group_norm(relu(x) * y, 3, eps=1e-05)", {"x": [2, 6, 7], "y": [2, 6, 7]}),
    ("instance_norm(x, weight=w, bias=b, eps=1e-05)", {"x": [3, 4, 9], "w": [4], "b": [4]}),
    ("batch_norm(x, None, None, w, b, training=True, eps=1e-05)", {"x": [3, 4, 5, 6], "w": [4], "b": [4]}),
    # running statistics (var drawn positive): every tensor's gradient, the running ones' too
    ("batch_norm(x, m, var, w, b, training=False, eps=1e-05)", {"x": [3, 4, 5, 6], "m": [4], "var": [4], "w": [4], "b": [4]}),
    ("batch_norm(relu(x), m, var, training=False, eps=0.001)", {"x": [3, 4, 7], "m": [4], "var": [4]}),
    # BatchNorm1d over features: x [N, C], both modes
    ("batch_norm(x, m, var, w, b, training=False, eps=1e-05)", {"x": [6, 4], "m": [4], "var": [4], "w": [4], "b": [4]}),
    ("batch_norm(x, None, None, w, b, training=True, eps=1e-05)", {"x": [6, 4], "w": [4], "b": [4]}),
    ("layer_norm_nd(x, w, b, dims=2, eps=1e-05)", {"x": [3, 4, 5, 6], "w": [5, 6], "b": [5, 6]}),
    ("conv2d(x, w, b, padding=1)", {"x": [2, 3, 6, 7], "w": [4, 3, 3, 3], "b": [4]}),
    ("relu(conv2d(x, w))", {"x": [2, 3, 5, 6], "w": [5, 3, 1, 1]}),               # 1x1, an epilogue
    ("conv2d(x, w, stride=2, groups=2)", {"x": [2, 4, 7, 6], "w": [6, 2, 3, 3]}),  # dw cut to the kernel
    ("conv1d(x, w, groups=4, padding=2, dilation=2)", {"x": [3, 4, 11], "w": [4, 1, 3]}),  # depthwise
    ("conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1)", {"x": [2, 3, 4, 5], "w": [3, 4, 3, 3], "b": [4]}),
    # padded unevenly: a causal depthwise conv1d (Mamba's), 'same' of an even kernel, strided with a remainder
    ("silu(conv1d(x, w, b, padding=3, padding_end=0, groups=4))", {"x": [2, 4, 13], "w": [4, 1, 4], "b": [4]}),
    ("conv2d(x, w, padding=(1, 0), padding_end=(2, 1))", {"x": [2, 3, 6, 7], "w": [4, 3, 4, 2]}),
    ("conv1d(x, w, stride=2, padding=2, padding_end=0, dilation=2)", {"x": [2, 3, 12], "w": [5, 3, 3]}),
    ("cat([x, relu(y)], dim=1)", {"x": [2, 3, 4], "y": [2, 5, 4]}),       # x's: a slice of up, copied
    ("stack([x, y], dim=-1) * 2.0", {"x": [4, 3], "y": [4, 3]}),
    # flash backward: causal with grouped heads (k's and v's summed per group), an upstream from a stage and
    # key heads broadcast (summed down)
    ("scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)",
     {"q": [2, 4, 20, 16], "k": [2, 2, 20, 16], "v": [2, 2, 20, 16]}),
    ("scaled_dot_product_attention(q, k, v, scale=0.3) * 2.0", {"q": [2, 3, 9, 24], "k": [2, 1, 11, 24], "v": [2, 1, 11, 8]}),
    # one fused backward (q, k, v inputs of one batch): a key head shared by all, no heads, causal with L > S
    ("scaled_dot_product_attention(q, k, v, scale=0.3)", {"q": [2, 3, 9, 24], "k": [2, 1, 11, 24], "v": [2, 1, 11, 8]}),
    ("scaled_dot_product_attention(q, k, v, is_causal=True)", {"q": [3, 13, 16], "k": [3, 7, 16], "v": [3, 7, 16]}),
    ("scaled_dot_product_attention(q * 2.0, k, v, enable_gqa=True)",            # q from an earlier stage
     {"q": [1, 4, 9, 16], "k": [1, 2, 9, 16], "v": [1, 2, 9, 16]}),
    ("max_pool2d(x, kernel_size=2)", {"x": [2, 3, 6, 8]}),
    ("max_pool2d(relu(x), kernel_size=3, stride=2, padding=1, ceil_mode=True)", {"x": [2, 2, 7, 9]}),   # ties at 0
    ("max_pool1d(x, kernel_size=3, stride=2, dilation=2)", {"x": [2, 3, 13]}),
    ("max_pool2d(x, kernel_size=5, stride=3, padding=2)", {"x": [1, 2, 9, 10]}),     # taps in runtime loops
    ("avg_pool2d(x, kernel_size=3, stride=1, padding=1)", {"x": [2, 3, 5, 7]}),
    ("avg_pool2d(x, kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)", {"x": [1, 2, 6, 7]}),
    ("avg_pool3d(x, kernel_size=2, divisor_override=3) * 2.0", {"x": [1, 2, 4, 4, 5]}),
    # adaptive: windows that overlap (7 -> 3, 5 -> 4), grow an input into several outputs (3 -> 7), or
    # take it all (global); max's ties at 0
    ("adaptive_avg_pool2d(x, output_size=(3, 4))", {"x": [2, 3, 7, 5]}),
    ("adaptive_max_pool2d(relu(x), output_size=(7, 2))", {"x": [2, 2, 3, 9]}),
    ("adaptive_avg_pool1d(x, 1) * 3.0", {"x": [2, 3, 11]}),
    ("adaptive_max_pool3d(x, output_size=(2, None, 3))", {"x": [1, 2, 5, 4, 7]}),
]


def spec_of(expression: str, shapes: dict[str, list[int]], dtype: str) -> dict:
    """The spec of one case: float inputs in dtype, index inputs (a lookup's) int64."""
    node = ir.parse(expression)
    index = ir.index_inputs(node)
    return validate({"name": "op", "expression": expression, "inputs": [
        {"name": n, "dtypes": ["int64" if n in index else dtype], "shapes": [shapes[n]]} for n in ir.input_names(node)]})


def drawn(spec: dict, device: str, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Each input of the spec's case, in order: index inputs uniform over the dim they index (repeating),
    a running variance (var) positive, the rest normal."""
    out = {}
    for i in spec["inputs"]:
        shape, dtype = i["shapes"][0], getattr(torch, i["dtypes"][0])
        if "index_of" in i:
            of = next(j for j in spec["inputs"] if j["name"] == i["index_of"])
            out[i["name"]] = torch.randint(0, of["shapes"][0][i["index_dim"]], shape, generator=gen).to(device)
        else:
            v = torch.randn(shape, generator=gen)
            out[i["name"]] = (v.abs() + 0.1 if i["name"] == "var" else v).to(device, dtype)
    return out


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("expression, shapes", CASES, ids=[c[0] for c in CASES])
def test_gradients_match_pytorchs_autograd(tmp_path, expression, shapes, dtype):
    check_gradients(tmp_path, expression, shapes, dtype)


# at sizes a model runs, every dtype, where the kernels compile for the GPU (a convolution's weight
# gradient sums 8 x 28 x 28 products: float32's rounding grows with them, as a matmul's)
GPU_CASES = [
    ("rmsnorm(x, w, eps=1e-06)", {"x": [4096, 2048], "w": [2048]}),
    ("layernorm(x, w, b, eps=1e-05)", {"x": [2, 1000, 3001], "w": [3001], "b": [3001]}),
    ("silu(a) * b", {"a": [1000, 3001], "b": [1000, 3001]}),
    ("scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)",
     {"q": [2, 8, 1000, 64], "k": [2, 2, 1000, 64], "v": [2, 2, 1000, 64]}),
    ("scaled_dot_product_attention(q, k, v)", {"q": [1, 4, 333, 128], "k": [1, 4, 517, 128], "v": [1, 4, 517, 96]}),
    ("relu(conv2d(x, w, b, padding=1))", {"x": [8, 32, 28, 28], "w": [64, 32, 3, 3], "b": [64]}, 8 * 28 * 28),
    ("max_pool2d(x, kernel_size=3, stride=2, padding=1)", {"x": [8, 64, 56, 56]}),
    ("cummax(x, dim=1)", {"x": [16, 5000, 8]}),
    ("batch_norm(x, m, var, w, b, training=False, eps=1e-05)", {"x": [8, 64, 14, 14], "m": [64], "var": [64], "w": [64], "b": [64]}),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("case", GPU_CASES, ids=[c[0][:40] for c in GPU_CASES])
def test_on_the_gpu_gradients_match_pytorchs_autograd(tmp_path, case, dtype):
    expression, shapes, *summed = case
    check_gradients(tmp_path, expression, shapes, dtype, "cuda", *summed)


def check_gradients(folder, expression: str, shapes: dict, dtype: str, device: str = "cpu",
                    summed: int | None = None) -> None:
    """The training kernel's output and every input's gradient against the reference's autograd in
    float64, from one upstream gradient (a running variance, var, drawn positive); summed: the most
    products a gradient sums, where more than the last dim (the tolerance grows as a matmul's)."""
    spec = spec_of(expression, shapes, dtype)
    node = parse_expression(spec)
    reference = getattr(load(folder, "reference.py", lower_torch.reference_source(spec, node)), "op")
    kernel = getattr(load(folder, "kernel.py", training.kernel_source(spec, node)), "op")
    gen = torch.Generator().manual_seed(0)
    values = list(drawn(spec, device, gen).values())
    ours = [v.clone().requires_grad_() for v in values]
    truth = [v.double().requires_grad_() for v in values]
    out, want = kernel(*ours), reference(*truth)
    upstream = torch.randn(want.shape, generator=gen).to(device)
    out.backward(upstream.to(out.dtype))
    want.backward(upstream.to(out.dtype).double())
    rtol, atol = protocol.tolerance(dtype, summed or max(s[-1] for s in shapes.values()),
                                    matmul="@" in expression or summed is not None)
    for name, got, expected in [("out", out, want)] + list(zip(ir.input_names(node), ours, truth)):
        got, expected = (got.grad, expected.grad) if name != "out" else (got, expected)
        assert got.shape == expected.shape and got.dtype == getattr(torch, dtype), name
        err = (got.double() - expected).abs()
        scale = rtol * float(expected.abs().max()) if name != "out" else 0.0     # as the judge allows a gradient
        assert bool((err <= atol + scale + rtol * expected.abs()).all()), f"{name}: max err {err.max():.3g}"


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("expression", ["cross_entropy(x, t)", "cross_entropy(x * 2.0 + b, t, reduction='sum')",
                                        "cross_entropy(x, t, reduction='none')", "nll_loss(x, t)",
                                        "cross_entropy(x, t, label_smoothing=0.2)",
                                        "cross_entropy(x * b, t, reduction='none', label_smoothing=0.1)",
                                        "nll_loss(log_softmax(x * b), t, reduction='sum')",
                                        "nll_loss(x, t, reduction='none')",
                                        "cross_entropy(x, t, weight=w, ignore_index=3)",
                                        "nll_loss(log_softmax(x * b), t, weight=w, reduction='sum', ignore_index=0)",
                                        "nll_loss(x, t, weight=w, reduction='none', ignore_index=-1)",
                                        "cross_entropy(x + b, t, reduction='none', ignore_index=69)"])
def test_cross_entropy_and_nll_loss_give_their_inputs_gradient_and_none_to_the_classes(tmp_path, expression, dtype):
    # an ignored row (-100, or the ignore_index given): its gradient 0; class weights get none either
    names = ir.input_names(ir.parse(expression))
    ignore = int(expression.split("ignore_index=")[1].rstrip(")")) if "ignore_index" in expression else -100
    shapes = {"x": [5, 70], "b": [70], "t": [5], "w": [70]}
    spec = validate({"name": "op", "expression": expression, "training": True, "inputs": [
        {"name": n, "dtypes": ["int64" if n == "t" else dtype], "shapes": [shapes[n]]} for n in names]})
    assert training.differentiable(spec) == [n for n in names if n not in "tw"]
    node = parse_expression(spec)
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), "op")
    kernel = getattr(load(tmp_path, "kernel.py", training.kernel_source(spec, node)), "op")
    gen = torch.Generator().manual_seed(0)
    t = torch.randint(0, 70, (5,), generator=gen)
    t[2] = ignore
    values = {"x": torch.randn(5, 70, generator=gen).to(getattr(torch, dtype)),
              "b": torch.randn(70, generator=gen).to(getattr(torch, dtype)), "t": t,
              "w": (0.5 + torch.rand(70, generator=gen)).to(getattr(torch, dtype))}
    ours = [values[n].clone().requires_grad_(n not in "tw") for n in names]
    truth = [values[n].double().requires_grad_(n != "w") if n != "t" else t for n in names]
    out, want = kernel(*ours), reference(*truth)
    upstream = torch.randn(want.shape, generator=gen)
    out.backward(upstream.to(out.dtype))
    want.backward(upstream.to(out.dtype).double())
    rtol, atol = protocol.tolerance(dtype, 70)
    for name, got, expected in zip(names, ours, truth):
        if name not in "tw":
            err = (got.grad.double() - expected.grad).abs()
            assert bool((err <= atol + rtol * expected.grad.abs()).all()), f"{name}: max err {err.max():.3g}"
            assert float(got.grad[2].abs().max()) == 0.0 or name != "x"          # the ignored row


def test_cross_entropys_gradient_kernel_reads_rows_in_chunks(tmp_path):
    # 70 classes in chunks of 32: two passes over each row, the second writing softmax - one_hot
    spec = validate({"name": "op", "expression": "cross_entropy_grad(x, t, g, reduction='none')", "inputs": [
        {"name": "x", "dtypes": ["float32"], "shapes": [[5, 70]]}, {"name": "t", "dtypes": ["int64"], "shapes": [[5]]},
        {"name": "g", "dtypes": ["float32"], "shapes": [[5]]}]})
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), "op")
    x, t, g = torch.randn(5, 70), torch.tensor([3, 69, -100, 0, 32]), torch.randn(5)
    got = kernel(x, t, g, config={"BLOCK_R": 2, "BLOCK_V": 32, "num_warps": 1, "num_stages": 1})
    want = (torch.softmax(x.double(), -1) - torch.nn.functional.one_hot(t.clamp(min=0), 70)) * g.double()[:, None]
    want[2] = 0.0
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["cummax", "cummin"])
@pytest.mark.parametrize("reverse", [False, True])
def test_cummax_and_cummins_gradient_goes_where_torch_sends_it(tmp_path, op, reverse):
    # ties (the latest equal element), NaN (the latest NaN), rows in several chunks of the kernel's walk
    spec = spec_of(f"{op}(x, dim=-1, reverse={reverse})", {"x": [3, 2500]}, "float32")
    kernel = getattr(load(tmp_path, "kernel.py", training.kernel_source(spec, parse_expression(spec))), "op")
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(-4, 5, (3, 2500), generator=gen).float()
    x[1, 700] = x[1, 1900] = float("nan")
    up = torch.randn(3, 2500, generator=gen)
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    kernel(ours).backward(up)
    flip = (lambda t: t.flip(-1)) if reverse else (lambda t: t)
    flip(getattr(torch, op)(flip(theirs), dim=-1).values).backward(up)
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("expression, shapes", [
    ("embedding(ids, w) * 2.0", {"ids": [4, 9], "w": [20, 33]}),                    # ids repeat: added up
    ("embedding(ids, w, padding_idx=3) * y", {"ids": [40], "w": [7, 5], "y": [40, 5]}),   # row 3 gets none
    ("embedding(ids, w, padding_idx=0)", {"ids": [6, 7], "w": [4, 9]}),                   # row 0 (a false value)
    ("relu(index_select(x, 1, idx)) + index_select(y, 0, jdx).sum(0)",
     {"x": [6, 8], "idx": [11], "y": [5, 11], "jdx": [9]}),
    ("gather(x * 2.0, -1, idx)", {"x": [5, 7], "idx": [5, 12]}),
    ("gather(x, 1, idx)", {"x": [3, 40], "idx": [3, 1000]}),        # more indices than the tensor has elements
])
def test_a_lookups_gradient_adds_up_where_it_read(tmp_path, expression, shapes, dtype):
    check_lookup(tmp_path, expression, shapes, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_on_the_gpu_an_embeddings_gradient_adds_up_where_it_read(tmp_path, dtype):
    check_lookup(tmp_path, "embedding(ids, w, padding_idx=0)", {"ids": [8, 512], "w": [1000, 256]}, dtype, "cuda")


def check_lookup(folder, expression: str, shapes: dict, dtype: str, device: str = "cpu") -> None:
    """A lookup's training kernel: every float input's gradient against the reference's autograd in
    float64, the indices drawn in range (repeating)."""
    spec = spec_of(expression, shapes, dtype)
    index = ir.index_inputs(ir.parse(expression))
    node = parse_expression(spec)
    reference = getattr(load(folder, "reference.py", lower_torch.reference_source(spec, node)), "op")
    kernel = getattr(load(folder, "kernel.py", training.kernel_source(spec, node)), "op")
    gen = torch.Generator().manual_seed(0)
    values = drawn(spec, device, gen)
    ours = [v.clone().requires_grad_(n not in index) for n, v in values.items()]
    truth = [v.double().requires_grad_() if n not in index else v for n, v in values.items()]
    out, want = kernel(*ours), reference(*truth)
    upstream = torch.randn(want.shape, generator=gen).to(device)
    out.backward(upstream.to(out.dtype))
    want.backward(upstream.to(out.dtype).double())
    rtol, atol = protocol.tolerance(dtype, 40)
    for name, got, expected in zip(values, ours, truth):
        if name not in index:
            err = (got.grad.double() - expected.grad).abs()
            assert bool((err <= atol + rtol * expected.grad.abs()).all()), f"{name}: max err {err.max():.3g}"


def test_prods_gradient_treats_zeros_as_torch(tmp_path):
    # rows with no zero, one (its gradient the others' product) and two (none anywhere)
    spec = spec_of("prod(x, dim=-1)", {"x": [3, 4]}, "float32")
    kernel = getattr(load(tmp_path, "kernel.py", training.kernel_source(spec, parse_expression(spec))), "op")
    x = torch.tensor([[1.5, -2.0, 3.0, 0.5], [0.0, 2.0, -3.0, 4.0], [0.0, 1.0, 0.0, 2.0]])
    up = torch.tensor([1.0, -2.0, 0.5])
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    kernel(ours).backward(up)
    torch.prod(theirs, dim=-1).backward(up)
    torch.testing.assert_close(ours.grad, theirs.grad)


def test_std_of_a_constant_row_passes_no_gradient_as_torch(tmp_path):
    spec = spec_of("std(x, dim=-1)", {"x": [3, 8]}, "float32")
    kernel = getattr(load(tmp_path, "kernel.py", training.kernel_source(spec, parse_expression(spec))), "op")
    x = torch.randn(3, 8)
    x[1] = 0.5                                      # zero variance: torch's gradient is 0 there, not 0/0
    ours, truth = x.clone().requires_grad_(), x.double().requires_grad_()
    kernel(ours).backward(torch.ones(3))
    torch.std(truth, dim=-1).backward(torch.ones(3, dtype=torch.float64))
    assert torch.isfinite(ours.grad).all() and (ours.grad[1] == 0).all()
    torch.testing.assert_close(ours.grad.double(), truth.grad, rtol=1e-5, atol=1e-6)


def test_an_input_only_compared_gets_no_gradient_and_a_mask_none(tmp_path):
    spec = validate({"name": "op", "expression": "where(m, x * 2.0, 0.0) + where(y > 0.0, 1.0, 0.0)", "inputs": [
        {"name": "m", "dtypes": ["bool"], "shapes": [[3, 4]]}, {"name": "x", "dtypes": ["float32"], "shapes": [[3, 4]]},
        {"name": "y", "dtypes": ["float32"], "shapes": [[3, 4]]}]})
    kernel = getattr(load(tmp_path, "kernel.py", training.kernel_source(spec, parse_expression(spec))), "op")
    m, x, y = torch.rand(3, 4) < 0.5, torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)
    kernel(m, x, y).sum().backward()
    assert torch.equal(x.grad, torch.where(m, 2.0, 0.0)) and y.grad is None


def test_gradients_that_read_only_a_mask_and_the_upstream_keep_their_inputs_dtype(tmp_path):
    spec = validate({"name": "op", "expression": "where(m, a, b)", "inputs": [
        {"name": "m", "dtypes": ["bool"], "shapes": [[5, 9]]}, {"name": "a", "dtypes": ["float32"], "shapes": [[5, 9]]},
        {"name": "b", "dtypes": ["float32"], "shapes": [[5, 9]]}]})
    kernel = getattr(load(tmp_path, "kernel.py", training.kernel_source(spec, parse_expression(spec))), "op")
    m, a, b = torch.rand(5, 9) < 0.5, torch.randn(5, 9, requires_grad=True), torch.randn(5, 9, requires_grad=True)
    up = torch.randn(5, 9)
    kernel(m, a, b).backward(up)
    assert a.grad.dtype == b.grad.dtype == torch.float32
    assert torch.equal(a.grad, torch.where(m, up, 0.0)) and torch.equal(b.grad, torch.where(m, 0.0, up))


def test_a_cat_whose_pieces_move_between_cases_is_refused():
    spec = validate({"name": "op", "expression": "cat([x, y], dim=-1)",
                     "inputs": [{"name": "x", "dtypes": ["float32"], "shapes": [[4, 3], [2, 5]]},
                                {"name": "y", "dtypes": ["float32"], "shapes": [[4, 6], [2, 9]]}]})
    with pytest.raises(autodiff.NoGradient, match="piece 1's place differs between cases"):
        training.kernel_source(spec, parse_expression(spec))


def test_a_strided_convolution_whose_cases_need_different_output_paddings_is_refused():
    spec = validate({"name": "op", "expression": "conv2d(x, w, stride=2)",
                     "inputs": [{"name": "x", "dtypes": ["float32"], "shapes": [[1, 2, 7, 7], [1, 2, 8, 8]]},
                                {"name": "w", "dtypes": ["float32"], "shapes": [[3, 2, 3, 3], [3, 2, 3, 3]]}]})
    with pytest.raises(autodiff.NoGradient, match="same sizes modulo the stride"):
        training.kernel_source(spec, parse_expression(spec))


@pytest.mark.parametrize("expression, says", [
    ("adaptive_max_pool1d(x, 1)", "windows of at most 256"),
])
def test_an_op_without_a_gradient_rule_is_refused_naming_it(expression, says):
    spec = spec_of(expression, {"x": [4, 8] if "adaptive" not in expression else [2, 3, 300], "m": [8], "v": [8]},
                   "float32")
    with pytest.raises((autodiff.NoGradient, SpecError, IRError), match=says):
        training.kernel_source(spec, parse_expression(spec))


@pytest.mark.parametrize("text, training", [
    ("layernorm backward on 8x64", True),
    ("rmsnorm forward and backward for training on 8x64", True),
    ("gradient of softmax on 4x8", True),
    ("层归一化反向 8x64", True),
    ("rmsnorm 用于训练 8x64", True),
    ("relu(x) * y with gradients on 64x64", True),
    ("relu(x) forward only on 4x8", None),
    ("batch norm in training mode on 8x16x4x4", None),      # batch norm's mode, not a backward
    ("batch norm for training on 8x16x4x4", None),
    ("批归一化 用于训练 8x16x4x4", None),
    ("mean over the last dim of 8x64 for training", True),
])
def test_training_in_words(text, training):
    from bot.request import parse_request
    spec, _ = parse_request(text)
    assert spec.get("training") is training


def test_a_max_over_a_dim_for_training_says_whose_gradient_it_takes():
    from bot.request import parse_request
    said = "tied maxima share it evenly (torch.max(x, dim).values gives it all to the first)"
    assert any(said in n for n in parse_request("torch.max(x, dim=-1).values for 8x33, for training")[1])
    assert not any(said in n for n in parse_request("max(x, dim=None) for 8x33, for training")[1])


@pytest.mark.parametrize("text", ["group norm with 4 groups on 2x8x3x4 for training", "instance norm on 2x4x8x8 for training"])
def test_training_of_a_norm_without_a_mode_asks_for_its_backward(text):
    from bot.request import parse_request
    assert parse_request(text)[0].get("training") is True


@pytest.mark.parametrize("expression, shapes, fused", [
    ("rmsnorm(x, w, eps=1e-06)", {"x": [4, 4096], "w": [4096]}, True),
    ("layernorm(x, w, b, eps=1e-05)", {"x": [2, 3, 768], "w": [768], "b": [768]}, True),
    ("rmsnorm(x + r, w, eps=1e-06)", {"x": [4, 64], "r": [4, 64], "w": [64]}, False),     # a body: its chain rule
    ("rmsnorm(x, w, eps=1e-06)", {"x": [2, norm_grad.MAX_N + 1], "w": [norm_grad.MAX_N + 1]}, False),
    ("scaled_dot_product_attention(q, k, v, enable_gqa=True)", {"q": [2, 4, 8, 16], "k": [2, 2, 8, 16],
                                                                "v": [2, 2, 8, 16]}, True),
    ("scaled_dot_product_attention(q, k, v)", {"q": [3, 8, 16], "k": [3, 8, 16], "v": [3, 8, 16]}, True),
    # k and v broadcast over the batch: their gradients are summed over it, by the gradient expressions
    ("scaled_dot_product_attention(q, k, v)", {"q": [2, 2, 8, 16], "k": [1, 2, 8, 16], "v": [1, 2, 8, 16]}, False),
])
def test_a_norm_or_attention_of_inputs_takes_one_fused_backward(expression, shapes, fused):
    spec = spec_of(expression, shapes, "float32")
    source = training.kernel_source(spec, parse_expression(spec))
    assert ("def op_backward(" in source) == fused
    first = ir.input_names(parse_expression(spec))[0]
    assert (f"def op_grad_{first}(" in source) != fused


@pytest.mark.parametrize("expression, shapes, joint", [
    ("silu(a) * b", {"a": [4, 96], "b": [4, 96]}, ["a", "b"]),
    ("relu(x) * y + z", {"x": [5, 9], "y": [5, 9], "z": [5, 9]}, ["x", "y", "z"]),
    ("gelu(x * w + b)", {"x": [2, 3, 10], "w": [10], "b": [10]}, []),      # w and b broadcast: summed down
    ("x * y", {"x": [6, 8], "y": [6, 1]}, []),                              # y's gradient sums rows
])
def test_pointwise_gradients_of_full_shape_inputs_share_one_kernel(expression, shapes, joint):
    spec = spec_of(expression, shapes, "float32")
    source = training.kernel_source(spec, parse_expression(spec))
    assert (f"{', '.join(f'd_{x}' for x in joint)} = op_grads(" in source) == bool(joint)
    assert all(f"def op_grad_{x}(" not in source for x in joint)


def test_the_fused_attention_backward_refuses_shapes_it_was_not_generated_for(tmp_path):
    shapes = {"q": [2, 2, 8, 16], "k": [2, 2, 8, 16], "v": [2, 2, 8, 16]}
    spec = spec_of("scaled_dot_product_attention(q, k, v)", shapes, "float32")
    module = load(tmp_path, "kernel.py", training.kernel_source(spec, parse_expression(spec)))
    q, g = torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16)
    k = v = torch.randn(1, 2, 8, 16)            # broadcast over the batch: the expressions' case, not this one
    with pytest.raises(ValueError, match="one batch.*regenerate"):
        module.op_backward(q, k, v, g)
