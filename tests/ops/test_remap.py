"""The remap family (bot.ops.remap): flip, roll, repeat/tile, repeat_interleave and a tensor's
tril/triu, pad, nearest upsampling and pixel (un)shuffle, as generated kernel.py files run under Triton's interpreter against the generated
reference: exactly (the kernel moves values), in float32 and float16, on odd shapes and every rank;
the gradients of flip, roll and the triangles; and the refusals, each naming what works."""
from __future__ import annotations

import re

import pytest
import torch
from generated import load

from bot import autodiff, ir, lower_torch
from bot.ops import remap
from bot.request import parse_request
from bot.spec import parse_expression, validate
from runner import inputs, protocol

CASES = [
    ("torch.flip(x, dims=[0, 2])", {"x": [5, 7, 9]}),
    ("x.flip(-1)", {"x": [37, 97]}),
    ("torch.fliplr(x)", {"x": [3, 11]}),
    ("torch.flipud(x)", {"x": [13]}),
    ("torch.roll(x, 3)", {"x": [37, 9]}),                         # no dims: the flattened tensor, shape kept
    ("torch.roll(x, shifts=(1, -40), dims=(0, 1))", {"x": [37, 19]}),   # a shift past the dim's size
    ("x.roll(-1, 2)", {"x": [2, 3, 4, 5, 3]}),                    # rank 5
    ("x.repeat(2, 1, 3)", {"x": [5, 7]}),                         # more repeats than dims: unit dims first
    ("x.repeat((1, 4))", {"x": [3, 5]}),
    ("torch.tile(x, (2,))", {"x": [5, 7]}),                       # fewer: repeats of the last dims
    ("x.repeat_interleave(3, dim=1)", {"x": [5, 7, 3]}),
    ("torch.repeat_interleave(x, 2)", {"x": [5, 7]}),             # no dim: flattened
    ("torch.tril(x, diagonal=1)", {"x": [3, 37, 41]}),
    ("x.triu(-2)", {"x": [37, 41]}),
    ("torch.triu(x)", {"x": [2, 2, 5, 3]}),
    ("torch.flip(x, [0]) + y", {"x": [37, 9], "y": [37, 9]}),     # a chain: the flip, then the add
    ("torch.tril(relu(x))", {"x": [9, 9]}),                       # ... the body, then the triangle
    ("F.pad(x, (1, 2))", {"x": [5, 7]}),
    ("F.pad(x, (1, 2, 3, 0), value=0.5)", {"x": [3, 5, 7]}),
    ("F.pad(x, (-1, 2))", {"x": [5, 7]}),                         # a negative pad crops
    ("F.pad(x, (2, 1), mode='reflect')", {"x": [3, 5, 7]}),
    ("F.pad(x, (2, 1, 1, 3), mode='replicate')", {"x": [2, 3, 5, 7]}),
    ("F.pad(x, (3, 1, 0, 2), mode='circular')", {"x": [2, 3, 5, 7]}),
    ("F.interpolate(x, scale_factor=2)", {"x": [2, 3, 5, 7]}),
    ("F.interpolate(x, scale_factor=(2, 4), mode='nearest')", {"x": [2, 3, 5, 7]}),
    ("F.interpolate(x, size=(10, 28))", {"x": [2, 3, 5, 7]}),
    ("F.interpolate(x, scale_factor=4.0)", {"x": [2, 3, 9]}),
    ("F.interpolate(x, scale_factor=2)", {"x": [1, 2, 3, 4, 5]}),    # 3-D
    ("F.pixel_shuffle(x, 2)", {"x": [2, 12, 5, 7]}),
    ("torch.pixel_shuffle(x, upscale_factor=3)", {"x": [18, 4, 5]}),           # no batch dim
    ("F.pixel_unshuffle(x, 2)", {"x": [2, 3, 3, 6, 10]}),                      # two batch dims
    ("F.pixel_shuffle(x, 1)", {"x": [2, 3, 5, 7]}),
    ("torch.diagonal(x)", {"x": [37, 41]}),
    ("torch.diagonal(x, offset=3, dim1=-2, dim2=-1)", {"x": [3, 17, 13]}),
    ("x.diagonal(-2, 1, 0)", {"x": [30, 40, 5]}),                            # dim1 after dim2, below
    ("torch.diagonal(x, 1, 2, 3) * 2.0", {"x": [2, 3, 5, 7]}),              # a chain: the diagonal, then the product
]


def spec_of(expression: str, shapes: dict[str, list[int]], training: bool = False) -> dict:
    node = ir.parse(expression, as_written=True)
    return validate({"name": "op", "expression": ir.to_text(node), "training": training,
                     "inputs": [{"name": n, "dtypes": ["float32", "float16"], "shapes": [shapes[n]]}
                                for n in ir.input_names(node)]})


@pytest.mark.parametrize("expression, shapes", CASES, ids=[c[0] for c in CASES])
def test_every_remap_matches_torch_exactly(tmp_path, expression, shapes):
    spec = spec_of(expression, shapes)
    node = parse_expression(spec)
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), "op")
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, node, {})), "op")
    case = protocol.cases(spec)[0]
    for variant in protocol.dtype_variants(spec):
        args = inputs.make_inputs(spec, case, variant, 0, "cpu")
        want = reference(*args)
        got = kernel(*args)
        assert got.dtype == args[0].dtype and list(got.shape) == spec["outputs"][0]["shapes"][0]
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert torch.equal(want, eval(expression, {"torch": torch, "relu": torch.relu, "F": torch.nn.functional},
                                      {i["name"]: a for i, a in zip(spec["inputs"], args)}))


def test_a_small_block_config_covers_every_element(tmp_path):
    spec = spec_of("torch.roll(x, shifts=(2, 3), dims=(1, 0))", {"x": [33, 70]})
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), "op")
    x = torch.randn(33, 70)
    for config in remap.CONFIGS:
        assert torch.equal(kernel(x, config=config), torch.roll(x, shifts=(2, 3), dims=(1, 0))), config


@pytest.mark.parametrize("expression, want", [
    ("torch.flip(x, [1])", "flip(up, dims=[1])"),
    ("torch.roll(x, shifts=(1, -2), dims=(0, 1))", "roll(up, shifts=(-1, 2), dims=(0, 1))"),
    ("torch.tril(x, diagonal=-1)", "tril(up, diagonal=-1)"),
    ("F.pad(x, (1, -2))", "pad(up, (-1, 2), mode='constant', value=0.0)"),
    ("F.pixel_shuffle(x, 2)", "pixel_unshuffle(up, 2)"),
    ("F.pixel_unshuffle(x, 3)", "pixel_shuffle(up, 3)"),
])
def test_the_gradient_moves_the_upstream_back(expression, want):
    node = ir.parse(expression, as_written=True)
    rule = autodiff._RULES[node.op]
    [(operand, text)] = rule(node, ["x"], "up")
    assert operand == node.args[0] and ir.parse(text, as_written=True) == ir.parse(want, as_written=True)


@pytest.mark.parametrize("expression, shapes, message", [
    ("x.repeat(2)", {"x": [3, 4]}, "fewer repeats than the tensor's 2 dims"),
    ("torch.tril(x)", {"x": [7]}, "tril takes a tensor of 2 dims or more"),
    ("torch.flip(x, [2])", {"x": [3, 4]}, "flip over dims (2,), but the tensor has 2"),
    ("F.pad(x, (3, 0), mode='reflect')", {"x": [2, 3]}, "F.pad by (3, 0) in mode 'reflect' over a dim of 3"),
    ("F.pad(x, (1, 1, 1, 1, 1, 1))", {"x": [4, 4]}, "F.pad pads 3 dims of a tensor of 2"),
    ("F.interpolate(x, size=(9, 14))", {"x": [2, 3, 5, 7]}, "nearest upsampling is read by whole powers of two"),
    ("F.interpolate(x, scale_factor=2)", {"x": [5, 7]}, "it takes [N, C, ...]"),
    ("F.pixel_shuffle(x, 2)", {"x": [2, 6, 5, 7]}, "needs channels divisible by 4, got 6"),
    ("F.pixel_unshuffle(x, 2)", {"x": [2, 6, 5, 8]}, "needs height and width divisible by 2, got 5 x 8"),
    ("F.pixel_shuffle(x, 2)", {"x": [8, 5]}, "takes [*, C, H, W], got a 2-D tensor"),
    ("torch.diagonal(x, 0, 0, 2)", {"x": [8, 8, 8]}, "two neighbouring dims are read"),
    ("torch.diagonal(x, 9)", {"x": [5, 9]}, "diagonal with offset 9 of a 5 x 9 matrix is empty"),
])
def test_shapes_the_op_cannot_take_are_refused_by_name(expression, shapes, message):
    with pytest.raises(Exception, match=re.escape(message)):
        spec_of(expression, shapes)


@pytest.mark.parametrize("expression, message", [
    ("torch.roll(x, (1, 2), (0,))", "a shift per dim: 2 shifts for 1 dims"),
    ("torch.roll(x, (1, 2))", "name the dims for several"),
    ("x.repeat_interleave(r, dim=0)", "a whole number of repeats"),
    ("torch.flip(x)", "flip needs its dims"),
    ("x.flip(0, 0)", "flip names a dim twice"),
    ("F.pad(x, (1,))", "pairs of whole numbers"),
    ("F.pad(x, (1, 1), mode='edge')", "mode 'constant', 'reflect', 'replicate' or 'circular'"),
    ("F.pad(x, (1, 1), mode='reflect', value=2.0)", "value is for mode 'constant'"),
    ("F.interpolate(x, scale_factor=3)", "whole powers of two"),
    ("F.interpolate(x, scale_factor=2, mode='bicubic')", "'bicubic' interpolates between values"),
    ("F.interpolate(x, scale_factor=2, mode='bilinear', align_corners=True)", "no align_corners"),
    ("F.interpolate(x, size=(8, 10), mode='bilinear')", "read by a whole scale_factor"),
    ("F.interpolate(x, scale_factor=1.5, mode='linear')", "read by a whole scale_factor"),
    ("F.interpolate(x, scale_factor=2, align_corners=True)", "no align_corners"),
    ("F.interpolate(x)", "size or scale_factor, one of them"),
    ("F.pixel_shuffle(x, 0)", "upscale_factor must be 1 or more"),
    ("F.pixel_unshuffle(x, r)", "downscale_factor must be whole numbers written out"),
])
def test_arguments_it_cannot_read_are_refused_by_name(expression, message):
    with pytest.raises(ir.IRError, match=message):
        ir.parse(expression, as_written=True)


@pytest.mark.parametrize("words, typed", [
    ("flip x along dim 1 for 64x128 fp16", "torch.flip(x, [1])"),
    ("flip a 64x128 tensor along dims 0 and 1", "torch.flip(x, [0, 1])"),
    ("roll x by 3 along dim 1 for 64x128", "torch.roll(x, 3, 1)"),
    ("循环移位 3 位 沿 dim 1 64x128", "torch.roll(x, 3, 1)"),
    ("nearest upsample x by 2 for 8x64x32x32 fp16", "F.interpolate(x, scale_factor=2)"),
    ("最近邻上采样 2 倍 8x64x32x32", "F.interpolate(x, scale_factor=2)"),
    ("reflect pad x by 2 for 8x3x32x32", "F.pad(x, (2, 2), mode='reflect')"),
    ("反射填充 2 8x3x32x32", "F.pad(x, (2, 2), mode='reflect')"),
    ("zero padding of 1 on 64x128", "F.pad(x, (1, 1))"),
    ("upper triangular part of a 128x128 matrix with diagonal 1", "torch.triu(x, diagonal=1)"),
    ("下三角 128x128", "torch.tril(x)"),
    ("triu of a 512x512 matrix", "torch.triu(x)"),
    ("tile x 2 times along dim 0 on 64x64", "x.repeat(2, 1)"),
    ("repeat each element 3 times along dim 1 for 8x16", "torch.repeat_interleave(x, 3, dim=1)"),
    ("pixel shuffle x by 2 for 8x64x32x32 bf16", "F.pixel_shuffle(x, 2)"),
    ("pixel unshuffle with downscale factor 4 on 1x3x256x256", "F.pixel_unshuffle(x, 4)"),
    ("逆像素重排 2 倍 8x3x64x64", "F.pixel_unshuffle(x, 2)"),
])
def test_remaps_in_words_in_english_and_chinese(words, typed):
    from bot.request import parse_request
    spec, _ = parse_request(words)
    assert ir.parse(spec["expression"]) == ir.parse(typed, as_written=True)


@pytest.mark.parametrize("words, says", [
    ("flip x for 64x64", "say which, e.g. 'flip x along dim 1'"),
    ("pixel shuffle of a 8x16x32x32 tensor", "takes its factor"),
    ("repeat x 2 times along dim 0 on 64x64", "'repeat' in words can mean copies of the whole tensor"),
    ("tile x along dim 0 on 64x64", "a repeat takes its count"),
    ("roll x along dim 0 for 64x64", "a roll shifts by a number"),
    ("nearest upsample x for 8x3x8x8", "takes a factor"),
    ("reflect pad x for 8x3x8x8", "a pad takes its amount"),
])
def test_remap_words_missing_their_amount_ask_for_it(words, says):
    from bot.generators.interface import GenerationError
    from bot.request import parse_request
    with pytest.raises(GenerationError, match=re.escape(says)):
        parse_request(words)


@pytest.mark.parametrize("text, torch_fn", [
    ("where(~torch.tril(m), 0.0, x) for 8x8", lambda m, x: torch.where(~torch.tril(m), 0.0, x)),
    ("where(torch.flip(m, dims=[1]), x, 0.0) for 8x8", lambda m, x: torch.where(torch.flip(m, dims=[1]), x, 0.0)),
])
def test_a_mask_moved_by_a_remap_stays_a_mask(tmp_path, text, torch_fn):
    # (a flipped mask standing as where's condition was once read as a float input: a bool output)
    spec, _ = parse_request(text + " fp32")
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    t = {"m": torch.rand(8, 8) > 0.5, "x": torch.randn(8, 8)}
    got = kernel(*[t[i["name"]] for i in spec["inputs"]])
    assert got.dtype == torch.float32 and torch.equal(got, torch_fn(t["m"], t["x"]))


@pytest.mark.parametrize("expression, shape", [
    ("F.interpolate(x, scale_factor=2, mode='bilinear', align_corners=False)", [2, 3, 5, 4]),
    ("F.interpolate(x, scale_factor=3, mode='bilinear')", [1, 2, 1, 3]),           # a dim of one input
    ("F.interpolate(x, scale_factor=2, mode='linear')", [2, 3, 7]),
    ("F.interpolate(x, scale_factor=(1, 2, 3), mode='trilinear')", [1, 2, 3, 4, 2]),
])
def test_linear_upsampling_by_whole_factors_is_torchs(tmp_path, expression, shape):
    # each dim's outputs mix an input with its neighbour before or after (the edge repeated)
    node = ir.parse(expression, as_written=True)
    spec = validate({"name": "op", "expression": ir.to_text(node),
                     "inputs": [{"name": "x", "dtypes": ["float32"], "shapes": [shape]}]})
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), "op")
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    want = eval(expression, {"F": torch.nn.functional, "x": x})
    torch.testing.assert_close(kernel(x.float()).double(), want, rtol=1e-6, atol=1e-6)
