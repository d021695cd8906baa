"""The registry of operator families: the IR driver (bot.ir), the request reader, the reference and
kernel lowerings and the catalog walk it instead of branching per operator.

A family is a module of bot.ops with this interface (docs/ARCHITECTURE.md, "Operator families"):

    NAME            its kind, e.g. "reduce" (ir.kind)
    OPS             the IR ops it owns
    ROOT            whether its ops stand only at the root of an expression, over a pointwise body
    SUPPORTED       (group, text) for the supported-operations line of refusals
    ALIASES         function names as people write them -> its IR op names
    KEYWORDS        function -> the keyword arguments it is read with (any other is refused)
    WORDS           request words, English and Chinese: (pattern, kind, op)
    OUTPUT_DTYPES   its ops' output dtypes where not the inputs' (argmax: int64, any: bool)
    convert(call)   the IR of a call of one of its functions (None: not one of them)
    check(node)     its operand rules, on a tree whose root (or matmul) it owns
    output_shape(node, shapes)
    torch_result(node, names, body, lines)   root families: the PyTorch of the op over its body, or
    TORCH_OPS       op -> writer(node, operand texts), for ops written like any other (bot.codegen.expr)
    kernel_source(spec, node, options)       kernel.py
    ENTRIES         its catalog entries
"""
from __future__ import annotations

import dataclasses
from types import ModuleType

from bot.codegen.expr import OpWriter
from bot.ops import (argreduce, attention, channel_norm, conv, fill, fused, gather, layout, loss, matmul, norm,
                     pointwise, pool, reduce, remap, scan, softmax, sort, view)
from bot.ops.entry import Entry
from bot.ops.node import WITH_INDICES, Node, inp

# remap after scan (it reads flip, handing a flipped scan back to scan) and before matmul (which reads
# tril/triu, handing a tensor's triangle to remap)
FAMILIES: tuple[ModuleType, ...] = (pointwise, reduce, argreduce, scan, sort, softmax, norm, channel_norm, fused, loss,
                                    pool, layout, gather, remap, matmul, conv, view, fill, attention)
ROOT_FAMILIES = tuple(f for f in FAMILIES if f.ROOT)
# ops with two outputs, (values, indices): torch.max/min over a dim, and the sort family's pairs
TWO_OUTPUTS = {*WITH_INDICES, *sort.PAIRS}
# Row-op words are looked for first: their names hold pointwise words ('log softmax', 'root mean
# square norm', 'argmax' holds 'max', 'cumulative sum' holds 'sum', 'log-sum-exp' holds 'sum' and 'log',
# 'cumulative product' holds 'product'); a vector norm's after the norms' ('layer norm'). Before
# them all, activations read with keywords, which may hold row words ('hardtanh with min -2 and max 2'),
# and pointwise words that hold others' (pointwise.EARLY_WORDS).
_KEYWORDED = pointwise.EARLY_WORDS + [w for w in pointwise.WORDS if w[0].groupindex]
WORDS = _KEYWORDED + [w for f in (softmax, norm, argreduce, scan, fused, reduce, pointwise) for w in f.WORDS
                      if w not in _KEYWORDED]
ALIASES = {k: v for f in FAMILIES for k, v in f.ALIASES.items()}
KEYWORDS = {k: v for f in FAMILIES for k, v in f.KEYWORDS.items()}
_OWNER = {**dict.fromkeys(pointwise.FUNCTIONS, pointwise),
          **{fn: f for f in FAMILIES if f is not pointwise for fn in f.OPS | set(f.KEYWORDS)}}
FUNCTIONS = set(_OWNER)
ENTRIES: tuple[Entry, ...] = tuple(e for f in FAMILIES for e in f.ENTRIES)
_OUTPUT_DTYPES = {op: dtype for f in FAMILIES for op, dtype in f.OUTPUT_DTYPES.items()}


def owner(fname: str) -> ModuleType | None:
    """The family whose IR rule reads a call of fname (aliases resolved)."""
    return _OWNER.get(fname)


def output_dtype(node: Node) -> str | None:
    """The dtype of the output of node's root op where it is not the inputs' (argmax: int64, any: bool)."""
    return _OUTPUT_DTYPES.get(node.op)


def root_family(op: str) -> ModuleType | None:
    """The root family owning op, if any."""
    return next((f for f in ROOT_FAMILIES if op in f.OPS), None)


def family(node: Node) -> ModuleType:
    """The family that lowers the whole tree: fused reductions', its root's, else matmul's or convolution's,
    else pointwise."""
    if fused.claims(node):
        return fused
    if node.op in view.OPS:
        return view
    if node.op in fill.OPS:
        return fill
    found = root_family(node.op)
    if found:
        return found
    return matmul if matmul.matmul_node(node) else conv if conv.conv_node(node) else pointwise


def supported_text() -> str:
    """The families' supported operations, one clause per group ('over any one dim: ...')."""
    clauses: list[list[str]] = []
    for f in FAMILIES:
        group, text = f.SUPPORTED
        if clauses and clauses[-1][0] == group and group:
            clauses[-1].append(text)
        else:
            clauses.append([group, text])
    return "; ".join((f"{c[0]}: " if c[0] else "") + ", ".join(c[1:]) for c in clauses)


def torch_ops(anchor: str) -> dict[str, OpWriter]:
    """The op table references write bodies with: the pointwise ops, and any family's own."""
    return (pointwise.torch_ops(anchor) | matmul.TORCH_OPS | conv.TORCH_OPS | fused.TORCH_OPS | view.TORCH_OPS
            | layout.TORCH_OPS | gather.TORCH_OPS | remap.TORCH_OPS | attention.TORCH_OPS
            | {fill.FULL: lambda node, a: fill.torch_text(node, f"{anchor}.dtype", f"{anchor}.device")})


def nested_torch_ops(writer) -> dict[str, OpWriter]:
    """Writers for the root families' ops where a chain's expression holds them inside others
    (relu(group_norm(...))): the family's own torch call over its operand, bound first to a
    temporary of writer's (the call may read it twice, as layer_norm(h, h.shape[-1:]) does)."""
    def written_by(fam: ModuleType) -> OpWriter:
        def write(node: Node, a: list[str]) -> str:
            body = a[0]
            if not body.isidentifier():
                name = writer.fresh()
                writer.lines.append(f"{name} = {body}")
                body = name
            args = [node.args[0], *(arg if arg.op == "input" else inp(writer.fresh()) for arg in node.args[1:])]
            named = dataclasses.replace(node, args=tuple(args))
            indices = index_inputs(named)
            for arg, new, text in zip(node.args[1:], args[1:], a[1:]):
                if arg.op != "input":      # a computed operand (targets counted by torch.arange): a temporary
                    writer.lines.append(f"{new.name} = {text}" + ".to(torch.int64)" * (new.name in indices))
            names = {new.name: new.name if arg.op != "input" else text
                     for arg, new, text in zip(node.args[1:], args[1:], a[1:])}
            return fam.torch_result(named, names, body, writer.lines)
        return write
    return {op: written_by(f) for f in ROOT_FAMILIES for op in f.OPS if op not in writer.ops}


def index_inputs(node: Node) -> dict[str, dict]:
    """The operands an op reads as indices (a gather's; a class loss's targets), each with its spec fields."""
    if node.op in loss.OPS:
        return loss.index_inputs(node)
    return gather.index_inputs(node) if node.op in gather.OPS else {}


def kernel_source(spec: dict, node: Node, options: dict) -> str:
    """kernel.py from the family the tree belongs to."""
    return family(node).kernel_source(spec, node, options)
