"""The argreduce family (bot.ops.argreduce): argmax/argmin over every dim through the dim template
(bot.codegen.dim_kernel), generated kernel.py files imported and run on small odd shapes and
compared exactly with the generated reference: the first index on ties, NaN as torch treats it."""
from __future__ import annotations

import pytest
import torch

from generated import load, make_spec
from lowering import (ALIGNED_CONFIG, COLS_CASE, CUBE, DIMS, MATRIX, ODD_ROWS, ROWS_CASE, SPLIT, aligned_only,
                      check_reduction, generate_reduction, reduction_source, ties)

from bot import ir
from bot.codegen import dim_kernel
from bot.ops import argreduce, reduce
from bot.spec import parse_expression

# Masked lanes compute on placeholders.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reduce_first_index_on_ties(tmp_path, op, dim):
    check_reduction(tmp_path, make_spec(f"{op}(x, dim={dim})", {"x": DIMS[dim]}), configs=(None, SPLIT), draw=ties)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reduce_over_every_element_is_the_first_flat_index(tmp_path, op):
    spec = make_spec(f"{op}(x, dim=None)", {"x": [MATRIX, CUBE, [3, 1031]]})
    _, module = generate_reduction(tmp_path, spec)
    # every config once (argmax); argmin shares the kernels, so the default and a split suffice
    check_reduction(tmp_path, spec, configs=(None, SPLIT, *(module.CONFIGS if op == "argmax" else ())), draw=ties)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reduce_treats_nan_as_torch_does(tmp_path, op):
    # NaN wins, the first one on ties, wherever the split boundaries fall.
    x = torch.randn(ROWS_CASE)
    x[3, 7] = x[3, 250] = x[4, 250] = float("nan")
    for dim, data in ((1, x), (0, x.t().contiguous())):     # the rows kernel, then the cols kernel
        _, module = generate_reduction(tmp_path, make_spec(f"{op}(x, dim={dim})", {"x": [list(data.shape)]}))
        for config in (None, SPLIT):
            assert torch.equal(module.op(data, config=config), getattr(torch, op)(data, dim=dim))


# ---------------------------------------------------------------- configs, splits, layouts

# The sum/mean cases of this test are in test_reduce.py (ids kept as they were).
@pytest.mark.parametrize("expression, shape", [
    pytest.param("argmin(x, dim=0)", [301, 5], id="argmin(x, dim=0)-shape1"),
    pytest.param("argmax(x, dim=1)", [5, 301], id="argmax(x, dim=1)-shape3"),
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


# The sum/mean/min cases of this test are in test_reduce.py.
@pytest.mark.parametrize("expression", ["argmax(x, dim=0)", "argmin(x, dim=1)"])
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


# The sum/mean/max/min cases of this test are in test_reduce.py.
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_split_partials_are_combined(tmp_path, op):
    # Odd sizes in both layouts, each split into 5 parts of D (the combine kernel's path).
    for shape, dim, view in ((COLS_CASE, 0, (1, 301, 45)), (ROWS_CASE, 1, (45, 301, 1)), ([3, 301, 5], 1, (3, 301, 5))):
        assert dim_kernel._reduce_tiles(SPLIT, *view, 4)[2] == 5
        spec = make_spec(f"{op}(x, dim={dim})", {"x": [shape]})
        check_reduction(tmp_path, spec, configs=(SPLIT,), draw=ties if op.startswith("arg") else None)


# ---------------------------------------------------------------- aligned kernels: odd rows of 1024+

@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reduce_aligned_rows(tmp_path, op):
    # The edge tile (head and tail) is reduced after the row's body, yet the first index wins.
    _, module = generate_reduction(tmp_path, make_spec(f"{op}(x, dim=1)", {"x": [ODD_ROWS]}))
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


# ---------------------------------------------------------------- the tuning contract

def test_source_follows_the_tuning_contract(tmp_path):
    for spec in (make_spec("argmax(x, dim=0)", {"x": [MATRIX, CUBE]}),
                 make_spec("cross_entropy(x, t)", {"x": [MATRIX], "t": [[37]]})):
        source = reduction_source(spec, parse_expression(spec))
        assert "def op(x" in source and "*, config=None):" in source and "TUNED = {}" in source
        module = load(tmp_path, "kernel.py", source)
        assert all(set(c) >= {"num_warps", "num_stages"} and all(isinstance(v, int) for v in c.values())
                   for c in module.CONFIGS)
    assert "the output holds int64 indices" in argreduce.kernel_source(
        make_spec("argmin(x, dim=1)", {"x": [MATRIX]}), ir.parse("argmin(x, dim=1)"), {})
