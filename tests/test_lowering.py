"""Lowerings of the operator IR: reference.py and kernel.py, generated, imported and run.

Kernels run under Triton's interpreter here (tests/conftest.py), in float32 and float16
(the interpreter gets bfloat16 wrong), and are compared with the reference evaluated on
float64 inputs within runner.protocol's tolerance.
"""
from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
import torch

from generated import load, make_spec

from bot import integrity, ir, lower_torch, lower_triton
from bot.spec import parse_expression, validate
from runner import protocol

SQUARE = [[3, 5], [17, 33]]

# The masked lanes of a tail block compute on placeholder values (log(0) and the like).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def generate(tmp_path, spec: dict, options: dict | None = None):
    node = parse_expression(spec)
    reference = load(tmp_path, "reference.py", lower_torch.reference_source(spec, node))
    kernel = load(tmp_path, "kernel.py", lower_triton.kernel_source(spec, node, options))
    return getattr(reference, spec["name"]), getattr(kernel, spec["name"])


def make_inputs(spec: dict, case: protocol.Case, variant: dict[str, str]) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(case.index)
    out = []
    for spec_input in spec["inputs"]:
        shape = case.shapes[spec_input["name"]]
        if spec_input["domain"] == "normal":
            values = torch.randn(shape, generator=gen)
        else:
            values = 0.5 + 1.5 * torch.rand(shape, generator=gen)
            if spec_input["domain"] == "nonzero":
                values = torch.where(torch.rand(shape, generator=gen) < 0.5, -values, values)
        out.append(values.to(getattr(torch, variant[spec_input["name"]])))
    return out


def assert_close(got: torch.Tensor, want: torch.Tensor, dtype: str, reduce_len: int, what: str) -> None:
    rtol, atol = protocol.tolerance(dtype, reduce_len)
    err = (got.double() - want).abs()
    ok = err <= atol + rtol * want.abs()       # NaN fails
    assert bool(ok.all()), f"{what}: {int((~ok).sum())} bad values, max err {err.max().item():.3g}"


def check(tmp_path, spec: dict, options: dict | None = None, looped: bool = False) -> None:
    """Kernel vs reference(float64 inputs) and reference shapes/dtypes, on every case x variant.
    looped: the row op must go through the looped kernel (the one-tile kernel is removed)."""
    reference, kernel = generate(tmp_path, spec, options)
    if looped:
        kernel.__globals__[f"{spec['name']}_kernel"] = None
    node = parse_expression(spec)
    out = spec["outputs"][0]
    for case, (v, variant) in itertools.product(protocol.cases(spec), enumerate(protocol.dtype_variants(spec))):
        inputs = make_inputs(spec, case, variant)
        want = reference(*[t.double() for t in inputs])
        dtype = out["dtypes"][v]
        label = f"{spec['expression']} {case.label} {protocol.variant_label(variant)}"
        for who, got in (("reference", reference(*inputs)), ("kernel", kernel(*inputs))):
            assert list(got.shape) == out["shapes"][case.index], f"{who} shape, {label}"
            assert got.dtype == getattr(torch, dtype), f"{who} dtype, {label}"
        reduce_len = ir.broadcast_shapes(list(case.shapes.values()))[-1] if node.op in ir.REDUCE else 1
        assert_close(kernel(*inputs), want, dtype, reduce_len, f"kernel, {label}")


# ---------------------------------------------------------------- pointwise ops, one by one and composed

POINTWISE = [
    "x + y", "x - y", "x * y", "x / y", "-x", "abs(x)", "exp(x)", "log(x)", "sqrt(x)", "rsqrt(x)",
    "x ** 2", "x ** 3", "x ** -2", "x ** 0.5", "x ** -0.5", "x ** 1.5", "x ** 0", "relu(x)", "gelu(x)",
    "gelu(x, approximate='tanh')", "silu(x)", "sigmoid(x)", "tanh(x)", "maximum(x, y)", "minimum(x, 0.5)",
    "where(x > y, x, y)", "where(x <= 0, 0.0, 1.0)", "(x < y) * 2.0 + (x != y)", "clamp(x, -0.5, 0.5)",
    "clamp(x, min=0.1)", "clamp(x, max=0.1)", "x * sqrt(2.0) + pi",
    # compositions
    "relu(x + y)", "silu(x) * y + exp(-abs(x))", "x / (1.0 + exp(-x))", "gelu(x * y - 1.0) ** 2",
    "gelu(x * 8.0)",    # past erf's clamp at +-4 for most elements
    "where(x >= y, tanh(x), sigmoid(y)) * (x - y)", "exp(x - y) / (1.0 + exp(x - y))",
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
    source = lower_triton.kernel_source(spec, parse_expression(spec), {"block": 256})
    assert "if block_start + BLOCK <= n_elements:" in source
    assert "x = tl.load(x_ptr + offs).to(tl.float32)" in source           # no mask: vectorizable
    assert "x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)" in source  # only the tail
    assert "tl.program_id(0).to(tl.int64) * BLOCK" in source
    check(tmp_path, spec, {"block": 256})   # 3 full blocks and a tail of 233


def test_full_shape_inputs_are_read_at_the_flat_offset(tmp_path):
    spec = make_spec("x + b", {"x": SQUARE, "b": [[5], [33]]})
    source = lower_triton.kernel_source(spec, parse_expression(spec))
    assert "x = tl.load(x_ptr + offs)" in source and "b = tl.load(b_ptr + b_offs)" in source
    assert "x_full" not in source and "b_full: tl.constexpr" in source


def test_mixed_dtypes_give_the_first_inputs_dtype(tmp_path):
    spec = validate({"name": "op", "expression": "x * y", "inputs": [
        {"name": "x", "dtypes": ["float16"], "shapes": SQUARE}, {"name": "y", "dtypes": ["float32"], "shapes": SQUARE}]})
    check(tmp_path, spec)


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


# ---------------------------------------------------------------- row ops

ROW_OPS = [
    "sum(x)", "mean(x)", "max(x)", "min(x)", "sum(exp(x))", "max(x * y)", "mean(x - y)", "min(relu(x) + 1.0)",
    "softmax(x)", "softmax(x * 0.5)", "log_softmax(x)", "log_softmax(x * y)",
    "layernorm(x)", "rmsnorm(x)", "layernorm(x + y, eps=1e-3)",
]


@pytest.mark.parametrize("expression", ROW_OPS)
def test_row_op(tmp_path, expression):
    names = ir.input_names(ir.parse(expression))
    check(tmp_path, make_spec(expression, {n: SQUARE + [[2, 3, 40]] for n in names}))


NORMS = {
    "layernorm weight": ("layernorm(x, w)", ["w"]),
    "layernorm weight bias": ("layernorm(x, w, b, eps=1e-5)", ["w", "b"]),
    "layernorm bias only": ("layernorm(x, bias=b)", ["b"]),
    "rmsnorm weight": ("rmsnorm(x, w, eps=1e-6)", ["w"]),
    "rmsnorm of a residual sum": ("rmsnorm(x + r, w)", ["w"]),
    "weights named like the kernel's own locals": ("layernorm(x, NV, TAIL)", ["NV", "TAIL"]),
}


@pytest.mark.parametrize("variant", NORMS)
def test_norm_weight_and_bias(tmp_path, variant):
    expression, vectors = NORMS[variant]
    cases = [[3, 5], [2, 3, 40]]
    shapes = {"x": cases, **{v: [[c[-1]] for c in cases] for v in vectors}}
    if "r" in ir.input_names(ir.parse(expression)):
        shapes["r"] = cases
    check(tmp_path, make_spec(expression, shapes))


def test_reduction_of_a_vector_is_0d(tmp_path):
    spec = make_spec("sum(x)", {"x": [[1000]]})
    assert spec["outputs"][0]["shapes"] == [[]]
    check(tmp_path, spec)


def test_row_op_input_patterns(tmp_path):
    # b is a last-dim vector, one value per row, then a single value: decided per launch.
    shapes = {"x": [[3, 5], [2, 3, 40], [1000]], "b": [[5], [2, 3, 1], [1]]}
    for expression in ("softmax(x * 0.5 + b)", "sum(x * b)", "layernorm(x - b)"):
        check(tmp_path, make_spec(expression, shapes))


@pytest.mark.parametrize("expression", ["sum(x)", "mean(x * 2.0)", "max(x)", "min(x)", "softmax(x)",
                                        "log_softmax(x - 1.0)", "layernorm(x, w, b)", "rmsnorm(x, w)"])
def test_looped_row_path(tmp_path, expression):
    # A 64-wide tile forces rows of 300 and 1000 through the looped kernel; more rows than one
    # tile holds so partly filled row blocks are exercised too.
    shapes = {"x": [[3, 300], [1000], [40, 70]]}
    for extra in ("w", "b"):
        if extra in expression:
            shapes[extra] = [[300], [1000], [70]]
    check(tmp_path, make_spec(expression, shapes), {"block": 64}, looped=True)


def test_a_row_of_5000_through_the_looped_kernel(tmp_path):
    for expression in ("softmax(x)", "layernorm(x)", "sum(x)"):
        check(tmp_path, make_spec(expression, {"x": [[2, 5000]]}), {"block": 1024}, looped=True)


@pytest.mark.parametrize("expression", ["sum(x)", "mean(x * y)", "max(x)", "min(x - y)"])
def test_odd_rows_are_read_aligned(tmp_path, expression):
    # Rows of 1031 and 2053 elements (no whole number of 16-byte vectors) go through the aligned
    # kernel alone (the others are removed): head, vector body and tail, in fp32 (4 per 16 bytes)
    # and fp16 (8), with tiles narrower and wider than the row.
    names = sorted(ir.input_names(ir.parse(expression)))
    spec = make_spec(expression, {n: [[3, 1031], [2, 2053]] for n in names})
    for config in ({"BLOCK_M": 1, "BLOCK_N": 256, "num_warps": 2}, {"BLOCK_M": 1, "BLOCK_N": 4096, "num_warps": 8}):
        reference, kernel = generate(tmp_path, spec, None)
        kernel.__globals__["op_kernel"] = kernel.__globals__["op_looped_kernel"] = None
        for case, variant in itertools.product(protocol.cases(spec), protocol.dtype_variants(spec)):
            inputs = make_inputs(spec, case, variant)
            dtype = variant[names[0]]
            got = kernel(*inputs, config=config)
            assert_close(got, reference(*[t.double() for t in inputs]), dtype, inputs[0].shape[-1], case.label)


def test_aligned_kernel_keeps_nan_and_skips_aligned_rows(tmp_path):
    # NaN in a row's head, body or tail wins its max. Rows of 1032 fp32 are 16-byte aligned: they
    # keep the tile kernels (with the aligned kernel removed, they still run).
    spec = make_spec("max(x)", {"x": [[4, 1031], [2, 1032]]}, dtypes=("float32",))
    reference, kernel = generate(tmp_path, spec)
    x = torch.randn(4, 1031)
    x[0, 1] = x[1, 500] = x[2, 1030] = float("nan")
    assert torch.equal(kernel(x).isnan(), torch.tensor([True, True, True, False]))
    assert kernel(x)[3] == x[3].max()
    kernel.__globals__["op_aligned_kernel"] = None
    x = torch.randn(2, 1032)
    assert torch.equal(kernel(x), reference(x))


def test_row_kernel_source(tmp_path):
    spec = make_spec("max(x)", {"x": SQUARE})
    source = lower_triton.kernel_source(spec, parse_expression(spec))
    assert 'float("-inf")' in source            # masked lanes never win a max
    assert "def op_looped_kernel(" in source and "or _row_config(R, N)" in source
    spec = make_spec("min(x)", {"x": SQUARE})
    assert 'float("inf")' in lower_triton.kernel_source(spec, parse_expression(spec))


def test_bad_row_broadcast_is_refused_clearly(tmp_path):
    spec = make_spec("softmax(x + y)", {"x": [[2, 3, 4]], "y": [[2, 1, 4]]})
    with pytest.raises(ValueError, match=r"input y has shape \[2, 1, 4\].*last-dim vector \[4\]"):
        lower_triton.kernel_source(spec, parse_expression(spec))
    # and at launch, for shapes the kernel was not generated for
    spec = make_spec("softmax(x + y)", {"x": [[2, 3, 4]], "y": [[4]]})
    _, kernel = generate(tmp_path, spec)
    with pytest.raises(ValueError, match=r"input y has shape \[2, 1, 4\]"):
        kernel(torch.randn(2, 3, 4), torch.randn(2, 1, 4))


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
    assert lower_triton.parse_options(words) == options


def test_options_reach_the_launcher(tmp_path):
    spec = make_spec("relu(x)", {"x": SQUARE})
    source = lower_triton.kernel_source(spec, parse_expression(spec), {"block": 2048, "num_warps": 2})
    assert 'or {**_pointwise_config(n_elements), "BLOCK": 2048, "num_warps": 2}' in source
    assert "Asked for in review" in source
    check(tmp_path, spec, {"block": 2048, "num_warps": 2})
    with pytest.raises(ValueError, match="power of two"):
        lower_triton.kernel_source(spec, parse_expression(spec), {"block": 1000})
    with pytest.raises(ValueError, match="num_warps"):
        lower_triton.kernel_source(spec, parse_expression(spec), {"num_warps": 3})


# ---------------------------------------------------------------- the tuning contract

def configs_of(tmp_path, spec: dict, options: dict | None = None) -> list[dict]:
    return load(tmp_path, "kernel.py", lower_triton.kernel_source(spec, parse_expression(spec), options)).CONFIGS


def test_config_spaces_and_review_pins(tmp_path):
    pointwise = make_spec("x + y", {"x": SQUARE, "y": SQUARE})
    assert configs_of(tmp_path, pointwise) == lower_triton.POINTWISE_CONFIGS
    assert configs_of(tmp_path, pointwise, {"block": 512}) == [{"BLOCK": 512, "num_warps": 4}, {"BLOCK": 512, "num_warps": 8}]
    assert {c["num_warps"] for c in configs_of(tmp_path, pointwise, {"num_warps": 2})} == {2}
    rows = make_spec("softmax(x)", {"x": [[5333, 497], [8, 32768]]})
    space = configs_of(tmp_path, rows)
    # the default's pick for each case comes first, then the variants that differ on some case
    assert space[:2] == [lower_triton._row_config(5333, 497), lower_triton._row_config(8, 32768)]
    assert 6 <= len(space) <= len(lower_triton.ROW_CONFIGS) + 2
    fitted = [[lower_triton._row_tile(r, n, c) for r, n in ((5333, 497), (8, 32768))] for c in space]
    assert len(set(map(str, fitted))) == len(space)
    assert all(c["BLOCK_N"] == 1024 for c in configs_of(tmp_path, rows, {"block": 1024}))


def test_row_tile_fits_any_config_to_any_shape():
    tile = lower_triton._row_tile
    assert tile(5333, 497, {"BLOCK_M": 16, "BLOCK_N": 1024, "num_warps": 4}) == (2, 512, 4)
    assert tile(3, 5, {"BLOCK_M": 64, "BLOCK_N": 4096, "num_warps": 8}) == (4, 16, 8)
    assert tile(8, 32768, {"BLOCK_M": 64, "BLOCK_N": 4096, "num_warps": 8}) == (1, 4096, 8)
    assert tile(1, 1, {"BLOCK_M": 1, "BLOCK_N": 8192, "num_warps": 4}) == (1, 16, 4)


@pytest.mark.parametrize("expression, shapes", [
    ("x * y + 1.0", {"x": [[3, 5], [2, 2500]], "y": [[5], [2500]]}),
    ("layernorm(x, w)", {"x": [[40, 70], [2, 3000]], "w": [[70], [3000]]}),
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
        source = lower_triton.kernel_source(spec, parse_expression(spec))
        assert not integrity.check(source, "op"), integrity.report(integrity.check(source, "op"))


# ---------------------------------------------------------------- the generators themselves

def test_constant_subexpressions_are_folded():
    node = lower_torch.fold_constants(ir.parse("x * sqrt(4.0) + where(1.0 > 0.0, y, x)"))
    assert ir.to_text(node) == "((x * 2.0) + y)"
    with pytest.raises(ValueError, match="no finite value"):
        lower_torch.fold_constants(ir.parse("x + log(0.0)"))


def test_repeated_subexpressions_are_computed_once():
    spec = make_spec("exp(x + y) / (1.0 + exp(x + y))", {"x": SQUARE, "y": SQUARE})
    source = lower_torch.reference_source(spec, parse_expression(spec))
    assert source.count("torch.exp(") == 1 and "t0 = torch.exp(x + y)" in source


def test_lower_triton_needs_neither_torch_nor_triton():
    # A bot-only host generates kernels without the runner's dependencies.
    code = "import sys, bot.lower_triton, bot.testgen; assert not {'torch', 'triton'} & set(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("expression, over_rows", [
    ("relu(x)", False), ("clamp(x, min=-0.5, max=0.5)", False), ("maximum(x, y)", False), ("minimum(x, y)", False),
    ("max(x)", True), ("min(x * 2.0)", True)])
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


def test_max_over_an_empty_last_dim_raises_as_torch_does(tmp_path):
    _, kernel = generate(tmp_path, make_spec("max(x)", {"x": [[4, 33]]}, dtypes=("float32",)))
    with pytest.raises(IndexError, match=r"max over dim -1 of shape \(5, 0\), which is empty"):
        kernel(torch.randn(5, 0))
    assert kernel(torch.randn(0, 5)).shape == (0,)
