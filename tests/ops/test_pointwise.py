"""The pointwise family (bot.ops.pointwise): generated reference.py and kernel.py, imported and run,
one op at a time and composed, over shapes and broadcasts; the review options and the tuning
contract of kernel files (bot.codegen.kernel_file), and the reference's own folding."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from generated import load, make_spec
from lowering import SQUARE, assert_close, check, generate, make_inputs

from bot.generators.interface import GenerationError
from bot.request import parse_request
from bot import integrity, ir, lower_torch
from bot.codegen import kernel_file, row_kernel
from bot.ops import pointwise, registry
from bot.spec import parse_expression, validate
from runner import protocol

# The masked lanes of a tail block compute on placeholder values (log(0) and the like).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


# ---------------------------------------------------------------- pointwise ops, one by one and composed

POINTWISE = [
    "x + y", "x - y", "x * y", "x / y", "-x", "abs(x)", "exp(x)", "log(x)", "sqrt(x)", "rsqrt(x)",
    "x ** 2", "x ** 3", "x ** -2", "x ** 0.5", "x ** -0.5", "x ** 1.5", "x ** 0", "relu(x)", "gelu(x)",
    "gelu(x, approximate='tanh')", "silu(x)", "sigmoid(x)", "tanh(x)", "maximum(x, y)", "minimum(x, 0.5)",
    "where(x > y, x, y)", "where(x <= 0, 0.0, 1.0)", "(x < y) * 2.0 + (x != y)", "clamp(x, -0.5, 0.5)",
    "clamp(x, min=0.1)", "clamp(x, max=0.1)", "x * sqrt(2.0) + pi", "erf(x)", "erf(x * 3.0) + erf(0.5)",
    # compositions
    "relu(x + y)", "silu(x) * y + exp(-abs(x))", "x / (1.0 + exp(-x))", "gelu(x * y - 1.0) ** 2",
    "gelu(x * 8.0)",    # past erf's clamp at +-4 for most elements
    "where(x >= y, tanh(x), sigmoid(y)) * (x - y)", "exp(x - y) / (1.0 + exp(x - y))",
    "sin(x) * cos(y * 3.0) + cos(sin(x))",
    "floor(x * 3.0) + ceil(y) * 0.5",
]


@pytest.mark.parametrize("expression", POINTWISE)
def test_pointwise_op(tmp_path, expression):
    names = ir.input_names(ir.parse(expression))
    check(tmp_path, make_spec(expression, {n: SQUARE for n in names}))


BROADCASTS = {
    "row vector": ("x + b", {"x": [[3, 5], [17, 33]], "b": [[5], [33]]}),
    "per row 3-D": ("x * s", {"x": [[2, 3, 40]], "s": [[2, 3, 1]]}),
    "scalar-shaped": ("x + y", {"x": [[1000]], "y": [[1]]}),
    "both sides 4-D": ("x * y - x", {"x": [[2, 1, 3, 5]], "y": [[1, 4, 1, 5]]}),
    "full in one case, broadcast in another": ("x * y + z", {"x": [[3, 5], [4, 3, 5]], "y": [[3, 5], [5]],
                                                            "z": [[3, 5], [4, 1, 1]]}),
    "odd 1-D over several blocks": ("gelu(x) + y", {"x": [[5001]], "y": [[5001]]}),
    "4-D odd": ("sigmoid(x) * y", {"x": [[2, 3, 5, 7]], "y": [[2, 3, 5, 7]]}),
}


@pytest.mark.parametrize("pattern", BROADCASTS)
def test_pointwise_shapes_and_broadcasting(tmp_path, pattern):
    expression, shapes = BROADCASTS[pattern]
    check(tmp_path, make_spec(expression, shapes))


def test_pointwise_blocks_take_the_unmasked_path_except_the_tail(tmp_path):
    spec = make_spec("x + y", {"x": [[1001]], "y": [[1001]]})
    source = pointwise.kernel_source(spec, parse_expression(spec), {"block": 256})
    assert "if block_start + BLOCK <= n_elements:" in source
    assert "x = tl.load(x_ptr + offs).to(tl.float32)" in source           # no mask: vectorizable
    assert "x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)" in source  # only the tail
    assert "tl.program_id(0).to(tl.int64) * BLOCK" in source
    check(tmp_path, spec, {"block": 256})   # 3 full blocks and a tail of 233


def test_full_shape_inputs_are_read_at_the_flat_offset(tmp_path):
    spec = make_spec("x + b", {"x": SQUARE, "b": [[5], [33]]})
    source = pointwise.kernel_source(spec, parse_expression(spec), {})
    assert "x = tl.load(x_ptr + offs)" in source and "b = tl.load(b_ptr + b_offs)" in source
    assert "x_full" not in source and "b_full: tl.constexpr" in source


def test_mixed_dtypes_give_the_first_inputs_dtype(tmp_path):
    spec = validate({"name": "op", "expression": "x * y", "inputs": [
        {"name": "x", "dtypes": ["float16"], "shapes": SQUARE}, {"name": "y", "dtypes": ["float32"], "shapes": SQUARE}]})
    check(tmp_path, spec)


@pytest.mark.parametrize("expression", ["x * mask", "mask * x + y", "where(mask, x, y)", "masked_fill(x, mask, -1.5)",
                                        "x * logical_not(mask)"])
def test_a_bool_mask_reads_as_torch_promotes_it(tmp_path, expression):
    # Triton loads a torch.bool tensor as int1: 1.0 where True, 0.0 where False; a [N] mask broadcasts.
    names = [n for n in ("x", "mask", "y") if n in expression]
    check(tmp_path, make_spec(expression, {n: [[5], [33]] if n == "mask" else SQUARE for n in names}, masks=("mask",)))


def test_a_mask_first_in_the_signature_leaves_the_output_the_float_dtype(tmp_path):
    spec = make_spec("mask * x", {"mask": SQUARE, "x": SQUARE}, dtypes=("float16",), masks=("mask",))
    _, kernel = generate(tmp_path, spec)
    mask, x = torch.rand(3, 5) < 0.5, torch.randn(3, 5, dtype=torch.float16)
    torch.testing.assert_close(kernel(mask, x), x * mask, rtol=0, atol=0)


def test_non_contiguous_inputs(tmp_path):
    spec = make_spec("x * y + 1.0", {"x": [[5, 3]], "y": [[5, 3]]}, dtypes=("float32",))
    reference, kernel = generate(tmp_path, spec)
    x, y = torch.randn(3, 5).t(), torch.randn(5, 6)[:, ::2]
    assert not x.is_contiguous() and not y.is_contiguous()
    torch.testing.assert_close(kernel(x, y), reference(x, y))


def test_inputs_named_like_generated_locals(tmp_path):
    shapes = {"out": SQUARE, "mask": SQUARE, "n_elements": SQUARE, "t0": SQUARE}
    check(tmp_path, make_spec("where(mask > 0, out, n_elements) * exp(t0) + exp(t0)", shapes))
    check(tmp_path, make_spec("softmax(N + rows)", {"N": SQUARE, "rows": SQUARE}))


def test_identity_returns_a_new_tensor(tmp_path):
    reference, kernel = generate(tmp_path, make_spec("x", {"x": SQUARE}))
    x = torch.randn(3, 5)
    for fn in (reference, kernel):
        out = fn(x)
        assert torch.equal(out, x) and out.data_ptr() != x.data_ptr()


def test_launcher_refuses_shapes_it_was_not_generated_for(tmp_path):
    _, kernel = generate(tmp_path, make_spec("x + y", {"x": SQUARE, "y": SQUARE}))
    with pytest.raises(ValueError, match=r"input y has shape \[5\].*regenerate"):
        kernel(torch.randn(3, 5), torch.randn(5))


# ---------------------------------------------------------------- options from review

@pytest.mark.parametrize("words, options", [
    (["use block size 2048"], {"block": 2048}),
    (["BLOCK=4096, num_warps=8"], {"block": 4096, "num_warps": 8}),
    (["try 8 warps", "actually num_warps 2"], {"num_warps": 2}),
    (["BLOCK_SIZE: 512"], {"block": 512}),
    (["looks good"], {}),
])
def test_parse_options(words, options):
    assert kernel_file.parse_options(words) == options


def test_options_reach_the_launcher(tmp_path):
    spec = make_spec("relu(x)", {"x": SQUARE})
    source = pointwise.kernel_source(spec, parse_expression(spec), {"block": 2048, "num_warps": 2})
    assert 'or {**_pointwise_config(n_elements), "BLOCK": 2048, "num_warps": 2}' in source
    assert "Asked for in review" in source
    check(tmp_path, spec, {"block": 2048, "num_warps": 2})
    with pytest.raises(ValueError, match="power of two"):
        pointwise.kernel_source(spec, parse_expression(spec), {"block": 1000})
    with pytest.raises(ValueError, match="num_warps"):
        pointwise.kernel_source(spec, parse_expression(spec), {"num_warps": 3})


# ---------------------------------------------------------------- the tuning contract

def configs_of(tmp_path, spec: dict, options: dict | None = None) -> list[dict]:
    return load(tmp_path, "kernel.py", registry.kernel_source(spec, parse_expression(spec), options or {})).CONFIGS


def test_config_spaces_and_review_pins(tmp_path):
    pointwise_spec = make_spec("x + y", {"x": SQUARE, "y": SQUARE})
    assert configs_of(tmp_path, pointwise_spec) == pointwise.POINTWISE_CONFIGS
    assert configs_of(tmp_path, pointwise_spec, {"block": 512}) == [{"BLOCK": 512, "num_warps": 4},
                                                                    {"BLOCK": 512, "num_warps": 8}]
    assert {c["num_warps"] for c in configs_of(tmp_path, pointwise_spec, {"num_warps": 2})} == {2}
    rows = make_spec("softmax(x)", {"x": [[5333, 497], [8, 32768]]})
    space = configs_of(tmp_path, rows)
    # the default's pick for each case comes first, then the variants that differ on some case
    # (softmax: rows stacked to 1024 elements, 8 warps to 8K, one tile to 32K)
    assert space[:2] == [row_kernel._row_config(r, n, 1024, 32768, 8, 32768) for r, n in ((5333, 497), (8, 32768))]
    assert 6 <= len(space) <= len(row_kernel.ROW_CONFIGS) + 2
    fitted = [[row_kernel._row_tile(r, n, c) for r, n in ((5333, 497), (8, 32768))] for c in space]
    assert len(set(map(str, fitted))) == len(space)
    assert all(c["BLOCK_N"] == 1024 for c in configs_of(tmp_path, rows, {"block": 1024}))


# The layernorm case of this test is in test_norm.py (ids kept as they were).
@pytest.mark.parametrize("expression, shapes", [
    pytest.param("x * y + 1.0", {"x": [[3, 5], [2, 2500]], "y": [[5], [2500]]}, id="x * y + 1.0-shapes0"),
])
def test_every_config_is_correct_on_every_case(tmp_path, expression, shapes):
    spec = make_spec(expression, shapes, dtypes=("float32",))
    reference, kernel = generate(tmp_path, spec)
    for case in protocol.cases(spec):
        inputs = make_inputs(spec, case, {n: "float32" for n in shapes})
        want = reference(*[t.double() for t in inputs])
        reduce_len = case.shapes["x"][-1] if "norm" in expression else 1
        for config in kernel.__globals__["CONFIGS"]:
            assert_close(kernel(*inputs, config=config), want, "float32", reduce_len, f"{config} {case.label}")


def test_generated_kernels_keep_the_integrity_rules():
    for expression in ("relu(x + y)", "rmsnorm(x + y)"):
        spec = make_spec(expression, {"x": SQUARE, "y": SQUARE})
        source = registry.kernel_source(spec, parse_expression(spec), {})
        assert not integrity.check(source, "op"), integrity.report(integrity.check(source, "op"))


# ---------------------------------------------------------------- the generators themselves

def test_constant_subexpressions_are_folded():
    node = pointwise.fold_constants(ir.parse("x * sqrt(4.0) + where(1.0 > 0.0, y, x)"))
    assert ir.to_text(node) == "((x * 2.0) + y)"
    with pytest.raises(ValueError, match="no finite value"):
        pointwise.fold_constants(ir.parse("x + log(0.0)"))


def test_repeated_subexpressions_are_computed_once():
    spec = make_spec("exp(x + y) / (1.0 + exp(x + y))", {"x": SQUARE, "y": SQUARE})
    source = lower_torch.reference_source(spec, parse_expression(spec))
    assert source.count("torch.exp(") == 1 and "t0 = torch.exp(x + y)" in source


def test_lower_triton_needs_neither_torch_nor_triton():
    # A bot-only host generates kernels without the runner's dependencies: the pointwise family and
    # the row template and kernel-file code old bot.lower_triton held, and bot.testgen.
    code = ("import sys, bot.ops.pointwise, bot.codegen.row_kernel, bot.codegen.kernel_file, bot.testgen; "
            "assert not {'torch', 'triton'} & set(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


# The max/min cases of this test (over rows) are in test_reduce.py.
@pytest.mark.parametrize("expression, over_rows", [
    ("relu(x)", False), ("clamp(x, min=-0.5, max=0.5)", False), ("maximum(x, y)", False), ("minimum(x, y)", False)])
def test_nan_propagates_as_in_torch(tmp_path, expression, over_rows):
    # torch's relu, clamp, maximum, minimum and max/min keep NaN; tl.maximum/minimum drop it
    # unless asked. Row ops: one row with NaN in its first chunk, one row all NaN, long rows
    # going through the looped kernel as well as the one-tile one.
    names = sorted(ir.input_names(ir.parse(expression)))
    shape = [4, 300] if over_rows else [4, 37]
    spec = make_spec(expression, {n: [shape] for n in names}, dtypes=("float32",))
    reference, kernel = generate(tmp_path, spec)
    inputs = [torch.randn(shape) for _ in names]
    inputs[0][1, 3] = inputs[0][3, 299 if over_rows else 36] = float("nan")
    inputs[0][2] = float("nan")
    want = reference(*inputs)
    configs = [None] + ([{"BLOCK_M": 1, "BLOCK_N": 64, "num_warps": 4}] if over_rows else [])
    for config in configs:
        got = kernel(*inputs, config=config)
        assert torch.equal(got.isnan(), want.isnan()), (config, got, want)
        torch.testing.assert_close(got[~want.isnan()], want[~want.isnan()])


@pytest.mark.parametrize("words, typed", [
    ("leaky relu with slope 0.2 on 64x128 fp16", "leaky_relu(x, 0.2)"), ("leaky relu of x", "leaky_relu(x)"),
    ("hardswish of a 64x128 tensor", "hardswish(x)"), ("hard sigmoid", "hardsigmoid(x)"), ("hard tanh", "hardtanh(x)"),
    ("relu6", "relu6(x)"), ("elu", "elu(x)"), ("celu with alpha 2", "celu(x, 2.0)"), ("selu", "selu(x)"),
    ("softplus with beta 2", "softplus(x, 2.0)"), ("softsign", "softsign(x)"), ("mish activation", "mish(x)"),
    ("log sigmoid", "logsigmoid(x)"), ("tanhshrink", "tanhshrink(x)"), ("softshrink with lambda 0.3", "softshrink(x, 0.3)"),
    ("softmax of leaky relu of x", "softmax(leaky_relu(x))"), ("泄漏 relu 64x128", "leaky_relu(x)"),
    # keywords in words, whose words may be row ops' (min, max); steps in the order 'then' gives
    ("softplus with beta 2 and threshold 10", "softplus(x, 2.0, 10.0)"),
    ("softplus with threshold 5", "softplus(x, 1.0, 5.0)"),
    ("hardtanh with min -2 and max 2", "hardtanh(x, -2.0, 2.0)"), ("relu6 then hardtanh", "hardtanh(relu6(x))"),
    ("sigmoid, then tanh, then relu", "relu(tanh(sigmoid(x)))"), ("tanh followed by softplus", "softplus(tanh(x))"),
    ("先 relu 然后 sigmoid", "sigmoid(relu(x))"), ("new gelu", "gelu(x, approximate='tanh')"),
])
def test_activations_in_words(words, typed):
    spec, _ = parse_request(words)
    assert ir.parse(spec["expression"], as_written=True) == ir.parse(typed, as_written=True)


@pytest.mark.parametrize("code, fn", [
    ("torch.expm1(x)", lambda x, y, z: torch.expm1(x)), ("torch.log1p(x.abs())", lambda x, y, z: torch.log1p(x.abs())),
    ("torch.log2(x.abs())", lambda x, y, z: torch.log2(x.abs())),
    ("torch.log10(x.abs())", lambda x, y, z: torch.log10(x.abs())), ("torch.exp2(x)", lambda x, y, z: torch.exp2(x)),
    ("torch.sign(x)", lambda x, y, z: torch.sign(x)), ("x.clamp_min(0.2)", lambda x, y, z: x.clamp_min(0.2)),
    ("torch.tan(x)", lambda x, y, z: torch.tan(x)),
    ("torch.trunc(x * 3.0)", lambda x, y, z: torch.trunc(x * 3.0)), ("torch.frac(x * 3.0)", lambda x, y, z: torch.frac(x * 3.0)),
    ("torch.round(x * 4.0)", lambda x, y, z: torch.round(x * 4.0)),
    ("torch.atan2(y, x)", lambda x, y, z: torch.atan2(y, x)), ("torch.arctan(x)", lambda x, y, z: torch.atan(x)),
    ("torch.remainder(x * 5.0, y)", lambda x, y, z: torch.remainder(x * 5.0, y)),
    ("(x * 5.0) % -1.5", lambda x, y, z: (x * 5.0) % -1.5), ("torch.fmod(x * 5.0, y)", lambda x, y, z: torch.fmod(x * 5.0, y)),
    ("torch.hypot(x, y)", lambda x, y, z: torch.hypot(x, y)), ("torch.asin(y * 0.3)", lambda x, y, z: torch.asin(y * 0.3)),
    ("torch.acos(y * 0.3)", lambda x, y, z: torch.acos(y * 0.3)), ("torch.sinh(x)", lambda x, y, z: torch.sinh(x)),
    ("torch.cosh(x)", lambda x, y, z: torch.cosh(x)), ("torch.asinh(x)", lambda x, y, z: torch.asinh(x)),
    ("torch.atanh(y * 0.3)", lambda x, y, z: torch.atanh(y * 0.3)), ("torch.special.erfc(y)", lambda x, y, z: torch.erfc(y)),
    ("torch.logit(torch.sigmoid(y))", lambda x, y, z: torch.logit(torch.sigmoid(y))),
    ("torch.logit(x, eps=0.1)", lambda x, y, z: torch.logit(x, eps=0.1)),
    ("torch.xlogy(x, y.abs())", lambda x, y, z: torch.xlogy(x, y.abs())), ("torch.sinc(x)", lambda x, y, z: torch.sinc(x)),
    ("torch.heaviside(x, y)", lambda x, y, z: torch.heaviside(x, y)), ("torch.deg2rad(x)", lambda x, y, z: torch.deg2rad(x)),
    ("F.rrelu(x, 0.1, 0.3)", lambda x, y, z: torch.nn.functional.rrelu(x, 0.1, 0.3)),
    ("F.prelu(x, 0.2)", lambda x, y, z: torch.nn.functional.prelu(x, torch.tensor([0.2], dtype=x.dtype))),
    ("F.threshold(x, 0.1, 20.0)", lambda x, y, z: torch.nn.functional.threshold(x, 0.1, 20.0)),
    ("torch.clamp_max(x, y)", lambda x, y, z: torch.clamp_max(x, y)),
    ("torch.addcmul(x, y, z, value=0.5)", lambda x, y, z: torch.addcmul(x, y, z, value=0.5)),
    ("x.addcdiv(y, z.abs() + 1.0)", lambda x, y, z: x.addcdiv(y, z.abs() + 1.0)),
    ("torch.lerp(x, y, 0.3)", lambda x, y, z: torch.lerp(x, y, 0.3)), ("torch.lerp(x, y, z)", torch.lerp),
    ("torch.logaddexp(x * 30.0, y)", lambda x, y, z: torch.logaddexp(x * 30.0, y)),
    ("torch.nn.functional.dropout(x, p=0.0) + torch.nn.functional.dropout(y, 0.3, training=False)",
     lambda x, y, z: x + y),
    ("torch.nan_to_num(x, nan=0.5, posinf=1e4, neginf=-1e4) + y.nan_to_num(1.0, 2.0, -2.0)",   # x holds NaN and inf
     lambda x, y, z: torch.nan_to_num(x, nan=0.5, posinf=1e4, neginf=-1e4) + y.nan_to_num(1.0, 2.0, -2.0)),
    ("torch.where((x > 0) & (y < 0.5), x, z) + torch.where((x > 0) | ~(y < 0.5), y, z)",
     lambda x, y, z: torch.where((x > 0) & (y < 0.5), x, z) + torch.where((x > 0) | ~(y < 0.5), y, z)),
    ("torch.where(torch.logical_xor(x > 0, y > 0), x, z) * torch.isfinite(x)",
     lambda x, y, z: torch.where(torch.logical_xor(x > 0, y > 0), x, z) * torch.isfinite(x)),
    ("torch.zeros_like(x) + torch.ones_like(y) * torch.full_like(x, 2.5)",     # x holds NaN and inf: still 0
     lambda x, y, z: torch.zeros_like(x) + torch.ones_like(y) * torch.full_like(x, 2.5)),
])
def test_math_functions_written_in_ir_ops_are_torchs(tmp_path, code, fn):
    node = ir.parse(code, as_written=True)
    names = ir.input_names(node)
    spec = validate({"name": "op", "expression": ir.to_text(node),
                     "inputs": [{"name": n, "dtypes": ["float32"], "shapes": [[257]]} for n in names]})
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, parse_expression(spec))), "op")
    gen = torch.Generator().manual_seed(0)
    x, y, z = (torch.randn(257, generator=gen, dtype=torch.float64) for _ in range(3))
    x[:4] = torch.tensor([0.0, float("nan"), -0.0, float("inf")])      # torch's sign: 0 for NaN; the rest keep NaN
    values = {"x": x, "y": y, "z": z}
    torch.testing.assert_close(reference(*[values[n] for n in names]), fn(x, y, z), rtol=1e-12, atol=1e-12,
                               equal_nan=True)


@pytest.mark.parametrize("request_text, torch_call", [
    ("F.glu(x, 1) with x 4x6x5 fp32", lambda x: torch.nn.functional.glu(x, 1)),
    ("F.pairwise_distance(x, y, p=1.0) with x 8x16 and y 8x16 fp32",
     lambda x, y: torch.nn.functional.pairwise_distance(x, y, p=1.0)),
    ("torch.outer(a, b) with a 8 and b 16 fp32", torch.outer),
    ("torch.cdist(x, y) with x 9x16 and y 7x16 fp32", torch.cdist),
    ("torch.cdist(x, y, p=1.0) with x 3x9x16 and y 3x7x16 fp32", lambda x, y: torch.cdist(x, y, p=1.0)),
    ("F.softmin(x, dim=0) with x 8x16 fp32", lambda x: torch.nn.functional.softmin(x, dim=0)),
    ("torch.diff(x, dim=0)[1:] + torch.diff(y, n=2, dim=0) with x 9x16 and y 9x1 fp32",
     lambda x, y: torch.diff(x, dim=0)[1:] + torch.diff(y, n=2, dim=0)),
    ("x.diff() with x 3x5x17 fp32", lambda x: x.diff()),
    ("torch.cross(a, b, dim=1) with a 4x3x5 and b 4x3x5 fp32", lambda a, b: torch.cross(a, b, dim=1)),
    ("torch.einsum('i,j->ij', a, b) with a 7 and b 5 fp32", lambda a, b: torch.einsum("i,j->ij", a, b)),
    ("torch.einsum('bi,bi->b', a, b) with a 6x9 and b 6x9 fp32", lambda a, b: torch.einsum("bi,bi->b", a, b)),
    ("torch.einsum('bhd,hd->hb', a, b) with a 4x3x8 and b 3x8 fp32", lambda a, b: torch.einsum("bhd,hd->hb", a, b)),
])
def test_functions_of_views_and_reductions_are_torchs(tmp_path, request_text, torch_call):
    spec, _ = parse_request(request_text)
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    args = [torch.randn(i["shapes"][0]) for i in spec["inputs"]]
    torch.testing.assert_close(kernel(*args), torch_call(*args), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_sign_keeps_the_inputs_dtype_and_is_read_from_a_request(tmp_path, dtype):
    # written with a tensor branch, so the request reader's where-of-constants refusal does not apply
    spec, _ = parse_request(f"torch.sign(x) * x with x 2x7 {'fp16' if dtype == 'float16' else 'fp32'}")
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    x = torch.tensor([float("nan"), -0.0, 0.0, float("inf"), -float("inf"), 2.0, -3.0] * 2, dtype=getattr(torch, dtype))
    got, want = kernel(x.reshape(2, 7)), (torch.sign(x) * x).reshape(2, 7)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("code", ["torch.atan(x * 4.0)", "torch.atan2(x, y)", "torch.remainder(x * 7.0, y)",
                                  "(x * 7.0) % 1.25", "torch.fmod(x * 7.0, y)", "torch.asin(u)", "torch.acos(u)",
                                  "torch.atanh(u)", "torch.asinh(x * 9.0)", "torch.hypot(x, y)"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_inverse_trigonometry_and_remainders_in_the_kernel_are_torchs(tmp_path, code, dtype):
    # atan is the kernel's own polynomial and fmod Triton's float %: every quadrant and sign, and
    # quotients near whole numbers, against torch in the kernel's dtype
    named = " and ".join(f"{n} 16x37" for n in ("x", "y", "u") if re.search(rf"\b{n}\b", code))
    spec, _ = parse_request(f"{code} with {named} {'fp16' if dtype == 'float16' else 'fp32'}")
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    gen = torch.Generator().manual_seed(0)
    x, y = (torch.randn(16, 37, generator=gen) for _ in range(2))
    y[0, :8] = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 3.0, -0.25])
    x[0, :8] = torch.tensor([1.0, -1.0, 0.0, 0.0, 2.5, 7.0, -9.0, 0.75])
    u = torch.rand(16, 37, generator=gen) * 1.9 - 0.95
    values = {"x": x, "y": y, "u": u}
    args = [values[i["name"]].to(getattr(torch, dtype)) for i in spec["inputs"]]
    # against float64 (the harness's truth): torch's float16 rounds x * 7.0 before the remainder
    want = eval(code, {"torch": torch}, {i["name"]: a.double() for i, a in zip(spec["inputs"], args)}).to(args[0].dtype)
    torch.testing.assert_close(kernel(*args), want, rtol=3e-6 if dtype == "float32" else 2e-3,
                               atol=3e-6 if dtype == "float32" else 2e-3, equal_nan=True)


@pytest.mark.parametrize("code", ["x // y", "torch.floor_divide(x, y)", "torch.div(x, y, rounding_mode='floor')",
                                  "torch.div(x, y, rounding_mode='trunc')", "torch.copysign(x, y)"])
def test_floor_division_and_copysign_are_torchs_at_every_sign_zero_and_infinity(tmp_path, code):
    # every pair of these values, x // y as torch computes it for floats (fmod-based, then rounded), the
    # zeros' signs included
    spec = validate({"name": "op", "expression": ir.to_text(ir.parse(code, as_written=True)),
                     "inputs": [{"name": n, "dtypes": ["float32"], "shapes": [[20, 20]]} for n in ("x", "y")]})
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    values = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.3, 0.1, -0.3, 2.5, -2.5, 7.0, -7.0, 1e-30, -1e-30, 1e30,
                           float("inf"), float("-inf"), float("nan"), 3.0, 0.7, -0.7])
    x, y = values.repeat_interleave(20).reshape(20, 20), values.repeat(20).reshape(20, 20)
    got, want = kernel(x, y), eval(code, {"torch": torch}, {"x": x, "y": y})
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(torch.signbit(got[got == 0]), torch.signbit(want[got == 0]))


@pytest.mark.parametrize("request_text, torch_fn", [
    ("x // 3 for 16x16", lambda x: x // 3),
    ("torch.div(x, 0.5, rounding_mode='floor') for 16x16", lambda x: torch.div(x, 0.5, rounding_mode="floor")),
    ("torch.div(x, 0.5, rounding_mode='trunc') for 16x16", lambda x: torch.div(x, 0.5, rounding_mode="trunc")),
    ("torch.copysign(x, -1.0) for 16x16", lambda x: torch.copysign(x, torch.tensor(-1.0))),
    ("torch.copysign(x, -0.0) for 16x16", lambda x: torch.copysign(x, torch.tensor(-0.0))),    # the sign bit of -0.0
])
def test_division_by_a_number_typed_in_a_request_is_torchs(tmp_path, request_text, torch_fn):
    # a number as the divisor: its tests (0 != 0, sign) are numbers alone inside the kernel
    spec, _ = parse_request(request_text)
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    x = torch.randn(16, 16, generator=torch.Generator().manual_seed(0)) * 10
    torch.testing.assert_close(kernel(x), torch_fn(x), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_round_goes_half_to_even_and_keeps_large_and_infinite_values(tmp_path, dtype):
    spec, _ = parse_request(f"torch.round(x) with x 4x8 {'fp16' if dtype == 'float16' else 'fp32'}")
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    big = 8388609.0 if dtype == "float32" else 2049.0          # odd integers past the float's last fraction bit
    values = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 3.7, -3.7, big, -big, float("inf"),
              -float("inf"), float("nan"), 0.0, 1e-8, 7.5, -7.5, 2.4999998, 4095.5, -4095.5, 123.25, -0.75,
              0.25, 1.0, -1.0, 6.5, 1e30 if dtype == "float32" else 60000.0, 2.5000002, -2.5000002, 9.5]
    x = torch.tensor(values, dtype=getattr(torch, dtype)).reshape(4, 8)
    torch.testing.assert_close(kernel(x), torch.round(x), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("x_shape, w_shape", [("2x6x5x3", "6"), ("2x6x5x3", "1"), ("7x6", "6"), ("3x4x9", "4")])
def test_prelu_puts_one_weight_per_channel_on_dim_1(tmp_path, x_shape, w_shape):
    spec, _ = parse_request(f"F.prelu(x, w) with x {x_shape} and w {w_shape} fp32")
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    x = torch.randn([int(d) for d in x_shape.split("x")])
    w = torch.rand(int(w_shape))
    torch.testing.assert_close(kernel(x, w), torch.nn.functional.prelu(x, w))


def test_a_prelu_keeps_its_name_once_written_out():
    assert parse_request("F.prelu(x, w) with x 2x6x5x5 and w 6")[0]["name"] == "prelu"
    assert parse_request("F.leaky_relu(x, 0.1) for 8x8")[0]["name"] == "leaky_relu"          # a slope, no weight


@pytest.mark.parametrize("request_text, name", [
    ("x % y with x 8x8 and y 8x8", "remainder"), ("torch.atan2(x, y) + 1.0 with x 8x8 and y 8x8", "add_atan2"),
    ("torch.frac(x) * 2.0 for 8x8", "scale_frac"),          # frac holds trunc: the larger formula names it
    ("F.softplus(relu(x) * 2.0) for 8x8", "softplus_scale_relu"), ("relu(x + y) for 8x8", "relu_add"),
])
def test_a_function_written_in_ir_ops_is_named_by_its_name(request_text, name):
    assert parse_request(request_text)[0]["name"] == name


def test_prelu_refuses_a_weight_that_is_neither_one_value_nor_one_per_channel():
    with pytest.raises(GenerationError, match=r"prelu's weight has 5 values; it takes 1 or one per channel \(dim 1 of x, 6\)"):
        parse_request("F.prelu(x, w) with x 2x6x4x4 and w 5")


def test_rrelu_in_training_mode_and_the_identity_are_refused_naming_why():
    with pytest.raises(ir.IRError, match="rrelu in training mode draws a random slope"):
        ir.parse("F.rrelu(x, training=True)", as_written=True)
    with pytest.raises(GenerationError, match="returns its input 'x' unchanged"):
        parse_request("def f(x):\n    return F.dropout(x, p=0.5, training=False)")


def test_a_first_tensor_given_by_its_name_input_is_the_first_argument():
    assert ir.parse("torch.clamp(input=x, min=0.5)", as_written=True) == ir.parse("clamp(x, 0.5)", as_written=True)
    with pytest.raises(ir.IRError, match="where with input=x"):      # where's input is its second argument
        ir.parse("torch.where(x > 0, input=x, other=y)", as_written=True)


def test_the_bitwise_and_of_tensors_that_are_not_masks_is_refused():
    with pytest.raises(ir.IRError, match="joins two masks"):
        ir.parse("(x * 2) & (y > 0)", as_written=True)


def test_nan_to_num_without_the_infinities_replacements_is_refused_naming_why():
    # torch's defaults are the output dtype's largest finite values
    with pytest.raises(ir.IRError, match="give both, e.g. torch.nan_to_num"):
        ir.parse("torch.nan_to_num(x)", as_written=True)


def test_dropout_that_is_random_is_refused_naming_why():
    with pytest.raises(ir.IRError, match="dropout with p=0.1 in training mode is random"):
        ir.parse("torch.nn.functional.dropout(x, 0.1)", as_written=True)


# ---------------------------------------------------------------- rotary embedding's rotate_half, read in place

ROPE = "x * cos + torch.cat((-x[..., {h}:], x[..., :{h}]), dim=-1) * sin for x {x}, cos {c}, sin {c}"


@pytest.mark.parametrize("x, c", [("3x2x8", "3x1x8"), ("5x3x2x16", "1x3x1x16"), ("7x6", "7x6")])
def test_a_rotate_half_written_as_a_cat_is_one_kernel_that_matches_the_cat(tmp_path, x, c):
    d = int(x.split("x")[-1])
    spec, _ = parse_request(ROPE.format(h=d // 2, x=x, c=c) + ", fp32 and fp16")
    assert "rotate_half(x)" in spec["expression"] and d in spec["fixed_sizes"]
    source = ir.kernel_source(spec, parse_expression(spec), {})
    assert len(re.findall(r"^def \w+_kernel\w*\(", source, re.M)) == 1        # one kernel, no cat between
    check(tmp_path, spec)
    # the reference computes what the cat computes
    ref = load(tmp_path, "reference.py", lower_torch.reference_source(spec, parse_expression(spec)))
    t = {i["name"]: torch.randn(i["shapes"][0], dtype=torch.float64) for i in spec["inputs"]}
    want = t["x"] * t["cos"] + torch.cat((-t["x"][..., d // 2:], t["x"][..., :d // 2]), dim=-1) * t["sin"]
    torch.testing.assert_close(getattr(ref, spec["name"])(*t.values()), want)


@pytest.mark.parametrize("request_text", [
    ROPE.format(h=3, x="3x2x8", c="3x1x8"),                       # not halves: a cat of its own
    ROPE.format(h=4, x="1x2x8", c="3x1x8"),                       # x broadcast: not the output's shape
    ROPE.format(h=4, x="3x2x8", c="3x1x8") + " with backward",     # training keeps the cat's gradient rules
])
def test_a_cat_that_is_no_in_place_rotation_stays_a_cat(request_text):
    spec, _ = parse_request(request_text)
    assert "rotate_half" not in spec["expression"] and "cat(" in spec["expression"]


def test_clamp_with_tensor_bounds_is_the_larger_then_the_smaller(tmp_path):
    spec, _ = parse_request("torch.clamp(x, min=lo, max=top) with x 8x16, lo 8x16 and top 8x16 fp32")
    assert ir.parse(spec["expression"]) == ir.parse("minimum(maximum(x, lo), top)")
    spec, _ = parse_request("x.clamp(lo) with x 8x16 and lo 8x16 fp32")
    assert ir.parse(spec["expression"]) == ir.parse("maximum(x, lo)")


def test_one_hot_is_a_mask_of_the_classes_and_asks_for_their_number(tmp_path):
    spec, _ = parse_request("-(F.log_softmax(x, dim=-1) * F.one_hot(t, 5)).sum(-1) with x 6x5 and t 6 fp32")
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    x, t = torch.randn(6, 5), torch.randint(0, 5, (6,))
    args = {"x": x, "t": t}
    want = -(torch.log_softmax(x, -1) * torch.nn.functional.one_hot(t, 5)).sum(-1)
    torch.testing.assert_close(kernel(*[args[i["name"]] for i in spec["inputs"]]), want)
    with pytest.raises(ir.IRError, match="num_classes as a whole number"):
        ir.parse("F.one_hot(t) * x", as_written=True)
    with pytest.raises(ir.IRError, match="dim missing"):
        ir.parse("torch.cross(a, b)", as_written=True)
