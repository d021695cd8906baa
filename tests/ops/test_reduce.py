"""The reduce family (bot.ops.reduce): sum/mean/max/min and any/all, generated kernel.py files imported and run.

Over the last dim through the row template (bot.codegen.row_kernel), whose shared machinery
(looped and aligned kernels, row tiles, input patterns) is tested here; over any dim, the last
included, through the dim template (bot.codegen.dim_kernel: its cols and rows kernels, splits,
configs and refusals), on small odd shapes, against the generated reference on float64 inputs
within runner.protocol's tolerance for the reduced length.
"""
from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest
import torch

from generated import make_spec
from lowering import (ALIGNED_CONFIG, COLS_CASE, CUBE, DIMS, MATRIX, ODD_ROWS, ROWS_CASE, SPLIT, SQUARE,
                      aligned_only, assert_close, check, check_reduction, generate, generate_reduction, make_inputs,
                      ties)

from bot import ir, lower_torch
from bot.codegen import dim_kernel, row_kernel
from bot.ops import argreduce, loss, reduce
from bot.spec import parse_expression
from runner import protocol
from runner.verify import verify

# Masked lanes compute on placeholders (log(0), rows past the end reach -inf - -inf and the like).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


# ---------------------------------------------------------------- over the last dim: the row template

# The softmax and norm cases of these row-op tests are in test_softmax.py and test_norm.py.
ROW_OPS = ["sum(x)", "mean(x)", "max(x)", "min(x)", "sum(exp(x))", "max(x * y)", "mean(x - y)", "min(relu(x) + 1.0)"]


@pytest.mark.parametrize("expression", ROW_OPS)
def test_row_op(tmp_path, expression):
    names = ir.input_names(ir.parse(expression))
    check(tmp_path, make_spec(expression, {n: SQUARE + [[2, 3, 40]] for n in names}))


def test_reduction_of_a_vector_is_0d(tmp_path):
    spec = make_spec("sum(x)", {"x": [[1000]]})
    assert spec["outputs"][0]["shapes"] == [[]]
    check(tmp_path, spec)


def test_row_op_input_patterns(tmp_path):
    # b is a last-dim vector, one value per row, then a single value: decided per launch.
    shapes = {"x": [[3, 5], [2, 3, 40], [1000]], "b": [[5], [2, 3, 1], [1]]}
    for expression in ("softmax(x * 0.5 + b)", "sum(x * b)", "layernorm(x - b)"):
        check(tmp_path, make_spec(expression, shapes))


def test_row_op_inputs_broadcast_over_leading_dims(tmp_path):
    # b shared over the batch ([1, S, N]), over the rows of a batch ([B, 1, N]), per head ([1, H, 1, N]
    # under [B, H, S, N]), and per batch and row of a head ([B, 1, S, 1]): rows of b found by the row's
    # index in each run of dims b holds; the 300-wide rows take the looped kernel.
    shapes = {"x": [[4, 9, 13], [3, 5, 300], [2, 3, 4, 5], [2, 3, 4, 5]],
              "b": [[1, 9, 13], [3, 1, 300], [1, 3, 1, 5], [2, 1, 4, 1]]}
    for expression in ("softmax(where(b > 0.0, x, -x))", "sum(x * b)", "layernorm(x + b)"):
        check(tmp_path, make_spec(expression, shapes))


@pytest.mark.parametrize("expression", ["sum(x)", "mean(x * 2.0)", "max(x)", "min(x)"])
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
    source = reduce.kernel_source(spec, parse_expression(spec), {})
    assert 'float("-inf")' in source            # masked lanes never win a max
    assert "def op_looped_kernel(" in source and "or _row_config(R, N, 4096, 1024, 16, 8192)" in source
    spec = make_spec("min(x)", {"x": SQUARE})
    assert 'float("inf")' in reduce.kernel_source(spec, parse_expression(spec), {})


def test_row_tile_fits_any_config_to_any_shape():
    tile = row_kernel._row_tile
    assert tile(5333, 497, {"BLOCK_M": 16, "BLOCK_N": 1024, "num_warps": 4}) == (2, 512, 4)
    assert tile(3, 5, {"BLOCK_M": 64, "BLOCK_N": 4096, "num_warps": 8}) == (4, 16, 8)
    assert tile(8, 32768, {"BLOCK_M": 64, "BLOCK_N": 4096, "num_warps": 8}) == (1, 4096, 8)
    assert tile(1, 1, {"BLOCK_M": 1, "BLOCK_N": 8192, "num_warps": 4}) == (1, 16, 4)


# The pointwise cases of this test are in test_pointwise.py.
@pytest.mark.parametrize("expression, over_rows", [("max(x)", True), ("min(x * 2.0)", True)])
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


# ---------------------------------------------------------------- over every dim: the dim template

@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_reduce_over_every_dim(tmp_path, op, dim):
    check_reduction(tmp_path, make_spec(f"{op}(x, dim={dim})", {"x": DIMS[dim]}))


@pytest.mark.parametrize("expression", ["sum(exp(x) * y, dim=0)", "max(relu(x - y), dim=1)",
                                        "mean(x / y + 1.0, dim=-2)", "min(where(x > y, x, -y), dim=0)"])
def test_reduce_of_a_body(tmp_path, expression):
    names = ir.input_names(ir.parse(expression))
    check_reduction(tmp_path, make_spec(expression, {n: [MATRIX, CUBE] for n in names}))


def test_sum_of_a_masked_body(tmp_path):
    # a bool mask over rows (the row template) and over dim 0 (the dim template)
    check(tmp_path, make_spec("sum(x * mask, dim=-1)", {"x": SQUARE, "mask": SQUARE}, masks=("mask",)))
    check_reduction(tmp_path, make_spec("sum(mask * x, dim=0)", {"x": [MATRIX], "mask": [MATRIX]}, masks=("mask",)))


@pytest.mark.parametrize("expression", ["sum(x, dim=None)", "mean((x - y) ** 2, dim=None)", "max(x, dim=None)",
                                        "min(clamp(1.0 - x * y, min=0.0), dim=None)"])
def test_reduce_over_every_element(tmp_path, expression):
    # one value: the body as [1, numel, 1], split over programs and combined; every config of the space
    names = ir.input_names(ir.parse(expression))
    spec = make_spec(expression, {n: [MATRIX, CUBE, [3, 1031]] for n in names})
    assert spec["outputs"][0]["shapes"] == [[], [], []] and spec["reduce"]["dim"] is None
    _, module = generate_reduction(tmp_path, spec)
    check_reduction(tmp_path, spec, configs=(None, *module.CONFIGS))


def test_every_element_reads_and_prints_as_pytorch_writes_it():
    node = ir.parse("torch.mean(x * y, dim=None)")
    assert node.attr("dim") == "all" and ir.to_text(node) == "mean((x * y), dim=None)"
    assert ir.parse(ir.to_text(node)) == node
    assert ir.parse("sum(x)").attr("dim") == -1               # a spec's sum without a dim is over the last
    assert ir.parse("sum(x)", as_written=True).attr("dim") is None      # as PyTorch reads it: settled by the caller
    assert ir.output_shape(node, {"x": [4, 5], "y": [5]}) == [] and ir.reduced(node) == (["x", "y"], None)


# ---------------------------------------------------------------- any and all: bools

@pytest.mark.parametrize("expression, shape", [
    ("any(x > 0.5, dim=-1)", [5, 37]), ("all(x > y, dim=1, keepdim=True)", [3, 9, 4]), ("all(x, dim=None)", [3, 7]),
])
def test_any_and_all_are_bools_exactly(tmp_path, expression, shape):
    # the registry's kernel (the row template over the last dim), then the dim template, split too
    spec = make_spec(expression, {n: [shape] for n in ir.input_names(ir.parse(expression))})
    assert spec["outputs"][0]["dtypes"] == ["bool", "bool"]
    check(tmp_path, spec)
    check_reduction(tmp_path, spec, configs=(None, SPLIT), draw=ties)


def test_any_and_all_of_a_float_tensor_read_it_as_torch_does(tmp_path):
    # true where nonzero, NaN included
    x = torch.tensor([[0.0, 0.0, 0.0], [0.0, float("nan"), 0.0], [1.0, -2.0, 0.5], [0.0, 3.0, 0.0]])
    for op in ("any", "all"):
        _, module = generate_reduction(tmp_path, make_spec(f"{op}(x, dim=1)", {"x": [[4, 3]]}, dtypes=("float32",)))
        assert torch.equal(module.op(x), getattr(torch, op)(x, dim=1)), op


# ---------------------------------------------------------------- configs, splits, layouts

# The argmax/argmin cases of this test are in test_argreduce.py (ids kept as they were).
@pytest.mark.parametrize("expression, shape", [
    pytest.param("sum(x, dim=0)", [301, 5], id="sum(x, dim=0)-shape0"),
    pytest.param("mean(x, dim=1)", [5, 301], id="mean(x, dim=1)-shape2"),
])
def test_every_config_runs(tmp_path, expression, shape):
    # The spec's own space, then every candidate of either layout (a config made for the other
    # layout takes the keys it lacks from the default). Five outputs are fewer than any config's
    # block of outputs, so masked tails are covered; D = 301 is long enough to split.
    spec = make_spec(expression, {"x": [shape]}, dtypes=("float32",))
    _, module = generate_reduction(tmp_path, spec)
    assert 1 <= len(module.CONFIGS) <= dim_kernel.MAX_CONFIGS
    arg = expression.startswith("arg")
    layouts = (argreduce.ARG_COLS_CONFIGS + argreduce.ARG_ROWS_CONFIGS if arg
               else reduce.COLS_CONFIGS + reduce.ROWS_CONFIGS)
    check_reduction(tmp_path, spec, configs=module.CONFIGS + layouts)


# The argmax/argmin cases of this test are in test_argreduce.py.
@pytest.mark.parametrize("expression", ["sum(x, dim=0)", "mean(x, dim=0)", "min(x, dim=0)"])
def test_empty_inputs_answer_as_torch_does(tmp_path, expression):
    # Specs have positive dims, but an exported kernel may meet empty ones: a sum over nothing is 0,
    # a mean NaN; min/argmax/argmin over nothing raise, as torch does; an empty output stays empty.
    reference, module = generate_reduction(tmp_path, make_spec(expression, {"x": [COLS_CASE]}, dtypes=("float32",)))
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
    text = reduce.dim_kernel_source(spec, parse_expression(spec), {})
    cols, rows = text.split("def op_cols_kernel(")[1].split("def op_rows_kernel(")
    assert "acc = tl.full([BLOCK_D, BLOCK_B], 0.0, tl.float32)" in cols and "acc += val\n" in cols
    assert "acc += tl.sum(val, axis=1, keep_dims=True)" in rows


# The argmax/argmin cases of this test are in test_argreduce.py.
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_split_partials_are_combined(tmp_path, op):
    # Odd sizes in both layouts, each split into 5 parts of D (the combine kernel's path).
    for shape, dim, view in ((COLS_CASE, 0, (1, 301, 45)), (ROWS_CASE, 1, (45, 301, 1)), ([3, 301, 5], 1, (3, 301, 5))):
        assert dim_kernel._reduce_tiles(SPLIT, *view, 4)[2] == 5
        spec = make_spec(f"{op}(x, dim={dim})", {"x": [shape]})
        check_reduction(tmp_path, spec, configs=(SPLIT,), draw=ties if op.startswith("arg") else None)


def test_cases_of_both_layouts_share_one_space(tmp_path):
    # dim 1 is the last dim of a matrix (rows kernel) but not of a 3-D tensor (cols kernel).
    spec = make_spec("sum(x, dim=1)", {"x": [MATRIX, CUBE]}, dtypes=("float32",))    # configs, not dtypes
    _, module = generate_reduction(tmp_path, spec)
    assert {"BLOCK_B", "BLOCK_R"} <= {key for config in module.CONFIGS for key in config}
    check_reduction(tmp_path, spec, configs=(None, *module.CONFIGS))


def test_default_configs():
    # dim 0 of 8192x8192: 128 column blocks of 64, each walking all 8192 rows pipelined; dim 0 of
    # 333x7001 has 110 such blocks only: 28 of 256 x 32 splits (a split is at least 16 rows).
    assert dim_kernel._reduce_config(1, 8192, 8192) == {"BLOCK_B": 64, "BLOCK_D": 64, "SPLIT_D": 1,
                                                        "num_warps": 4, "num_stages": 6}
    assert dim_kernel._reduce_config(1, 333, 7001) == {"BLOCK_B": 256, "BLOCK_D": 16, "SPLIT_D": 32,
                                                       "num_warps": 2, "num_stages": 1}
    # the last dim of 8192x8192: one row per program, one tile per row, no split.
    assert dim_kernel._reduce_config(8192, 8192, 1) == {"BLOCK_R": 1, "BLOCK_D": 8192, "SPLIT_D": 1,
                                                        "num_warps": 16, "num_stages": 1}
    # a few very long rows are split
    assert dim_kernel._reduce_config(4, 1 << 20, 1)["SPLIT_D"] == 16    # 8 chunks of 8192 each
    # argmax/argmin: 512 x 4 tiles over dim 0 (an accumulator per lane, 64 splits); over the last
    # dim one row per one-warp program in 512-wide chunks.
    assert dim_kernel._reduce_config(1, 8192, 8192, arg_reduce=True) == {
        "BLOCK_B": 512, "BLOCK_D": 4, "SPLIT_D": 64, "num_warps": 2, "num_stages": 3}
    assert dim_kernel._reduce_config(8192, 8192, 1, arg_reduce=True) == {
        "BLOCK_R": 1, "BLOCK_D": 512, "SPLIT_D": 1, "num_warps": 1, "num_stages": 1}
    assert loss._cross_entropy_config(4096, 128256) == {"BLOCK_R": 1, "BLOCK_V": 8192, "num_warps": 4,
                                                        "num_stages": 1}
    assert loss._cross_entropy_config(1024, 128256) == {"BLOCK_R": 1, "BLOCK_V": 2048, "num_warps": 4,
                                                        "num_stages": 3}


@pytest.mark.parametrize("view", [(1, 8192, 8192), (8192, 8192, 1), (1, 1, 1), (5, 1, 11), (3, 301, 5), (1, 97, 1)])
def test_any_config_fits_any_case(view):
    A, D, B = view
    spaces = [(False, [dim_kernel._reduce_config(*view), *reduce.COLS_CONFIGS, *reduce.ROWS_CONFIGS]),
              (True, [dim_kernel._reduce_config(*view, True), *argreduce.ARG_COLS_CONFIGS,
                      *argreduce.ARG_ROWS_CONFIGS])]
    for arg_reduce, config in [(arg_reduce, c) for arg_reduce, configs in spaces for c in configs]:
        for elem_bytes in (2, 8):
            block, block_d, split, chunk, _, stages = dim_kernel._reduce_tiles(config, A, D, B, elem_bytes,
                                                                              arg_reduce)
            assert block <= max(1, 2 * (B if B > 1 else A)) and block_d < 2 * D and chunk % block_d == 0
            assert (split - 1) * chunk < D <= split * chunk, (config, view)
            assert stages == 1 or stages * block * block_d * elem_bytes <= 96 * 1024


# ---------------------------------------------------------------- aligned kernels: odd rows of 1024+

@pytest.mark.parametrize("op", ["sum", "max"])
def test_reduce_aligned_rows(tmp_path, op):
    # dim 1 of [5, 1031, 1]: B == 1, so rows; the edge tile folds into the same accumulators.
    spec = make_spec(f"{op}(x, dim=1)", {"x": [ODD_ROWS + [1]]})
    reference, module = generate_reduction(tmp_path, spec)
    aligned_only(module)
    x = torch.randn(ODD_ROWS + [1])
    x[1, 0] = x[0, 1030] = 9.0                            # the head's and the tail's
    for config in (None, ALIGNED_CONFIG):
        torch.testing.assert_close(module.op(x, config=config), reference(x.double()).float())


# ---------------------------------------------------------------- launcher, names, options, errors

def test_tuned_config_reaches_the_launcher(tmp_path):
    spec = make_spec("sum(x, dim=0)", {"x": [COLS_CASE]}, dtypes=("float32",))
    _, module = generate_reduction(tmp_path, spec)
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
    reference, module = generate_reduction(tmp_path, spec)
    inputs = [torch.randn(97, 37).t() for _ in range(3)]
    torch.testing.assert_close(module.op(*inputs), reference(*inputs))


def test_options_pin_the_default_and_every_config(tmp_path):
    spec = make_spec("max(x, dim=0)", {"x": [COLS_CASE]})
    _, module = generate_reduction(tmp_path, spec, {"block": 64, "num_warps": 2})
    assert all(c["BLOCK_D"] == 64 and c["num_warps"] == 2 for c in module.CONFIGS)
    check_reduction(tmp_path, spec, {"block": 64, "num_warps": 2})
    spec = make_spec("cross_entropy(x, t)", {"x": [MATRIX], "t": [[37]]})
    _, module = generate_reduction(tmp_path, spec, {"block": 32})
    assert all(c["BLOCK_V"] == 32 for c in module.CONFIGS)
    check_reduction(tmp_path, spec, {"block": 32})


def test_inputs_broadcast_over_the_body_are_expanded_to_it(tmp_path):
    # a bias over the rows, a per-row value, and a cross entropy's logits plus a row vector
    check_reduction(tmp_path, make_spec("sum(x + b, dim=0)", {"x": [MATRIX], "b": [[97]]}))
    check_reduction(tmp_path, make_spec("mean(x * t, dim=None)", {"x": [MATRIX], "t": [[37, 1]]}))
    check_reduction(tmp_path, make_spec("cross_entropy(x + b, t)", {"x": [MATRIX], "b": [[1, 97]], "t": [[37]]}))


def test_refusals_are_clear(tmp_path):
    spec = make_spec("sum(x, dim=0)", {"x": [MATRIX]})
    with pytest.raises(ValueError, match=r"over dim 2, but case 1 has shape \[37, 97\]"):
        reduce.dim_kernel_source(spec, ir.call("sum", ir.inp("x"), dim=2), {})
    spec = make_spec("argmax(x, dim=1)", {"x": [[1, 2**30]]})
    with pytest.raises(ValueError, match=r"argmax over a dim of 1073741824 .*shorter than 1073741824"):
        argreduce.kernel_source(spec, parse_expression(spec), {})
    # (old bot.lower_reduce refused softmax here, "not softmax": the registry now sends each tree
    # to its own family, so there is no such guard left to test)
    # (an operator name is now checked as the file is rendered, after the kernel's own refusals
    # such as the one above: a spec it otherwise accepts)
    spec = make_spec("argmax(x, dim=1)", {"x": [MATRIX]})
    with pytest.raises(ValueError, match="clashes"):
        argreduce.kernel_source({**spec, "name": "chunk"}, parse_expression(spec), {})
    # at launch, an input broadcast where the spec had full shapes: expanded as torch broadcasts it
    _, module = generate_reduction(tmp_path, make_spec("sum(x * y, dim=0)", {"x": [MATRIX], "y": [MATRIX]}))
    x, y = torch.randn(MATRIX), torch.randn(97)
    torch.testing.assert_close(module.op(x, y), (x * y).sum(0), rtol=1e-4, atol=1e-4)


def test_lower_reduce_needs_neither_torch_nor_triton():
    # Every family (bot.ops.registry imports them all) and the IR driver, on a bot-only host.
    code = "import sys, bot.ops.registry, bot.ir; assert not {'torch', 'triton'} & set(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dim", [0, 1])
def test_max_min_keep_nan_as_torch_does(tmp_path, op, dim):
    # NaN anywhere in a reduced slice makes its result NaN (torch.amax/amin), across splits too.
    spec = make_spec(f"{op}(x, dim={dim})", {"x": [COLS_CASE]}, dtypes=("float32",))
    reference, module = generate_reduction(tmp_path, spec)
    x = torch.randn(COLS_CASE)
    x[3, 7] = x[250, 40] = float("nan")
    want = reference(x)
    for config in (None, SPLIT, reduce.COLS_CONFIGS[0]):
        got = module.op(x, config=config)
        assert torch.equal(got.isnan(), want.isnan()), (config, got, want)
        torch.testing.assert_close(got[~want.isnan()], want[~want.isnan()])


# ---------------------------------------------------------------- keepdim=True: the reduced dim kept as size 1

@pytest.mark.parametrize("expression", ["sum(x, dim=1, keepdim=True)", "max(x * y, dim=-1, keepdim=True)",
                                        "mean(x, dim=0, keepdim=True)", "argmin(x, dim=-2, keepdim=True)"])
def test_keepdim_keeps_the_reduced_dim_as_size_one(tmp_path, expression):
    names = ir.input_names(ir.parse(expression))
    spec = make_spec(expression, {n: [[4, 7, 5], [9, 3]] for n in names})
    dim = parse_expression(spec).attr("dim")
    for case, shape in enumerate(([4, 7, 5], [9, 3])):
        assert spec["outputs"][0]["shapes"][case] == [1 if i == dim % len(shape) else s for i, s in enumerate(shape)]
    check_reduction(tmp_path, spec, configs=(None, SPLIT))
    assert ir.parse(ir.to_text(parse_expression(spec))) == parse_expression(spec)


def test_keepdim_over_every_element_is_refused():
    with pytest.raises(ir.IRError, match="keepdim"):
        ir.parse("torch.sum(x, dim=None, keepdim=True)", as_written=True)


def test_keepdim_passes_the_harness(tmp_path):
    # The wrapping launcher as the runner runs it: sandboxed, static checks, poisoned outputs.
    spec = make_spec("sum(x, dim=0, keepdim=True)", {"x": [[33, 20]]})
    node = parse_expression(spec)
    files = {"spec.json": json.dumps(spec), "reference.py": lower_torch.reference_source(spec, node),
             "kernel.py": reduce.kernel_source(spec, node, {})}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = verify(tmp_path / "spec.json", tmp_path / "reference.py", tmp_path / "kernel.py", "cpu")
    assert result["status"] == "pass", result["summary"]
