"""What a spec says of its operator besides the expression: the name it takes when none is given
('gelu_add', 'sum_dim0'), its one-line description, and its params (scalars, eps, clamp bounds,
exponent, approximation, reduction, tf32, a reduction's dim).
"""
from __future__ import annotations

import functools
from typing import Iterator

from bot import ir
from bot.ops import chain, fused, pointwise
from bot.ops import matmul as mmf
from bot.request.messages import node_text


def default_name(node: ir.Node, shapes: dict[str, list[list[int]]]) -> str:
    """The spec's name where none is given: the first ops of the tree ('gelu_add'), a reduction's dim."""
    if node.op == chain.OUTPUTS:        # each result's name, then how many: 'rmsnorm_add_2_outputs'
        return "_".join(default_name(r, shapes) for r in node.args[:2] if r.op != "input") + f"_{len(node.args)}_outputs"
    k = ir.kind(node)
    if k == "matmul":
        return mmf.matmul_name(node, batched=_batched(node, shapes))
    parts = list(dict.fromkeys(_labels(node)))
    name = "_".join(parts[:3])
    over_dims = isinstance(node.attr("dim"), tuple) and node.op in ir.REDUCE      # sum over dims (1, 2): fused's
    if k in ("reduce", "argreduce", "scan", "sort") or over_dims:   # "sum" alone would shadow the builtin in generated files
        name += _dim_suffix(node.attr("dim"))
        name += "".join(f"_{flag}" for flag in ("reverse", "exclusive", "descending") if node.attr(flag))
    elif k == "loss" and node.attr("reduction") == "none":
        name += "_per_row"
    return name


def _labels(node: ir.Node) -> Iterator[str]:
    """The tree's ops as a name says them, outermost first: a product by a constant is 'scale', a
    written-out prelu 'prelu' and a PyTorch function written in the IR's ops by its name ('remainder',
    not the where and comparisons it is made of), each read on into its operands only."""
    if _is_prelu(node):
        yield "prelu"
        yield from _labels(node.args[1])
        return
    for name, template in _templates():
        bound: dict[str, ir.Node] = {}
        if _matches(template, node, bound):
            yield name
            for operand in bound.values():
                yield from _labels(operand)
            return
    if node.op not in ("input", "const"):
        yield "scale" if node.op == "mul" and any(a.op == "const" for a in node.args) else node.op
    for a in node.args:
        yield from _labels(a)


@functools.cache
def _templates() -> tuple[tuple[str, ir.Node], ...]:
    """Each composite's formula as a tree over its parameters, the largest first (frac holds trunc)."""
    found = []
    for name, (params, formula) in pointwise.COMPOSITES.items():
        try:
            found.append((name, ir.parse(formula, as_written=True)))
        except ir.IRError:                  # a formula of views and reductions (glu, outer): not a name's business
            continue
    return tuple(sorted(found, key=lambda f: -sum(1 for _ in f[1].walk())))


def _matches(template: ir.Node, node: ir.Node, bound: dict[str, ir.Node]) -> bool:
    """Whether node is template with each parameter (an input of the template) standing for one subtree
    throughout; bound collects them."""
    if template.op == "input":
        return bound.setdefault(template.name, node) == node
    return (template.op == node.op and template.value == node.value and template.attrs == node.attrs
            and len(template.args) == len(node.args)
            and all(_matches(t, n, bound) for t, n in zip(template.args, node.args)))


def _is_prelu(node: ir.Node) -> bool:
    """where(x > 0, x, w * x) of a tensor w: F.prelu as ir.settled writes it out."""
    if node.op != "where" or node.args[0].op != "gt" or node.args[0].args[1].value != 0.0:
        return False
    x, slope = node.args[1], node.args[2]
    return node.args[0].args[0] == x and slope.op == "mul" and slope.args[1] == x and slope.args[0].op != "const"


def _dim_suffix(d) -> str:
    """'_all', '_last_dim', '_dim1', '_dim_neg2', '_dims1_2': the dims a reduction runs over, in its name."""
    if isinstance(d, tuple):
        return "_dims" + "_".join(str(x) if x >= 0 else f"neg{-x}" for x in d)
    return "_all" if d == ir.ALL else "_last_dim" if d == -1 else f"_dim{d}" if d >= 0 else f"_dim_neg{-d}"


def _batched(node: ir.Node, shapes: dict[str, list[list[int]]]) -> bool:
    return any(len(s) == 3 for s in shapes[ir.matmul_node(node).args[0].name])


def describe(node: ir.Node, shapes: dict[str, list[list[int]]]) -> str:
    """A one-line description of the operator, for the spec."""
    if node.op == chain.OUTPUTS:
        return f"{len(node.args)} outputs: " + "; ".join(f"({k}) {describe(r, shapes) if r.op != 'input' else r.name}"
                                                         for k, r in enumerate(node.args))
    k = ir.kind(node)
    if k == "pointwise":
        return f"elementwise {node_text(node)}"
    if k == "matmul":
        a, b = (x.name for x in ir.matmul_node(node).args)
        title = f"{'batched ' * _batched(node, shapes)}matrix multiplication {a} @ {b}"
        return title if node.op == ir.MATMUL and not mmf.triangle(node) else f"{title} with epilogue {node_text(node)}"
    inner = node_text(node.args[0])
    if k == "norm":
        title = {"layernorm": "layer norm", "rmsnorm": "RMS norm"}[node.op]
        extras = " and ".join(a.name for a in node.args[1:])
        return f"{title} of {inner} over the last dim{f' with {extras}' if extras else ''}, eps={node.attr('eps')!r}"
    if k == "fused" and node.op not in fused.REDUCTIONS:       # x / its norm, x minus its mean
        return f"{node_text(node)}, its reductions over {_over(fused.reduced_dim(node))}"
    if k == "loss":
        what = "cross entropy of logits" if node.op == "cross_entropy" else "negative log likelihood of log-probabilities"
        ignored = node.attr("ignore_index")
        return (f"{what} {inner} against class indices {node.args[1].name} over the last dim, "
                f"reduction {node.attr('reduction')}" + (f", rows whose target is {ignored} ignored" if ignored is not None
                                                         else ""))
    flags = " and ".join(flag + "d" * (flag == "reverse") for flag in ("reverse", "exclusive") if node.attr(flag))
    d = node.attr("dim", -1)
    return f"{flags + ' ' if flags else ''}{node.op} of {inner} over {_over(None if d == ir.ALL else d)}"


def _over(dim: int | list[int] | None) -> str:
    """'every element' (None), 'the last dim', 'dim 0', 'dims [2, 3]'."""
    return ("every element" if dim is None else "the last dim" if dim == -1 else
            f"dims {dim}" if isinstance(dim, list) else f"dim {dim}")


def spec_params(node: ir.Node, scalars: dict[str, float]) -> dict:
    """The spec's params: the scalars read and the attributes of the ops in the tree."""
    params: dict = dict(scalars)
    for sub in node.walk():
        if sub.op in ir.NORMS:
            params["eps"] = sub.attr("eps")
        elif sub.op == "clamp":
            params.update({k: sub.attr(k) for k in ("min", "max") if sub.attr(k) is not None})
        elif sub.op == "pow":
            params["exponent"] = sub.attr("exponent")
        elif sub.op == "gelu" and sub.attr("approximate") == "tanh":
            params["approximate"] = "tanh"
        elif sub.op in ir.LOSSES:
            params["reduction"] = sub.attr("reduction")
        elif sub.op == ir.MATMUL and sub.attr("tf32"):
            params["tf32"] = True
    if ir.kind(node) in ("reduce", "argreduce", "scan", "sort") and node.attr("dim") != -1:
        params["dim"] = None if node.attr("dim") == ir.ALL else node.attr("dim")
    params.update({flag: True for flag in ("reverse", "exclusive") if ir.kind(node) == "scan" and node.attr(flag)})
    return params
