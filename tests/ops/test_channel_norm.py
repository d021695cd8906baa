"""The channel-norm family (bot.ops.channel_norm): batch norm (training and eval), group norm, instance
norm and layer norm over several trailing dims, generated and run under Triton's interpreter against
torch.nn.functional on float64 inputs, in float32 and float16, on small odd shapes."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from generated import load

from bot.generators.interface import GenerationError
from bot.request import parse_request
from bot import ir, lower_torch
from bot.ops import channel_norm
from bot.spec import SpecError, parse_expression, validate
from runner import protocol

# (expression, shapes, torch's own call over float64 tensors t)
CASES = [
    ("batch_norm(x, None, None, w, b, training=True, eps=1e-05)", {"x": [6, 5, 7, 9], "w": [5], "b": [5]},
     lambda t: F.batch_norm(t["x"], None, None, t["w"], t["b"], training=True)),
    ("batch_norm(x, None, None, None, None, training=True, eps=0.001)", {"x": [33, 7]},
     lambda t: F.batch_norm(t["x"], None, None, training=True, eps=1e-3)),
    ("batch_norm(x, m, v, w, b, training=False, eps=1e-05)", {"x": [2, 3, 5, 4, 3], "m": [3], "v": [3], "w": [3], "b": [3]},
     lambda t: F.batch_norm(t["x"], t["m"], t["v"], t["w"], t["b"], training=False)),
    ("group_norm(x, 3, w, b, eps=1e-05)", {"x": [2, 6, 5, 7], "w": [6], "b": [6]},
     lambda t: F.group_norm(t["x"], 3, t["w"], t["b"])),
    ("group_norm(x + y, 2, None, None, eps=1e-05)", {"x": [3, 4, 9], "y": [3, 4, 9]},
     lambda t: F.group_norm(t["x"] + t["y"], 2)),
    # channels of a quarter tile or more (the default tile: 1024): the normalising pass by channel rows
    ("group_norm(x, 2, w, b, eps=1e-05)", {"x": [2, 4, 16, 17], "w": [4], "b": [4]},
     lambda t: F.group_norm(t["x"], 2, t["w"], t["b"])),
    ("instance_norm(x, weight=w, bias=b, eps=1e-05)", {"x": [2, 3, 6, 5], "w": [3], "b": [3]},
     lambda t: F.instance_norm(t["x"], weight=t["w"], bias=t["b"])),
    ("instance_norm(x, weight=None, bias=None, eps=1e-05)", {"x": [2, 3, 4, 5, 3]},
     lambda t: F.instance_norm(t["x"])),
    ("layer_norm_nd(x, w, b, dims=2, eps=1e-05)", {"x": [4, 6, 7], "w": [6, 7], "b": [6, 7]},
     lambda t: F.layer_norm(t["x"], [6, 7], t["w"], t["b"])),
    ("layer_norm_nd(x, None, None, dims=3, eps=1e-05)", {"x": [3, 5, 4, 6]},
     lambda t: F.layer_norm(t["x"], [5, 4, 6])),
    # one tensor in two roles: passed to the kernel once
    ("batch_norm(x, v, v, w, w, training=False, eps=1e-05)", {"x": [2, 3, 5], "v": [3], "w": [3]},
     lambda t: F.batch_norm(t["x"], t["v"], t["v"], t["w"], t["w"], training=False)),
    ("group_norm(x, 2, w, w, eps=1e-05)", {"x": [2, 4, 5], "w": [4]},
     lambda t: F.group_norm(t["x"], 2, t["w"], t["w"])),
]


def raw_spec(expression: str, shapes: dict, dtypes=("float32", "float16")) -> dict:
    return {"name": "norm_op", "expression": expression,
            "inputs": [{"name": n, "dtypes": list(dtypes), "shapes": [s],
                        **({"domain": "positive"} if n == "v" else {})} for n, s in shapes.items()]}


def tensors_for(spec: dict) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    out = {}
    for i in spec["inputs"]:
        t = torch.randn(i["shapes"][0], generator=gen)
        out[i["name"]] = t.abs() + 0.5 if i["domain"] == "positive" else t + 0.5     # a mean to take away
    return out


@pytest.mark.parametrize("expression, shapes, torch_call", CASES, ids=[c[0] for c in CASES])
def test_every_norm_matches_torch(tmp_path, expression, shapes, torch_call):
    spec = validate(raw_spec(expression, shapes))
    node = parse_expression(spec)
    assert ir.parse(ir.to_text(node)) == node
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), "norm_op")
    kernel = getattr(load(tmp_path, "kernel.py", channel_norm.kernel_source(spec, node, {})), "norm_op")
    tensors = tensors_for(spec)
    wide = {n: t.double() for n, t in tensors.items()}
    torch.testing.assert_close(reference(*wide.values()), torch_call(wide), rtol=1e-12, atol=1e-12)
    for dtype in ("float32", "float16"):
        args = [t.to(getattr(torch, dtype)) for t in tensors.values()]
        want = reference(*[a.double() for a in args])
        length = protocol.cases(spec)[0].shapes["x"]
        rtol, atol = protocol.tolerance(dtype, max(length))
        # every config in float32 (256-element tiles split the rows many ways); float16 with the default
        for config in (None, *channel_norm.CONFIGS) if dtype == "float32" else (None,):
            got = kernel(*args, config=config)
            assert got.shape == want.shape and got.dtype == args[0].dtype
            err = (got.double() - want).abs()
            assert bool((err <= atol + rtol * want.abs()).all()), f"{dtype} {config}: max err {err.max():.3g}"


@pytest.mark.parametrize("grad", [False, True])
def test_an_eval_batch_norm_inside_an_expression_keeps_what_follows_it(tmp_path, grad):
    # its reference wrote an early return of the norm itself, so relu(...) * 2.0 was lost after it
    expression = "relu(batch_norm(x, m, v, w, b, training=False, eps=1e-05)) * 2.0 + batch_norm(x, v, v, None, None, " \
                 "training=False, eps=0.001)"
    spec = validate(raw_spec(expression, {"x": [2, 3, 5], "m": [3], "v": [3], "w": [3], "b": [3]}))
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, parse_expression(spec))),
                        "norm_op")
    t = {n: v.double().requires_grad_(grad and n in "mv") for n, v in tensors_for(spec).items()}
    want = torch.relu(F.batch_norm(t["x"], t["m"].detach(), t["v"].detach(), t["w"], t["b"])) * 2.0 + \
        F.batch_norm(t["x"], t["v"].detach(), t["v"].detach(), eps=1e-3)
    torch.testing.assert_close(reference(*t.values()), want)


@pytest.mark.parametrize("expression, shapes, says", [
    ("group_norm(x, 4, None, None, eps=1e-05)", {"x": [2, 6, 5]}, "4 groups do not divide the 6 channels"),
    ("batch_norm(x, None, None, w, None, training=True, eps=1e-05)", {"x": [2, 3, 5], "w": [4]},
     "weight w must have shape [3]"),
    ("batch_norm(x, None, None, None, None, training=False, eps=1e-05)", {"x": [2, 3, 5]}, "give both"),
    ("batch_norm(x, None, None, None, None, training=True, eps=1e-05)", {"x": [1, 3]}, "more than one value"),
    ("instance_norm(x, use_input_stats=False)", {"x": [2, 3, 5]}, "use_input_stats=False"),
    ("group_norm(x, 0, None, None, eps=1e-05)", {"x": [2, 3, 5]}, "num_groups as a positive integer"),
])
def test_what_cannot_be_lowered_is_refused_naming_it(expression, shapes, says):
    with pytest.raises((SpecError, ir.IRError)) as e:
        validate(raw_spec(expression, shapes))
    assert says in str(e.value)


def test_channels_and_normalized_dims_stay_fixed():
    spec = validate(raw_spec("group_norm(x, 4, w, b, eps=1e-05)", {"x": [16, 64, 32, 32], "w": [64], "b": [64]}))
    assert spec["fixed_sizes"] == [64] and spec["reduce"] == {"inputs": ["x"], "dim": [1, 2, 3]}
    spec = validate(raw_spec("layer_norm_nd(x, None, None, dims=2, eps=1e-05)", {"x": [16, 64, 32]}))
    assert spec["fixed_sizes"] == [32, 64] and spec["reduce"] == {"inputs": ["x"], "dim": [1, 2]}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("case", [0, 3, 5, 7], ids=["batch", "group", "instance", "layer"])
def test_on_the_gpu_every_dtype_matches_torch(tmp_path, dtype, case):
    expression, shapes, torch_call = CASES[case]
    shapes = {**shapes, "x": [shapes["x"][0] * 64, *shapes["x"][1:]]}     # a larger batch
    spec = validate(raw_spec(expression, shapes, (dtype,)))
    kernel = getattr(load(tmp_path, "kernel.py", channel_norm.kernel_source(spec, parse_expression(spec), {})),
                     "norm_op")
    tensors = {n: t.cuda().to(getattr(torch, dtype)) for n, t in tensors_for(spec).items()}
    want = torch_call({n: t.double() for n, t in tensors.items()})
    rtol, atol = protocol.tolerance(dtype, max(shapes["x"]))
    for config in (None, *channel_norm.CONFIGS):        # fused and split, at the GPU's own split
        err = (kernel(*tensors.values(), config=config).double() - want).abs()
        assert bool((err <= atol + rtol * want.abs()).all()), f"{config}: max err {err.max():.3g}"


@pytest.mark.parametrize("words, typed", [
    ("group norm with 8 groups on 8x64x32x32 fp16", "group_norm(x, 8, weight, bias, eps=1e-05)"),
    ("group norm 8 groups 32x64x56x56", "group_norm(x, 8, weight, bias, eps=1e-05)"),     # a count, then the shape
    ("batch norm on 16x32x28x28", "batch_norm(x, None, None, weight, bias, training=True)"),
    ("batch norm for inference on 16x32x28x28", "batch_norm(x, running_mean, running_var, weight, bias)"),
    ("batch norm without affine on 8x4x5", "batch_norm(x, None, None, None, None, training=True)"),
    ("instance norm 2d on 4x16x20x20", "instance_norm(x)"),
    ("instance norm with affine, eps 1e-6, 4x16x20x20", "instance_norm(x, None, None, weight, bias, eps=1e-6)"),
    ("组归一化 分组 4 8x16x10x10", "group_norm(x, 4, weight, bias)"),
    ("分组归一化 8 组 8x64x32x32", "group_norm(x, 8, weight, bias)"),
])
def test_channel_norms_in_words(words, typed):
    spec, _ = parse_request(words)
    assert ir.parse(spec["expression"]) == ir.parse(typed)
    shapes = {i["name"]: i["shapes"][0] for i in spec["inputs"]}
    assert all(shapes[n] == [shapes["x"][1]] for n in shapes if n != "x")
    assert spec["inputs"][-1]["domain"] == "normal" and all(
        i["domain"] == "positive" for i in spec["inputs"] if i["name"] == "running_var")


@pytest.mark.parametrize("words, says", [
    ("group norm over 32 groups", "needs the input's shape"),
    ("group norm on 8x64x32x32", "needs its number of groups"),
])
def test_channel_norm_words_refused_say_what_works(words, says):
    with pytest.raises(GenerationError, match=says):
        parse_request(words)
