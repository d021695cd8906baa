"""Views (bot.ops.view): unsqueeze, squeeze, flatten, reshape to unit dims. No kernel of their own: a
chain stage the entry takes (`stage0 = A.unsqueeze(1)`), the next kernel reading it as an input.
Generated and run under Triton's interpreter against torch on float64 inputs."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from generated import load

from bot import ir, lower_torch
from bot.spec import parse_expression, validate
from runner import integrity, protocol

# (expression, shapes, kernels, torch's own computation over float64 tensors t)
CASES = [
    ("A.unsqueeze(1) * B", {"A": [37], "B": [37, 29]}, 1, lambda t: t["A"].unsqueeze(1) * t["B"]),
    ("max_pool1d(relu(x @ w).unsqueeze(1), 4).squeeze(1)", {"x": [6, 20], "w": [20, 33]}, 2,
     lambda t: F.max_pool1d(torch.relu(t["x"] @ t["w"]).unsqueeze(1), 4).squeeze(1)),
    ("sum(x.flatten(1), dim=1) + b.view(-1)", {"x": [5, 3, 7], "b": [5, 1]}, 2,
     lambda t: t["x"].flatten(1).sum(1) + t["b"].view(-1)),
    ("exp(x - c.reshape(1, -1, 1)).squeeze()", {"x": [4, 6, 1], "c": [6]}, 1,
     lambda t: torch.exp(t["x"] - t["c"].reshape(1, -1, 1)).squeeze()),
    # sizes naming the tensor's own dims, as pasted modules write them (b, c, h, w = x.shape)
    ("relu(x).view(relu(x).size(0), -1) @ w", {"x": [5, 3, 4], "w": [12, 7]}, 2,
     lambda t: torch.relu(t["x"]).view(5, -1) @ t["w"]),
    ("softmax(relu(x).view(relu(x).shape[0], relu(x).shape[1] * relu(x).shape[2], -1)).view_as(x) * 2.0",
     {"x": [2, 3, 4, 5]}, 3, lambda t: torch.softmax(torch.relu(t["x"]).view(2, 12, 5), -1).view_as(t["x"]) * 2),
    ("sum(exp(x).reshape(-1, exp(x).size(-2), exp(x).size(-1)), dim=0)", {"x": [2, 3, 4, 5]}, 2,
     lambda t: torch.exp(t["x"]).reshape(-1, 4, 5).sum(0)),
    # slices, selects and pieces (bounds as numbers, from the end, steps; chunk, split, unbind, narrow)
    ("silu(x.chunk(2, dim=-1)[0]) * x.chunk(2, dim=-1)[1]", {"x": [5, 14]}, 1,
     lambda t: F.silu(t["x"].chunk(2, -1)[0]) * t["x"].chunk(2, -1)[1]),
    ("relu(x[:, :4]) + x[:, 4:] * x.split(2, dim=1)[1].sum(dim=1, keepdim=True)", {"x": [5, 8]}, 2,
     lambda t: torch.relu(t["x"][:, :4]) + t["x"][:, 4:] * t["x"].split(2, 1)[1].sum(1, keepdim=True)),
    ("sigmoid(x[1:-1, ..., 0]) * sum(x[1:-1, :, ::3], dim=-1) + x.unbind(2)[2][1:-1]", {"x": [4, 6, 5]}, 2,
     lambda t: torch.sigmoid(t["x"][..., 0][1:-1]) * t["x"][1:-1, :, ::3].sum(-1) + t["x"].unbind(2)[2][1:-1]),
    ("cumsum(x.narrow(1, 0, x.size(1) - 1), dim=1) * x.select(1, 0).unsqueeze(1)", {"x": [3, 7]}, 2,
     lambda t: torch.cumsum(t["x"].narrow(1, 0, 6), 1) * t["x"][:, 0:1]),
    # None in an index: a unit dim where it stands (an outer product, an SE block's channel scale)
    ("x[:, None] * y[None, :]", {"x": [5], "y": [7]}, 1, lambda t: t["x"][:, None] * t["y"][None, :]),
    ("x * s[:, :, None, None]", {"x": [2, 3, 4, 5], "s": [2, 3]}, 1, lambda t: t["x"] * t["s"][:, :, None, None]),
    ("x[1:, None, 0] + y[..., 0, None]", {"x": [4, 3, 5], "y": [3, 5, 2]}, 1,
     lambda t: t["x"][1:, None, 0] + t["y"][..., 0, None]),
    ("relu(x[None, ..., None]) * 2.0", {"x": [3, 4]}, 1, lambda t: torch.relu(t["x"][None, ..., None]) * 2),
    # another tensor's first dims and the rest joined: an attention's heads merged back (B, T, _ = x.shape)
    ("relu(y).transpose(1, 2).reshape(x.shape[0], x.shape[1], -1) * 2.0 + x", {"x": [2, 3, 20], "y": [2, 4, 3, 5]}, 2,
     lambda t: torch.relu(t["y"]).transpose(1, 2).reshape(2, 3, -1) * 2 + t["x"]),
    # and another tensor's whole shape, dim by dim
    ("relu(y).view(x.shape[0], x.shape[1]) + x", {"x": [6, 10], "y": [60]}, 2,
     lambda t: torch.relu(t["y"]).view(6, 10) + t["x"]),
    # broadcasts written out: expand (-1 keeps a dim, new dims lead) and expand_as
    ("x[:, :1].expand(-1, 40) + x", {"x": [16, 40]}, 1, lambda t: t["x"][:, :1].expand(-1, 40) + t["x"]),
    ("x.unsqueeze(0).expand(4, -1, -1) * y", {"x": [3, 5], "y": [4, 3, 5]}, 1,
     lambda t: t["x"].unsqueeze(0).expand(4, -1, -1) * t["y"]),
    ("relu(b).expand_as(x) + x", {"b": [5, 1], "x": [5, 9]}, 2, lambda t: torch.relu(t["b"]).expand_as(t["x"]) + t["x"]),
    # sizes as numbers, written for the shapes given: those shapes stay
    ("softmax(relu(x).view(-1, 6), dim=-1)", {"x": [2, 3, 6]}, 2, lambda t: torch.softmax(torch.relu(t["x"]).view(-1, 6), -1)),
    # sizes read off inputs' shapes in each case: a view to other sizes, repeat_kv's expand and reshape,
    # a gate viewed back to unit dims
    ("relu(x).view(x.size(1), x.size(0)) + y", {"x": [4, 6], "y": [6, 4]}, 2,
     lambda t: torch.relu(t["x"]).view(6, 4) + t["y"]),
    ("(relu(k)[:, :, None, :, :].expand(k.shape[0], k.shape[1], 2, k.shape[2], k.shape[3]).reshape(k.shape[0], "
     "k.shape[1] * 2, k.shape[2], k.shape[3]) * q)", {"k": [2, 3, 5, 4], "q": [2, 6, 5, 4]}, 2,
     lambda t: torch.repeat_interleave(torch.relu(t["k"]), 2, dim=1) * t["q"]),
    ("relu(x).view(x.shape[0], x.shape[1] // 2, 2, x.shape[2] // 3, 3).permute(0, 1, 3, 2, 4).reshape(-1, 2, 3) * 2.0",
     {"x": [2, 4, 9]}, 3,
     lambda t: torch.relu(t["x"]).view(2, 2, 2, 3, 3).permute(0, 1, 3, 2, 4).reshape(-1, 2, 3) * 2.0),
    ("relu(x).reshape(x.shape[0] // 2, -1) * 2.0 + relu(x).view(x.size(0) * 2, -1).sum()", {"x": [4, 6]}, 3,
     lambda t: torch.relu(t["x"]).reshape(2, -1) * 2.0 + torch.relu(t["x"]).view(8, -1).sum()),
    ("relu(x)[:, [-1]] * y + relu(x)[:, [2]]", {"x": [4, 6], "y": [4, 1]}, 2,
     lambda t: torch.relu(t["x"])[:, [-1]] * t["y"] + torch.relu(t["x"])[:, [2]]),
    ("x * sigmoid(relu(g).view(x.size(0), x.size(1), 1, 1))", {"x": [2, 8, 3, 5], "g": [2, 8]}, 2,
     lambda t: t["x"] * torch.sigmoid(torch.relu(t["g"])).view(2, 8, 1, 1)),
]


def raw_spec(expression: str, shapes: dict, dtypes=("float32", "float16")) -> dict:
    return validate({"name": "view_op", "expression": expression,
                     "inputs": [{"name": n, "dtypes": list(dtypes), "shapes": [s]} for n, s in shapes.items()]})


@pytest.mark.parametrize("expression, shapes, kernels, torch_fn", CASES, ids=[c[0][:40] for c in CASES])
def test_a_view_between_kernels_matches_torch(tmp_path, expression, shapes, kernels, torch_fn):
    spec = raw_spec(expression, shapes)
    node = parse_expression(spec)
    source = ir.kernel_source(spec, node, {})
    assert integrity.check_kernel(source, "view_op") == []
    assert f"as {kernels} kernel{'s' * (kernels > 1)}:" in source
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), "view_op")
    kernel = getattr(load(tmp_path, "kernel.py", source), "view_op")
    gen = torch.Generator().manual_seed(0)
    tensors = {n: torch.randn(s, generator=gen) for n, s in shapes.items()}
    torch.testing.assert_close(reference(*[t.double() for t in tensors.values()]),
                               torch_fn({n: t.double() for n, t in tensors.items()}), rtol=1e-10, atol=1e-10)
    for dtype in ("float32", "float16"):
        args = [t.to(getattr(torch, dtype)) for t in tensors.values()]
        want, got = reference(*[a.double() for a in args]), kernel(*args)
        assert got.shape == want.shape == torch.Size(ir.output_shape(node, shapes)) and got.dtype == args[0].dtype
        rtol, atol = protocol.tolerance(dtype, 20, matmul=True)
        assert bool(((got.double() - want).abs() <= atol + rtol * want.abs()).all()), dtype


def test_views_print_as_they_parse_back():
    for text in ("(A.unsqueeze(1) * B)", "relu(x).flatten(1, -1)", "((a + b).reshape(1, -1, 1) * c)",
                 "relu(y).reshape_as(x)", "(relu(x)[:, 1:-1:2] * y)", "(relu(x)[..., :4, :] * y)",
                 "(relu(x).chunk(3, dim=-1)[2] * y)", "(relu(x).select(-1, 0) * y)"):
        node = ir.parse(text, as_written=True)
        assert ir.to_text(node) == text and ir.parse(ir.to_text(node), as_written=True) == node


def test_a_view_keeps_its_operands_indices():
    spec = raw_spec("argmax(x, dim=1).unsqueeze(1)", {"x": [4, 9]}, ("float32",))
    node = parse_expression(spec)
    assert ir.output_dtype(node, "float32") == "int64" and spec["outputs"][0]["shapes"] == [[4, 1]]


@pytest.mark.parametrize("expression, message", [
    ("x.unsqueeze(1)", "only views its input"),
    ("relu(x).view(n, -1)", r"reshape/view to \(n, -1\) is not supported"),
    ("relu(x).view(0, -1)", r"reshape/view to \(0, -1\) is not supported"),
    ("x.view(-1, -1) * 2.0", "is not supported"),
    ("relu(x).unsqueeze(d)", "takes dim as an integer"),
    # dims out of order, counted from 0 after a -1 (it would take what dims x has beyond), another tensor's
    # dims but not all of them in order: each names what is read
    ("relu(x).view(relu(x).size(0), -1, relu(x).size(3))", "join neighbouring dims"),
    # several index lists (or one beside an integer) index jointly, as torch's advanced indexing does
    ("x[[0], [1]] * 2.0", "unsupported indexing"),
    ("x[0, :, [1]] * 2.0", "unsupported indexing"),
    ("x[i, j] * 2.0", "slices with number bounds"),
    ("x[:, 0:n] * 2.0", "bounds must be numbers"),
    ("x.chunk(2, dim=1)[-1] * 2.0", "by its position from 0"),
    ("x.narrow(1, 0, n) * 2.0", "narrow takes a length as a number"),
    ("x.expand(n, 4) * 2.0", "expand is read with its sizes as whole numbers"),
])
def test_views_refused_say_what_works(expression, message):
    with pytest.raises(ir.IRError, match=message):
        ir.parse(expression, as_written=True)


def test_a_view_by_numbers_keeps_the_shapes_it_was_written_for():
    spec = raw_spec("softmax(relu(x).view(-1, 6), dim=-1)", {"x": [2, 3, 6]})
    fixed, _ = ir.size_rules(parse_expression(spec), [{"x": [2, 3, 6]}])
    assert {2, 3, 6} <= fixed


def test_a_shape_a_view_cannot_take_is_named():
    with pytest.raises(Exception, match="cannot be viewed"):
        raw_spec("relu(x).view(1, 1)", {"x": [3, 5]})
    with pytest.raises(Exception, match="gives fewer than 4 pieces"):
        raw_spec("relu(x.chunk(4, dim=1)[3])", {"x": [3, 5]})          # 5 in chunks of 2: 3 chunks
    with pytest.raises(Exception, match="out of range"):
        raw_spec("relu(x.select(1, 5))", {"x": [3, 5]})
    with pytest.raises(Exception, match=r"cannot be expanded to \(3, 4\)"):
        raw_spec("x.expand(3, 4) * 2.0", {"x": [3, 5]})
    with pytest.raises(Exception, match="a new leading dim takes a size"):
        raw_spec("x.expand(-1, 3, 5) * 2.0", {"x": [3, 5]})


def test_a_slice_keeps_the_size_of_the_dim_it_cuts_and_of_its_piece():
    spec = raw_spec("relu(x[:, :4]) + y", {"x": [3, 10], "y": [3, 4]})
    assert {10, 4} <= set(spec["fixed_sizes"])
    spec = raw_spec("relu(y).view_as(x) + x", {"x": [6, 10], "y": [60]})      # element counts stay equal
    assert {6, 10, 60} <= set(spec["fixed_sizes"])


@pytest.mark.parametrize("expression, shapes, shape", [
    # sizes naming a tensor's first dims, no -1: torch's view drops the unit dims after them
    ("adaptive_avg_pool2d(x, output_size=1).view(adaptive_avg_pool2d(x, output_size=1).size(0), "
     "adaptive_avg_pool2d(x, output_size=1).size(1)) + y", {"x": [2, 3, 4, 5], "y": [2, 3]}, [2, 3]),
    ("relu(y).view(x.size(0), x.size(1)) + 1.0", {"x": [2, 3, 1], "y": [6]}, [2, 3]),
    ("x.narrow(1, -2, 2) * 2.0", {"x": [3, 5]}, [3, 2]),          # from 2 before the end to the end
    ("x.split(3, dim=1)[1] * 2.0", {"x": [3, 5]}, [3, 2]),        # the last piece is what is left
    ("x.split([1, 3, 1], dim=1)[1] * 2.0", {"x": [3, 5]}, [3, 3]),
])
def test_views_take_torchs_shapes(expression, shapes, shape):
    node = ir.parse(expression, as_written=True)
    assert ir.output_shape(node, shapes) == shape and ir.parse(ir.to_text(node), as_written=True) == node


@pytest.mark.parametrize("expression, shape, text, out", [
    # a dim split by a constant: heads out of a hidden dim, as attention code writes it
    ("relu(x.view(x.size(0), x.size(1), 4, -1))", [2, 5, 32], "relu(x.unflatten(2, (4, -1)))", [2, 5, 4, 8]),
    ("relu(x.view(x.shape[0], x.shape[1], 4, x.shape[2] // 4))", [2, 5, 32], "relu(x.unflatten(2, (4, -1)))",
     [2, 5, 4, 8]),
    ("relu(x.view(x.size(0), 4, 8, x.size(2)))", [2, 32, 16], "relu(x.unflatten(1, (4, 8)))", [2, 4, 8, 16]),
    ("relu(x.unflatten(-1, (-1, 2)))", [3, 8], "relu(x.unflatten(-1, (-1, 2)))", [3, 4, 2]),
])
def test_a_dim_split_by_a_constant_is_an_unflatten(expression, shape, text, out):
    node = ir.parse(expression, as_written=True)
    assert ir.to_text(node) == text and ir.output_shape(node, {"x": shape}) == out


@pytest.mark.parametrize("expression, shape, says", [
    ("relu(x.view(x.size(0), -1, 4))", [2, 5, 32], "would merge the others"),       # torch merges dims 1 and 2
    ("relu(x.view(x.size(0), x.size(1), 4, -1))", [2, 5, 30], "do not split into (4, -1)"),
    ("relu(x.unflatten(1, (3, 3)))", [2, 10], "do not split into (3, 3)"),
])
def test_splits_that_do_not_fit_are_refused(expression, shape, says):
    with pytest.raises(ir.IRError, match=re.escape(says)):
        ir.output_shape(ir.parse(expression, as_written=True), {"x": shape})


@pytest.mark.parametrize("expression, shapes, says", [
    ("x.narrow(1, 0, 10) * 2.0", {"x": [3, 5]}, "runs past dim 1's size 5"),
    ("x.split(3, dim=1)[2] * 2.0", {"x": [3, 5]}, "gives fewer than 3 pieces"),
    ("x.split([2, 2], dim=1)[0] * 2.0", {"x": [3, 5]}, "adding up to 4 do not cover dim 1 of size 5"),
    ("sum(x)[0] + y", {"x": [3, 5], "y": [2]}, "0-d tensor"),
])
def test_views_torch_refuses_are_refused(expression, shapes, says):
    with pytest.raises(ir.IRError, match=says):
        ir.output_shape(ir.parse(expression, as_written=True), shapes)


def test_indexing_a_tuple_a_function_returns_is_not_a_slice():
    with pytest.raises(ir.IRError, match="max gives a tuple"):
        ir.parse("torch.max(x, dim=1)[0]", as_written=True)
