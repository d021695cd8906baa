"""The argreduce family (bot.ops.argreduce): argmax/argmin over every dim through the dim template
(bot.codegen.dim_kernel), generated kernel.py files imported and run on small odd shapes and
compared exactly with the generated reference: the first index on ties, NaN as torch treats it."""
from __future__ import annotations

import pytest
import torch

from generated import load, make_spec
from lowering import (ALIGNED_CONFIG, COLS_CASE, CUBE, DIMS, MATRIX, ODD_ROWS, ROWS_CASE, SPLIT, aligned_only,
                      check_reduction, configs_for, generate_reduction, reduction_source, ties)

from bot import ir
from bot.codegen import dim_kernel
from bot.ops import argreduce, reduce
from bot.spec import parse_expression
from bot.generators.interface import GenerationError
from bot.request import parse_request
from runner import protocol

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


# ---------------------------------------------------------------- torch.max(x, dim) whole: (values, indices)

def _values_and_indices(tmp_path, expression: str, shapes: list, configs, draw) -> None:
    """The kernel's (values, indices) equal to the reference's on every case, dtype and config."""
    spec = make_spec(expression, {"x": shapes})
    assert [o["name"] for o in spec["outputs"]] == ["values", "indices"]
    assert spec["outputs"][1]["dtypes"] == ["int64"] * len(spec["outputs"][0]["dtypes"])
    reference, module = generate_reduction(tmp_path, spec)
    for case in protocol.cases(spec):
        for v, variant in enumerate(protocol.dtype_variants(spec)):
            x = draw(spec, case, variant)[0]
            want = reference(x)
            for config in configs_for((None, *configs(module)), v == 0):
                values, indices = module.op(x, config=config) if config else module.op(x)
                label = f"{expression} {list(x.shape)} {x.dtype} {config}"
                assert values.dtype == x.dtype and indices.dtype == torch.int64, label
                torch.testing.assert_close(values, want[0], rtol=0, atol=0, equal_nan=True, msg=label)
                assert torch.equal(indices, want[1]), label


@pytest.mark.parametrize("expression, shapes", [
    ("max_with_indices(x, dim=1)", [MATRIX, CUBE]),
    ("min_with_indices(x, dim=0)", [MATRIX, CUBE, COLS_CASE]),
    ("max_with_indices(x, dim=-1)", [ROWS_CASE, ODD_ROWS]),
])
def test_values_and_indices_from_one_kernel_on_ties_with_every_config(tmp_path, expression, shapes):
    _values_and_indices(tmp_path, expression, shapes, lambda module: [*module.CONFIGS, SPLIT], ties)


def test_values_and_indices_keep_the_dim_and_take_a_body(tmp_path):
    _values_and_indices(tmp_path, "max_with_indices(x * 2.0, dim=-1, keepdim=True)", [MATRIX],
                        lambda module: [], ties)


def test_values_and_indices_treat_nan_as_torch_does(tmp_path):
    def with_nan(spec, case, variant):
        x = torch.randn(case.shapes["x"])
        x.view(-1)[::11] = float("nan")
        return [x.to(getattr(torch, variant["x"]))]
    _values_and_indices(tmp_path, "min_with_indices(x, dim=-1)", [ROWS_CASE], lambda module: [SPLIT], with_nan)


@pytest.mark.gpu
@pytest.mark.parametrize("expression", ["max_with_indices(x, dim=-1)", "min_with_indices(x, dim=0)"])
def test_on_the_gpu_values_and_indices_match_torch_in_every_dtype(tmp_path, expression):
    spec = make_spec(expression, {"x": [[4099, 1000], [3, 2000, 37], [8, 8193]]}, ("float32", "float16", "bfloat16"))
    reference, module = generate_reduction(tmp_path, spec)
    for case in protocol.cases(spec):
        for variant in protocol.dtype_variants(spec):
            x = ties(spec, case, variant)[0].cuda()
            want = reference(x)
            for config in (None, *module.CONFIGS):
                values, indices = module.op(x, config=config) if config else module.op(x)
                assert torch.equal(values, want[0]) and torch.equal(indices, want[1]), (case.label, variant, config)


@pytest.mark.parametrize("request_text, expression", [
    ("torch.max(x, dim=1) for 64x128", "max_with_indices(x, dim=-1)"),
    ("x.min(0) for fp16 64x128", "min_with_indices(x, dim=0)"),
    ("max and argmax over the last dim of 4096x4096", "max_with_indices(x, dim=-1)"),
    ("min and argmin over dim 0 of a 1024x512 tensor", "min_with_indices(x, dim=0)"),
    ("the values and indices of the max over the last dim, 64x128", "max_with_indices(x, dim=-1)"),
    ("max with indices over dim 1 of 64x128", "max_with_indices(x, dim=-1)"),
    # its parts stay one output each
    ("torch.max(x, dim=1)[0] for 64x128", "max(x, dim=-1)"),
    ("torch.max(x, dim=1).indices for 64x128", "argmax(x, dim=-1)"),
])
def test_max_over_a_dim_whole_is_its_values_and_indices(request_text, expression):
    spec, _ = parse_request(request_text)
    assert spec["expression"] == expression
    assert len(spec["outputs"]) == (2 if "with_indices" in expression else 1)


PASTED_MAX = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        {body}

def get_inputs():
    return [torch.randn(16, 33, 40)]

def get_init_inputs():
    return [1]
"""


@pytest.mark.parametrize("body, expression", [
    ("values, indices = torch.max(x, dim=self.dim)\n        return values, indices", "max_with_indices(x, dim=1)"),
    ("return torch.min(x, self.dim)", "min_with_indices(x, dim=1)"),
    ("return torch.max(x, dim=self.dim)[1]", "argmax(x, dim=1)"),
])
def test_a_pasted_module_returning_max_whole_gives_both_outputs(body, expression):
    spec, _ = parse_request("```python\n" + PASTED_MAX.format(body=body) + "```")
    assert spec["expression"] == expression


@pytest.mark.parametrize("request_text, says", [
    ("torch.max(x, dim=1) + 1 for 64x128", "only as the whole result"),
    ("max and argmax over all elements of 64x128", "over one dim"),
    ("max and argmax over dim 1 of 37x97, forward and backward", "no backward for max_with_indices"),
])
def test_values_and_indices_refused_where_they_are_not_the_result(request_text, says):
    with pytest.raises(GenerationError, match=says):
        parse_request(request_text)


def test_a_pasted_module_returning_two_unrelated_tensors_gives_each():
    body = "return x.amax(1), x.argmin(1)"
    spec, _ = parse_request("```python\n" + PASTED_MAX.format(body=body) + "```")
    assert spec["expression"] == "outputs(max(x, dim=1), argmin(x, dim=1))"
    assert [o["dtypes"][0] for o in spec["outputs"]] == [spec["inputs"][0]["dtypes"][0], "int64"]
