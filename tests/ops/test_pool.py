"""The pooling family (bot.ops.pool): generated kernel.py files, imported and run under Triton's
interpreter, against torch.nn.functional's pooling on float64 inputs (and the generated reference,
which must be the same thing), in float32 and float16, on small odd shapes."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from generated import load

from bot.generators.interface import GenerationError
from bot.request import parse_request
from bot import ir, lower_torch
from bot.ops import pool
from bot.spec import SpecError, parse_expression, validate
from runner import inputs, protocol

# (expression, x's shape): every dim, stride, padding, dilation, ceil_mode, count_include_pad,
# divisor_override, adaptive sizes, unbatched input, and a body.
GEOMETRIES = [
    ("max_pool1d(x, kernel_size=3, stride=2, padding=1)", [2, 3, 17]),
    ("max_pool1d(x, kernel_size=4, stride=1, padding=2, dilation=3, ceil_mode=True)", [2, 3, 19]),
    ("max_pool2d(x, kernel_size=2)", [2, 3, 9, 11]),
    ("max_pool2d(x, kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), ceil_mode=True)", [2, 3, 10, 7]),
    ("max_pool2d(relu(x) * y, kernel_size=3, stride=2)", [2, 3, 9, 8]),
    ("max_pool3d(x, kernel_size=3, stride=2, padding=1, dilation=2)", [1, 2, 7, 8, 9]),
    ("avg_pool1d(x, kernel_size=4, stride=1, padding=2)", [2, 3, 13]),
    ("avg_pool2d(x, kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)", [2, 3, 10, 9]),
    ("avg_pool2d(x, kernel_size=3, stride=2, padding=1, ceil_mode=True)", [2, 3, 10, 9]),
    ("avg_pool2d(x, kernel_size=2, divisor_override=3)", [3, 7, 9]),                        # unbatched
    ("avg_pool3d(x, kernel_size=(2, 3, 3), stride=(1, 2, 2), padding=(1, 1, 0))", [1, 2, 5, 7, 8]),
    ("adaptive_avg_pool2d(x, output_size=(3, 4))", [2, 3, 10, 7]),
    ("adaptive_avg_pool1d(x, output_size=5)", [2, 3, 12]),
    ("adaptive_max_pool3d(x, output_size=(2, None, 3))", [1, 2, 5, 4, 7]),
    ("adaptive_avg_pool2d(x, output_size=1)", [2, 5, 6, 9]),                                 # global average
    ("max_pool2d(x * y, kernel_size=2)", [2, 3, 8, 7]),            # y [3, 1, 1]: a body input broadcast
    # windows overlapping down the rows: the rolled kernel, in chunks of 4, 8 and 16 output rows
    ("avg_pool2d(x, kernel_size=3, stride=1, padding=1, count_include_pad=False)", [2, 3, 11, 9]),
    ("max_pool2d(x, kernel_size=3, stride=1)", [2, 3, 20, 9]),
    ("max_pool2d(relu(x) * y, kernel_size=(4, 3), stride=(1, 2), padding=(2, 1), dilation=(1, 2), ceil_mode=True)",
     [2, 3, 10, 13]),
    ("avg_pool3d(x, kernel_size=(2, 3, 2), stride=(2, 1, 1), padding=(1, 1, 0), ceil_mode=True)", [1, 2, 5, 9, 7]),
    ("avg_pool2d(x, kernel_size=2, stride=1, divisor_override=3)", [3, 7, 9]),              # unbatched
]


def raw_spec(expression: str, shape: list[int], dtypes=("float32", "float16")) -> dict:
    names = ir.input_names(ir.parse(expression))
    shapes = {"x": shape, "y": shape if "relu" in expression else [shape[1], 1, 1]}
    return {"name": "pool_op", "expression": expression,
            "inputs": [{"name": n, "dtypes": list(dtypes), "shapes": [shapes[n]]} for n in names]}


def torch_pool(expression: str, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """torch.nn.functional's own pooling of the expression's body (the body computed here)."""
    node = ir.parse(expression)
    body = tensors["x"] if node.args[0].op == "input" else (torch.relu(tensors["x"]) if node.args[0].args[0].op == "relu"
                                                             else tensors["x"]) * tensors["y"]
    return getattr(F, pool.function_name(node))(body, **dict(pool._keywords(node)))


@pytest.mark.parametrize("expression, shape", GEOMETRIES, ids=[g[0] for g in GEOMETRIES])
def test_every_geometry_matches_torch(tmp_path, expression, shape):
    spec = validate(raw_spec(expression, shape))
    node = parse_expression(spec)
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), "pool_op")
    module = load(tmp_path, "kernel.py", pool.kernel_source(spec, node, {}))
    kernel = module.pool_op
    gen = torch.Generator().manual_seed(0)
    tensors = {i["name"]: torch.randn(i["shapes"][0], generator=gen) for i in spec["inputs"]}
    wide = {n: t.double() for n, t in tensors.items()}
    torch.testing.assert_close(reference(*wide.values()), torch_pool(expression, wide), rtol=1e-12, atol=1e-12)
    for dtype in ("float32", "float16"):
        args = [t.to(getattr(torch, dtype)) for t in tensors.values()]
        want = reference(*[a.double() for a in args])
        rtol, atol = protocol.tolerance(dtype)
        for config in (None, module.CONFIGS[1], module.CONFIGS[-1]):
            got = kernel(*args, config=config)
            assert got.shape == want.shape and got.dtype == args[0].dtype
            err = (got.double() - want).abs()
            assert bool((err <= atol + rtol * want.abs()).all()), f"{dtype} {config}: max err {err.max():.3g}"


@pytest.mark.parametrize("call, shape", [
    ("lp_pool2d(x, 2, 3, stride=2)", [2, 3, 11, 9]),
    ("lp_pool1d(x, norm_type=3.0, kernel_size=2, ceil_mode=True)", [2, 3, 11]),
    ("lp_pool3d(abs(x), 1.5, (2, 2, 1))", [1, 2, 5, 6, 7]),
])
def test_lp_pooling_is_torchs_power_average(tmp_path, call, shape):
    expression = ir.to_text(ir.parse(call, as_written=True))
    spec = validate({"name": "pool_op", "expression": expression,
                     "inputs": [{"name": "x", "dtypes": ["float32"], "shapes": [shape]}]})
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), "pool_op")
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    want = eval(f"F.{call}", {"F": F, "abs": torch.abs, "x": x})
    torch.testing.assert_close(kernel(x), want, rtol=1e-4, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("expression", ["max_pool2d(x, kernel_size=2)",
                                        "max_pool2d(x, kernel_size=3, stride=1, padding=1)"])    # rolled
def test_max_pooling_keeps_nan_as_torch_does(tmp_path, expression):
    spec = validate(raw_spec(expression, [1, 1, 4, 4], ("float32",)))
    kernel = getattr(load(tmp_path, "kernel.py", pool.kernel_source(spec, parse_expression(spec), {})), "pool_op")
    x = torch.arange(16.0).reshape(1, 1, 4, 4)
    x[0, 0, 0, 1] = float("nan")
    assert torch.equal(kernel(x).isnan(), torch_pool(expression, {"x": x}).isnan())


def test_the_text_reads_back_as_the_same_pooling():
    for expression, _ in GEOMETRIES:
        node = ir.parse(expression)
        assert ir.parse(ir.to_text(node)) == node
    assert ir.to_text(ir.parse("F.max_pool2d(x, 2, 2, 0, 1, False)")) == "max_pool2d(x, kernel_size=2)"
    assert ir.to_text(ir.parse("F.avg_pool1d(x, 3, 1, 1, False, False)")) == \
        "avg_pool1d(x, kernel_size=3, stride=1, padding=1, count_include_pad=False)"


@pytest.mark.parametrize("expression, shape, says", [
    ("max_pool2d(x, kernel_size=2, return_indices=True)", [1, 1, 4, 4], "returns two tensors"),
    ("max_pool2d(x, kernel_size=2, padding=2)", [1, 1, 8, 8], "at most half the kernel size"),
    ("max_pool2d(x, kernel_size=5)", [1, 1, 4, 8], "smaller than the window's reach"),
    ("max_pool2d(x)", [1, 1, 4, 8], "needs kernel_size"),
    ("max_pool3d(x, kernel_size=2)", [4, 8], "takes x [N, C, D, H, W]"),
    ("max_pool2d(x, kernel_size=2, ceil_mode=1)", [1, 1, 4, 8], "expected True or False"),
    ("adaptive_avg_pool2d(x, output_size=0)", [1, 1, 4, 8], "output_size must be at least 1"),
    ("F.lp_pool2d(x, p, 2)", [1, 1, 4, 8], "norm_type as a nonzero number written out"),
])
def test_what_cannot_be_lowered_is_refused_naming_it(expression, shape, says):
    with pytest.raises((SpecError, ir.IRError)) as e:
        validate(raw_spec(expression, shape))
    assert says in str(e.value)


def test_the_runner_never_shrinks_below_the_windows_reach():
    spec = validate(raw_spec("max_pool2d(x, kernel_size=5, stride=2, padding=1, dilation=2)", [16, 64, 512, 512]))
    assert spec["least_size"] == 7 and "fixed_sizes" not in spec
    case = inputs.shrink(protocol.cases(spec)[0], protocol.CPU_MAX_ELEMENTS, *protocol.size_rules(spec))
    assert min(case.shapes["x"][2:]) >= 7


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("expression, shape", [
    ("max_pool2d(x, kernel_size=3, stride=2, padding=1)", [32, 64, 112, 112]),
    ("avg_pool2d(x, kernel_size=3, stride=1, padding=1)", [32, 64, 112, 112]),
    ("max_pool2d(x, kernel_size=(5, 3), stride=1, padding=(2, 0))", [8, 32, 61, 77]),
    ("avg_pool2d(x, kernel_size=2)", [32, 64, 56, 57]),
    ("max_pool2d(x, kernel_size=4, ceil_mode=True)", [16, 32, 130, 131]),
    ("max_pool3d(x, kernel_size=3, stride=2, padding=1)", [4, 16, 32, 32, 31]),
    ("adaptive_avg_pool2d(x, output_size=1)", [64, 512, 7, 7]),
])
def test_on_the_gpu_every_dtype_matches_torch(tmp_path, dtype, expression, shape):
    spec = validate(raw_spec(expression, shape, (dtype,)))
    kernel = getattr(load(tmp_path, "kernel.py", pool.kernel_source(spec, parse_expression(spec), {})), "pool_op")
    x = torch.randn(shape, device="cuda").to(getattr(torch, dtype))
    want = torch_pool(expression, {"x": x.double()})
    got = kernel(x)
    rtol, atol = protocol.tolerance(dtype)
    err = (got.double() - want).abs()
    assert bool((err <= atol + rtol * want.abs()).all()), f"max err {err.max():.3g}"


@pytest.mark.parametrize("words, expression", [
    ("2x2 max pooling on 8x64x56x56 fp16", "max_pool2d(x, kernel_size=2)"),
    ("avg pool 3d with kernel size 3, stride 2, padding 1 on 4x16x9x20x20",
     "avg_pool3d(x, kernel_size=3, stride=2, padding=1)"),
    ("3x3 average pooling with stride 1, padding 1, excluding padding, 2x8x32x32",
     "avg_pool2d(x, kernel_size=3, stride=1, padding=1, count_include_pad=False)"),
    ("max pool 1d kernel 4 with ceil mode over 16x32x100", "max_pool1d(x, kernel_size=4, ceil_mode=True)"),
    ("global average pooling over 8x512x7x7", "adaptive_avg_pool2d(x, output_size=(1, 1))"),
    ("adaptive max pool to 7x5 on 8x64x56x56", "adaptive_max_pool2d(x, output_size=(7, 5))"),
    ("最大池化 窗口 3 步长 2 8x64x56x56", "max_pool2d(x, kernel_size=3, stride=2)"),
    ("对 8x512x7x7 的输入做全局平均池化", "adaptive_avg_pool2d(x, output_size=(1, 1))"),
    # the window just after the words, not taken for a shape
    ("average pooling 2x2 on 8x32x64x64", "avg_pool2d(x, kernel_size=2)"),
    ("avg pool 3d 2x2x2 on 4x8x16x32x32", "avg_pool3d(x, kernel_size=2)"),
    ("max pool 3x3 stride 2 on 16x64x112x112", "max_pool2d(x, kernel_size=3, stride=2)"),
    ("2x2 最大池化 on 8x64x56x56", "max_pool2d(x, kernel_size=2)"),
    ("最大池化 2x2 8x64x56x56", "max_pool2d(x, kernel_size=2)"),
    ("avg pool 3x3 stride 1 padding 1 count_include_pad False on 2x8x32x32",
     "avg_pool2d(x, kernel_size=3, stride=1, padding=1, count_include_pad=False)"),
    # no shape and no rank named: 2-d, on a CNN feature map's default shapes (both noted)
    ("global average pooling", "adaptive_avg_pool2d(x, output_size=(1, 1))"),
    ("max pool with kernel size 3", "max_pool2d(x, kernel_size=3)"),
    ("max pool stride 2 kernel 3 on 8x32x56x56", "max_pool2d(x, kernel_size=3, stride=2)"),
    # sizes as torch's tuples, keywords as torch spells them
    ("max pool kernel_size=(3, 3), stride=(2, 2), padding=(1, 1) on 8x32x56x56",
     "max_pool2d(x, kernel_size=3, stride=2, padding=1)"),
    ("avg pool kernel size (2,3) on 8x32x56x56", "avg_pool2d(x, kernel_size=(2, 3))"),
    ("max pool 1d kernel (4,) on 8x32x100", "max_pool1d(x, kernel_size=4)"),
])
def test_pooling_in_words(words, expression):
    spec, _ = parse_request(words)
    assert spec["expression"] == expression


@pytest.mark.parametrize("words, says", [
    ("max pooling on 8x64x56x56", "pooling needs its window"),
    ("max pool 2d on 8x64x56x56", "pooling needs its window"),
    ("adaptive avg pool on 8x64x56x56", "adaptive pooling needs its output size"),
    ("lp pooling on 8x64x56x56", "as code it is: F.lp_pool2d"),
    ("stochastic pooling on 8x64x56x56", "this pooling"),
    ("max pooling with 2x2 windows and relu on 8x64x56x56", "I read max_pool2d but you also named relu"),
    ("avg pool 2x2 dilation 2 on 8x64x56x56", "average pooling has no dilation"),
    ("global average pooling with stride 2 on 8x64x56x56", "takes an output size alone"),
])
def test_pooling_words_refused_say_what_works(words, says):
    with pytest.raises(GenerationError, match=says):
        parse_request(words)
