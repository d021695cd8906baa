"""The fused-reduction family (bot.ops.fused): expressions holding reductions that keep their dim (or
reduce every element), and prod, var, std, logsumexp and norm; generated and run under Triton's
interpreter against torch on float64 inputs, in float32 and float16, whole-row and split."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from generated import load

from bot import ir, lower_torch
from bot.ops import fused
from bot.request import parse_request
from bot.spec import SpecError, parse_expression, validate
from runner import protocol

# (expression as pasted, shapes, torch's own computation over float64 tensors t)
CASES = [
    ("x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)", {"x": [3, 5, 4, 6]},
     lambda t: t["x"] / torch.sqrt(torch.mean(t["x"] ** 2, dim=1, keepdim=True) + 1e-5)),
    ("x / torch.norm(x, p='fro')", {"x": [7, 9, 5]}, lambda t: t["x"] / torch.norm(t["x"], p="fro")),
    ("x / torch.mean(torch.abs(x), dim=1, keepdim=True)", {"x": [6, 301]},
     lambda t: t["x"] / torch.mean(torch.abs(t["x"]), dim=1, keepdim=True)),
    ("F.normalize(x, p=2.0, dim=-1)", {"x": [5, 37]}, lambda t: F.normalize(t["x"], dim=-1)),
    ("torch.exp(x - torch.amax(x, dim=0, keepdim=True)) / torch.sum(torch.exp(x - torch.amax(x, dim=0, keepdim=True)), "
     "dim=0, keepdim=True)", {"x": [33, 10]}, lambda t: torch.softmax(t["x"], dim=0)),
    ("(x - x.mean(dim=2, keepdim=True)) * y", {"x": [3, 4, 11], "y": [3, 4, 11]},
     lambda t: (t["x"] - t["x"].mean(dim=2, keepdim=True)) * t["y"]),
    ("x - torch.amax(x, 1, keepdim=True) + b", {"x": [4, 9, 5], "b": [9, 1]},
     lambda t: t["x"] - torch.amax(t["x"], 1, keepdim=True) + t["b"]),
    ("torch.var(x, dim=1)", {"x": [6, 50, 3]}, lambda t: torch.var(t["x"], dim=1)),
    ("torch.std(x, dim=-1, correction=0, keepdim=True)", {"x": [5, 70]},
     lambda t: torch.std(t["x"], dim=-1, correction=0, keepdim=True)),
    ("torch.logsumexp(x * 3.0, dim=0)", {"x": [40, 7]}, lambda t: torch.logsumexp(t["x"] * 3, dim=0)),
    ("torch.prod(x, dim=1)", {"x": [3, 8, 5]}, lambda t: torch.prod(t["x"], dim=1)),
    ("torch.linalg.vector_norm(x, ord=3.0, dim=1)", {"x": [4, 13]},
     lambda t: torch.linalg.vector_norm(t["x"], ord=3, dim=1)),
    ("x.norm(p=float('inf'), dim=0, keepdim=True)", {"x": [9, 4]}, lambda t: t["x"].norm(p=float("inf"), dim=0,
                                                                                          keepdim=True)),
    ("torch.var(x)", {"x": [6, 11]}, lambda t: torch.var(t["x"])),
    ("torch.mean(x, dim=[2, 3], keepdim=True) + x", {"x": [2, 3, 5, 7]},         # neighbouring dims at once
     lambda t: torch.mean(t["x"], dim=[2, 3], keepdim=True) + t["x"]),
    ("torch.amax(x, dim=(0, 1))", {"x": [4, 3, 9]}, lambda t: torch.amax(t["x"], dim=(0, 1))),
    # b steps through the dims after the reduced one unlike the full shape: copied out to it at launch
    ("x * torch.sum(x + b, dim=1, keepdim=True)", {"x": [4, 3, 5, 2], "b": [4, 1, 5, 1]},
     lambda t: t["x"] * torch.sum(t["x"] + t["b"], dim=1, keepdim=True)),
    ("F.cosine_similarity(x, y)", {"x": [5, 37], "y": [5, 37]}, lambda t: F.cosine_similarity(t["x"], t["y"])),
    # y broadcast over the rows (not over the reduced dim): each row of x against y's one row
    ("torch.cosine_similarity(x, y, dim=-1, eps=1e-6)", {"x": [6, 37], "y": [1, 37]},
     lambda t: torch.cosine_similarity(t["x"], t["y"], dim=-1, eps=1e-6)),
    # a reduction of a value already reduced over its dim (KernelBench level 2's 51 and 80) is that value
    ("F.gelu(torch.logsumexp(torch.mean(x, dim=1, keepdim=True), dim=1, keepdim=True)) + x", {"x": [6, 37]},
     lambda t: F.gelu(torch.logsumexp(torch.mean(t["x"], dim=1, keepdim=True), dim=1, keepdim=True)) + t["x"]),
    ("x.amax(1, keepdim=True).norm(dim=1, keepdim=True) + x.amax(1, keepdim=True).var(1, correction=0, keepdim=True)",
     {"x": [6, 37]}, lambda t: t["x"].amax(1, keepdim=True).norm(dim=1, keepdim=True)
     + t["x"].amax(1, keepdim=True).var(1, correction=0, keepdim=True)),
]


@pytest.mark.parametrize("code, collapsed", [
    ("logsumexp(mean(x, dim=1, keepdim=True), dim=1, keepdim=True) + y", "mean(x, dim=1, keepdim=True) + y"),
    ("norm(max(x, dim=0, keepdim=True), dim=0, keepdim=True) * x", "abs(max(x, dim=0, keepdim=True)) * x"),
    ("var(sum(x, dim=1, keepdim=True), dim=1, correction=0, keepdim=True) + x",
     "sum(x, dim=1, keepdim=True) - sum(x, dim=1, keepdim=True) + x"),
])
def test_a_reduction_of_a_value_reduced_over_its_dim_is_that_value(code, collapsed):
    assert ir.parse(code, as_written=True) == ir.parse(collapsed, as_written=True)


@pytest.mark.parametrize("code, says", [
    ("sum(mean(x, dim=1, keepdim=True), dim=0, keepdim=True) * x", "one reduced dim"),
    # torch gives nan (one element, correction 1): left to the kernel of its own that reduces it
    ("var(mean(x, dim=1, keepdim=True), dim=1, keepdim=True) + x", "already reduced"),
])
def test_a_reduction_of_a_reduced_value_that_is_not_that_value_is_left_as_written(code, says):
    with pytest.raises(ir.IRError, match=says):
        ir.check_single(ir.parse(code, as_written=True))


def spec_of(code: str, shapes: dict, dtypes=("float32", "float16")) -> dict:
    node = ir.parse(code, as_written=True)
    return validate({"name": "fused_op", "expression": ir.to_text(node),
                     "inputs": [{"name": n, "dtypes": list(dtypes), "shapes": [s], "domain": d}
                                for n, s in shapes.items()
                                for d in [ir.domains(node).get(n, "normal")]]})


def tensors_for(spec: dict) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    out = {}
    for i in spec["inputs"]:
        t = torch.randn(i["shapes"][0], generator=gen)
        out[i["name"]] = t if i["domain"] == "normal" else t.sign() * (0.5 + t.abs())
    return out


@pytest.mark.parametrize("code, shapes, torch_fn", CASES, ids=[c[0][:60] for c in CASES])
def test_every_expression_matches_torch_whole_and_split(tmp_path, code, shapes, torch_fn):
    spec = spec_of(code, shapes)
    node = parse_expression(spec)
    assert ir.kind(node) == "fused" and ir.parse(ir.to_text(node)) == node
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), "fused_op")
    kernel = getattr(load(tmp_path, "kernel.py", fused.kernel_source(spec, node, {})), "fused_op")
    tensors = tensors_for(spec)
    wide = {n: t.double() for n, t in tensors.items()}
    torch.testing.assert_close(reference(*wide.values()), torch_fn(wide), rtol=1e-10, atol=1e-10)
    length = max(shapes["x"])
    for dtype in ("float32", "float16"):
        args = [t.to(getattr(torch, dtype)) for t in tensors.values()]
        want = reference(*[a.double() for a in args])
        rtol, atol = protocol.tolerance(dtype, length)
        # every config in float32 (16-deep chunks split short rows too); float16 with the default
        for config in (None, *fused.CONFIGS) if dtype == "float32" else (None,):
            got = kernel(*args, config=config)
            assert got.shape == want.shape and got.dtype == args[0].dtype, (dtype, config)
            err = (got.double() - want).abs()
            assert bool((err <= atol + rtol * want.abs()).all()), f"{dtype} {config}: max err {err.max():.3g}"


@pytest.mark.parametrize("code, shapes, says", [
    ("x / x.sum(dim=1)", {"x": [4, 5]}, "do not broadcast"),      # as in torch: [4, 5] / [4]
    ("x / x.sum(dim=2, keepdim=True)", {"x": [4, 5]}, "over dim 2, but the input has 2 dims"),
    ("torch.norm(x, p=0)", {"x": [4, 5]}, "norm of order 0 is not supported"),
    ("torch.logsumexp(x)", {"x": [4, 5]}, "logsumexp needs a dim"),
    ("torch.sum(x, dim=(0, 2))", {"x": [4, 5, 6]}, "reduces neighbouring dims"),
    # torch expands y over dim 1 before its norm: sqrt(8) times |y|, not |y|
    ("F.cosine_similarity(x, y)", {"x": [4, 8], "y": [4, 1]}, "the full size on the dims they reduce"),
])
def test_what_cannot_be_lowered_is_refused_naming_it(code, shapes, says):
    with pytest.raises((SpecError, ir.IRError)) as e:
        spec_of(code, shapes)
    assert says in str(e.value)


def test_cosine_similarity_clamps_each_norm_as_torch_does(tmp_path):
    # torch divides each input by its own norm, at least eps: rows of tiny, zero and ordinary norms
    spec = spec_of("F.cosine_similarity(x, y, dim=1, eps=1e-8)", {"x": [4, 9], "y": [4, 9]}, ("float32",))
    node = parse_expression(spec)
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), "fused_op")
    kernel = getattr(load(tmp_path, "kernel.py", fused.kernel_source(spec, node, {})), "fused_op")
    x, y = torch.randn(4, 9, dtype=torch.float64), torch.randn(4, 9, dtype=torch.float64)
    x[0] *= 1e-10
    y[1] *= 3e-9
    x[2] = 0.0
    want = F.cosine_similarity(x, y, dim=1, eps=1e-8)
    torch.testing.assert_close(reference(x, y), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(kernel(x.float(), y.float()).double(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("case", [0, 1, 2, 7, 9])
def test_on_the_gpu_every_dtype_matches_torch(tmp_path, dtype, case):
    code, shapes, torch_fn = CASES[case]
    shapes = {n: [s[0] * 64, *s[1:]] for n, s in shapes.items()}
    spec = spec_of(code, shapes, (dtype,))
    kernel = getattr(load(tmp_path, "kernel.py", fused.kernel_source(spec, parse_expression(spec), {})), "fused_op")
    tensors = {n: t.cuda().to(getattr(torch, dtype)) for n, t in tensors_for(spec).items()}
    want = torch_fn({n: t.double() for n, t in tensors.items()})
    got = kernel(*tensors.values())
    rtol, atol = protocol.tolerance(dtype, max(shapes["x"]))
    err = (got.double() - want).abs()
    assert bool((err <= atol + rtol * want.abs()).all()), f"max err {err.max():.3g}"


@pytest.mark.parametrize("request_text, torch_call", [
    ("x.amax(dim=(1, 3), keepdim=True) with x 2x3x5x4 fp32", lambda x: x.amax(dim=(1, 3), keepdim=True)),
    ("x - x.mean(dim=(0, 2), keepdim=True) with x 3x4x5 fp32", lambda x: x - x.mean(dim=(0, 2), keepdim=True)),
    ("torch.logsumexp(x, dim=(-1, 1)) with x 2x3x4x5 fp32", lambda x: torch.logsumexp(x, dim=(-1, 1))),
])
def test_a_request_over_dims_that_are_not_neighbours_permutes_them_last(tmp_path, request_text, torch_call):
    # the reader writes the permute into the spec (a layout kernel's copy), then one run of dims is reduced
    spec, _ = parse_request(request_text)
    assert "permute(x, " in spec["expression"]
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    x = torch.randn(spec["inputs"][0]["shapes"][0])
    torch.testing.assert_close(kernel(x), torch_call(x), rtol=1e-4, atol=1e-4)
