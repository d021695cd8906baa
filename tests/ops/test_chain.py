"""Chains (bot.ops.chain): expressions no one family lowers whole, split into the fewest stages the
families' rules allow; kernel.py runs them in order. Generated and run under Triton's interpreter
against torch on float64 inputs, in float32 and float16 (stages between kernels keep float32)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from generated import load

from bot import ir, lower_torch
from bot.ops import chain
from bot.spec import parse_expression, validate
from runner import harness, integrity

X, W = [2, 4, 7, 6], [8, 4, 3, 3]
# (expression, shapes, stages, torch's own computation over float64 tensors t)
CASES = [
    ("softmax(conv2d(x, w))", {"x": X, "w": W}, 2, lambda t: torch.softmax(F.conv2d(t["x"], t["w"]), -1)),
    ("conv2d(x, w) + conv2d(x, v)", {"x": X, "w": W, "v": W}, 2,
     lambda t: F.conv2d(t["x"], t["w"]) + F.conv2d(t["x"], t["v"])),
    ("conv2d(x, w, padding=1) + x", {"x": [2, 8, 5, 6], "w": [8, 8, 3, 3]}, 2,
     lambda t: F.conv2d(t["x"], t["w"], padding=1) + t["x"]),
    ("conv2d(x * 2.0, w)", {"x": X, "w": W}, 2, lambda t: F.conv2d(t["x"] * 2, t["w"])),
    ("relu(group_norm(conv2d(x, w, b), 2, g, gb, eps=1e-05))", {"x": X, "w": W, "b": [8], "g": [8], "gb": [8]}, 3,
     lambda t: torch.relu(F.group_norm(F.conv2d(t["x"], t["w"], t["b"]), 2, t["g"], t["gb"]))),
    ("max_pool2d(relu(conv2d(x, w)), kernel_size=2)", {"x": X, "w": W}, 2,
     lambda t: F.max_pool2d(torch.relu(F.conv2d(t["x"], t["w"])), 2)),
    # swiglu's two products of one x, and a product of a product
    ("silu(matmul(x, w1)) * matmul(x, w2)", {"x": [9, 20], "w1": [20, 24], "w2": [20, 24]}, 2,
     lambda t: F.silu(t["x"] @ t["w1"]) * (t["x"] @ t["w2"])),
    ("matmul(matmul(x, w1), w2)", {"x": [9, 20], "w1": [20, 24], "w2": [24, 7]}, 2,
     lambda t: (t["x"] @ t["w1"]) @ t["w2"]),
    # a reduction of inputs the rest does not read may reduce rows of another shape: its own stage
    ("min(matmul(a, b), dim=1, keepdim=True) + c", {"a": [9, 20], "b": [20, 24], "c": [1, 5, 1, 1]}, 3,
     lambda t: torch.amin(t["a"] @ t["b"], dim=1, keepdim=True) + t["c"]),
    ("sum(matmul(a, b) / 2.0, dim=1, keepdim=True) * 1.5", {"a": [9, 20], "b": [20, 24]}, 2,
     lambda t: torch.sum(t["a"] @ t["b"] / 2, dim=1, keepdim=True) * 1.5),
    ("exp(conv2d(x, w) - max(conv2d(x, w), dim=1, keepdim=True)) / sum(exp(conv2d(x, w) - max(conv2d(x, w), dim=1, "
     "keepdim=True)), dim=1, keepdim=True)", {"x": X, "w": W}, 2, lambda t: torch.softmax(F.conv2d(t["x"], t["w"]), 1)),
    # constants made in the expression (bot.ops.fill): a stage the entry allocates, no kernel of its own
    ("softmax(where(torch.triu(torch.ones(6, 6), diagonal=1) != 0.0, -inf, x))", {"x": [3, 6, 6]}, 3,
     lambda t: torch.softmax(t["x"].masked_fill(torch.triu(torch.ones(6, 6, dtype=torch.bool), 1), -torch.inf), -1)),
    ("where(~torch.ones(5, 5, dtype=torch.bool).tril(), 0.0, x) * 2.0", {"x": [5, 5]}, 4,
     lambda t: t["x"].masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), 0) * 2),
    ("matmul(a, torch.ones(20, 1)) + torch.full((1, 1), 0.5)", {"a": [9, 20]}, 3,
     lambda t: t["a"] @ torch.ones(20, 1, dtype=torch.float64) + 0.5),
    ("matmul(a + torch.eye(6), b)", {"a": [6, 6], "b": [6, 5]}, 5,
     lambda t: (t["a"] + torch.eye(6, dtype=torch.float64)) @ t["b"]),
    ("x * torch.tensor([[0.5, -1.0, 2.0]]) + torch.arange(1, 4) * torch.linspace(0, 1, 3)", {"x": [4, 3]}, 5,
     lambda t: t["x"] * torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64)
     + torch.arange(1, 4, dtype=torch.float64) * torch.linspace(0, 1, 3, dtype=torch.float64)),
    # indices counted by a constant stage (CLIP's labels = torch.arange(n)), read as int64 by the loss
    ("cross_entropy(x, torch.arange(6)) + nll_loss(log_softmax(x, dim=-1), torch.arange(6))", {"x": [6, 9]}, 6,
     lambda t: torch.nn.functional.cross_entropy(t["x"], torch.arange(6))
     + torch.nn.functional.nll_loss(torch.log_softmax(t["x"], -1), torch.arange(6))),
    ("cross_entropy(x, torch.arange(6), reduction='none') * 2.0", {"x": [6, 9]}, 4,
     lambda t: torch.nn.functional.cross_entropy(t["x"], torch.arange(6), reduction="none") * 2.0),
    # numbers computed in the expression (smooth L1's 0.5 * beta) stay inside the kernel that reads them
    ("smooth_l1_loss(a, amax(q, dim=1), beta=0.5)", {"a": [7], "q": [7, 5]}, 2,
     lambda t: torch.nn.functional.smooth_l1_loss(t["a"], t["q"].amax(1), beta=0.5)),
    # rmsnorm's weight gradient: the per-row mean is the stage, not the full-size product around it
    ("sum(g * x * rsqrt(mean(x * x, dim=-1, keepdim=True) + 1e-06), dim=0)", {"g": [9, 33], "x": [9, 33]}, 2,
     lambda t: torch.sum(t["g"] * t["x"] * torch.rsqrt((t["x"] * t["x"]).mean(-1, keepdim=True) + 1e-6), 0)),
]


def test_a_reduction_inside_an_operand_is_staged_instead_of_the_operand():
    node = ir.parse(CASES[-1][0])
    first, last = ir.stages(node)
    assert first.node.op == "mean" and ir.output_shape(first.node, CASES[-1][1]) == [9, 1]
    assert last.node.op == "sum" and "mean" not in ir.to_text(last.node)


def raw_spec(expression: str, shapes: dict, dtypes=("float32", "float16")) -> dict:
    return validate({"name": "chain_op", "expression": expression,
                     "inputs": [{"name": n, "dtypes": list(dtypes), "shapes": [s]} for n, s in shapes.items()]})


def generated(tmp_path, spec: dict, node: ir.Node):
    """(reference, kernel) functions of the spec's files, the kernel's past the integrity check."""
    source = ir.kernel_source(spec, node, {})
    assert integrity.check_kernel(source, "chain_op") == []
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), "chain_op")
    return reference, getattr(load(tmp_path, "kernel.py", source), "chain_op")


def random_inputs(shapes: dict) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {n: torch.randn(s, generator=gen) for n, s in shapes.items()}


@pytest.mark.parametrize("expression, shapes, stages, torch_fn", CASES, ids=[c[0][:50] for c in CASES])
def test_every_chain_matches_torch_in_its_fewest_stages(tmp_path, expression, shapes, stages, torch_fn):
    spec = raw_spec(expression, shapes)
    node = parse_expression(spec)
    assert ir.kind(node) == "chain" and len(ir.stages(node)) == stages and spec["chain"] == stages
    reference, kernel = generated(tmp_path, spec, node)
    tensors = random_inputs(shapes)
    wide = {n: t.double() for n, t in tensors.items()}
    torch.testing.assert_close(reference(*wide.values()), torch_fn(wide), rtol=1e-10, atol=1e-10)
    for dtype in ("float32", "float16"):
        args = [t.to(getattr(torch, dtype)) for t in tensors.values()]
        want = reference(*[a.double() for a in args])
        got = kernel(*args)
        assert got.shape == want.shape and got.dtype == args[0].dtype
        # the judge's rule for a chain: stored intermediates round at the scale of what later stages sum
        check = harness.compare(got, want, args[0].dtype, max(spec.get("reduce", {}).get("lengths", [1])),
                                matmul=True, scaled=True)
        assert not check.problem, f"{dtype}: {check.problem}"


def test_a_chain_ending_in_indices_returns_them(tmp_path):
    spec = raw_spec("argmax(conv2d(x, w), dim=1)", {"x": X, "w": W}, ("float32",))
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), "chain_op")
    x, w = torch.randn(X), torch.randn(W)
    got = kernel(x, w)
    assert got.dtype == torch.int64 and torch.equal(got, torch.argmax(F.conv2d(x.double(), w.double()), dim=1))


def test_a_chain_ending_in_any_returns_bools(tmp_path):
    spec = raw_spec("any(softmax(x) > 0.2, dim=0)", {"x": [6, 5]}, ("float32",))
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), "chain_op")
    x = torch.randn(6, 5) * 3
    got = kernel(x)
    assert got.dtype == torch.bool and torch.equal(got, torch.any(torch.softmax(x.double(), -1) > 0.2, dim=0))


@pytest.mark.parametrize("expression", ["argmax(x, dim=1) * 2.0", "relu(any(x > 0.0, dim=1))"])
def test_indices_and_bools_are_the_outermost_operation(expression):
    with pytest.raises(ir.IRError, match="must be the outermost operation"):
        ir.parse(expression)


def test_a_chain_refuses_what_no_split_avoids():
    with pytest.raises(ir.IRError, match="takes padding as numbers, 'valid' or 'same' \\(not transposed\\)"):
        ir.check(ir.parse("relu(conv_transpose2d(x * 2.0, w, padding='same'))"))


def test_the_chain_spec_says_its_stages_and_its_longest_sum():
    spec = raw_spec("relu(group_norm(conv2d(x, w, b), 2, g, gb, eps=1e-05))",
                    {"x": [2, 4, 9, 9], "w": [8, 4, 3, 3], "b": [8], "g": [8], "gb": [8]})
    # the conv sums 4 x 9 products; the group norm 4 channels x 7 x 7 positions, counted as all 8 channels
    assert spec["chain"] == 3 and spec["reduce"] == {"lengths": [8 * 7 * 7]} and spec["matmul"]
    assert {4, 8, 3} <= set(spec["fixed_sizes"])


# ---------------------------------------------------------------- several results: outputs(...)

# (expression, shapes, kernels, torch's results over float64 tensors t)
SEVERAL = [
    # a residual returned beside its norm: the sum is one kernel, the norm reads it
    ("outputs((x + r) * rsqrt(mean((x + r) * (x + r), dim=-1, keepdim=True) + 1e-06) * w, x + r)",
     {"x": [5, 33], "r": [5, 33], "w": [33]}, 2,
     lambda t: ((t["x"] + t["r"]) * torch.rsqrt((t["x"] + t["r"]).pow(2).mean(-1, keepdim=True) + 1e-6) * t["w"],
                t["x"] + t["r"])),
    # indices kept int64, a view of an input copied, a reduction beside its operand
    ("outputs(softmax(x * 2.0), argmax(softmax(x * 2.0), dim=-1), x.flatten(), relu(y) + sum(x, dim=-1, keepdim=True))",
     {"x": [6, 17], "y": [6, 1]}, 4,
     lambda t: (torch.softmax(t["x"] * 2, -1), torch.softmax(t["x"] * 2, -1).argmax(-1), t["x"].flatten(),
                torch.relu(t["y"]) + t["x"].sum(-1, keepdim=True))),
]


@pytest.mark.parametrize("expression, shapes, kernels, torch_fn", SEVERAL, ids=[c[0][:40] for c in SEVERAL])
def test_several_results_are_each_a_stage_and_each_match_torch(tmp_path, expression, shapes, kernels, torch_fn):
    spec = raw_spec(expression, shapes)
    node = parse_expression(spec)
    assert [o["name"] for o in spec["outputs"]] == [f"out{k}" for k in range(len(node.args))]
    assert sum(s.node.op not in chain.NO_KERNEL for s in ir.stages(node)) == kernels
    reference, kernel = generated(tmp_path, spec, node)
    tensors = random_inputs(shapes)
    for want, exact in zip(reference(*[t.double() for t in tensors.values()]), torch_fn({n: t.double() for n, t in
                                                                                          tensors.items()})):
        torch.testing.assert_close(want, exact, rtol=1e-10, atol=1e-10)
    for dtype in ("float32", "float16"):
        args = [t.to(getattr(torch, dtype)) for t in tensors.values()]
        got, wants = kernel(*args), reference(*[a.double() for a in args])
        assert isinstance(got, tuple) and len(got) == len(wants) == len(spec["outputs"])
        for k, (g, w, out) in enumerate(zip(got, wants, spec["outputs"])):
            assert list(g.shape) == out["shapes"][0] and str(g.dtype) == f"torch.{out['dtypes'][-1 if dtype == 'float16' else 0]}"
            assert all(g.data_ptr() != a.data_ptr() for a in args), f"output {k} is an input's memory"
            if not g.is_floating_point():
                assert torch.equal(g, w), f"{dtype} output {k}"
                continue
            check = harness.compare(g, w, args[0].dtype, 33, matmul=False, scaled=True)
            assert not check.problem, f"{dtype} output {k}: {check.problem}"


def test_the_reference_computes_a_result_inside_another_once():
    spec = raw_spec(SEVERAL[0][0], SEVERAL[0][1])
    text = lower_torch.reference_source(spec, parse_expression(spec))
    body = text.split('dtype."""')[-1]
    assert body.count("x + r") == 1 and "result0 = x + r" in body and "return (result1, result0)" in body


@pytest.mark.parametrize("expression, message", [
    ("relu(outputs(x * 2.0, y))", "several results are the function's return value, not an operand"),
    ("outputs(x * 2.0, 3.0)", "a result is 3.0, which reads no input"),
    ("outputs(x, y[:, 1:])", "returns its inputs or views of them"),
    ("outputs(x * 2.0)", "outputs\\(...\\) takes two or more results"),
    ("outputs(argmax(x, dim=1) * 2.0, x)", "must be the outermost operation"),
])
def test_several_results_are_refused_naming_why(expression, message):
    with pytest.raises(ir.IRError, match=message):
        ir.parse(expression)


@pytest.mark.parametrize("expression, inputs", [
    ("outputs(result0 * 2.0, relu(result0 + 1.0))", {"result0": torch.randn(4, 6)}),     # an input named as a local
    ("outputs(x * 2.0, x * 2.0, (x * 2.0).flatten())", {"x": torch.randn(4, 6)}),         # one tensor returned thrice
    ("outputs(argmax(x, dim=1), argmax(x, dim=1))", {"x": torch.randn(4, 6)}),
    ("outputs(gather(x, 1, idx), idx)", {"x": torch.randn(4, 6), "idx": torch.randint(0, 6, (4, 3))}),
])
def test_several_results_never_alias_and_keep_their_dtypes(tmp_path, expression, inputs):
    spec = validate({"name": "chain_op", "expression": expression, "inputs": [
        {"name": n, "dtypes": [str(t.dtype).removeprefix("torch.")], "shapes": [list(t.shape)],
         **({"domain": "index", "index_of": "x"} if n == "idx" else {})} for n, t in inputs.items()]})
    reference, kernel = generated(tmp_path, spec, parse_expression(spec))
    wants, gots = reference(*inputs.values()), kernel(*inputs.values())
    assert len({g.data_ptr() for g in gots}) == len(gots) and not {g.data_ptr() for g in gots} & {
        t.data_ptr() for t in inputs.values()}
    for want, got, out in zip(wants, gots, spec["outputs"]):
        assert str(got.dtype) == str(want.dtype) == f"torch.{out['dtypes'][0]}"
        torch.testing.assert_close(got, want)


def test_results_of_one_size_are_computed_in_the_order_written():
    node = ir.parse("outputs(x * 2.0, x + y, x - y)")
    assert chain.computing_order(node) == list(node.args)
