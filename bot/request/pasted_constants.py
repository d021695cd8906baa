"""The constants of a pasted module's file, evaluated: numbers, strings, tuples and lists, module-level
sizes, math constants and functions, torch dtypes, and what a constant function (get_init_inputs)
returns. A name bound to anything else is Opaque, refused naming its line where it is read.
literal() writes a value back as code.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Any

from bot.generators.interface import GenerationError

TORCH_DTYPES = {"float16": "float16", "half": "float16", "bfloat16": "bfloat16", "float32": "float32",
                "float": "float32", "bool": "bool", "int64": "int64", "long": "int64"}
# Comparisons and logical ops: their result is a bool tensor of their operands' shape.
MASK_CALLS = {"gt", "ge", "lt", "le", "eq", "ne", "logical_not", "logical_and", "logical_or", "logical_xor"}
_MATH = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf}
_MATH_FNS = {"sqrt": math.sqrt, "exp": math.exp, "log": math.log, "tanh": math.tanh, "erf": math.erf,
             "cos": math.cos, "sin": math.sin, "log2": math.log2, "log10": math.log10, "pow": math.pow}
_BUILTINS = {"int": int, "float": float, "abs": abs, "min": min, "max": max, "round": round, "len": len,
             "tuple": tuple, "list": list}
_MAX_SIZE = 1 << 40          # bigger constants are not sizes: refuse rather than compute them


@dataclass(frozen=True)
class Dtype:
    name: str                # a dtype get_inputs names: a float one (torch.float16), torch.bool or torch.int64


@dataclass(frozen=True)
class Opaque:
    """An attribute set in a way this reader does not evaluate."""
    line: int
    text: str


class NotConstant(Exception):
    """What this reader does not evaluate: node, the expression that is not a constant."""
    def __init__(self, node: ast.AST):
        self.node = node


def module_constants(tree: ast.Module) -> dict:
    """Module-level names bound to constants (sizes, tuples of them); others are Opaque."""
    env: dict = {}
    for n in tree.body:
        target, value = assigned(n)
        if target is None:
            continue
        targets = n.targets if isinstance(n, ast.Assign) else [target]     # height = width = 128: both
        try:
            value = const(value, env)
            for t in targets:
                bind(t, value, env)
        except NotConstant:
            for t in (t for target in targets for t in ast.walk(target)):
                if isinstance(t, ast.Name):
                    env[t.id] = Opaque(n.lineno, ast.unparse(n)[:60])
    return env


def assigned(n: ast.stmt) -> tuple[ast.expr | None, ast.expr | None]:
    """(target, value) of a plain or annotated assignment (the first target of a = b = value), else
    (None, None)."""
    if isinstance(n, ast.Assign):
        return n.targets[0], n.value
    if isinstance(n, ast.AnnAssign) and n.value is not None:
        return n.target, n.value
    return None, None


def bind(target: ast.expr, value: Any, env: dict) -> None:
    """Bind target (a name, or a tuple or list of them) to value in env."""
    if isinstance(target, ast.Name):
        env[target.id] = value
    elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (tuple, list)) \
            and len(value) == len(target.elts):
        for t, v in zip(target.elts, value):
            bind(t, v, env)
    else:
        raise NotConstant(target)


def const(n: ast.expr, env: dict) -> Any:
    """The value of a constant expression (numbers, strings, tuples and lists, sizes, math)."""
    if isinstance(n, ast.Constant):
        return n.value
    if isinstance(n, ast.Name):
        value = env.get(n.id, _BUILTINS.get(n.id, n))
        if value is n or isinstance(value, Opaque):
            raise NotConstant(n)
        return value
    if isinstance(n, ast.Attribute):
        path = ast.unparse(n)
        if path.startswith("math.") and n.attr in _MATH:
            return _MATH[n.attr]
        if path.startswith("torch.") and n.attr in TORCH_DTYPES:
            return Dtype(TORCH_DTYPES[n.attr])
        raise NotConstant(n)
    if isinstance(n, (ast.Tuple, ast.List)):
        items: list = []
        for e in n.elts:
            if isinstance(e, ast.Starred):
                items += list(const(e.value, env))
            else:
                items.append(const(e, env))
        return tuple(items) if isinstance(n, ast.Tuple) else items
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd, ast.Not)):
        v = const(n.operand, env)
        return -v if isinstance(n.op, ast.USub) else +v if isinstance(n.op, ast.UAdd) else not v
    if isinstance(n, ast.BinOp):
        return _binop(n, const(n.left, env), const(n.right, env))
    if isinstance(n, ast.Subscript):
        return const(n.value, env)[const(n.slice, env)]
    if isinstance(n, ast.Slice):
        return slice(*(None if p is None else const(p, env) for p in (n.lower, n.upper, n.step)))
    if isinstance(n, ast.Call) and not n.keywords:
        return _call(n, [const(a, env) for a in n.args])
    if isinstance(n, ast.IfExp):
        return const(n.body if const(n.test, env) else n.orelse, env)
    if isinstance(n, ast.BoolOp):         # Python's short circuit: the first deciding operand's value
        value = None
        for operand in n.values:
            value = const(operand, env)
            if bool(value) is isinstance(n.op, ast.Or):
                return value
        return value
    if isinstance(n, ast.Compare):
        return _compared(n, env)
    raise NotConstant(n)


def _compared(n: ast.Compare, env: dict) -> bool:
    ops = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
           ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
           ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b,
           ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
    left = const(n.left, env)
    for op, right in zip(n.ops, n.comparators):
        right = const(right, env)
        try:
            if not ops[type(op)](left, right):
                return False
        except TypeError:
            raise NotConstant(n) from None
        left = right
    return True


def _binop(n: ast.BinOp, a, b):
    numbers = all(isinstance(v, (int, float)) for v in (a, b))
    if isinstance(n.op, ast.Pow) and not (numbers and abs(b) <= 64):
        raise NotConstant(n)
    if isinstance(n.op, ast.Mult) and not numbers and not (isinstance(b, int) and 0 <= b <= 64 or
                                                           isinstance(a, int) and 0 <= a <= 64):
        raise NotConstant(n)
    ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b, ast.Div: lambda: a / b,
           ast.FloorDiv: lambda: a // b, ast.Mod: lambda: a % b, ast.Pow: lambda: a ** b}
    if type(n.op) not in ops:
        raise NotConstant(n)
    try:
        value = ops[type(n.op)]()
    except (TypeError, ZeroDivisionError, OverflowError):
        raise NotConstant(n) from None
    if isinstance(value, (int, float)) and abs(value) > _MAX_SIZE and not math.isinf(value):
        raise NotConstant(n)
    return value


def _call(n: ast.Call, args: list):
    path = ast.unparse(n.func)
    fn = _MATH_FNS.get(path[5:]) if path.startswith("math.") else _BUILTINS.get(path)
    if fn is None:
        raise NotConstant(n)
    try:
        return fn(*args)
    except (TypeError, ValueError, OverflowError):
        raise NotConstant(n) from None


def folded(n: ast.expr) -> ast.expr:
    """A number where the expression is a constant (math.sqrt(2.0 / math.pi), 64 // 2), else n."""
    try:
        value = const(n, {})
    except (NotConstant, TypeError, ValueError, IndexError, KeyError):
        return n
    return literal(value, n) if isinstance(value, (int, float)) and not isinstance(value, bool) else n


def returned_constant(fn: ast.FunctionDef, env: dict) -> Any:
    """What a constant function (get_init_inputs) returns, its local assignments evaluated."""
    local = dict(env)
    for stmt in fn.body:
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            return const(stmt.value, local)
        target, value = assigned(stmt)
        if target is not None:
            bind(target, const(value, local), local)
        elif not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            raise NotConstant(stmt)
    raise NotConstant(fn)


def refuse_constant(n: ast.AST, what: str) -> None:
    """Refuse what is not a constant, naming its line and what it was for."""
    raise GenerationError(f"line {n.lineno}: {what} {ast.unparse(n)[:60]!r} is not a constant I can evaluate "
                          "(numbers, tuples, module-level sizes and math constants)")


def literal(value: Any, at: ast.AST) -> ast.expr:
    """A constant value written back as code, placed at `at`."""
    if isinstance(value, (tuple, list)):
        node = ast.Tuple([literal(v, at) for v in value], ast.Load())
    elif isinstance(value, (int, float)) and value < 0:
        node = ast.UnaryOp(ast.USub(), ast.Constant(-value))
    else:
        node = ast.Constant(value)
    return ast.copy_location(node, at)
