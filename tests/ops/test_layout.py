"""The layout family (bot.ops.layout): permute/transpose of a pointwise body and cat/stack, as
generated kernel.py files run under Triton's interpreter against the generated reference on float64
inputs (exactly where no body computes: the kernels move values without arithmetic), in float32 and float16, on odd shapes
that exercise the merged dims, the transposed and row-copy tiles and the batch split."""
from __future__ import annotations

import pytest
import torch
from generated import load

from bot import ir, lower_torch
from bot.request import parse_request
from bot.ops import layout, view
from bot.spec import parse_expression, validate
from runner import inputs, protocol

CASES = [
    ("x.transpose(0, 1)", {"x": [37, 45]}),                       # a matrix: one tile dim each way
    ("x.T", {"x": [33, 70]}),
    ("x.transpose(1, 2)", {"x": [3, 37, 45]}),                    # batched transpose of the last two dims
    ("relu(x).permute(2, 0, 1)", {"x": [5, 7, 9]}),               # a body, the last dim moved first
    ("x.permute(0, 2, 1, 3)", {"x": [2, 5, 7, 9]}),               # last dim kept: rows copied whole
    ("(x * y).permute(1, 0)", {"x": [8, 13], "y": [1, 13]}),      # a broadcast body input
    ("torch.movedim(x, 1, -1)", {"x": [2, 3, 4, 5]}),
    ("x.permute(2, 1, 0)", {"x": [1, 1, 7]}),                     # unit dims only moved: a plain copy
    ("x.permute(3, 1, 4, 0, 2)", {"x": [2, 3, 4, 5, 3]}),         # rank 5, nothing merges
    ("torch.cat([a, b, c], dim=1)", {"a": [4, 3, 5], "b": [4, 7, 5], "c": [4, 1, 5]}),
    ("torch.cat((a, b), -1)", {"a": [6, 3], "b": [6, 9]}),
    ("torch.concat([a, b], dim=0)", {"a": [2, 3], "b": [5, 3]}),
    ("torch.stack([a, b], dim=1)", {"a": [6, 3], "b": [6, 3]}),  # a chain: two views, then the cat
    ("relu(torch.cat([a * 2, b], dim=0))", {"a": [6, 3], "b": [2, 3]}),
    ("torch.cat([a, b, a], dim=1)", {"a": [4, 3], "b": [4, 5]}),     # a tensor in two places
    ("torch.stack([relu(a), relu(a)], dim=0)", {"a": [4, 3]}),         # one stage in two places
    ("x.mT + 1", {"x": [3, 5, 7]}),                               # a chain: the transpose, then the add
]


def spec_of(expression: str, shapes: dict[str, list[int]], dtypes=("float32", "float16")) -> dict:
    node = ir.parse(expression, as_written=True)
    return validate({"name": "op", "expression": ir.to_text(node),
                     "inputs": [{"name": n, "dtypes": list(dtypes), "shapes": [shapes[n]]} for n in ir.input_names(node)]})


def run(tmp_path, spec: dict, config: dict | None = None) -> None:
    node = parse_expression(spec)
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), "op")
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, node, {})), "op")
    case = protocol.cases(spec)[0]
    body = any(s.op not in ("input", *layout.OPS, *view.OPS) for s in node.walk())    # else moves are exact
    for v, variant in enumerate(protocol.dtype_variants(spec)):
        args = inputs.make_inputs(spec, case, variant, 0, "cpu")
        want = reference(*[a.double() for a in args])
        got = kernel(*args, config=config) if config else kernel(*args)
        assert got.dtype == args[0].dtype and list(got.shape) == spec["outputs"][0]["shapes"][0]
        rtol, atol = protocol.tolerance(variant[spec["inputs"][0]["name"]]) if body else (0, 0)
        torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("expression, shapes", CASES, ids=[c[0] for c in CASES])
def test_every_layout_matches_torch_exactly(tmp_path, expression, shapes):
    run(tmp_path, spec_of(expression, shapes))


@pytest.mark.parametrize("config", [layout.PERMUTE_CONFIGS[1], layout.PERMUTE_CONFIGS[4]], ids=["square", "rows"])
def test_any_config_of_the_space_is_correct_in_either_tile_mode(tmp_path, config):
    run(tmp_path, spec_of("x.transpose(1, 2)", {"x": [2, 37, 45]}, ("float32",)), config)
    (tmp_path / "rows").mkdir()
    run(tmp_path / "rows", spec_of("x.transpose(0, 1)", {"x": [5, 7, 33]}, ("float32",)), config)


def test_layout_ops_are_kernels_and_chain_stages():
    assert ir.kind(ir.parse("x.permute(0, 2, 1)")) == "layout"
    assert ir.kind(ir.parse("torch.cat([a, b], dim=1)")) == "layout"
    stages = [ir.to_text(s.node) for s in ir.stages(ir.parse("torch.stack([a, relu(b)], dim=0)"))]
    assert stages == ["a.unsqueeze(0)", "relu(b)", "stage1.unsqueeze(0)", "cat([stage0, stage2], dim=0)"]
    # a matmul still reads its transposed operand in place
    assert ir.kind(ir.parse("a @ b.transpose(-2, -1)")) == "matmul"


@pytest.mark.parametrize("expression, shapes, message", [
    ("x.permute(0, 1)", {"x": [2, 3, 4]}, "names 2 dims, but the tensor has 3"),
    ("x.permute(0, 0, 1)", None, "not a permutation"),
    ("x.transpose(0, 3)", {"x": [2, 3, 4]}, "transpose of dims"),
    ("x.T", {"x": [2, 3, 4]}, "names 2 dims, but the tensor has 3"),
    ("torch.cat([a, b], dim=1)", {"a": [2, 3], "b": [4, 3]}, "differ in another dim"),
    ("torch.cat([a, b], dim=2)", {"a": [2, 3], "b": [2, 3]}, "cat along dim 2, but its parts have 2 dims"),
    ("torch.cat(parts, dim=1)", None, "a list of tensors written out"),
    ("torch.cat([a, 1.0], dim=1)", None, "each part must be a tensor"),
    ("x.permute(d)", None, "the new order of dims as integers"),
])
def test_bad_layouts_are_refused_naming_the_problem(expression, shapes, message):
    with pytest.raises(ir.IRError, match=message):
        node = ir.parse(expression, as_written=True)
        ir.output_shape(node, shapes)


WORDS = [
    ("transpose a 4096x8192 fp16 matrix", "permute(x, (1, 0))", [[4096, 8192]]),
    ("transpose dims 0 and 1 of x on 8x128x64", "transpose(x, 0, 1)", [[8, 128, 64]]),
    ("transpose dim 1 and dim 2, 8x128x64", "transpose(x, 1, 2)", [[8, 128, 64]]),
    ("transpose the last two dims of 8x128x64", "transpose(x, -2, -1)", [[8, 128, 64]]),
    ("permute x to (0, 2, 1) on 8x64x32 fp16", "permute(x, (0, 2, 1))", [[8, 64, 32]]),
    ("permute to 2,0,1 on 8x64x32", "permute(x, (2, 0, 1))", [[8, 64, 32]]),
    ("维度置换 (0, 2, 1), 8x64x32", "permute(x, (0, 2, 1))", [[8, 64, 32]]),
    ("转置 4096x4096 的矩阵", "permute(x, (1, 0))", [[4096, 4096]]),
    ("concatenate x and y along dim 1, x 4x8 and y 4x16 fp32", "cat([x, y], dim=1)", [[4, 8]]),
    ("concat three tensors on the last dim, 64x128", "cat([a, b, c], dim=-1)", [[64, 128]]),
    ("stack a and b along dim 1 on 16x16", "cat([a.unsqueeze(1), b.unsqueeze(1)], dim=1)", [[16, 16]]),
]


@pytest.mark.parametrize("text, expression, first_shapes", WORDS, ids=[w[0] for w in WORDS])
def test_layout_in_words(text, expression, first_shapes):
    spec, _ = parse_request(text)
    assert spec["expression"] == expression and spec["inputs"][0]["shapes"] == first_shapes


def test_words_say_what_they_assumed():
    _, notes = parse_request("transpose x on 8x128x64 bf16")
    assert any("swapping the last two dims" in n for n in notes)
    _, notes = parse_request("concatenate x and y on 4x8")
    assert any("along dim 0, torch.cat's default" in n for n in notes)


def test_a_typed_cat_with_a_list_is_read_as_code():
    spec, _ = parse_request("torch.cat([x, y], dim=1) with x 4x8 and y 4x16 fp16")
    assert spec["expression"] == "cat([x, y], dim=1)" and spec["outputs"][0]["shapes"] == [[4, 24]]
