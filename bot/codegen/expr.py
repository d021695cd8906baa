"""The expression writer every lowering shares: a pointwise IR tree as one Python expression,
from an op table (bot.ops.pointwise's torch table for references, its Triton table for kernels),
so the lowerings cannot drift apart in how they parenthesise, name temporaries or treat
comparisons."""
from __future__ import annotations

import math

from typing import Callable

from bot.ops.node import Node

# Precedence of the Python operators the writers emit; a function call is an atom.
_ATOM, _NEG, _MUL, _ADD, _CMP = 5, 4, 3, 2, 1
_INFIX = {"add": ("+", _ADD), "sub": ("-", _ADD), "mul": ("*", _MUL), "div": ("/", _MUL),
          "gt": (">", _CMP), "ge": (">=", _CMP), "lt": ("<", _CMP), "le": ("<=", _CMP),
          "eq": ("==", _CMP), "ne": ("!=", _CMP)}


COMPARE = {"gt", "ge", "lt", "le", "eq", "ne"}    # written infix, as conditions
# An op table entry writes one op from its operands' texts (and the node, for attrs).
OpWriter = Callable[[Node, list[str]], str]


def fmt_const(value: float) -> str:
    """A float literal that reads back exactly (infinities and NaN as float('inf'), which Python,
    torch and Triton's jit all read)."""
    value = float(value)
    return repr(value) if math.isfinite(value) else f"float('{value}')"


def call_writer(fn: str) -> OpWriter:
    """An op written as a plain call, fn(operands...)."""
    return lambda node, a: f"{fn}({', '.join(a)})"


class ExprWriter:
    """Writes a pointwise IR tree as one Python expression over local variable names.

    Subtrees that occur more than once are bound to temporaries (`t0 = ...`, in `lines`)
    so they are computed once. A comparison used as a number is cast with `as_number`;
    a number used as a condition is compared with 0. With `round_with`, every step's
    result is passed through that function (the generated tests emulate rounding so).
    """

    def __init__(self, ops: dict[str, OpWriter], names: dict[str, str], as_number: str, taken: set[str],
                 round_with: str | None = None, exact: frozenset[str] = frozenset()):
        self.ops, self.names, self.as_number, self.round_with = ops, names, as_number, round_with
        self.exact = exact              # ops that move values without computing (views): never rounded
        self.taken = set(taken) | set(names.values())
        self.lines: list[str] = []
        self._temps: dict[Node, str] = {}
        self._repeated: set[Node] = set()
        self._unrounded: Node | None = None

    def write(self, node: Node, round_result: bool = True) -> str:
        """The expression for node (a number); needed temporaries are appended to lines."""
        self._unrounded = None if round_result else node
        seen: set[Node] = set()

        def count(sub: Node) -> None:
            if sub in seen:          # its own subtrees are then computed once, inside it
                if sub.args:
                    self._repeated.add(sub)
                return
            seen.add(sub)
            for a in sub.args:
                count(a)

        count(node)
        return self._value(node)[0]

    def condition(self, node: Node) -> str:
        if node.op in COMPARE:
            return self._expr(node)[0]
        return f"{self._operand(node, _CMP)} != 0"

    def _value(self, node: Node) -> tuple[str, int]:
        if node.op in COMPARE:
            return f"({self._expr(node)[0]}).{self.as_number}", _ATOM
        return self._expr(node)

    def _expr(self, node: Node) -> tuple[str, int]:
        if node in self._temps:
            return self._temps[node], _ATOM
        text, prec = self._build(node)
        if self.round_with and node.args and node.op not in COMPARE | self.exact and node is not self._unrounded:
            text, prec = f"{self.round_with}({text})", _ATOM
        if node in self._repeated:
            name = self.fresh()
            self.lines.append(f"{name} = {text}")
            self._temps[node] = name
            return name, _ATOM
        return text, prec

    def _build(self, node: Node) -> tuple[str, int]:
        if node.op == "input":
            return self.names[node.name], _ATOM
        if node.op == "const":
            return fmt_const(node.value), (_NEG if node.value < 0 else _ATOM)
        if node.op in _INFIX:
            symbol, prec = _INFIX[node.op]
            left = self._operand(node.args[0], prec, strict=prec == _CMP)
            right = self._operand(node.args[1], prec, strict=True)
            return f"{left} {symbol} {right}", prec
        if node.op == "neg":
            return f"-{self._operand(node.args[0], _NEG, strict=True)}", _NEG
        if node.op == "where":
            args = [self.condition(node.args[0]), self._value(node.args[1])[0], self._value(node.args[2])[0]]
        else:
            args = [self._value(a)[0] for a in node.args]
        return self.ops[node.op](node, args), _ATOM

    def _operand(self, node: Node, prec: int, strict: bool = False) -> str:
        # Keep the IR's evaluation order: an operand of equal precedence on the right
        # (or in a comparison) is parenthesised, since float + and * are not associative.
        text, own = self._value(node)
        return f"({text})" if own < prec or (strict and own == prec) else text

    def fresh(self) -> str:
        """A temporary's name no other name takes."""
        i = 0
        while f"t{i}" in self.taken:
            i += 1
        self.taken.add(f"t{i}")
        return f"t{i}"
