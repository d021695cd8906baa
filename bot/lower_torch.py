"""Lowering of the operator IR to PyTorch: the reference (stage 2).

Also home of the expression writer both lowerings share: `ExprWriter` turns a
pointwise IR tree into one Python expression from an op table (this module's for
torch, bot.lower_triton's for Triton), so the two lowerings cannot drift apart in
how they parenthesise, name temporaries or treat comparisons.
"""
from __future__ import annotations

import math
from typing import Callable

from bot import ir

# Precedence of the Python operators the writers emit; a function call is an atom.
_ATOM, _NEG, _MUL, _ADD, _CMP = 5, 4, 3, 2, 1
_INFIX = {"add": ("+", _ADD), "sub": ("-", _ADD), "mul": ("*", _MUL), "div": ("/", _MUL),
          "gt": (">", _CMP), "ge": (">=", _CMP), "lt": ("<", _CMP), "le": ("<=", _CMP),
          "eq": ("==", _CMP), "ne": ("!=", _CMP)}

# An op table entry writes one op from its operands' texts (and the node, for attrs).
OpWriter = Callable[[ir.Node, list[str]], str]


# ---------------------------------------------------------------- IR helpers shared by the lowerings

def fold_constants(node: ir.Node) -> ir.Node:
    """Replace subtrees without inputs by their value, so `x / sqrt(2.0)` never asks
    torch or Triton to apply a function to a bare Python number."""
    if node.op in ("input", "const"):
        return node
    args = tuple(fold_constants(a) for a in node.args)
    if node.op == "where" and args[0].op == "const":
        return args[1] if args[0].value != 0 else args[2]
    if any(a.op != "const" for a in args):
        return ir.Node(node.op, args, attrs=node.attrs)
    try:
        value = _CONST_OPS[node.op](*(a.value for a in args), **dict(node.attrs))
    except (ValueError, TypeError, OverflowError, ZeroDivisionError):   # TypeError: a complex power
        raise ValueError(f"the constant part {ir.to_text(node)} has no finite value") from None
    if not math.isfinite(value):
        raise ValueError(f"the constant part {ir.to_text(node)} has no finite value")
    return ir.const(value)


def _gelu(v: float, approximate: str = "none") -> float:
    if approximate == "tanh":
        return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
    return 0.5 * v * (1 + math.erf(v / math.sqrt(2)))


def _clamp(v: float, **bounds: float | None) -> float:
    if bounds.get("min") is not None:
        v = max(v, bounds["min"])
    if bounds.get("max") is not None:
        v = min(v, bounds["max"])
    return v


_CONST_OPS: dict[str, Callable[..., float]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
    "maximum": max, "minimum": min,
    "gt": lambda a, b: float(a > b), "ge": lambda a, b: float(a >= b), "lt": lambda a, b: float(a < b),
    "le": lambda a, b: float(a <= b), "eq": lambda a, b: float(a == b), "ne": lambda a, b: float(a != b),
    "neg": lambda a: -a, "abs": abs, "exp": math.exp, "log": math.log, "sqrt": math.sqrt,
    "rsqrt": lambda a: 1 / math.sqrt(a), "relu": lambda a: max(a, 0.0), "gelu": _gelu,
    "silu": lambda a: a / (1 + math.exp(-a)), "sigmoid": lambda a: 1 / (1 + math.exp(-a)), "tanh": math.tanh,
    "pow": lambda a, exponent: float(a**exponent), "clamp": _clamp,
}


def local_names(names: list[str], reserved: set[str]) -> dict[str, str]:
    """Input name -> the variable name generated code uses: the same name unless it
    would clash with a name the generated code needs itself (e.g. an input called `out`)."""
    taken = set(reserved) | set(names)
    out = {}
    for name in names:
        local = name
        while local in reserved or (local != name and local in taken):
            local += "_in"
        taken.add(local)
        out[name] = local
    return out


def fmt_const(value: float) -> str:
    """A float literal that reads back exactly."""
    return repr(float(value))


# ---------------------------------------------------------------- the expression writer

class ExprWriter:
    """Writes a pointwise IR tree as one Python expression over local variable names.

    Subtrees that occur more than once are bound to temporaries (`t0 = ...`, in `lines`)
    so they are computed once. A comparison used as a number is cast with `as_number`;
    a number used as a condition is compared with 0. With `round_with`, every step's
    result is passed through that function (the generated tests emulate rounding so).
    """

    def __init__(self, ops: dict[str, OpWriter], names: dict[str, str], as_number: str, taken: set[str],
                 round_with: str | None = None):
        self.ops, self.names, self.as_number, self.round_with = ops, names, as_number, round_with
        self.taken = set(taken) | set(names.values())
        self.lines: list[str] = []
        self._temps: dict[ir.Node, str] = {}
        self._repeated: set[ir.Node] = set()
        self._unrounded: ir.Node | None = None

    def write(self, node: ir.Node, round_result: bool = True) -> str:
        """The expression for node (a number); needed temporaries are appended to lines."""
        self._unrounded = None if round_result else node
        seen: set[ir.Node] = set()

        def count(sub: ir.Node) -> None:
            if sub in seen:          # its own subtrees are then computed once, inside it
                if sub.args:
                    self._repeated.add(sub)
                return
            seen.add(sub)
            for a in sub.args:
                count(a)

        count(node)
        return self._value(node)[0]

    def condition(self, node: ir.Node) -> str:
        if node.op in ir.COMPARE:
            return self._expr(node)[0]
        return f"{self._operand(node, _CMP)} != 0"

    def _value(self, node: ir.Node) -> tuple[str, int]:
        if node.op in ir.COMPARE:
            return f"({self._expr(node)[0]}).{self.as_number}", _ATOM
        return self._expr(node)

    def _expr(self, node: ir.Node) -> tuple[str, int]:
        if node in self._temps:
            return self._temps[node], _ATOM
        text, prec = self._build(node)
        if self.round_with and node.args and node.op not in ir.COMPARE and node is not self._unrounded:
            text, prec = f"{self.round_with}({text})", _ATOM
        if node in self._repeated:
            name = self._fresh()
            self.lines.append(f"{name} = {text}")
            self._temps[node] = name
            return name, _ATOM
        return text, prec

    def _build(self, node: ir.Node) -> tuple[str, int]:
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

    def _operand(self, node: ir.Node, prec: int, strict: bool = False) -> str:
        # Keep the IR's evaluation order: an operand of equal precedence on the right
        # (or in a comparison) is parenthesised, since float + and * are not associative.
        text, own = self._value(node)
        return f"({text})" if own < prec or (strict and own == prec) else text

    def _fresh(self) -> str:
        i = 0
        while f"t{i}" in self.taken:
            i += 1
        self.taken.add(f"t{i}")
        return f"t{i}"


# ---------------------------------------------------------------- torch op table

def call_writer(fn: str) -> OpWriter:
    """An op written as a plain call, fn(operands...)."""
    return lambda node, a: f"{fn}({', '.join(a)})"


def _torch_binary_max_min(fn: str, clamp_key: str) -> OpWriter:
    # torch.maximum needs two tensors; against a constant, clamp does the same.
    def write(node: ir.Node, a: list[str]) -> str:
        for tensor, other in ((0, 1), (1, 0)):
            if node.args[other].op == "const":
                return f"torch.clamp({a[tensor]}, {clamp_key}={a[other]})"
        return f"{fn}({a[0]}, {a[1]})"
    return write


def _torch_clamp(node: ir.Node, a: list[str]) -> str:
    bounds = [f"{k}={fmt_const(node.attr(k))}" for k in ("min", "max") if node.attr(k) is not None]
    return f"torch.clamp({a[0]}, {', '.join(bounds)})"


def _torch_gelu(node: ir.Node, a: list[str]) -> str:
    mode = ", approximate='tanh'" if node.attr("approximate") == "tanh" else ""
    return f"torch.nn.functional.gelu({a[0]}{mode})"


def torch_ops(anchor: str) -> dict[str, OpWriter]:
    """The torch op table; `anchor` is the first input, whose dtype and device a
    where() of two constants takes (torch.where(c, 1.0, 0.0) alone would be float32)."""
    def where(node: ir.Node, a: list[str]) -> str:
        if node.args[1].op == "const" and node.args[2].op == "const":
            a = [a[0], f"{anchor}.new_tensor({a[1]})", a[2]]
        return f"torch.where({', '.join(a)})"

    return {
        **{op: call_writer(f"torch.{op}") for op in ("abs", "exp", "log", "sqrt", "rsqrt", "relu", "sigmoid", "tanh")},
        "silu": call_writer("torch.nn.functional.silu"),
        ir.MATMUL: call_writer("torch.matmul"),
        "gelu": _torch_gelu,
        "pow": lambda node, a: f"torch.pow({a[0]}, {fmt_const(node.attr('exponent'))})",
        "clamp": _torch_clamp,
        "maximum": _torch_binary_max_min("torch.maximum", "min"),
        "minimum": _torch_binary_max_min("torch.minimum", "max"),
        "where": where,
    }


def torch_expression(node: ir.Node, names: dict[str, str], anchor: str, taken: set[str],
                     round_with: str | None = None, round_result: bool = True) -> tuple[list[str], str]:
    """(statements, expression) computing a pointwise node with torch, in the inputs' dtype."""
    writer = ExprWriter(torch_ops(anchor), names, f"to({anchor}.dtype)", taken, round_with)
    text = writer.write(fold_constants(node), round_result)
    return writer.lines, text


# ---------------------------------------------------------------- reference.py

REFERENCE_RESERVED = {"torch", "h"}
_REDUCE_FN = {"sum": "torch.sum", "mean": "torch.mean", "max": "torch.amax", "min": "torch.amin",
              "argmax": "torch.argmax", "argmin": "torch.argmin",
              "softmax": "torch.softmax", "log_softmax": "torch.log_softmax"}


def torch_lines(spec: dict, node: ir.Node, names: dict[str, str], round_with: str | None = None) -> tuple[list[str], str]:
    """(statements, result expression) computing the whole operator with torch over the local
    names. With round_with, every pointwise step feeding the result (the body of a row op
    included) is passed through that function; the result itself is not."""
    anchor = names[spec["inputs"][0]["name"]]
    body_node = node.args[0] if node.op in ir.ROOT_OPS else node
    lines, body = torch_expression(body_node, names, anchor, REFERENCE_RESERVED | set(names.values()),
                                   round_with, round_result=node.op in ir.ROOT_OPS)
    if node.op in ir.NORMS:
        result = _torch_norm(node, names, body, lines)
    elif node.op in ir.LOSSES:
        result = _torch_cross_entropy(node, names, body, lines)
    elif node.op in ir.ROOT_OPS:
        result = f"{_REDUCE_FN[node.op]}({body}, dim={node.attr('dim', -1)})"
    elif body_node.op == "input":
        result = f"{body}.clone()"       # the expression is one input: still return a new tensor
    else:
        result = body
    if _mixed_dtypes(spec):
        result = f"({result}).to({anchor}.dtype)"   # the output takes the first input's dtype
    return lines, result


def reference_source(spec: dict, node: ir.Node) -> str:
    """reference.py: `import torch` and `def <spec name>(<inputs in spec order>)` in plain
    PyTorch, computing in the inputs' own dtype (it is the eager baseline for timing AND,
    called on float64 inputs, the ground truth), returning one new tensor."""
    _check_name(spec["name"], REFERENCE_RESERVED)
    order = [i["name"] for i in spec["inputs"]]
    names = local_names(order, REFERENCE_RESERVED)
    lines, result = torch_lines(spec, node, names)
    over = over_text(node)
    statements = "".join(f"    {line}\n" for line in lines)
    return (f'"""PyTorch reference for {spec["name"]}: {doc_text(spec.get("description") or spec["expression"])}.\n\n'
            "Generated by kernelbot. It is the eager baseline the kernel is timed against and, called on\n"
            'float64 inputs, the ground truth the kernel is checked against."""\n'
            "import torch\n\n\n"
            f"def {spec['name']}({', '.join(names[n] for n in order)}):\n"
            f'    """{doc_text(spec["expression"])}{over}, in the inputs\' dtype."""\n'
            f"{statements}"
            f"    return {result}\n")


def over_text(node: ir.Node) -> str:
    """' over the last dim', ' over dim 0' or '' for the docstrings of generated files."""
    if node.op not in ir.ROOT_OPS:
        return ""
    dim = node.attr("dim", -1)
    return " over the last dim" if dim == -1 else f" over dim {dim}"


def _torch_cross_entropy(node: ir.Node, names: dict[str, str], body: str, lines: list[str]) -> str:
    # Classes are the last dim (torch's own cross_entropy takes them at dim 1): rows flattened.
    if not body.isidentifier():
        lines.append(f"h = {body}")
        body = "h"
    target = names[node.args[1].name]
    reduction = node.attr("reduction")
    loss = (f"torch.nn.functional.cross_entropy({body}.flatten(0, -2), {target}.flatten(), "
            f"reduction={reduction!r})")
    return loss if reduction == "mean" else f"{loss}.reshape({target}.shape)"


def _torch_norm(node: ir.Node, names: dict[str, str], body: str, lines: list[str]) -> str:
    if not body.isidentifier():
        lines.append(f"h = {body}")
        body = "h"
    extras = iter(names[a.name] for a in node.args[1:])
    weight = next(extras) if node.attr("has_weight") else None
    eps = fmt_const(node.attr("eps"))
    if node.op == "rmsnorm":
        return f"torch.nn.functional.rms_norm({body}, {body}.shape[-1:], weight={weight}, eps={eps})"
    bias = next(extras) if node.attr("has_bias") else None
    return f"torch.nn.functional.layer_norm({body}, {body}.shape[-1:], weight={weight}, bias={bias}, eps={eps})"


def plain_text(node: ir.Node) -> str:
    """ir.to_text without the outermost parentheses, for comments."""
    text = ir.to_text(node)
    return text[1:-1] if text.startswith("(") and text.endswith(")") else text


def doc_text(text: str) -> str:
    """Text that is safe inside a generated docstring: one line, no quote characters to close it."""
    return " ".join(str(text).split()).replace("\\", "/").replace('"', "'")


def _mixed_dtypes(spec: dict) -> bool:
    floats = [i for i in spec["inputs"] if i.get("domain") != "index"]
    return any(len({i["dtypes"][j] for i in floats}) > 1 for j in range(len(floats[0]["dtypes"])))


def _check_name(name: str, reserved: set[str]) -> None:
    if name in reserved:
        raise ValueError(f"operator name {name!r} clashes with a name the generated code uses; rename the operator")
