"""The reduction lowering (bot.lower_reduce): generated kernel.py files, imported and run.

sum/mean/max/min and argmax/argmin over every dim, and cross_entropy, run under Triton's
interpreter here (tests/conftest.py) in float32 and float16 (the interpreter gets bfloat16
wrong), on small odd shapes, against the generated reference on float64 inputs: within
runner.protocol's tolerance for the reduced length, exactly for indices.
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from generated import load, make_spec

from bot import ir, lower_reduce, lower_torch
from bot.spec import parse_expression
from runner import protocol
from runner.inputs import make_inputs

# Masked lanes compute on placeholders (rows past the end reach -inf - -inf in cross entropy).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

MATRIX, CUBE, VECTOR = [37, 97], [5, 7, 11], [97]
COLS_CASE, ROWS_CASE = [301, 45], [45, 301]     # dim 0 / dim 1 of these: D = 301, long enough to split
SPLIT = {"BLOCK_B": 16, "BLOCK_R": 2, "BLOCK_D": 16, "SPLIT_D": 5, "num_warps": 4, "num_stages": 2}


def generate(tmp_path, spec: dict, options: dict | None = None):
    """(reference function, kernel.py module)."""
    node = parse_expression(spec)
    reference = load(tmp_path, "reference.py", lower_torch.reference_source(spec, node))
    kernel = load(tmp_path, "kernel.py", lower_reduce.kernel_source(spec, node, options))
    return getattr(reference, spec["name"]), kernel


def ties(spec: dict, case: protocol.Case, variant: dict[str, str]) -> list[torch.Tensor]:
    """Small integers: every row and column holds its max and min several times."""
    gen = torch.Generator().manual_seed(case.index)
    return [torch.randint(-2, 3, case.shapes[i["name"]], generator=gen).to(getattr(torch, variant[i["name"]]))
            for i in spec["inputs"]]


def check(tmp_path, spec: dict, options: dict | None = None, configs=(None,), draw=None) -> None:
    """Kernel vs reference(float64 inputs) on every case x dtype variant x config: shape, dtype,
    values within tolerance (indices exactly)."""
    reference, module = generate(tmp_path, spec, options)
    kernel = getattr(module, spec["name"])
    out = spec["outputs"][0]
    for case in protocol.cases(spec):
        for v, variant in enumerate(protocol.dtype_variants(spec)):
            inputs = draw(spec, case, variant) if draw else make_inputs(spec, case, variant, 0, "cpu")
            want = reference(*[t.double() if t.is_floating_point() else t for t in inputs])
            reduced = spec["reduce"]
            length = ir.broadcast_shapes([case.shapes[n] for n in reduced["inputs"]])[reduced["dim"]]
            for config in configs:
                got = kernel(*inputs, config=config)
                label = f"{spec['expression']} {case.label} {protocol.variant_label(variant)} config={config}"
                assert list(got.shape) == out["shapes"][case.index], label
                assert got.dtype == getattr(torch, out["dtypes"][v]), label
                if got.dtype == torch.int64:
                    assert torch.equal(got, want), f"{label}: {got} != {want}"
                    continue
                rtol, atol = protocol.tolerance(out["dtypes"][v], length)
                err = (got.double() - want).abs()
                assert bool((err <= atol + rtol * want.abs()).all()), f"{label}: max err {err.max().item():.3g}"


# ---------------------------------------------------------------- every op over every dim

DIMS = {0: [MATRIX, CUBE, VECTOR], 1: [MATRIX, CUBE], 2: [CUBE], -1: [MATRIX, CUBE, VECTOR], -2: [MATRIX, CUBE]}


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_reduce_over_every_dim(tmp_path, op, dim):
    check(tmp_path, make_spec(f"{op}(x, dim={dim})", {"x": DIMS[dim]}))


@pytest.mark.parametrize("expression", ["sum(exp(x) * y, dim=0)", "max(relu(x - y), dim=1)",
                                        "mean(x / y + 1.0, dim=-2)", "min(where(x > y, x, -y), dim=0)"])
def test_reduce_of_a_body(tmp_path, expression):
    names = ir.input_names(ir.parse(expression))
    check(tmp_path, make_spec(expression, {n: [MATRIX, CUBE] for n in names}))


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reduce_first_index_on_ties(tmp_path, op, dim):
    check(tmp_path, make_spec(f"{op}(x, dim={dim})", {"x": DIMS[dim]}), configs=(None, SPLIT), draw=ties)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reduce_treats_nan_as_torch_does(tmp_path, op):
    # NaN wins, the first one on ties, wherever the split boundaries fall.
    x = torch.randn(ROWS_CASE)
    x[3, 7] = x[3, 250] = x[4, 250] = float("nan")
    for dim, data in ((1, x), (0, x.t().contiguous())):     # the rows kernel, then the cols kernel
        _, module = generate(tmp_path, make_spec(f"{op}(x, dim={dim})", {"x": [list(data.shape)]}))
        for config in (None, SPLIT):
            assert torch.equal(module.op(data, config=config), getattr(torch, op)(data, dim=dim))


# ---------------------------------------------------------------- configs, splits, layouts

@pytest.mark.parametrize("expression, shape", [("sum(x, dim=0)", [301, 5]), ("argmin(x, dim=0)", [301, 5]),
                                               ("mean(x, dim=1)", [5, 301]), ("argmax(x, dim=1)", [5, 301])])
def test_every_config_runs(tmp_path, expression, shape):
    # The spec's own space, then every candidate of either layout (a config made for the other
    # layout takes the keys it lacks from the default). Five outputs are fewer than any config's
    # block of outputs, so masked tails are covered; D = 301 is long enough to split.
    spec = make_spec(expression, {"x": [shape]}, dtypes=("float32",))
    _, module = generate(tmp_path, spec)
    assert 1 <= len(module.CONFIGS) <= lower_reduce.MAX_CONFIGS
    arg = expression.startswith("arg")
    layouts = (lower_reduce.ARG_COLS_CONFIGS + lower_reduce.ARG_ROWS_CONFIGS if arg
               else lower_reduce.COLS_CONFIGS + lower_reduce.ROWS_CONFIGS)
    check(tmp_path, spec, configs=module.CONFIGS + layouts)


@pytest.mark.parametrize("expression", ["sum(x, dim=0)", "mean(x, dim=0)", "min(x, dim=0)", "argmax(x, dim=0)",
                                        "argmin(x, dim=1)"])
def test_empty_inputs_answer_as_torch_does(tmp_path, expression):
    # Specs have positive dims, but an exported kernel may meet empty ones: a sum over nothing is 0,
    # a mean NaN; min/argmax/argmin over nothing raise, as torch does; an empty output stays empty.
    reference, module = generate(tmp_path, make_spec(expression, {"x": [COLS_CASE]}, dtypes=("float32",)))
    for shape in ((0, 5), (5, 0)):
        x = torch.randn(shape)
        try:
            want = reference(x)
        except IndexError:                                  # torch's error for these
            with pytest.raises(IndexError, match="which is empty: torch refuses that too"):
                module.op(x)
            continue
        torch.testing.assert_close(module.op(x), want, equal_nan=True)


def test_cols_kernel_keeps_an_accumulator_per_lane():
    # Over columns, the tile is folded into one accumulator per lane and reduced once after the loop
    # (no block reduction per step, which cost narrow tiles 50 vs 35.5 us on an H200); over rows,
    # sum/mean/max/min reduce each tile as it arrives.
    spec = make_spec("sum(x, dim=0)", {"x": [COLS_CASE]})
    text = lower_reduce.kernel_source(spec, parse_expression(spec))
    cols, rows = text.split("def op_cols_kernel(")[1].split("def op_rows_kernel(")
    assert "acc = tl.full([BLOCK_D, BLOCK_B], 0.0, tl.float32)" in cols and "acc += val\n" in cols
    assert "acc += tl.sum(val, axis=1, keep_dims=True)" in rows


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "argmax", "argmin"])
def test_split_partials_are_combined(tmp_path, op):
    # Odd sizes in both layouts, each split into 5 parts of D (the combine kernel's path).
    for shape, dim, view in ((COLS_CASE, 0, (1, 301, 45)), (ROWS_CASE, 1, (45, 301, 1)), ([3, 301, 5], 1, (3, 301, 5))):
        assert lower_reduce._reduce_tiles(SPLIT, *view, 4)[2] == 5
        spec = make_spec(f"{op}(x, dim={dim})", {"x": [shape]})
        check(tmp_path, spec, configs=(SPLIT,), draw=ties if op.startswith("arg") else None)


def test_cases_of_both_layouts_share_one_space(tmp_path):
    # dim 1 is the last dim of a matrix (rows kernel) but not of a 3-D tensor (cols kernel).
    spec = make_spec("sum(x, dim=1)", {"x": [MATRIX, CUBE]})
    _, module = generate(tmp_path, spec)
    assert {"BLOCK_B", "BLOCK_R"} <= {key for config in module.CONFIGS for key in config}
    check(tmp_path, spec, configs=(None, *module.CONFIGS))


def test_default_configs():
    # dim 0 of 8192x8192: A = 1, so 8 column blocks of 1024 x 128 splits of 64 rows (1024 programs).
    assert lower_reduce._reduce_config(1, 8192, 8192) == {"BLOCK_B": 1024, "BLOCK_D": 8, "SPLIT_D": 128,
                                                          "num_warps": 4, "num_stages": 1}
    # the last dim of 8192x8192: one row per program, one tile per row, no split.
    assert lower_reduce._reduce_config(8192, 8192, 1) == {"BLOCK_R": 1, "BLOCK_D": 8192, "SPLIT_D": 1,
                                                          "num_warps": 16, "num_stages": 1}
    # a few very long rows are split
    assert lower_reduce._reduce_config(4, 1 << 20, 1)["SPLIT_D"] == 16    # 8 chunks of 8192 each
    # argmax/argmin: 512 x 4 tiles over dim 0 (an accumulator per lane, 64 splits); over the last
    # dim one row per one-warp program in 512-wide chunks.
    assert lower_reduce._reduce_config(1, 8192, 8192, arg_reduce=True) == {
        "BLOCK_B": 512, "BLOCK_D": 4, "SPLIT_D": 64, "num_warps": 2, "num_stages": 3}
    assert lower_reduce._reduce_config(8192, 8192, 1, arg_reduce=True) == {
        "BLOCK_R": 1, "BLOCK_D": 512, "SPLIT_D": 1, "num_warps": 1, "num_stages": 1}
    assert lower_reduce._cross_entropy_config(4096, 128256) == {"BLOCK_R": 1, "BLOCK_V": 8192, "num_warps": 4,
                                                                "num_stages": 1}


@pytest.mark.parametrize("view", [(1, 8192, 8192), (8192, 8192, 1), (1, 1, 1), (5, 1, 11), (3, 301, 5), (1, 97, 1)])
def test_any_config_fits_any_case(view):
    A, D, B = view
    spaces = [(False, [lower_reduce._reduce_config(*view), *lower_reduce.COLS_CONFIGS, *lower_reduce.ROWS_CONFIGS]),
              (True, [lower_reduce._reduce_config(*view, True), *lower_reduce.ARG_COLS_CONFIGS,
                      *lower_reduce.ARG_ROWS_CONFIGS])]
    for arg_reduce, config in [(arg_reduce, c) for arg_reduce, configs in spaces for c in configs]:
        for elem_bytes in (2, 8):
            block, block_d, split, chunk, _, stages = lower_reduce._reduce_tiles(config, A, D, B, elem_bytes,
                                                                                arg_reduce)
            assert block <= max(1, 2 * (B if B > 1 else A)) and block_d < 2 * D and chunk % block_d == 0
            assert (split - 1) * chunk < D <= split * chunk, (config, view)
            assert stages == 1 or stages * block * block_d * elem_bytes <= 96 * 1024


# ---------------------------------------------------------------- cross entropy

@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("logits", ["x", "x * 0.5 + y"])
def test_cross_entropy(tmp_path, logits, reduction):
    names = ir.input_names(ir.parse(logits))
    shapes = {n: [MATRIX, [2, 3, 50]] for n in names} | {"t": [[37], [2, 3]]}
    check(tmp_path, make_spec(f"cross_entropy({logits}, t, reduction='{reduction}')", shapes))


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_long_rows_in_chunks(tmp_path, reduction):
    # Logits up to ~100: without the running max's rescaling exp() would overflow float32.
    spec = make_spec(f"cross_entropy(x * 30.0, t, reduction='{reduction}')",
                     {"x": [[5, 1000], MATRIX], "t": [[5], [37]]})
    _, module = generate(tmp_path, spec)
    chunked = [{"BLOCK_R": 2, "BLOCK_V": 64, "num_warps": 4, "num_stages": 2}]
    check(tmp_path, spec, configs=(None, *chunked, *module.CONFIGS, *lower_reduce.CROSS_ENTROPY_CONFIGS))


def test_cross_entropy_target_out_of_range_picks_zero(tmp_path):
    # The target's logit is one direct load per row: a target outside [0, V) must read nothing
    # (no out-of-bounds access) and count as a logit of 0, as documented in kernel.py.
    spec = make_spec("cross_entropy(x, t, reduction='none')", {"x": [MATRIX], "t": [[37]]}, ("float32",))
    reference, module = generate(tmp_path, spec)
    x, t = torch.randn(MATRIX), torch.randint(0, 97, (37,))
    t[3], t[10] = 97, -1
    got, want = module.op(x, t), reference(x, t.clamp(0, 96))
    inside = torch.ones(37, dtype=torch.bool)
    inside[[3, 10]] = False
    torch.testing.assert_close(got[inside], want[inside])
    torch.testing.assert_close(got[~inside], torch.logsumexp(x[[3, 10]], dim=-1))


@pytest.mark.parametrize("logits", ["x", "x * 0.5 + y", "x - x_next"])
def test_cross_entropy_persistent_kernel(tmp_path, logits):
    # PER_SM programs per SM (4 SMs on CPU) loop over rows that fit one tile, one or two at a time,
    # the last step partly past R; the one-program-per-row kernel is removed to be sure.
    names = ir.input_names(ir.parse(logits))
    spec = make_spec(f"cross_entropy({logits}, t, reduction='none')", {n: [MATRIX] for n in names} | {"t": [[37]]},
                     ("float32",))
    reference, module = generate(tmp_path, spec)
    module.op_kernel = None
    inputs = make_inputs(spec, protocol.cases(spec)[0], protocol.dtype_variants(spec)[0], 0, "cpu")
    want = reference(*[i.double() if i.is_floating_point() else i for i in inputs])
    for block_r in (1, 2):
        config = {"BLOCK_R": block_r, "BLOCK_V": 128, "num_warps": 1, "num_stages": 1, "PER_SM": 1}
        torch.testing.assert_close(module.op(*inputs, config=config), want.float())


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_ignores_padding_as_torch_does(tmp_path, reduction):
    # Target -100 (torch's default ignore_index): no loss, and 'mean' averages over the other rows;
    # all of them padding makes 'mean' 0 / 0, NaN, in torch and here.
    spec = make_spec(f"cross_entropy(x, t, reduction='{reduction}')", {"x": [[6, 97]], "t": [[6]]}, ("float32",))
    reference, module = generate(tmp_path, spec)
    x, t = torch.randn(6, 97), torch.randint(0, 97, (6,))
    t[[1, 4]] = protocol.IGNORE_INDEX
    torch.testing.assert_close(module.op(x, t), reference(x, t))
    padding = torch.full_like(t, protocol.IGNORE_INDEX)
    torch.testing.assert_close(module.op(x, padding), reference(x, padding), equal_nan=True)


# ---------------------------------------------------------------- aligned kernels: odd rows of 1024+

# Rows of no whole number of 16-byte vectors, long enough for the aligned kernel: row r starts
# r * 1031 elements in, so its head (before its first 16-byte boundary) and tail vary by row.
ODD_ROWS = [5, 1031]
ALIGNED_CONFIG = {"BLOCK_R": 1, "BLOCK_D": 128, "BLOCK_V": 128, "SPLIT_D": 1, "num_warps": 4, "num_stages": 2}


def aligned_only(module) -> None:
    """Remove module's other row kernels: a launch that does not take the aligned kernel fails."""
    for name in ("op_rows_kernel", "op_kernel", "op_persistent_kernel"):
        if hasattr(module, name):
            setattr(module, name, None)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reduce_aligned_rows(tmp_path, op):
    # The edge tile (head and tail) is reduced after the row's body, yet the first index wins.
    _, module = generate(tmp_path, make_spec(f"{op}(x, dim=1)", {"x": [ODD_ROWS]}))
    aligned_only(module)
    for dtype in (torch.float32, torch.float16):       # 4 and 8 elements per 16 bytes
        x = torch.zeros(ODD_ROWS)
        x[0, [1028, 1030]] = 2.0                        # the extreme only in the tail
        x[1, [0, 600]] = 2.0                            # a tie of the head and the body
        x[2, [1, 300]] = float("nan")                   # NaN in the head and the body
        x[3, [5, 1030]] = torch.tensor([2.0, float("nan")])    # NaN in the tail beats the body's extreme
        x[4] = torch.randint(-2, 3, (1031,))            # ties everywhere
        x = (x if op == "argmax" else -x).to(dtype)
        for config in (None, ALIGNED_CONFIG):
            assert torch.equal(module.op(x, config=config), getattr(torch, op)(x, dim=1)), (dtype, config)


@pytest.mark.parametrize("op", ["sum", "max"])
def test_reduce_aligned_rows(tmp_path, op):
    # dim 1 of [5, 1031, 1]: B == 1, so rows; the edge tile folds into the same accumulators.
    spec = make_spec(f"{op}(x, dim=1)", {"x": [ODD_ROWS + [1]]})
    reference, module = generate(tmp_path, spec)
    aligned_only(module)
    x = torch.randn(ODD_ROWS + [1])
    x[1, 0] = x[0, 1030] = 9.0                            # the head's and the tail's
    for config in (None, ALIGNED_CONFIG):
        torch.testing.assert_close(module.op(x, config=config), reference(x.double()).float())


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_aligned_rows(tmp_path, reduction):
    spec = make_spec(f"cross_entropy(x * 30.0, t, reduction='{reduction}')", {"x": [ODD_ROWS], "t": [[5]]})
    reference, module = generate(tmp_path, spec)
    aligned_only(module)
    x, t = torch.randn(ODD_ROWS), torch.tensor([3, 1030, 0, protocol.IGNORE_INDEX, 1029])  # targets in head, tail
    x[1, 1030] = x[2, 0] = 5.0                            # the running max set by the edge
    for config in (None, ALIGNED_CONFIG):
        torch.testing.assert_close(module.op(x, t, config=config), reference(x.double(), t).float())


# ---------------------------------------------------------------- launcher, names, options, errors

def test_tuned_config_reaches_the_launcher(tmp_path):
    spec = make_spec("sum(x, dim=0)", {"x": [COLS_CASE]}, dtypes=("float32",))
    _, module = generate(tmp_path, spec)
    seen = []
    fit = module._reduce_tiles
    module._reduce_tiles = lambda config, *case: seen.append(config) or fit(config, *case)
    x = torch.randn(COLS_CASE)
    module.TUNED[module.tuning_key((x,))] = SPLIT
    torch.testing.assert_close(module.op(x), x.sum(0))
    assert seen == [SPLIT]


def test_non_contiguous_inputs_and_generated_names(tmp_path):
    # Inputs named like kernel.py's own locals are renamed there; views are made contiguous.
    spec = make_spec("sum(acc * dim - chunk, dim=0)", {n: [MATRIX] for n in ("acc", "dim", "chunk")}, ("float32",))
    reference, module = generate(tmp_path, spec)
    inputs = [torch.randn(97, 37).t() for _ in range(3)]
    torch.testing.assert_close(module.op(*inputs), reference(*inputs))


def test_options_pin_the_default_and_every_config(tmp_path):
    spec = make_spec("max(x, dim=0)", {"x": [COLS_CASE]})
    _, module = generate(tmp_path, spec, {"block": 64, "num_warps": 2})
    assert all(c["BLOCK_D"] == 64 and c["num_warps"] == 2 for c in module.CONFIGS)
    check(tmp_path, spec, {"block": 64, "num_warps": 2})
    spec = make_spec("cross_entropy(x, t)", {"x": [MATRIX], "t": [[37]]})
    _, module = generate(tmp_path, spec, {"block": 32})
    assert all(c["BLOCK_V"] == 32 for c in module.CONFIGS)
    check(tmp_path, spec, {"block": 32})


def test_source_follows_the_tuning_contract(tmp_path):
    for spec in (make_spec("argmax(x, dim=0)", {"x": [MATRIX, CUBE]}),
                 make_spec("cross_entropy(x, t)", {"x": [MATRIX], "t": [[37]]})):
        source = lower_reduce.kernel_source(spec, parse_expression(spec))
        assert "def op(x" in source and "*, config=None):" in source and "TUNED = {}" in source
        module = load(tmp_path, "kernel.py", source)
        assert all(set(c) >= {"num_warps", "num_stages"} and all(isinstance(v, int) for v in c.values())
                   for c in module.CONFIGS)
    assert "the output holds int64 indices" in lower_reduce.kernel_source(
        make_spec("argmin(x, dim=1)", {"x": [MATRIX]}), ir.parse("argmin(x, dim=1)"))


def test_refusals_are_clear(tmp_path):
    spec = make_spec("sum(x + b, dim=0)", {"x": [MATRIX], "b": [[97]]})
    with pytest.raises(ValueError, match=r"input b has shape \[97\] in case 1.*full shape \[37, 97\]"):
        lower_reduce.kernel_source(spec, parse_expression(spec))
    spec = make_spec("cross_entropy(x + b, t)", {"x": [MATRIX], "b": [[1, 97]], "t": [[37]]})
    with pytest.raises(ValueError, match="broadcasting inputs are not supported"):
        lower_reduce.kernel_source(spec, parse_expression(spec))
    spec = make_spec("sum(x, dim=0)", {"x": [MATRIX]})
    with pytest.raises(ValueError, match=r"over dim 2, but case 1 has shape \[37, 97\]"):
        lower_reduce.kernel_source(spec, ir.call("sum", ir.inp("x"), dim=2))
    spec = make_spec("argmax(x, dim=1)", {"x": [[1, 2**30]]})
    with pytest.raises(ValueError, match=r"argmax over a dim of 1073741824 .*shorter than 1073741824"):
        lower_reduce.kernel_source(spec, parse_expression(spec))
    with pytest.raises(ValueError, match="not softmax"):
        lower_reduce.kernel_source(spec, ir.call("softmax", ir.inp("x"), dim=-1))
    with pytest.raises(ValueError, match="clashes"):
        lower_reduce.kernel_source({**spec, "name": "chunk"}, parse_expression(spec))
    # at launch, for shapes the kernel was not generated for
    _, module = generate(tmp_path, make_spec("sum(x * y, dim=0)", {"x": [MATRIX], "y": [MATRIX]}))
    with pytest.raises(ValueError, match=r"input y has shape \[97\].*regenerate"):
        module.op(torch.randn(MATRIX), torch.randn(97))


def test_lower_reduce_needs_neither_torch_nor_triton():
    code = "import sys, bot.lower_reduce; assert not {'torch', 'triton'} & set(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dim", [0, 1])
def test_max_min_keep_nan_as_torch_does(tmp_path, op, dim):
    # NaN anywhere in a reduced slice makes its result NaN (torch.amax/amin), across splits too.
    spec = make_spec(f"{op}(x, dim={dim})", {"x": [COLS_CASE]}, dtypes=("float32",))
    reference, module = generate(tmp_path, spec)
    x = torch.randn(COLS_CASE)
    x[3, 7] = x[250, 40] = float("nan")
    want = reference(x)
    for config in (None, SPLIT, lower_reduce.COLS_CONFIGS[0]):
        got = module.op(x, config=config)
        assert torch.equal(got.isnan(), want.isnan()), (config, got, want)
        torch.testing.assert_close(got[~want.isnan()], want[~want.isnan()])
