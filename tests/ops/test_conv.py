"""The convolution family (bot.ops.conv): generated kernel.py files, imported and run.

Kernels run under Triton's interpreter here (tests/conftest.py), in float32 and float16, on small odd
shapes, against torch.nn.functional's convolution on float64 inputs (and the generated reference,
which must be the same thing) within runner.protocol's tolerance.
"""
from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from generated import load

from bot.generators.interface import GenerationError
from bot.request import parse_request
from bot import ir, lower_torch
from bot.ops import conv
from bot.spec import SpecError, parse_expression, validate
from runner import inputs, protocol

# (expression, x, weight, bias or None): every dim, stride, padding, dilation, groups, transposed.
GEOMETRIES = [
    ("conv1d(x, w, b, stride=2, padding=1)", [2, 4, 17], [16, 4, 3], [16]),
    ("conv1d(x, w, dilation=2, groups=3)", [3, 6, 23], [18, 2, 5], None),
    ("conv2d(x, w, b, stride=(2, 1), padding=(1, 2))", [2, 3, 9, 12], [16, 3, 3, 5], [16]),
    ("conv2d(x, w, b, groups=8)", [2, 8, 10, 9], [8, 1, 3, 3], [8]),                # depthwise
    ("conv2d(x, w, b, padding=1, groups=8)", [2, 8, 10, 9], [16, 1, 3, 3], [16]),   # depthwise, 2 per channel
    ("conv2d(x, w)", [2, 16, 7, 5], [32, 16, 1, 1], None),                          # pointwise
    ("conv3d(x, w, b, padding=1)", [2, 3, 5, 6, 7], [16, 3, 3, 3, 3], [16]),
    ("conv3d(x, w, b, stride=(1, 2, 2), dilation=(2, 1, 1))", [1, 4, 6, 7, 8], [8, 4, 2, 3, 1], [8]),
    ("conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1)", [2, 4, 9], [4, 16, 3], [16]),
    ("conv_transpose2d(x, w, b, stride=(2, 3), padding=(1, 2), groups=2, dilation=(2, 1))",
     [2, 8, 5, 6], [8, 8, 3, 4], [16]),
    ("conv_transpose2d(x, w, b, stride=2, groups=4)", [2, 4, 6, 6], [4, 1, 3, 3], [4]),
    ("conv_transpose3d(x, w, b, stride=2, padding=(1, 2, 1), output_padding=1, groups=4)",
     [1, 4, 2, 3, 4], [4, 2, 2, 5, 3], [8]),
    # 16 or more input channels a group: K runs tap by tap, a transposed one's outputs by phase
    ("conv2d(x, w, b, stride=2, padding=1)", [2, 20, 9, 8], [32, 20, 3, 3], [32]),
    ("conv_transpose2d(x, w, b, stride=(2, 3), padding=1, output_padding=(1, 0))", [2, 24, 5, 4], [24, 16, 3, 3], [16]),
    ("conv_transpose3d(x, w, stride=2, groups=2)", [1, 32, 2, 2, 2], [32, 8, 1, 2, 2], None),
    ("conv_transpose1d(x, w, stride=3)", [2, 16, 1], [16, 16, 1], None),      # phases 1 and 2 have no outputs
    # a sample's positions fill whole tiles: tiles of one sample each (a 1x1's loads by position too)
    ("conv2d(x, w, b)", [2, 16, 8, 8], [32, 16, 1, 1], [32]),
    ("conv2d(x, w, padding=1)", [2, 16, 8, 16], [16, 16, 3, 3], None),
    # float16 and bfloat16 over several taps, 16 or more channels a group: x read channels-last, the
    # weight taps-first (each copied so first)
    ("conv2d(x, w, b, padding=1, dilation=(1, 2), groups=2)", [1, 32, 5, 7], [48, 16, 3, 3], [48]),
]
DOT_CASE = GEOMETRIES[2]            # 3 input channels, 15 taps: tl.dot over (channel, tap)
FMA_CASE = GEOMETRIES[3]            # depthwise: tap by tap
TAP_CASE = GEOMETRIES[13]           # transposed, 24 input channels, phases: tl.dot tap by tap
SAMPLE_CASE = GEOMETRIES[16]        # 1x1: tiles of one sample's positions, or flattened with wide tiles


def raw_spec(expression: str, shapes: dict[str, list[int]], dtypes=("float32", "float16")) -> dict:
    return {"name": "conv_op", "expression": expression,
            "inputs": [{"name": n, "dtypes": list(dtypes), "shapes": [s]} for n, s in shapes.items()]}


def shapes_of(x, w, b) -> dict[str, list[int]]:
    return {"x": x, "w": w, **({"b": b} if b else {})}


def torch_conv(expression: str, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """torch.nn.functional's own call of the expression's convolution (not the generated reference)."""
    node = conv.conv_node(ir.parse(expression))
    kwargs = dict(conv._keywords(node))
    return getattr(F, conv.function_name(node))(tensors["x"], tensors["w"], tensors.get("b"), **kwargs)


def check(tmp_path, expression: str, shapes: dict, configs=(None,), dtypes=("float32", "float16"), extra=None,
          edit=lambda source: source):
    """The kernel against torch's convolution (and the generated reference) on float64 inputs, in
    each dtype, with the launcher's config and each given one; extra: the epilogue around it, as a
    function of the convolution's float64 output and the tensors; edit: a change to kernel.py first."""
    spec = validate(raw_spec(expression, shapes, dtypes))
    node = parse_expression(spec)
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), "conv_op")
    kernel = getattr(load(tmp_path, "kernel.py", edit(conv.kernel_source(spec, node, {}))), "conv_op")
    gen = torch.Generator().manual_seed(0)
    tensors = {n: torch.randn(s, generator=gen) for n, s in shapes.items()}
    wide = {n: t.double() for n, t in tensors.items()}
    want = torch_conv(expression, wide)
    want = extra(want, wide) if extra else want
    torch.testing.assert_close(reference(*wide.values()), want, rtol=1e-12, atol=1e-12)
    k = math.prod(shapes["w"][1:])
    for dtype in dtypes:
        args = [t.to(getattr(torch, dtype)) for t in tensors.values()]
        want = reference(*[a.double() for a in args])
        rtol, atol = protocol.tolerance(dtype, k, matmul=True)
        for config in configs:
            got = kernel(*args, config=config)
            assert got.shape == want.shape and got.dtype == args[0].dtype, (expression, dtype, config)
            err = (got.double() - want).abs()
            bad = ~(err <= atol + rtol * want.abs())
            assert not bool(bad.any()), f"{expression} {dtype} {config}: {int(bad.sum())} bad, max err {err.max():.3g}"


@pytest.mark.parametrize("expression, x, w, b", GEOMETRIES, ids=[g[0] for g in GEOMETRIES])
def test_every_geometry_matches_torch(tmp_path, expression, x, w, b):
    # float16 on a few (the interpreter's float16 products are slow; the GPU tests take every dtype)
    half = expression in (GEOMETRIES[0][0], GEOMETRIES[3][0], GEOMETRIES[12][0], GEOMETRIES[13][0], GEOMETRIES[-1][0])
    check(tmp_path, expression, shapes_of(x, w, b), dtypes=("float32", "float16") if half else ("float32",))


@pytest.mark.parametrize("expression, x, w", [("conv2d(x, w, b, padding='same')", [2, 3, 7, 6], [4, 3, 3, 5]),
                                             ("conv1d(x, w, b, padding='same', dilation=2)", [2, 3, 11], [4, 3, 3]),
                                             ("conv3d(x, w, b, padding='same', groups=3)", [1, 3, 4, 5, 3], [6, 1, 3, 1, 3])])
def test_same_padding_keeps_the_spatial_sizes_as_torchs(tmp_path, expression, x, w):
    spec = validate(raw_spec(expression, shapes_of(x, w, [w[0]])))
    assert spec["outputs"][0]["shapes"][0][2:] == x[2:] and "same" not in ir.to_text(parse_expression(spec))
    check(tmp_path, expression, shapes_of(x, w, [w[0]]), dtypes=("float32",))


@pytest.mark.parametrize("code, x, w, want", [
    # a causal depthwise conv1d (Mamba's): k - 1 zeros before, none after; every path of the kernel
    ("F.conv1d(F.pad(x, (3, 0)), w, b, groups=4)", [2, 4, 19], [4, 1, 4],
     lambda x, w, b: F.conv1d(F.pad(x, (3, 0)), w, b, groups=4)),
    ("F.conv2d(F.pad(x, (2, 0, 1, 3)), w, b, padding=1, stride=2)", [2, 3, 9, 8], [5, 3, 3, 3],
     lambda x, w, b: F.conv2d(F.pad(x, (2, 0, 1, 3)), w, b, padding=1, stride=2)),
    ("F.conv2d(x, w, b, padding='same')", [2, 3, 7, 6], [4, 3, 4, 2],        # even kernels: one more after
     lambda x, w, b: F.conv2d(x, w, b, padding="same")),
    ("F.conv2d(F.pad(x, (0, 1, 0, 1)), w, b)", [2, 16, 6, 6], [32, 16, 1, 1],  # 1x1: positions past x are bias
     lambda x, w, b: F.conv2d(F.pad(x, (0, 1, 0, 1)), w, b)),
])
def test_uneven_padding_before_and_after_is_torchs(tmp_path, code, x, w, want):
    node = ir.parse(code, as_written=True)
    spec = validate({"name": "conv_op", "expression": ir.to_text(node), "inputs": [
        {"name": n, "dtypes": ["float32"], "shapes": [s]} for n, s in (("x", x), ("w", w), ("b", [w[0]]))]})
    node = parse_expression(spec)                 # 'same' settled for the weight's shape
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), "conv_op")
    module = load(tmp_path, "kernel.py", conv.kernel_source(spec, node, {}))
    gen = torch.Generator().manual_seed(0)
    t = [torch.randn(s, generator=gen) for s in (x, w, [w[0]])]
    torch.testing.assert_close(reference(*[a.double() for a in t]), want(*[a.double() for a in t]))
    for config in (None, *conv.CONFIGS[:2]):
        torch.testing.assert_close(module.conv_op(*t, config=config), want(*t), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("code, stages", [
    ("F.conv1d(F.pad(x, (1, 1), mode='reflect'), w)", ["pad", "conv"]),
    ("F.conv1d(F.pad(x, (1, 1), value=1.0), w)", ["pad", "conv"]),
    ("F.conv1d(F.pad(x, (1, 1, 1, 1)), w)", ["pad", "conv"]),          # past its spatial dims
    ("F.conv_transpose1d(F.pad(x, (1, 1)), w)", ["pad", "conv"]),      # its padding crops instead
    ("F.conv1d(F.pad(x, (2, -1)), w)", ["pad", "conv"]),               # a crop
    ("F.pad(x, (1, 1)) * 2.0", ["pad", "mul"]),
    ("F.conv1d(F.pad(x, (2, 0)), w)", ["conv"]),                       # zeros: the convolution's own padding
])
def test_pads_no_convolution_folds_in_are_a_kernel_before_it(code, stages):
    assert [s.node.op for s in ir.stages(ir.parse(code, as_written=True))] == stages


@pytest.mark.parametrize("code, says", [
    ("F.conv_transpose1d(x, w, padding=1, padding_end=2)", "not transposed ones"),
    ("F.conv1d(F.pad(x, ()), w)", "F.pad takes pad as pairs of whole numbers"),
])
def test_paddings_it_cannot_read_are_refused_naming_what_works(code, says):
    with pytest.raises(ir.IRError, match=re.escape(says)):
        ir.parse(code, as_written=True)


@pytest.mark.parametrize("case", [DOT_CASE, FMA_CASE, TAP_CASE, SAMPLE_CASE],
                         ids=["dot", "multiply-add", "tap by tap", "per sample"])
def test_every_config_is_right(tmp_path, case):
    expression, x, w, b = case
    check(tmp_path, expression, shapes_of(x, w, b), configs=tuple(conv.CONFIGS), dtypes=("float32",))


@pytest.mark.parametrize("case", [DOT_CASE, TAP_CASE, SAMPLE_CASE], ids=["dot", "tap by tap", "per sample"])
def test_the_wide_channel_offsets_are_right(tmp_path, case):
    # int64 channel offsets where a sample's channels span 2**31 elements: forced on small inputs here
    expression, x, w, b = case
    wide = "* D * H * W >= 2**31"

    def forced(source: str) -> str:
        assert wide in source
        return source.replace(wide, "* D * H * W >= 0")
    check(tmp_path, expression, shapes_of(x, w, b), dtypes=("float32",), edit=forced)


@pytest.mark.parametrize("x, w, out", [([2, 8, 9, 7], [32, 8, 3, 3], [7, 5]),
                                       ([2, 16, 8, 8], [32, 16, 1, 1], [8, 8])],     # tiles of one sample
                         ids=["flattened", "per sample"])
def test_a_pointwise_epilogue_is_fused_with_broadcast_inputs(tmp_path, x, w, out):
    shapes = {"x": x, "w": w, "b": [32], "scale": [32, 1, 1], "residual": [2, 32, *out]}
    check(tmp_path, "relu(conv2d(x, w, b) * scale + residual)", shapes,
          extra=lambda out, t: torch.relu(out * t["scale"] + t["residual"]))


def test_the_text_reads_back_as_the_same_convolution():
    for expression, *_ in GEOMETRIES:
        node = ir.parse(expression)
        assert ir.parse(ir.to_text(node)) == node
    assert ir.to_text(ir.parse("conv2d(x, w, None, 1, (1, 1), 1, 1)")) == "conv2d(x, w, padding=1)"
    assert ir.to_text(ir.parse("conv_transpose1d(x, w, b, 2, 0, 1)")) == \
        "conv_transpose1d(x, w, b, stride=2, output_padding=1)"       # torch's positional order for each


@pytest.mark.parametrize("expression, shapes, says", [
    ("conv1d(x, w, stride=2, padding='same')", {"x": [1, 2, 5], "w": [4, 2, 3]}, "padding='same' takes stride 1"),
    ("conv_transpose1d(x, w, padding='same')", {"x": [1, 2, 5], "w": [2, 4, 3]}, "takes padding as numbers, 'valid'"),
    ("conv2d(x, w, groups=3)", {"x": [1, 4, 5, 5], "w": [6, 2, 3, 3]}, "which 3 groups do not divide"),
    ("conv2d(x, w)", {"x": [1, 3, 5, 5], "w": [4, 2, 3, 3]}, "takes 2 input channels"),
    ("conv2d(x, w)", {"x": [1, 2, 2, 5], "w": [4, 2, 3, 3]}, "smaller than the kernel's reach"),
    ("conv2d(x, w, b)", {"x": [1, 2, 5, 5], "w": [4, 2, 3, 3], "b": [2]}, "bias must have shape [4]"),
    ("conv3d(x, w)", {"x": [1, 2, 5, 5], "w": [4, 2, 3, 3]}, "a 3-d convolution takes x"),
    ("conv2d(x, w, stride=0)", {"x": [1, 2, 5, 5], "w": [4, 2, 3, 3]}, "stride must be at least 1"),
    ("conv_transpose2d(x, w, stride=2, output_padding=2)", {"x": [1, 2, 5, 5], "w": [2, 4, 3, 3]},
     "output_padding [2, 2] must be smaller"),
])
def test_what_cannot_be_lowered_is_refused_naming_it(expression, shapes, says):
    with pytest.raises(SpecError) as e:
        validate(raw_spec(expression, shapes))
    assert says in str(e.value)


def test_the_runner_keeps_channels_and_kernel_and_the_kernels_reach():
    spec = validate(raw_spec("conv2d(x, w, b, padding=1, dilation=2)",
                             {"x": [8, 16, 64, 64], "w": [32, 16, 5, 5], "b": [32]}))
    assert spec["fixed_sizes"] == [5, 16, 32] and spec["least_size"] == 7      # 2 * (5 - 1) + 1 - 2 * 1
    assert spec["reduce"] == {"inputs": ["w"], "dim": [1, 2, 3]} and spec["matmul"]
    odd = inputs.odd_case(protocol.cases(spec)[0], 1, *protocol.size_rules(spec))
    assert odd.shapes == {"x": [37, 16, 97, 97], "w": [32, 16, 5, 5], "b": [32]}
    shrunk = inputs.shrink(protocol.cases(spec)[0], protocol.CPU_MAX_ELEMENTS, *protocol.size_rules(spec))
    assert shrunk.shapes["x"][1:2] == [16] and min(shrunk.shapes["x"][2:]) >= 7
    conv.conv_shape(shrunk.shapes["x"], [32, 16, 5, 5], [32], 2, False, (1, 1), (1, 1), (2, 2), 1, (0, 0), (1, 1))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("expression, x, w, b", [
    ("relu(conv2d(x, w, b, padding=1))", [8, 64, 56, 56], [128, 64, 3, 3], [128]),
    ("conv2d(x, w, b, padding=1, groups=64)", [8, 64, 56, 56], [64, 1, 3, 3], [64]),
    ("conv2d(x, w, stride=2)", [4, 32, 33, 31], [64, 32, 1, 1], None),
    ("conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1)", [4, 32, 17, 19], [32, 16, 3, 3], [16]),
    ("conv3d(x, w, b, padding=1)", [2, 16, 9, 10, 11], [32, 16, 3, 3, 3], [32]),
    ("conv2d(x, w, b, stride=2, padding=2, dilation=2, groups=2)", [4, 64, 15, 17], [96, 32, 3, 3], [96]),
])
def test_on_the_gpu_every_dtype_matches_torch(tmp_path, dtype, expression, x, w, b):
    spec = validate(raw_spec(expression, shapes_of(x, w, b), (dtype,)))
    node = parse_expression(spec)
    kernel = getattr(load(tmp_path, "kernel.py", conv.kernel_source(spec, node, {})), "conv_op")
    gen = torch.Generator(device="cuda").manual_seed(0)
    tensors = {n: torch.randn(s, generator=gen, device="cuda") for n, s in shapes_of(x, w, b).items()}
    args = [t.to(getattr(torch, dtype)) for t in tensors.values()]
    want = torch_conv(expression, {n: a.double() for n, a in zip(tensors, args)})
    want = torch.relu(want) if expression.startswith("relu") else want
    rtol, atol = protocol.tolerance(dtype, math.prod(w[1:]), matmul=True)
    got = kernel(*args)
    err = (got.double() - want).abs()
    assert bool((err <= atol + rtol * want.abs()).all()), f"max err {err.max():.3g}"


@pytest.mark.parametrize("words, expression, weight", [
    ("conv2d 3x3 with 64 output channels, stride 2, padding 1 on 8x32x56x56 fp16",
     "conv2d(x, w, stride=2, padding=1)", [64, 32, 3, 3]),
    ("3x3 depthwise convolution with padding 1 on 8x32x56x56", "conv2d(x, w, padding=1, groups=32)", [32, 1, 3, 3]),
    ("1x1 pointwise conv with 128 filters over 8x64x28x28, with bias", "conv2d(x, w, b)", [128, 64, 1, 1]),
    ("transposed conv 2d, kernel 4, stride 2, padding 1, 32 output channels, 4x64x16x16",
     "conv_transpose2d(x, w, stride=2, padding=1)", [64, 32, 4, 4]),
    ("conv1d kernel size 5 with 16 out channels on 4x8x100", "conv1d(x, w)", [16, 8, 5]),
    ("grouped conv 3x3 groups 4 with 64 output channels on 8x32x20x20", "conv2d(x, w, groups=4)", [64, 8, 3, 3]),
    ("卷积 卷积核 3 输出通道 16 步长 1 填充 1 2x8x10x10", "conv2d(x, w, stride=1, padding=1)", [16, 8, 3, 3]),
    ("卷积 3x3 2x8x10x10 输出 16 通道", "conv2d(x, w)", [16, 8, 3, 3]),
    # the transposed forms as people write them; the window just after the words, in Chinese too
    ("conv transpose 2d 4x4 stride 2 with 32 output channels on 4x64x32x32", "conv_transpose2d(x, w, stride=2)",
     [64, 32, 4, 4]),
    ("conv_transpose2d 3x3 with 16 output channels on 2x8x9x9", "conv_transpose2d(x, w)", [8, 16, 3, 3]),
    ("转置卷积 3x3 输出通道 16 on 2x8x9x9", "conv_transpose2d(x, w)", [8, 16, 3, 3]),
    ("conv2d 3x3 with output channels 32 on 2x8x9x9", "conv2d(x, w)", [32, 8, 3, 3]),
    # channels as "C_in to C_out"; a stride said before the kernel is not its size
    ("conv1d 64 to 128 channels kernel 3 padding 1 on 16x64x1000", "conv1d(x, w, padding=1)", [128, 64, 3]),
    ("conv2d 3x3 64->128 with padding 1 on 8x64x20x20", "conv2d(x, w, padding=1)", [128, 64, 3, 3]),
    ("conv2d 3x3 64 to 32 on 8x64x20x20", "conv2d(x, w)", [32, 64, 3, 3]),
    ("conv2d 3x3, 64->128 channels, 16x64x56x56", "conv2d(x, w)", [128, 64, 3, 3]),
    ("conv2d 3x3 64 in 128 out on 16x64x56x56", "conv2d(x, w)", [128, 64, 3, 3]),
    ("conv transpose 2d stride 2 kernel 4, 64 to 32 channels on 8x64x32x32", "conv_transpose2d(x, w, stride=2)",
     [64, 32, 4, 4]),
    ("卷积 3x3 64通道到128通道 输入 16x64x56x56", "conv2d(x, w)", [128, 64, 3, 3]),
    # pointwise steps said after it: its fused epilogue, in order
    ("conv2d 3x3 with 64 output channels on 8x32x28x28 then relu", "relu(conv2d(x, w))", [64, 32, 3, 3]),
    ("conv2d 3x3 with 64 output channels, padding 1, with bias on 8x32x28x28, then gelu then scale by 0.5",
     "gelu(conv2d(x, w, b, padding=1)) * 0.5", [64, 32, 3, 3]),
    # the weight's (and bias's) shape said by name: its kernel, output channels and groups
    ("conv2d with padding 1 on x 32x64x56x56 with weight 64x64x3x3 and bias b 64, fp16", "conv2d(x, w, b, padding=1)",
     [64, 64, 3, 3]),
    ("conv2d on input 8x32x28x28, weight 128x32x5x5, bias 128", "conv2d(x, w, b)", [128, 32, 5, 5]),
    ("depthwise conv2d on 8x32x28x28 with weight 32x1x5x5, padding 2", "conv2d(x, w, padding=2, groups=32)",
     [32, 1, 5, 5]),
    ("conv2d on 8x32x28x28 with weight 64x16x3x3, stride 2", "conv2d(x, w, stride=2, groups=2)", [64, 16, 3, 3]),
    ("conv2d kernel_size=(3, 5) padding=(1, 2) with 16 output channels on 2x8x20x20", "conv2d(x, w, padding=(1, 2))",
     [16, 8, 3, 5]),
    ("conv transpose 2d on 8x32x28x28 with weight w 32x16x4x4, stride 2", "conv_transpose2d(x, w, stride=2)",
     [32, 16, 4, 4]),
    ("F.conv1d(x, w, padding='valid') with x 2x3x10 and w 4x3x5 fp32", "conv1d(x, w)", [4, 3, 5]),     # typed
    # causal: dilation * (k - 1) zeros before the sequence, none after
    ("causal depthwise conv1d kernel 4 on 2x1536x2048 fp16", "conv1d(x, w, padding=3, groups=1536, padding_end=0)",
     [1536, 1, 4]),
    ("dilated causal conv1d kernel 2 dilation 4 with 32 output channels on 4x16x500",
     "conv1d(x, w, padding=4, dilation=4, padding_end=0)", [32, 16, 2]),
])
def test_convolution_in_words(words, expression, weight):
    spec, _ = parse_request(words)
    assert ir.parse(spec["expression"]) == ir.parse(expression)
    assert next(i for i in spec["inputs"] if i["name"] == "w")["shapes"][0] == weight


@pytest.mark.parametrize("words, says", [
    ("conv2d 3x3 of 1x64x56x56", "how many output channels"),
    ("depthwise convolution", "needs the input's shape"),
    ("conv2d with 64 output channels on 8x32x56x56", "needs its kernel size"),
    ("conv2d 3x3 groups 3 with 64 output channels on 8x32x20x20", "groups=3 must divide"),
    ("causal conv2d 3x3 with 8 output channels on 2x8x10x10", "a causal convolution is a conv1d"),
    ("conv2d 3x3 from 32 to 128 channels on 16x64x56x56", "has 64 channels"),
    ("conv2d 3x3 32 to 128 on 16x64x56x56", "has 64 channels"),
    ("relu then conv2d 3x3 with 64 output channels on 8x32x28x28", "you also named relu"),
    ("conv2d 3x3 with 64 output channels on 8x32x28x28 plus residual", "you also named add"),
    ("conv2d 5x5 on 8x32x28x28 with weight 64x32x3x3", "its weight is 64x32x5x5"),
    ("conv2d on 8x32x28x28 with weight 64x32x3x3 and bias 32", "its bias is 64"),
    ("conv2d 3x3 with 16 output channels on 8x32x28x28 with weight 64x32x3x3", "its weight is 16x32x3x3"),
])
def test_convolution_words_refused_say_what_works(words, says):
    with pytest.raises(GenerationError, match=says):
        parse_request(words)


UNBATCHED = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
    def forward(self, x):
        return torch.relu(self.conv(x))

def get_inputs():
    return [torch.randn(3, 10, 7)]

def get_init_inputs():
    return []
'''


def test_an_unbatched_input_is_a_batch_of_one(tmp_path):
    # torch takes x [C, H, W]: the kernel convolves x.unsqueeze(0) and drops the batch dim again
    spec, _ = parse_request(UNBATCHED)
    assert spec["outputs"][0]["shapes"] == [[8, 10, 7]]
    assert "x.unsqueeze(0)" in spec["expression"] and ".squeeze(0)" in spec["expression"]
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    x, w, b = (torch.randn(i["shapes"][0]) for i in spec["inputs"])
    torch.testing.assert_close(kernel(x, w, b), torch.relu(F.conv2d(x, w, b, padding=1)), rtol=1e-4, atol=1e-4)
