"""Operator IR: a small expression language for the offline generator.

A spec names its operator as an expression string, e.g. ``relu(x + y)``,
``softmax(x * 0.5)``, ``rmsnorm(x, weight, eps=1e-6)``. This module parses that
string (with Python's ``ast``, allowing only the node types below) into a tree of
:class:`Node`, checks it, and infers shapes. Lowerings to PyTorch and Triton read
the tree; people read and edit the string.
"""
from __future__ import annotations

import ast
import copy
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

UNARY = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "relu", "gelu", "silu", "sigmoid", "tanh", "pow", "clamp"}
BINARY = {"add", "sub", "mul", "div", "maximum", "minimum"}
COMPARE = {"gt", "ge", "lt", "le", "eq", "ne"}
POINTWISE = UNARY | BINARY | COMPARE | {"where"}
REDUCE = {"sum", "mean", "max", "min"}         # over any one dim (attr dim, default -1)
ARG_REDUCE = {"argmax", "argmin"}              # over any one dim, of a plain input; int64 indices
ROW_PRESERVING = {"softmax", "log_softmax"}
NORMS = {"layernorm", "rmsnorm"}
LOSSES = {"cross_entropy"}                     # (logits body, int64 target) over the last dim
ROW_OPS = REDUCE | ROW_PRESERVING | NORMS
ROOT_OPS = ROW_OPS | ARG_REDUCE | LOSSES       # ops that may only stand at the root
MATMUL = "matmul"                              # one per expression; the rest is its epilogue

# Inputs whose values reach these ops need a restricted domain.
POSITIVE_DOMAIN_OPS = {"log", "sqrt", "rsqrt"}

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}
_CMPOPS = {ast.Gt: "gt", ast.GtE: "ge", ast.Lt: "lt", ast.LtE: "le", ast.Eq: "eq", ast.NotEq: "ne"}
_ALIASES = {
    "max": "max", "amax": "max", "min": "min", "amin": "min",
    "negative": "neg", "logsoftmax": "log_softmax", "layer_norm": "layernorm",
    "rms_norm": "rmsnorm", "swish": "silu", "clip": "clamp", "multiply": "mul",
    "divide": "div", "true_divide": "div", "subtract": "sub", "square": "square",
    "gelu_tanh": "gelu_tanh", "reciprocal": "reciprocal", "mm": "matmul", "bmm": "matmul",
    "crossentropy": "cross_entropy",
}
_CONSTANTS = {"pi": math.pi, "e": math.e}
# PyTorch activations written in the IR's own ops: (parameters with PyTorch's defaults, formula), from
# PyTorch's documented definitions. Their kernels and generated references compute the formula; a
# pasted module's reference is the pasted call itself, so the formula is checked against PyTorch.
_SOFTPLUS = "where(x * beta > threshold, x, log(1.0 + exp(x * beta)) / beta)"
COMPOSITES: dict[str, tuple[tuple[tuple[str, float | None], ...], str]] = {
    "leaky_relu": ((("x", None), ("negative_slope", 0.01)), "where(x > 0, x, x * negative_slope)"),
    "elu": ((("x", None), ("alpha", 1.0)), "where(x > 0, x, alpha * (exp(x) - 1.0))"),
    "celu": ((("x", None), ("alpha", 1.0)), "where(x > 0, x, alpha * (exp(x / alpha) - 1.0))"),
    "selu": ((("x", None),), "1.0507009873554804934193349852946 * where(x > 0, x, "
                             "1.6732632423543772848170429916717 * (exp(x) - 1.0))"),
    "relu6": ((("x", None),), "clamp(x, 0.0, 6.0)"),
    "hardtanh": ((("x", None), ("min_val", -1.0), ("max_val", 1.0)), "clamp(x, min_val, max_val)"),
    "hardsigmoid": ((("x", None),), "clamp(x / 6.0 + 0.5, 0.0, 1.0)"),
    "hardswish": ((("x", None),), "x * clamp(x + 3.0, 0.0, 6.0) / 6.0"),
    "softsign": ((("x", None),), "x / (1.0 + abs(x))"),
    "softplus": ((("x", None), ("beta", 1.0), ("threshold", 20.0)), _SOFTPLUS),
    "mish": ((("x", None),), "x * tanh(where(x > 20.0, x, log(1.0 + exp(x))))"),
    "logsigmoid": ((("x", None),), "-where(-x > 20.0, -x, log(1.0 + exp(-x)))"),
    "tanhshrink": ((("x", None),), "x - tanh(x)"),
    "softshrink": ((("x", None), ("lambd", 0.5)), "where(x > lambd, x - lambd, where(x < -lambd, x + lambd, 0.0))"),
    "hardshrink": ((("x", None), ("lambd", 0.5)), "where(abs(x) > lambd, x, 0.0)"),
}
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
    "where(cond, a, b), clamp(x, min, max), comparisons, constants; over any one dim: "
    "sum, mean, max, min, argmax, argmin; over the last dim: softmax, log_softmax, "
    "layernorm(x, weight, bias, eps=...), rmsnorm(x, weight, eps=...) (also of a sum, e.g. "
    "rmsnorm(x + residual, weight)), cross_entropy(logits, target); matmul a @ b (2-D, or batched 3-D; "
    "tf32=True for float32) with a pointwise epilogue, e.g. relu(a @ b + bias)"
)


# ---------------------------------------------------------------- parsing

def parse(text: str, as_written: bool = False) -> Node:
    """Parse an expression string into a checked IR tree. In a spec, a reduction without a dim is
    over the last dim; as_written (code a person typed or pasted) leaves its dim None, as PyTorch
    reads it: over all elements, which the caller must settle or refuse."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise IRError(f"cannot parse expression {text!r}: {e.msg}. Write it like 'relu(x + y)'.") from None
    node = _convert(tree.body)
    if not as_written:
        node = with_dim(node, -1) if node.op in REDUCE | ARG_REDUCE and node.attr("dim") is None else node
        if node.op in ROW_PRESERVING and node.attr("dim") != -1:
            raise IRError(f"{node.op} is supported over the last dim (dim=-1) only")
    check(node)
    return node


def with_dim(node: Node, dim: int) -> Node:
    """The root reduction over dim."""
    return call(node.op, *node.args, **{**dict(node.attrs), "dim": dim})


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


def is_int_literal(n: ast.expr) -> bool:
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
        n = n.operand
    return isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool)


def _convert(n: ast.expr) -> Node:
    if isinstance(n, ast.Name):
        if n.id in _CONSTANTS:
            return const(_CONSTANTS[n.id])
        return inp(n.id)
    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in ("math", "torch") \
            and n.attr in _CONSTANTS:                  # math.pi, torch.e
        return const(_CONSTANTS[n.attr])
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
        if isinstance(n.op, ast.MatMult):
            return call(MATMUL, _convert(n.left), _convert(n.right), tf32=False)
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
    written = _func_name(n.func).lower()
    fname = _ALIASES.get(written, written)
    args = list(n.args)
    # method style: x.exp() -> exp(x)
    if isinstance(n.func, ast.Attribute) and not _is_module_path(n.func.value):
        args = [n.func.value] + args
    kw = {k.arg: k.value for k in n.keywords if k.arg}
    _check_keywords(fname, n, kw)
    if fname in REDUCE | ARG_REDUCE and len(args) == 3 and isinstance(args[2], ast.Constant) and \
            isinstance(args[2].value, bool):                 # torch.sum(x, -1, True): keepdim by position
        kw.setdefault("keepdim", args.pop())
    keepdim = kw.pop("keepdim", None)
    if keepdim is not None and not (isinstance(keepdim, ast.Constant) and keepdim.value is False):
        raise IRError(f"{fname} with keepdim={ast.unparse(keepdim)} is not supported: the offline generator returns "
                      "the reduced shape without the kept dim; drop keepdim (unsqueeze the result yourself)")
    dim = _dim(fname, args, kw, written if isinstance(n.func, ast.Name) else "")
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
        if len(args) > 3:
            raise IRError(f"clamp takes x, min and max, got {len(args)} arguments")
        lo = _bound(args[1] if len(args) > 1 else kw.get("min"))
        hi = _bound(args[2] if len(args) > 2 else kw.get("max"))
        if lo is None and hi is None:
            raise IRError("clamp needs min, max or both, e.g. clamp(x, -1.0, 1.0)")
        return call("clamp", _convert(args[0]), min=lo, max=hi)
    if fname == "gelu":
        _arity(fname, args, 1)                       # approximate is keyword-only in PyTorch
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
    if fname in REDUCE | ARG_REDUCE | ROW_PRESERVING:
        _arity(fname, args, 1)
        return call(fname, _convert(args[0]), dim=dim)
    if fname in NORMS:
        return _convert_norm(fname, args, kw)
    if fname == MATMUL:
        _arity(fname, args, 2)
        return call(MATMUL, _convert(args[0]), _convert(args[1]), tf32=_flag(kw.get("tf32")))
    if fname == "cross_entropy":
        return _convert_cross_entropy(args, kw)
    if fname in COMPOSITES:
        return _convert_composite(fname, args, kw)
    raise IRError(f"unsupported function {fname!r}. Supported: {SUPPORTED_TEXT}")


def _convert_composite(fname: str, args: list, kw: dict) -> Node:
    """A PyTorch activation written in the IR's own ops: its parameters bound (PyTorch's order and
    defaults) and substituted into its formula."""
    params, formula = COMPOSITES[fname]
    if len(args) > len(params):
        raise IRError(f"{fname} takes at most {len(params)} arguments ({', '.join(p for p, _ in params)})")
    bound = dict(zip((p for p, _ in params), args))
    for p, default in params:
        if p in kw:
            bound[p] = kw.pop(p)
        bound.setdefault(p, None if default is None else ast.Constant(default))
    if bound["x"] is None:
        raise IRError(f"{fname} needs an input, e.g. {fname}(x)")
    values = {p: bound["x"] if p == "x" else ast.Constant(_number(bound[p])) for p, _ in params}
    return _convert(_Bind(values).visit(ast.parse(formula, mode="eval").body))


class _Bind(ast.NodeTransformer):
    def __init__(self, values: dict[str, ast.expr]):
        self.values = values

    def visit_Name(self, n: ast.Name) -> ast.expr:
        return copy.deepcopy(self.values[n.id]) if n.id in self.values else n


# The keywords each function is read with; any other (alpha=, dtype=, out=, rounding_mode=, ...) may
# change the result, so it is refused rather than dropped. inplace=False alone is accepted anywhere.
_KEYWORDS = {**dict.fromkeys(REDUCE | ARG_REDUCE | ROW_PRESERVING, {"dim", "axis", "keepdim"}),
             **dict.fromkeys(NORMS, {"eps", "weight", "bias", "normalized_shape"}),
             "gelu": {"approximate"}, "clamp": {"min", "max"}, MATMUL: {"tf32"},
             "cross_entropy": {"reduction", "input", "target"},
             **{name: {p for p, _ in params[1:]} for name, (params, _) in COMPOSITES.items()}}


_KNOWN = set(_KEYWORDS) | UNARY | BINARY | COMPARE | {"square", "reciprocal", "gelu_tanh", "maximum", "minimum",
                                                      "pow", "where"}


def _check_keywords(fname: str, n: ast.Call, kw: dict) -> None:
    if any(k.arg is None for k in n.keywords):
        raise IRError(f"{fname}(**...) is not supported: spell out its arguments")
    if "inplace" in kw and isinstance(kw["inplace"], ast.Constant) and kw["inplace"].value is False:
        del kw["inplace"]
    extra = sorted(set(kw) - _KEYWORDS.get(fname, set()))
    if extra and fname not in _KNOWN:
        raise IRError(f"unsupported function {fname!r}. Supported: {SUPPORTED_TEXT}")
    if extra:
        raise IRError(f"{fname} with {', '.join(f'{k}={ast.unparse(kw[k])}' for k in extra)} is not supported by the "
                      f"offline generator (it would change what {fname} computes)")


def _is_module_path(v: ast.expr) -> bool:
    names = {"torch", "F", "nn", "functional", "tl", "math", "np", "special", "linalg"}
    if isinstance(v, ast.Name):
        return v.id in names
    return isinstance(v, ast.Attribute) and v.attr in names


def _dim(fname: str, args: list, kw: dict, written: str = "") -> int:
    """The dim a reduction or row op works over, from dim=d or a second positional int. Not given:
    None for a reduction (all elements, as in PyTorch), -1 for the others. Reductions take any one
    dim; softmax, norms and losses the last one only."""
    if fname not in ROOT_OPS:
        return -1
    dim = kw.pop("dim", kw.pop("axis", None))
    if dim is None and len(args) == 2 and isinstance(args[1], (ast.Tuple, ast.List)):
        dim = args.pop()
    if dim is None and fname in REDUCE | ARG_REDUCE | ROW_PRESERVING and len(args) == 2 and is_int_literal(args[1]):
        if written in ("max", "min"):             # a bare max(x, 0) may be maximum; torch.amax(x, 1) is not
            raise IRError(f"{fname}(x, {ast.unparse(args[1])}): over dim {ast.unparse(args[1])}, or elementwise with "
                          f"{ast.unparse(args[1])}? Write {fname}(x, dim={ast.unparse(args[1])}) or "
                          f"{'maximum' if fname == 'max' else 'minimum'}(x, {ast.unparse(args[1])}.0)")
        dim = args.pop()
    if dim is None or (isinstance(dim, ast.Constant) and dim.value is None):
        return None if fname in REDUCE | ARG_REDUCE else -1
    if not is_int_literal(dim):
        raise IRError(f"{fname} takes one dim as an integer, e.g. dim=0; got {ast.unparse(dim)!r} (a reduction "
                      "over several dims at once is not supported)")
    if fname in ROW_PRESERVING:
        return int(_number(dim))           # the last dim only: parse and the request parser check it
    if fname not in REDUCE | ARG_REDUCE and _number(dim) != -1:
        raise IRError(f"{fname} is supported over the last dim (dim=-1) only")
    return int(_number(dim))


def _flag(n: ast.expr | None) -> bool:
    if n is None:
        return False
    if isinstance(n, ast.Constant) and isinstance(n.value, bool):
        return n.value
    raise IRError(f"expected True or False, got {ast.unparse(n)!r}")


def _convert_cross_entropy(args: list, kw: dict) -> Node:
    # cross_entropy(logits, target, reduction='mean'|'none'), with torch's default ignore_index
    # (-100); class weights, label smoothing and other ignore_index values are not supported.
    extra = sorted(set(kw) - {"reduction", "input", "target"})
    if extra:
        raise IRError(f"cross_entropy supports reduction='mean' or 'none' only, not {', '.join(extra)}")
    args = args + [kw[k] for k in ("input", "target") if k in kw]
    _arity("cross_entropy", args, 2)
    node = kw.get("reduction")
    reduction = "mean" if node is None else node.value if isinstance(node, ast.Constant) else None
    if reduction not in ("mean", "none"):
        raise IRError(f"cross_entropy reduction must be 'mean' or 'none', got {ast.unparse(node)!r}")
    return call("cross_entropy", _convert(args[0]), _convert(args[1]), reduction=reduction)


def _is_none(a: ast.expr | None) -> bool:
    return a is None or (isinstance(a, ast.Constant) and a.value is None)


def _check_last_dim_only(fname: str, shape: ast.expr) -> None:
    """A norm's normalized_shape must name the last dim alone: (N,), [N], x.shape[-1:], x.shape[-1]."""
    one = isinstance(shape, (ast.Tuple, ast.List)) and len(shape.elts) <= 1
    index = shape.slice if isinstance(shape, ast.Subscript) else None
    last = isinstance(index, ast.Slice) and index.upper is None and index.step is None and \
        index.lower is not None and is_int_literal(index.lower) and _number(index.lower) == -1
    last = last or (index is not None and is_int_literal(index) and _number(index) == -1)
    if not (one or last):
        raise IRError(f"{fname} over normalized_shape {ast.unparse(shape)!r} is not supported: the offline generator "
                      "normalizes over the last dim only, e.g. x.shape[-1:]")


def _arity(fname: str, args: list, n: int) -> None:
    if len(args) != n:
        raise IRError(f"{fname} takes {n} argument{'s' * (n > 1)}, got {len(args)}")


def _convert_norm(fname: str, args: list, kw: dict) -> Node:
    # layernorm(x, weight, bias, eps=..); F.layer_norm(x, shape, weight, bias, eps)
    if args and len(args) > 1 and isinstance(args[1], (ast.Tuple, ast.List, ast.Subscript, ast.Attribute)):
        _check_last_dim_only(fname, args[1])
        args = [args[0]] + args[2:]
    if "normalized_shape" in kw:
        _check_last_dim_only(fname, kw.pop("normalized_shape"))
    eps_node = kw.pop("eps", None)
    max_args = 3 if fname == "layernorm" else 2
    if len(args) > max_args + 1:
        raise IRError(f"{fname} takes at most {max_args + 1} arguments (x, weight{', bias' * (max_args == 3)}, eps), "
                      f"got {len(args)}")
    if len(args) > max_args:
        eps_node = args[max_args]
        args = args[:max_args]
    if not args:
        raise IRError(f"{fname} needs an input, e.g. {fname}(x, weight, eps=1e-6)")
    slots = args[1:] + [None] * (max_args - len(args))         # weight (and bias) by position
    for i, key in enumerate(("weight", "bias")[:max_args - 1]):
        if key in kw:
            slots[i] = kw.pop(key)
    args = args[:1] + slots
    eps = _number(eps_node) if eps_node is not None else DEFAULT_EPS[fname]
    conv = [None if _is_none(a) else _convert(a) for a in args]
    weight = conv[1] if len(conv) > 1 else None
    bias = conv[2] if len(conv) > 2 else None
    return call(fname, conv[0], *(a for a in (weight, bias) if a is not None),
                eps=eps, has_weight=weight is not None, has_bias=bias is not None)


# ---------------------------------------------------------------- checks and queries

def check(node: Node) -> None:
    """Root ops (reductions, row ops, losses) may only stand at the root, over a pointwise body;
    their extra operands (norm weight and bias, cross-entropy target) and argmax's operand must be
    plain inputs. A matmul has plain-input operands, and everything around it is its epilogue."""
    body = node.args[0] if node.op in ROOT_OPS else node
    extras = node.args[1:] if node.op in ROOT_OPS else ()
    if node.op in ARG_REDUCE and body.op != "input":
        raise IRError(f"{node.op} takes a tensor input, e.g. {node.op}(x, dim=-1); compute the expression in a separate kernel")
    for extra in extras:
        if extra.op != "input":
            raise IRError(f"{node.op} {'target' if node.op in LOSSES else 'weight and bias'} must be inputs, "
                          f"got {to_text(extra)!r}")
    if node.op in LOSSES and extras[0].name in input_names(body):
        raise IRError("cross_entropy's target (class indices) cannot also be part of the logits")
    matmuls = [sub for sub in body.walk() if sub.op == MATMUL]
    for sub in body.walk():
        if sub.op in ROOT_OPS:
            raise IRError(f"{sub.op} must be the outermost operation (e.g. softmax(x * 2) is fine, softmax(x) * 2 is not)")
        if sub.op not in POINTWISE | {"input", "const", MATMUL}:
            raise IRError(f"unsupported op {sub.op!r}. Supported: {SUPPORTED_TEXT}")
    if matmuls:
        _check_matmul(node, body, matmuls)
    if not input_names(node):
        raise IRError("the expression has no inputs; name at least one tensor, e.g. relu(x)")


def _check_matmul(node: Node, body: Node, matmuls: list[Node]) -> None:
    if node is not body:
        raise IRError(f"a matmul inside {node.op} is not supported; a matmul takes a pointwise epilogue, "
                      "e.g. relu(a @ b + bias)")
    if len(set(matmuls)) > 1:            # one product used twice (a local named twice) is one matmul
        raise IRError("one matmul per kernel; chain them as separate operators")
    mm = matmuls[0]
    if any(a.op != "input" for a in mm.args):
        raise IRError("matmul operands must be inputs, e.g. a @ b; compute a prologue in a separate kernel")
    if any(a.name in _inputs_outside(node, mm) for a in mm.args):
        raise IRError("matmul operands cannot also be used in the epilogue")


def _inputs_outside(node: Node, inner: Node) -> list[str]:
    """The input names node reads other than through the subtree inner."""
    if node == inner:
        return []
    if node.op == "input":
        return [node.name]
    return [name for a in node.args for name in _inputs_outside(a, inner)]


def input_names(node: Node) -> list[str]:
    """Input names in order of first appearance."""
    seen: list[str] = []
    for sub in node.walk():
        if sub.op == "input" and sub.name not in seen:
            seen.append(sub.name)
    return seen


_ROOT_KINDS = {**dict.fromkeys(REDUCE, "reduce"), **dict.fromkeys(ARG_REDUCE, "argreduce"),
               **dict.fromkeys(ROW_PRESERVING, "softmax"), **dict.fromkeys(NORMS, "norm"),
               **dict.fromkeys(LOSSES, "loss")}


def kind(node: Node) -> str:
    """'pointwise', 'matmul' (with its epilogue), 'reduce', 'argreduce', 'softmax'
    (softmax/log_softmax), 'norm' or 'loss'."""
    if node.op in _ROOT_KINDS:
        return _ROOT_KINDS[node.op]
    return "matmul" if any(sub.op == MATMUL for sub in node.walk()) else "pointwise"


def matmul_node(node: Node) -> Node | None:
    return next((sub for sub in node.walk() if sub.op == MATMUL), None)


def index_inputs(node: Node) -> dict[str, str]:
    """Integer inputs: class-index input name -> the input whose last dim it indexes."""
    if node.op not in LOSSES:
        return {}
    return {node.args[1].name: input_names(node.args[0])[0]}


def reduced(node: Node) -> tuple[list[str], int] | None:
    """(inputs, dim) whose broadcast length at dim the op accumulates over (its error grows with
    the sqrt of it), or None for ops that accumulate nothing."""
    if node.op in REDUCE | ARG_REDUCE:
        return input_names(node.args[0]), node.attr("dim", -1)
    if node.op in LOSSES:
        return input_names(node.args[0]), -1
    mm = matmul_node(node)
    return ([mm.args[0].name], -1) if mm else None


def domains(node: Node) -> dict[str, str]:
    """Input domain per input: 'positive' under log/sqrt/rsqrt/fractional pow,
    'nonzero' in a denominator or under a negative pow, else 'normal'."""
    out = {n: "normal" for n in input_names(node)}
    out.update(dict.fromkeys(index_inputs(node), "index"))

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
    if node.op in LOSSES:
        return _loss_shape(node, shapes)
    mm = matmul_node(node)
    if mm:
        full = broadcast_shapes([_matmul_shape(shapes[mm.args[0].name], shapes[mm.args[1].name])]
                                + [shapes[n] for n in input_names(node) if n not in {a.name for a in mm.args}])
        if full != _matmul_shape(shapes[mm.args[0].name], shapes[mm.args[1].name]):
            raise IRError(f"the epilogue's inputs broadcast the matmul's output to {full}; they must fit inside it")
        return full
    full = broadcast_shapes([shapes[n] for n in input_names(node)])
    if node.op in REDUCE | ARG_REDUCE:
        dim = node.attr("dim", -1)
        if not -len(full) <= dim < len(full):
            raise IRError(f"{node.op} over dim {dim}, but the input has {len(full)} dims (shape {full})")
        return full[:dim % len(full)] + full[dim % len(full) + 1:]
    return full


def _matmul_shape(a: list[int], b: list[int]) -> list[int]:
    if len(a) not in (2, 3) or len(b) not in (2, 3) or (len(a) == 2 and len(b) == 3):
        raise IRError(f"matmul takes a [M, K] @ b [K, N], or batched a [B, M, K] @ b [B, K, N] or [K, N]; "
                      f"got {a} @ {b}")
    if a[-1] != b[-2]:
        raise IRError(f"matmul: a {a} has K = {a[-1]} but b {b} has K = {b[-2]}; they must match")
    if len(b) == 3 and b[0] != a[0]:
        raise IRError(f"batched matmul: a {a} and b {b} have different batch sizes")
    return a[:-1] + [b[-1]]


def _loss_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    logits = broadcast_shapes([shapes[n] for n in input_names(node.args[0])])
    target = list(shapes[node.args[1].name])
    if target != logits[:-1]:
        raise IRError(f"cross_entropy: target must have the logits' shape without the class dim, "
                      f"{logits[:-1]}, got {target}")
    return [] if node.attr("reduction") == "mean" else logits[:-1]


def output_dtype(node: Node, float_dtype: str) -> str:
    """The output's dtype: int64 indices for argmax/argmin, else the float inputs' dtype."""
    return "int64" if node.op in ARG_REDUCE else float_dtype


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
    # a reduction always spells its dim: to a PyTorch reader sum(x) is over all elements
    if node.op in REDUCE | ARG_REDUCE or (node.op in ROW_PRESERVING and node.attr("dim", -1) != -1):
        dim = node.attr("dim")
        return f"{node.op}({to_text(node.args[0])}{'' if dim is None else f', dim={dim}'})"
    if node.op == MATMUL:
        return f"matmul({to_text(node.args[0])}, {to_text(node.args[1])}{', tf32=True' * bool(node.attr('tf32'))})"
    if node.op in LOSSES and node.attr("reduction") != "mean":
        return f"cross_entropy({to_text(node.args[0])}, {to_text(node.args[1])}, reduction='none')"
    if node.op in NORMS:
        args = [to_text(a) for a in node.args]
        if node.attr("has_bias") and not node.attr("has_weight"):
            args.insert(1, "None")            # keep the bias in the bias slot
        return f"{node.op}({', '.join(args)}, eps={node.attr('eps')!r})"
    return f"{node.op}({', '.join(to_text(a) for a in node.args)})"
