"""Constant tensors made inside an expression: torch.ones, torch.zeros and torch.full of fixed sizes
(x.new_ones too), torch.eye (ones kept on the diagonal by tril and triu, the remap family's),
torch.arange and torch.linspace (ones counted by the scan family's exclusive cumsum, then scaled and
shifted) and torch.tensor of written-out numbers (each where that count reaches it). They read no
input, so no kernel writes one: in a chain (bot.ops.chain) a fill is a stage of its own that the entry
allocates with torch.full, and the kernels around it read it as an ordinary input (a causal mask,
`torch.triu(torch.ones(n, n), 1).bool()`, is a fill, a triangle kernel and the kernel that uses it).

Sizes are numbers: pasted code's `n = x.shape[-1]` arrives here as the case's size, and the runner
keeps the dims of those sizes when it draws other cases. A float dtype= is read as the inputs' (every
constant of the expression is); dtype=torch.bool makes a mask (the fill compared with zero); an int
dtype is read as its whole numbers (torch.arange's default), refused where torch would truncate.
"""
from __future__ import annotations

import ast
import math

from bot.codegen.expr import fmt_const
from bot.ops import remap, view
from bot.ops.entry import Entry
from bot.ops.node import Call, IRError, Node, arguments, call, const, fmt_num, is_int_literal, number, prints

NAME = "fill"
FULL = "full"
OPS = {FULL}
ROOT = False
SUPPORTED = ("", "constant tensors of fixed sizes (torch.ones, zeros, full, eye, arange, linspace, x.new_ones, "
             "torch.tensor of up to 64 numbers) as operands")
ALIASES: dict[str, str] = {}
_MADE = {"device", "dtype", "requires_grad", "layout", "pin_memory"}
KEYWORDS = {"ones": _MADE | {"size"}, "zeros": _MADE | {"size"}, FULL: _MADE | {"size", "fill_value"},
            "eye": _MADE | {"n", "m"}, "arange": _MADE | {"start", "end", "step"},
            "linspace": _MADE | {"start", "end", "steps"}, "tensor": _MADE | {"data"}}
# x.new_ones(sizes): the receiver gives only a dtype and device, which the kernels take from the inputs
KEYWORDS |= {f"new_{k}": KEYWORDS[k] for k in ("ones", "zeros", FULL)}
WORDS: list = []
OUTPUT_DTYPES: dict[str, str] = {}
ENTRIES: tuple[Entry, ...] = ()
MAX_NUMEL = 2**31 - 1
_FLOATS = {"float", "float32", "float16", "half", "bfloat16", "float64", "double"}
_INTS = {"int64", "long", "int32", "int", "int16", "short"}
_EXACT = 2**24          # float32 counts every whole number up to here
_LISTED = 64            # the most values a torch.tensor([...]) is read with (a where per value)


def convert(c: Call) -> Node | None:
    if c.fname not in KEYWORDS:
        return None
    if c.fname.startswith("new_"):        # x.new_zeros(n): x gave the dtype and device only
        c = Call(c.fname.removeprefix("new_"), c.written, c.args[1:], c.kw, c.expr)
    kind = _dtype(c)
    for k in ("device", "requires_grad", "layout", "pin_memory"):      # where it lives changes no value
        c.kw.pop(k, None)
    node = {"eye": _eye, "arange": _arange, "linspace": _linspace, "tensor": _tensor}.get(c.fname, _filled)(c)
    if kind == "int":
        _whole(node, c)
    return call("ne", node, const(0.0)) if kind == "bool" else node


def _filled(c: Call) -> Node:
    value = {"ones": 1.0, "zeros": 0.0}.get(c.fname)
    if value is None:
        written = c.args[1] if len(c.args) == 2 else c.kw.pop("fill_value", None)
        if written is None or len(c.args) > 2:
            raise IRError("torch.full takes its sizes and a number: torch.full((n, m), 0.5)")
        value = number(written)
    return _full(_sizes(c, c.args[:1] if c.fname == FULL else c.args), value)


def _full(shape: tuple[int, ...], value: float) -> Node:
    """The constant node of every constructor here, its size checked."""
    node = call(FULL, shape=shape, value=value)
    check(node)
    return node


def _counted(count: int, step: float, start: float) -> Node:
    """start + step * i for i in 0 .. count - 1: i an exclusive cumsum of ones, exact in float32."""
    if not 1 <= count <= _EXACT:
        raise IRError(f"a range of {count} values: 1 to 2**24 are supported")
    counted = call("cumsum", _full((count,), 1.0), dim=0, reverse=False, exclusive=True)
    scaled = counted if step == 1 else call("mul", counted, const(step))
    return scaled if start == 0 else call("add", scaled, const(start))


def _arange(c: Call) -> Node:
    """torch.arange(end), (start, end) or (start, end, step). Its int64 default is read as those whole
    numbers: the arithmetic around it is float, and // is refused wherever it is written."""
    named = {k: c.kw.pop(k) for k in ("start", "end", "step") if k in c.kw}
    order = ("end",) if len(c.args) == 1 and not named else ("start", "end", "step")
    if len(c.args) > len(order) or set(order[:len(c.args)]) & set(named):
        raise IRError("torch.arange takes end, or start, end and step: torch.arange(64), torch.arange(0, 64, 2)")
    values = {"start": 0.0, "step": 1.0, **{k: number(e) for k, e in {**dict(zip(order, c.args)), **named}.items()}}
    if "end" not in values or values["step"] == 0:
        raise IRError("torch.arange needs its end (and a step other than 0): torch.arange(64)")
    return _counted(math.ceil((values["end"] - values["start"]) / values["step"]), values["step"], values["start"])


def _linspace(c: Call) -> Node:
    """torch.linspace(start, end, steps) as torch computes it: the first half start + i * step, the
    rest end - (steps - 1 - i) * step, step = (end - start) / (steps - 1)."""
    given = arguments(c, ("start", "end", "steps"))
    if len(given) != 3 or not is_int_literal(given["steps"]):
        raise IRError("torch.linspace takes start, end and a whole number of steps: torch.linspace(0, 1, 64)")
    start, end, steps = number(given["start"]), number(given["end"]), int(number(given["steps"]))
    step = (end - start) / max(steps - 1, 1)
    i = _counted(steps, 1.0, 0.0)
    rest = call("sub", const(end), call("mul", call("sub", const(float(steps - 1)), i), const(step)))
    return call("where", call("lt", i, const(float(max(steps // 2, 1)))), _counted(steps, step, start), rest)


def _tensor(c: Call) -> Node:
    """torch.tensor(2.5): a number, broadcast as torch broadcasts a 0-d tensor; torch.tensor([0.25, 0.5,
    0.25]) (nested lists too): each value where a count of the positions reaches it, computed once in
    a stage of its own (the view around it makes one) and viewed to the lists' shape."""
    given = arguments(c, ("data",))
    data = given.get("data")
    if data is None or len(given) != 1:
        raise IRError("torch.tensor takes one number or a list of numbers: torch.tensor([0.25, 0.5, 0.25])")
    if not isinstance(data, (ast.List, ast.Tuple)):
        return const(number(data))
    shape, values = _nested(data)
    if len(values) > _LISTED:
        raise IRError(f"torch.tensor of {len(values)} values: up to {_LISTED} written out are read; make a longer "
                      "one an input or a buffer")
    flags = all(isinstance(v, ast.Constant) and isinstance(v.value, bool) for v in values)
    numbers = [float(v.value) if flags else number(v) for v in values]      # [True, False]: a mask
    index = _counted(len(numbers), 1.0, 0.0)
    node = call("add", call("mul", index, const(0.0)), const(numbers[-1]))  # a tensor: the wheres keep its dtype
    for k in range(len(numbers) - 2, -1, -1):
        node = call("where", call("eq", index, const(float(k))), const(numbers[k]), node)
    node = call(view.RESHAPE, node, sizes=tuple(shape))
    return call("ne", node, const(0.0)) if flags else node


def _nested(data: ast.expr) -> tuple[list[int], list[ast.expr]]:
    """(shape, values in order) of nested lists of numbers; IRError where they are ragged or empty."""
    if not isinstance(data, (ast.List, ast.Tuple)):
        return [], [data]
    parts = [_nested(e) for e in data.elts]
    if not parts or any(p[0] != parts[0][0] for p in parts):
        raise IRError(f"torch.tensor({ast.unparse(data)[:40]}): the lists must be non-empty and of one shape")
    return [len(parts), *parts[0][0]], [v for p in parts for v in p[1]]


def _dtype(c: Call) -> str:
    """The kind of dtype= ("float" where not given; torch.arange's int64 default is read as its whole
    numbers, as any int dtype is where every value is whole); another dtype is refused."""
    given = c.kw.pop("dtype", None)
    written = given is not None and ast.unparse(given).removeprefix("torch.")
    # dtype=x.dtype: an input's, the float dtype every constant of the expression is read in
    kind = "float" if not written or written in _FLOATS or written.endswith(".dtype") else "bool" if written == "bool" else \
        "int" if written in _INTS else None
    if kind is None:
        raise IRError(f"torch.{c.fname} with dtype={ast.unparse(given)} is not supported: a float, whole-number or "
                      "bool (mask) constant is")
    return kind


def _whole(node: Node, c: Call) -> None:
    """An int dtype's constant holds whole numbers only (torch would truncate the others)."""
    values = [n.value for n in node.walk() if n.op == "const"] + [n.attr("value") for n in node.walk() if n.op == FULL]
    if c.fname == "linspace" or not all(float(v).is_integer() for v in values):
        raise IRError(f"torch.{c.fname} with an int dtype truncates its values; write whole numbers or a float dtype")


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
    return remap.triangle(remap.triangle(_full((*n, *m), 1.0), remap.TRIL, 0), remap.TRIU, 0)


def check(node: Node) -> None:
    """A constant's size: the kernels reading it index with int32."""
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
