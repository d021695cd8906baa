"""The IR's core: the expression tree every operator family builds and reads, and the small readers
of Python syntax (numbers, dims, flags) the families' IR rules share. No family logic lives here."""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

CONSTANTS = {"pi": math.pi, "e": math.e, "inf": math.inf, "nan": math.nan}
ALL = "all"          # a reduction's dim when it reduces every element (PyTorch: no dim, or dim=None)
# torch.max(x, dim) / torch.min(x, dim) whole (bot.ops.argreduce): two outputs, the values and the
# indices of the arg-reduction named here; the families that write its kernel and launchers ask.
WITH_INDICES = {"max_with_indices": "argmax", "min_with_indices": "argmin"}


class IRError(ValueError):
    """The expression cannot be understood; the message says what would work."""


@dataclass(frozen=True)
class Node:
    op: str
    args: tuple["Node", ...] = ()
    name: str | None = None          # for op == "input"
    value: float | None = None       # for op == "const"
    attrs: tuple[tuple[str, Any], ...] = field(default=())

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)

    def walk(self) -> Iterable["Node"]:
        yield self
        for a in self.args:
            yield from a.walk()


def inp(name: str) -> Node:
    return Node("input", name=name)


def const(value: float) -> Node:
    return Node("const", value=float(value))


def call(op: str, *args: Node, **attrs: Any) -> Node:
    return Node(op, tuple(args), attrs=tuple(sorted(attrs.items())))


@dataclass(frozen=True)
class Call:
    """One function call as a family's IR rule reads it: the name (aliases resolved), the
    positional arguments (a method's receiver first) and keywords, still as Python syntax, and
    `expr`, which converts an argument into a Node."""
    fname: str
    written: str                     # as typed, when called by a bare name (max vs torch.amax)
    args: list
    kw: dict
    expr: Callable[[ast.expr], Node]


def input_names(node: Node) -> list[str]:
    """Input names in order of first appearance."""
    seen: list[str] = []
    for sub in node.walk():
        if sub.op == "input" and sub.name not in seen:
            seen.append(sub.name)
    return seen


def substitute(node: Node, old: Node, new: Node) -> Node:
    """node with every occurrence of the subtree old replaced by new."""
    if node == old:
        return new
    return replace(node, args=tuple(substitute(a, old, new) for a in node.args))


def inputs_outside(node: Node, inner: Node) -> list[str]:
    """The input names node reads other than through the subtree inner."""
    if node == inner:
        return []
    if node.op == "input":
        return [node.name]
    return [name for a in node.args for name in inputs_outside(a, inner)]


def broadcast_shapes(shapes: list[list[int]]) -> list[int]:
    """NumPy broadcasting; raises IRError naming the clash. No shapes (numbers alone) broadcast to []."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        if len(dims) > 1:
            raise IRError(f"shapes {shapes} do not broadcast (dim {i - rank}: {sorted(dims)})")
        out.append(dims.pop() if dims else 1)
    return out


# ---------------------------------------------------------------- reading arguments

def number(n: ast.expr) -> float:
    if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool):
        return float(n.value)
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
        v = number(n.operand)
        return -v if isinstance(n.op, ast.USub) else v
    if isinstance(n, ast.Name) and n.id in CONSTANTS:
        return CONSTANTS[n.id]
    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in ("math", "torch") \
            and n.attr in CONSTANTS:
        return CONSTANTS[n.attr]
    if is_float_call(n):
        return float(n.args[0].value)
    raise IRError(f"expected a number, got {ast.unparse(n)!r}")


def is_float_call(n: ast.expr) -> bool:
    """float('inf'), float('-inf'), float('nan'), float(2): a number written as a call."""
    return isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "float" and len(n.args) == 1 \
        and not n.keywords and isinstance(n.args[0], ast.Constant) and not isinstance(n.args[0].value, bool) \
        and isinstance(n.args[0].value, (str, int, float)) and _reads_as_float(n.args[0].value)


def _reads_as_float(v) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False


def is_int_literal(n: ast.expr) -> bool:
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
        n = n.operand
    return isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool)


def is_none(a: ast.expr | None) -> bool:
    return a is None or (isinstance(a, ast.Constant) and a.value is None)


def flag(n: ast.expr | None) -> bool:
    if n is None:
        return False
    if isinstance(n, ast.Constant) and isinstance(n.value, bool):
        return n.value
    raise IRError(f"expected True or False, got {ast.unparse(n)!r}")


def arity(fname: str, args: list, n: int) -> None:
    if len(args) != n:
        raise IRError(f"{fname} takes {n} argument{'s' * (n > 1)}, got {len(args)}")


def fmt_num(v: float) -> str:
    return repr(int(v)) + ".0" if float(v).is_integer() and abs(v) < 1e15 else repr(v)


# ---------------------------------------------------------------- printing

# Ops whose every output element is an element of their one tensor operand or zero (views, permutes,
# triangles, flips, repeats): of a bool mask they give a mask. Registered by the families that own them.
MOVERS: set[str] = set()

# op -> how it prints, registered by the family that owns it (bot.ops.registry loads them all).
# A printer gets the node and `to_text` for its operands; ops without one print as op(args).
PRINTERS: dict[str, Callable[[Node, Callable[[Node], str]], str]] = {}


def prints(*ops: str) -> Callable:
    """Decorator: register a family's printer for its ops."""
    def register(fn: Callable) -> Callable:
        PRINTERS.update(dict.fromkeys(ops, fn))
        return fn
    return register


def literal_keywords(c: Call, usage: str) -> dict:
    """A gradient op's keyword arguments (keywords_text's), each a literal; anything else is refused
    with `usage`, how bot.autodiff writes the op."""
    try:
        values = {k: ast.literal_eval(v) for k, v in c.kw.items()}
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        values = None
    if values is None or not all(_plain(v) for v in values.values()):
        raise IRError(f"{c.fname} takes literal keyword arguments (numbers, strings, tuples of them): {usage}")
    return values


def _plain(value) -> bool:
    """A literal an attribute holds: a number, string, bool or None, or a tuple of them."""
    return (value is None or isinstance(value, (bool, int, float, str))
            or (isinstance(value, tuple) and all(_plain(v) for v in value)))


def keywords_text(node: Node, text) -> str:
    """op(args, key=value, ...) with every attribute written as a literal: the printer of the gradient
    ops bot.autodiff writes (pool_grad, cumext_grad, index_grad), which read them back by literal_eval."""
    return f"{node.op}({', '.join(text(a) for a in node.args)}, {', '.join(f'{k}={v!r}' for k, v in node.attrs)})"


def to_text(node: Node) -> str:
    """Inverse of parsing: a canonical expression string."""
    if node.op == "input":
        return node.name
    if node.op == "const":
        return fmt_num(node.value)
    if node.op in PRINTERS:
        return PRINTERS[node.op](node, to_text)
    return f"{node.op}({', '.join(to_text(a) for a in node.args)})"


def plain_text(node: Node) -> str:
    """to_text without the outermost parentheses, for comments."""
    text = to_text(node)
    return text[1:-1] if text.startswith("(") and text.endswith(")") else text


def arguments(c: Call, order: tuple[str, ...]) -> dict:
    """A call's arguments by name, positional ones in the function's order (torch's); IRError for
    too many or one given twice. The keywords are taken out of the call."""
    if len(c.args) > len(order):
        raise IRError(f"{c.fname} takes at most {len(order)} arguments ({', '.join(order)}), got {len(c.args)}")
    given = dict(zip(order, c.args))
    for key in list(c.kw):
        if key in given:
            raise IRError(f"{c.fname} got {key} twice")
        given[key] = c.kw.pop(key)
    return given


def keepdim(c: Call) -> bool:
    """A reduction's keepdim, by keyword or as torch.sum(x, -1, True) gives it by position (then
    gone from the call); True keeps the reduced dim as size 1."""
    if len(c.args) == 3 and isinstance(c.args[2], ast.Constant) and isinstance(c.args[2].value, bool):
        c.kw.setdefault("keepdim", c.args.pop())
    given = c.kw.pop("keepdim", None)
    if given is not None and not (isinstance(given, ast.Constant) and isinstance(given.value, bool)):
        raise IRError(f"{c.fname} takes keepdim=True or False, got {ast.unparse(given)!r}")
    return bool(given is not None and given.value)


def over_dim(c: Call, all_by_default: bool, several: bool = False) -> int | tuple[int, ...] | None:
    """The one dim a reduction or row op works over: dim=d, axis=d or a second positional int;
    keepdim=False is accepted, keepdim=True refused (torch.sum(x, -1, True) gives it by position).
    Not given: None (all elements, as PyTorch reads a reduction: its caller settles it) when
    all_by_default, else -1; dim=None written: ALL when all_by_default. several: a tuple or list
    of dims is read too (a tuple of two or more; one dim alone is that int)."""
    fname, args, kw = c.fname, c.args, c.kw
    if all_by_default and len(args) == 3 and isinstance(args[2], ast.Constant) and isinstance(args[2].value, bool):
        kw.setdefault("keepdim", args.pop())
    keepdim = kw.pop("keepdim", None)
    if keepdim is not None and not (isinstance(keepdim, ast.Constant) and keepdim.value is False):
        raise IRError(f"{fname} with keepdim={ast.unparse(keepdim)} is not supported: the offline generator returns "
                      "the reduced shape without the kept dim; drop keepdim (unsqueeze the result yourself)")
    dim = kw.pop("dim", kw.pop("axis", None))
    if dim is None and len(args) == 2 and isinstance(args[1], (ast.Tuple, ast.List)):
        dim = args.pop()
    if dim is None and len(args) == 2 and is_int_literal(args[1]):
        if c.written in ("max", "min"):             # a bare max(x, 0) may be maximum; torch.amax(x, 1) is not
            raise IRError(f"{fname}(x, {ast.unparse(args[1])}): over dim {ast.unparse(args[1])}, or elementwise with "
                          f"{ast.unparse(args[1])}? Write {fname}(x, dim={ast.unparse(args[1])}) or "
                          f"{'maximum' if fname == 'max' else 'minimum'}(x, {ast.unparse(args[1])}.0)")
        dim = args.pop()
    if dim is None:
        return None if all_by_default else -1
    if is_none(dim):
        return ALL if all_by_default else -1
    if several and isinstance(dim, (ast.Tuple, ast.List)) and dim.elts and all(is_int_literal(e) for e in dim.elts):
        dims = tuple(int(number(e)) for e in dim.elts)
        if len(set(dims)) != len(dims):
            raise IRError(f"{fname} over dims {ast.unparse(dim)}: a dim appears twice")
        return dims[0] if len(dims) == 1 else dims
    if not is_int_literal(dim):
        raise IRError(f"{fname} takes one dim as an integer, e.g. dim=0; got {ast.unparse(dim)!r} (a reduction "
                      "over several dims at once is not supported)")
    return int(number(dim))


def dim_call(c: Call, dim: int | None, kept: bool = False) -> Node:
    """The node of op(x) over dim: one operand; kept (keepdim=True) only when given, so nodes and
    their text stay as they were without it."""
    arity(c.fname, c.args, 1)
    if kept and dim == ALL:
        raise IRError(f"{c.fname} over every element with keepdim=True is not supported; reduce over a dim, "
                      "or drop keepdim (one value)")
    return call(c.fname, c.expr(c.args[0]), dim=dim, **({"keepdim": True} if kept else {}))


def dim_text(node: Node, text: Callable[[Node], str]) -> str:
    """op(body, dim=d): a reduction always spells its dim (to a PyTorch reader sum(x) is over all
    elements), a row op when it is not the last."""
    dim = node.attr("dim")
    kept = ", keepdim=True" if node.attr("keepdim") else ""
    return f"{node.op}({text(node.args[0])}{'' if dim is None else ', dim=None' if dim == ALL else f', dim={dim}'}{kept})"


def reduced_shape(node: Node, full: list[int]) -> list[int]:
    """The shape of a reduction of a body of shape `full` over node's dim (a single value over ALL)."""
    dim = node.attr("dim", -1)
    if dim == ALL:
        return []
    if not -len(full) <= dim < len(full):
        raise IRError(f"{node.op} over dim {dim}, but the input has {len(full)} dims (shape {full})")
    kept = [1] if node.attr("keepdim") else []
    return full[:dim % len(full)] + kept + full[dim % len(full) + 1:]

