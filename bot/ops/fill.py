"""Constant tensors made inside an expression: torch.ones, torch.zeros and torch.full of fixed sizes,
torch.eye (ones kept on the diagonal by tril and triu, the remap family's) and torch.arange (ones
counted by the scan family's exclusive cumsum, then scaled and shifted). They read no input,
so no kernel writes one: in a chain (bot.ops.chain) a fill is a stage of its own that the entry
allocates with torch.full, and the kernels around it read it as an ordinary input (a causal mask,
`torch.triu(torch.ones(n, n), 1).bool()`, is a fill, a triangle kernel and the kernel that uses it).

Sizes are numbers: pasted code's `n = x.shape[-1]` arrives here as the case's size, and the runner
keeps the dims of those sizes when it draws other cases. A float dtype= is read as the inputs' (every
constant of the expression is); dtype=torch.bool makes a mask (the fill compared with zero); another
dtype would change the arithmetic around it and is refused.
"""
from __future__ import annotations

import ast
import math

from bot.codegen.expr import fmt_const
from bot.ops import remap
from bot.ops.entry import Entry
from bot.ops.node import Call, IRError, Node, call, const, fmt_num, is_int_literal, number, prints

NAME = "fill"
FULL = "full"
OPS = {FULL}
ROOT = False
SUPPORTED = ("", "constant tensors of fixed sizes (torch.ones, zeros, full, eye, arange) as operands")
ALIASES: dict[str, str] = {}
_MADE = {"device", "dtype", "requires_grad", "layout", "pin_memory"}
KEYWORDS = {"ones": _MADE | {"size"}, "zeros": _MADE | {"size"}, FULL: _MADE | {"size", "fill_value"},
            "eye": _MADE | {"n", "m"}, "arange": _MADE | {"start", "end", "step"}}
WORDS: list = []
OUTPUT_DTYPES: dict[str, str] = {}
ENTRIES: tuple[Entry, ...] = ()
MAX_NUMEL = 2**31 - 1
_FLOATS = {"float", "float32", "float16", "half", "bfloat16", "float64", "double"}
_INTS = {"int64", "long", "int32", "int", "int16", "short"}
_EXACT = 2**24          # float32 counts every whole number up to here


def convert(c: Call) -> Node | None:
    if c.fname not in KEYWORDS:
        return None
    if c.fname == "arange":
        return _arange(c)
    as_mask = _dtype(c)
    for k in ("device", "requires_grad", "layout", "pin_memory"):      # where it lives changes no value
        c.kw.pop(k, None)
    if c.fname == "eye":
        node = _eye(c)
    else:
        value = {"ones": 1.0, "zeros": 0.0}.get(c.fname)
        if value is None:
            written = c.args[1] if len(c.args) == 2 else c.kw.pop("fill_value", None)
            if written is None or len(c.args) > 2:
                raise IRError("torch.full takes its sizes and a number: torch.full((n, m), 0.5)")
            value = number(written)
        node = call(FULL, shape=_sizes(c, c.args[:1] if c.fname == FULL else c.args), value=value)
    return call("ne", node, const(0.0)) if as_mask else node


def _arange(c: Call) -> Node:
    """torch.arange(end), (start, end) or (start, end, step): start + step * i, i counted by an exclusive
    cumsum of ones (exact in float32 below 2**24). Its int64 default is read as those whole numbers:
    the arithmetic around it is float, and // is refused wherever it is written."""
    given = c.kw.pop("dtype", None)
    if given is not None and ast.unparse(given).removeprefix("torch.") not in _FLOATS | _INTS:
        raise IRError(f"torch.arange with dtype={ast.unparse(given)} is not supported: whole numbers or floats are")
    for k in ("device", "requires_grad", "layout", "pin_memory"):
        c.kw.pop(k, None)
    named = {k: c.kw.pop(k) for k in ("start", "end", "step") if k in c.kw}
    order = ("end",) if len(c.args) == 1 and not named else ("start", "end", "step")
    if len(c.args) > len(order) or set(order[:len(c.args)]) & set(named):
        raise IRError("torch.arange takes end, or start, end and step: torch.arange(64), torch.arange(0, 64, 2)")
    values = {"start": 0.0, "step": 1.0, **{k: number(e) for k, e in {**dict(zip(order, c.args)), **named}.items()}}
    if "end" not in values or values["step"] == 0:
        raise IRError("torch.arange needs its end (and a step other than 0): torch.arange(64)")
    start, end, step = values["start"], values["end"], values["step"]
    count = math.ceil((end - start) / step)
    if not 1 <= count <= _EXACT:
        raise IRError(f"torch.arange({start:g}, {end:g}, {step:g}) has {count} values: 1 to 2**24 are supported")
    counted = call("cumsum", call(FULL, shape=(count,), value=1.0), dim=0, reverse=False, exclusive=True)
    scaled = counted if step == 1 else call("mul", counted, const(step))
    return scaled if start == 0 else call("add", scaled, const(start))


def _dtype(c: Call) -> bool:
    """Whether dtype= makes a mask (torch.bool); a float dtype is the inputs'; any other is refused."""
    given = c.kw.pop("dtype", None)
    written = given is not None and ast.unparse(given).removeprefix("torch.")
    if not written or written in _FLOATS:
        return False
    if written == "bool":
        return True
    raise IRError(f"torch.{c.fname} with dtype={ast.unparse(given)} is not supported: a float constant (computed in "
                  "the inputs' dtype) or a bool mask (dtype=torch.bool) is")


def _sizes(c: Call, written: list) -> tuple[int, ...]:
    given = c.kw.pop("size", None)
    elts = [given] if given is not None else written
    if len(elts) == 1 and isinstance(elts[0], (ast.Tuple, ast.List)):
        elts = list(elts[0].elts)
    if not elts or not all(is_int_literal(e) and number(e) >= 1 for e in elts):
        raise IRError(f"torch.{c.fname} is read with its sizes as whole numbers of at least 1 (e.g. torch.{c.fname}"
                      f"(64, 64)); got {', '.join(ast.unparse(e) for e in elts) or 'none'}")
    return tuple(int(number(e)) for e in elts)


def _eye(c: Call) -> Node:
    """torch.eye(n, m): ones on the diagonal, the ones' lower and upper triangles at offset 0."""
    named = [c.kw.pop(k, None) for k in ("n", "m")]
    written = [*c.args, *[e for e in named if e is not None]]
    if not 1 <= len(written) <= 2:
        raise IRError("torch.eye takes n and optionally m: torch.eye(64)")
    n, m = (_sizes(c, [e]) for e in (written * 2)[:2])
    return remap.triangle(remap.triangle(call(FULL, shape=(*n, *m), value=1.0), remap.TRIL, 0), remap.TRIU, 0)


def check(node: Node) -> None:
    if math.prod(node.attr("shape")) > MAX_NUMEL:
        raise IRError(f"a constant of shape {list(node.attr('shape'))} has over 2**31 elements")


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    return list(node.attr("shape"))


def size_rules(node: Node, cases: list[dict[str, list[int]]]) -> tuple[set[int], int]:
    """The runner keeps the constant's sizes when it draws other cases: the dims the expression
    combines with it must keep fitting."""
    return set(node.attr("shape")), 1


def torch_text(node: Node, dtype: str, device: str) -> str:
    """The constant in PyTorch: torch.full of its sizes and value, in dtype on device (texts)."""
    return f"torch.full({node.attr('shape')!r}, {fmt_const(node.attr('value'))}, dtype={dtype}, device={device})"


@prints(FULL)
def _text(node: Node, text) -> str:
    return f"full({node.attr('shape')!r}, {fmt_num(node.attr('value'))})"


def kernel_source(spec: dict, node: Node, options: dict) -> str:
    raise IRError("a constant alone reads no input: there is no kernel to write; ask for the computation around it")


def reference_property(node: Node) -> tuple[str, bool]:
    return "", False
