"""Operator IR: a small expression language for the offline generator.

A spec names its operator as an expression string, e.g. ``relu(x + y)``,
``softmax(x * 0.5)``, ``rmsnorm(x, weight, eps=1e-6)``. This module parses that
string (with Python's ``ast``, allowing only the node types below) into a tree of
:class:`Node`, checks it, and infers shapes. Lowerings to PyTorch and Triton read
the tree; people read and edit the string.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

UNARY = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "relu", "gelu", "silu", "sigmoid", "tanh", "pow", "clamp"}
BINARY = {"add", "sub", "mul", "div", "maximum", "minimum"}
COMPARE = {"gt", "ge", "lt", "le", "eq", "ne"}
POINTWISE = UNARY | BINARY | COMPARE | {"where"}
REDUCE = {"sum", "mean", "max", "min"}
ROW_PRESERVING = {"softmax", "log_softmax"}
NORMS = {"layernorm", "rmsnorm"}
ROW_OPS = REDUCE | ROW_PRESERVING | NORMS

# Inputs whose values reach these ops need a restricted domain.
POSITIVE_DOMAIN_OPS = {"log", "sqrt", "rsqrt"}

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}
_CMPOPS = {ast.Gt: "gt", ast.GtE: "ge", ast.Lt: "lt", ast.LtE: "le", ast.Eq: "eq", ast.NotEq: "ne"}
_ALIASES = {
    "max": "max", "amax": "max", "min": "min", "amin": "min",
    "negative": "neg", "logsoftmax": "log_softmax", "layer_norm": "layernorm",
    "rms_norm": "rmsnorm", "swish": "silu", "clip": "clamp", "multiply": "mul",
    "divide": "div", "true_divide": "div", "subtract": "sub", "square": "square",
    "gelu_tanh": "gelu_tanh", "reciprocal": "reciprocal",
}
_CONSTANTS = {"pi": math.pi, "e": math.e}
DEFAULT_EPS = {"layernorm": 1e-5, "rmsnorm": 1e-6}


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


SUPPORTED_TEXT = (
    "pointwise: + - * / ** (by a constant), neg, abs, exp, log, sqrt, rsqrt, relu, "
    "gelu (approximate='none' or 'tanh'), silu, sigmoid, tanh, maximum, minimum, "
    "where(cond, a, b), clamp(x, min, max), comparisons, constants; over the last dim: "
    "sum, mean, max, min, softmax, log_softmax; layernorm(x, weight, bias, eps=...), "
    "rmsnorm(x, weight, eps=...)"
)


# ---------------------------------------------------------------- parsing

def parse(text: str) -> Node:
    """Parse an expression string into a checked IR tree."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise IRError(f"cannot parse expression {text!r}: {e.msg}. Write it like 'relu(x + y)'.") from None
    node = _convert(tree.body)
    check(node)
    return node


def _func_name(f: ast.expr) -> str:
    # torch.relu, F.gelu, torch.nn.functional.silu, x.exp -> last attribute name
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    raise IRError(f"unsupported call target {ast.unparse(f)!r}")


def _number(n: ast.expr) -> float:
    if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool):
        return float(n.value)
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
        v = _number(n.operand)
        return -v if isinstance(n.op, ast.USub) else v
    if isinstance(n, ast.Name) and n.id in _CONSTANTS:
        return _CONSTANTS[n.id]
    raise IRError(f"expected a number, got {ast.unparse(n)!r}")


def _bound(n: ast.expr | None) -> float | None:
    """A clamp bound: a number, or None for 'no bound'."""
    if n is None or (isinstance(n, ast.Constant) and n.value is None):
        return None
    return _number(n)


def _is_int_literal(n: ast.expr) -> bool:
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
        n = n.operand
    return isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool)


def _convert(n: ast.expr) -> Node:
    if isinstance(n, ast.Name):
        if n.id in _CONSTANTS:
            return const(_CONSTANTS[n.id])
        return inp(n.id)
    if isinstance(n, ast.Constant):
        if isinstance(n.value, bool) or not isinstance(n.value, (int, float)):
            raise IRError(f"unsupported constant {n.value!r}: only numbers")
        return const(n.value)
    if isinstance(n, ast.UnaryOp):
        if isinstance(n.op, ast.USub):
            inner = _convert(n.operand)
            return const(-inner.value) if inner.op == "const" else call("neg", inner)
        if isinstance(n.op, ast.UAdd):
            return _convert(n.operand)
        raise IRError(f"unsupported operator in {ast.unparse(n)!r}")
    if isinstance(n, ast.BinOp):
        if isinstance(n.op, ast.Pow):
            return call("pow", _convert(n.left), exponent=_number(n.right))
        if type(n.op) not in _BINOPS:
            raise IRError(f"unsupported operator in {ast.unparse(n)!r}; use + - * / **")
        return call(_BINOPS[type(n.op)], _convert(n.left), _convert(n.right))
    if isinstance(n, ast.Compare):
        if len(n.ops) != 1 or type(n.ops[0]) not in _CMPOPS:
            raise IRError(f"unsupported comparison {ast.unparse(n)!r}; compare two values at a time")
        return call(_CMPOPS[type(n.ops[0])], _convert(n.left), _convert(n.comparators[0]))
    if isinstance(n, ast.Call):
        return _convert_call(n)
    raise IRError(f"unsupported syntax {ast.unparse(n)!r}. Supported: {SUPPORTED_TEXT}")


def _convert_call(n: ast.Call) -> Node:
    fname = _func_name(n.func).lower()
    fname = _ALIASES.get(fname, fname)
    args = list(n.args)
    # method style: x.exp() -> exp(x)
    if isinstance(n.func, ast.Attribute) and not _is_module_path(n.func.value):
        args = [n.func.value] + args
    kw = {k.arg: k.value for k in n.keywords if k.arg}
    kw.pop("keepdim", None)
    _check_dim(fname, args, kw)
    if fname in ("square",):
        return call("pow", _convert(args[0]), exponent=2.0)
    if fname == "reciprocal":
        return call("div", const(1.0), _convert(args[0]))
    if fname == "gelu_tanh":
        return call("gelu", _convert(args[0]), approximate="tanh")
    if fname in ("maximum", "minimum") or (fname in ("max", "min") and len(args) == 2 and "dim" not in kw):
        op = {"max": "maximum", "min": "minimum"}.get(fname, fname)
        _arity(fname, args, 2)
        return call(op, _convert(args[0]), _convert(args[1]))
    if fname in BINARY | COMPARE:
        _arity(fname, args, 2)
        return call(fname, _convert(args[0]), _convert(args[1]))
    if fname == "pow":
        _arity(fname, args, 2)
        return call("pow", _convert(args[0]), exponent=_number(args[1]))
    if fname == "clamp":
        lo = _bound(args[1] if len(args) > 1 else kw.get("min"))
        hi = _bound(args[2] if len(args) > 2 else kw.get("max"))
        if lo is None and hi is None:
            raise IRError("clamp needs min, max or both, e.g. clamp(x, -1.0, 1.0)")
        return call("clamp", _convert(args[0]), min=lo, max=hi)
    if fname == "gelu":
        approx = kw.get("approximate")
        mode = approx.value if isinstance(approx, ast.Constant) else ("none" if approx is None else approx)
        if mode not in ("none", "tanh"):
            mode = ast.unparse(mode) if isinstance(mode, ast.AST) else mode
            raise IRError(f"gelu approximate must be 'none' or 'tanh', got {mode!r}")
        return call("gelu", _convert(args[0]), approximate=mode)
    if fname == "where":
        _arity(fname, args, 3)
        return call("where", *(_convert(a) for a in args))
    if fname in UNARY:
        _arity(fname, args, 1)
        return call(fname, _convert(args[0]))
    if fname in REDUCE | ROW_PRESERVING:
        _arity(fname, args, 1)
        return call(fname, _convert(args[0]), dim=-1)
    if fname in NORMS:
        return _convert_norm(fname, args, kw)
    raise IRError(f"unsupported function {fname!r}. Supported: {SUPPORTED_TEXT}")


def _is_module_path(v: ast.expr) -> bool:
    names = {"torch", "F", "nn", "functional", "tl", "math", "np", "special", "linalg"}
    if isinstance(v, ast.Name):
        return v.id in names
    return isinstance(v, ast.Attribute) and v.attr in names


def _check_dim(fname: str, args: list, kw: dict) -> None:
    # Row ops reduce over the last dim only; accept dim=-1 spelled either way.
    if fname not in ROW_OPS:
        return
    dim = kw.pop("dim", None)
    if dim is None and fname in REDUCE | ROW_PRESERVING and len(args) == 2 and _is_int_literal(args[1]):
        dim = args.pop()
    if dim is not None and (not _is_int_literal(dim) or _number(dim) != -1):
        raise IRError(f"{fname} is supported over the last dim (dim=-1) only")


def _arity(fname: str, args: list, n: int) -> None:
    if len(args) != n:
        raise IRError(f"{fname} takes {n} argument{'s' * (n > 1)}, got {len(args)}")


def _convert_norm(fname: str, args: list, kw: dict) -> Node:
    # layernorm(x, weight, bias, eps=..); F.layer_norm(x, shape, weight, bias, eps)
    if args and len(args) > 1 and isinstance(args[1], (ast.Tuple, ast.List, ast.Subscript, ast.Attribute)):
        args = [args[0]] + args[2:]
    eps_node = kw.pop("eps", None)
    max_args = 3 if fname == "layernorm" else 2
    if len(args) > max_args:
        eps_node = args[max_args]
        args = args[:max_args]
    for key in ("weight", "bias"):
        if key in kw:
            args += [kw.pop(key)]
    if not args:
        raise IRError(f"{fname} needs an input, e.g. {fname}(x, weight, eps=1e-6)")
    eps = _number(eps_node) if eps_node is not None else DEFAULT_EPS[fname]
    conv = [_convert(a) if not (isinstance(a, ast.Constant) and a.value is None) else None for a in args]
    weight = conv[1] if len(conv) > 1 else None
    bias = conv[2] if len(conv) > 2 else None
    return call(fname, conv[0], *(a for a in (weight, bias) if a is not None),
                eps=eps, has_weight=weight is not None, has_bias=bias is not None)


# ---------------------------------------------------------------- checks and queries

def check(node: Node) -> None:
    """Row ops may only stand at the root; norm weights and biases must be plain inputs."""
    if node.op in ROW_OPS:
        for sub in node.args[0].walk():
            if sub.op in ROW_OPS:
                raise IRError(f"{sub.op} inside {node.op} is not supported; one row op per kernel")
        if node.op in NORMS:
            for extra in node.args[1:]:
                if extra.op != "input":
                    raise IRError(f"{node.op} weight and bias must be inputs, got {to_text(extra)!r}")
        body = node.args[0]
    else:
        body = node
    for sub in body.walk():
        if sub.op in ROW_OPS:
            raise IRError(f"{sub.op} must be the outermost operation (e.g. softmax(x * 2) is fine, softmax(x) * 2 is not)")
        if sub.op not in POINTWISE | {"input", "const"}:
            raise IRError(f"unsupported op {sub.op!r}. Supported: {SUPPORTED_TEXT}")
    if not input_names(node):
        raise IRError("the expression has no inputs; name at least one tensor, e.g. relu(x)")


def input_names(node: Node) -> list[str]:
    """Input names in order of first appearance."""
    seen: list[str] = []
    for sub in node.walk():
        if sub.op == "input" and sub.name not in seen:
            seen.append(sub.name)
    return seen


def kind(node: Node) -> str:
    """'pointwise', 'reduce', 'softmax' (softmax/log_softmax) or 'norm'."""
    if node.op in REDUCE:
        return "reduce"
    if node.op in ROW_PRESERVING:
        return "softmax"
    if node.op in NORMS:
        return "norm"
    return "pointwise"


def domains(node: Node) -> dict[str, str]:
    """Input domain per input: 'positive' under log/sqrt/rsqrt/fractional pow,
    'nonzero' in a denominator or under a negative pow, else 'normal'."""
    out = {n: "normal" for n in input_names(node)}

    def mark(sub: Node, dom: str) -> None:
        for leaf in sub.walk():
            if leaf.op == "input" and out[leaf.name] != "positive":
                out[leaf.name] = dom

    for sub in node.walk():
        if sub.op in POSITIVE_DOMAIN_OPS:
            mark(sub.args[0], "positive")
        elif sub.op == "pow":
            e = sub.attr("exponent")
            if e != int(e):
                mark(sub.args[0], "positive")
            elif e < 0:
                mark(sub.args[0], "nonzero")
        elif sub.op == "div":
            mark(sub.args[1], "nonzero")
    return out


def broadcast_shapes(shapes: list[list[int]]) -> list[int]:
    """NumPy broadcasting; raises IRError naming the clash."""
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        if len(dims) > 1:
            raise IRError(f"shapes {shapes} do not broadcast (dim {i - rank}: {sorted(dims)})")
        out.append(dims.pop() if dims else 1)
    return out


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    """Output shape of the expression for one case's input shapes."""
    missing = [n for n in input_names(node) if n not in shapes]
    if missing:
        raise IRError(f"no shape given for input(s) {', '.join(missing)}")
    if node.op in NORMS:
        x = broadcast_shapes([shapes[n] for n in input_names(node.args[0])])
        for extra in node.args[1:]:
            if list(shapes[extra.name]) != [x[-1]]:
                raise IRError(f"{node.op} {extra.name} must have shape [{x[-1]}] (the last dim), got {shapes[extra.name]}")
        return x
    full = broadcast_shapes([shapes[n] for n in input_names(node)])
    if node.op in REDUCE:
        return full[:-1]
    return full


# ---------------------------------------------------------------- printing

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "gt": ">", "ge": ">=", "lt": "<", "le": "<=", "eq": "==", "ne": "!="}


def _fmt_num(v: float) -> str:
    return repr(int(v)) + ".0" if float(v).is_integer() and abs(v) < 1e15 else repr(v)


def to_text(node: Node) -> str:
    """Inverse of parse: a canonical expression string."""
    if node.op == "input":
        return node.name
    if node.op == "const":
        return _fmt_num(node.value)
    if node.op in _INFIX:
        return f"({to_text(node.args[0])} {_INFIX[node.op]} {to_text(node.args[1])})"
    if node.op == "pow":
        return f"({to_text(node.args[0])} ** {_fmt_num(node.attr('exponent'))})"
    if node.op == "clamp":
        return f"clamp({to_text(node.args[0])}, {node.attr('min')}, {node.attr('max')})"
    if node.op == "gelu" and node.attr("approximate") == "tanh":
        return f"gelu({to_text(node.args[0])}, approximate='tanh')"
    if node.op in NORMS:
        args = [to_text(a) for a in node.args]
        if node.attr("has_bias") and not node.attr("has_weight"):
            args.insert(1, "None")            # keep the bias in the bias slot
        return f"{node.op}({', '.join(args)}, eps={node.attr('eps')!r})"
    return f"{node.op}({', '.join(to_text(a) for a in node.args)})"
