"""The shapes and the float dtype of the tensors a pasted module's get_inputs() makes, one per
parameter of forward: torch.rand/randn/randint and their kin, shaped by arithmetic, transposes,
casts and calls that keep their argument's shape.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from bot.generators.interface import GenerationError
from bot.request.pasted_constants import (TORCH_DTYPES, Dtype, NotConstant, assigned, bind, const,
                                          refuse_constant)

_MAKERS = {"rand", "randn", "ones", "zeros", "empty", "full", "randint", "rand_like", "randn_like"}


def read_inputs(fn: ast.FunctionDef, env: dict, tensors: list[str]) -> tuple[dict[str, list[int]], list[str]]:
    """Shapes and the dtype of forward's tensors from what get_inputs returns: (shape per tensor,
    the float dtype named, if any)."""
    local = dict(env)
    made: list[ast.expr] | None = None
    for stmt in fn.body:
        if isinstance(stmt, ast.Return) and isinstance(stmt.value, (ast.List, ast.Tuple)):
            made = list(stmt.value.elts)
            break
        target, value = assigned(stmt)
        if isinstance(target, ast.Name) and _is_tensor(value, local):
            local[target.id] = _Made(*_tensor(value, local, target.id))
        elif target is not None:
            try:
                bind(target, const(value, local), local)
            except NotConstant:
                refuse_constant(value, "get_inputs computes")
    if made is None:
        raise GenerationError(f"line {fn.lineno}: get_inputs must return a list of the tensors forward takes, "
                              "e.g. 'return [torch.randn(batch_size, dim)]'")
    if len(made) != len(tensors):
        raise GenerationError(f"get_inputs returns {len(made)} values but forward takes {len(tensors)} "
                              f"({', '.join(tensors)})")
    shapes, dtypes = {}, set()
    for name, expr in zip(tensors, made):
        shape, dtype = _tensor(expr, local, name)
        shapes[name] = shape
        if dtype:
            dtypes.add(dtype)
    if len(dtypes) > 1:
        raise GenerationError(f"get_inputs makes tensors of {' and '.join(sorted(dtypes))}; the offline kernels take "
                              "one float dtype for every input")
    return shapes, sorted(dtypes)


def made_shape(expr: ast.expr, env: dict, name: str) -> list[int]:
    """The shape of a tensor an expression makes the way get_inputs does (torch.randn(64, 1, 1) * 0.02);
    GenerationError where it cannot be told."""
    return _tensor(expr, env, name)[0]


@dataclass(frozen=True)
class _Made:
    """A local tensor of get_inputs: its shape and dtype (None: torch's default)."""
    shape: list[int]
    dtype: str | None


# Functions and methods that keep their tensor argument's shape (get_inputs often shapes values:
# torch.rand(n) * scale, .softmax(dim=-1), torch.triu(...)).
_SAME_SHAPE = {"abs", "exp", "log", "sigmoid", "tanh", "relu", "softmax", "log_softmax", "triu", "tril", "clamp",
               "sign", "neg", "sqrt", "contiguous", "cuda", "to", "half", "float", "bfloat16", "clone", "detach",
               "requires_grad_", "mul", "add", "sub", "div"}


def _is_tensor(value: ast.expr | None, env: dict) -> bool:
    return value is not None and any(isinstance(n, ast.Call) and _maker(n) or
                                     isinstance(n, ast.Name) and isinstance(env.get(n.id), _Made)
                                     for n in ast.walk(value))


def _maker(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) == "torch" \
        and call.func.attr in _MAKERS


def _tensor(expr: ast.expr, env: dict, name: str) -> tuple[list[int], str | None]:
    """(shape, dtype or None) of a tensor get_inputs makes."""
    if isinstance(expr, ast.Name) and isinstance(env.get(expr.id), _Made):
        return env[expr.id].shape, env[expr.id].dtype
    if isinstance(expr, ast.Call) and _maker(expr):
        return _made(expr, env)
    if isinstance(expr, ast.BinOp):
        shapes = [_tensor(s, env, name) for s in (expr.left, expr.right) if _is_tensor(s, env)]
        if shapes:
            return _broadcast([s for s, _ in shapes], expr, name), next((d for _, d in shapes if d), None)
    if isinstance(expr, ast.UnaryOp) and _is_tensor(expr.operand, env):
        return _tensor(expr.operand, env, name)
    if isinstance(expr, ast.Attribute) and expr.attr in ("T", "mT") and _is_tensor(expr.value, env):
        shape, dtype = _tensor(expr.value, env, name)
        return shape[:-2] + shape[-2:][::-1], dtype
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _SAME_SHAPE:
        inner = expr.func.value if _is_tensor(expr.func.value, env) else next(
            (a for a in expr.args if _is_tensor(a, env)), None)
        if inner is not None:
            shape, dtype = _tensor(inner, env, name)
            return shape, _cast(expr, env) or dtype
    if not _is_tensor(expr, env):
        raise GenerationError(f"line {expr.lineno}: get_inputs gives {name} {ast.unparse(expr)[:40]}, which is not "
                              "a tensor; the offline kernels take tensors only: make it a constant in forward or an "
                              "__init__ argument")
    raise GenerationError(f"line {expr.lineno}: I cannot tell the shape get_inputs gives {name} from "
                          f"{ast.unparse(expr)[:60]!r}; make it with torch.rand/randn/randint(sizes, dtype=...)")


def _broadcast(shapes: list[list[int]], at: ast.expr, name: str) -> list[int]:
    rank = max(len(s) for s in shapes)
    out = []
    for sizes in zip(*([1] * (rank - len(s)) + s for s in shapes)):
        if len(set(sizes) - {1}) > 1:
            raise GenerationError(f"line {at.lineno}: get_inputs combines tensors of shapes "
                                  f"{' and '.join(map(str, shapes))} for {name}, which do not broadcast")
        out.append(max(sizes))
    return out


def _made(base: ast.Call, env: dict) -> tuple[list[int], str | None]:
    """torch.rand(*sizes, dtype=...) and its kin."""
    kinds = {k.arg: k.value for k in base.keywords}
    args = list(base.args)
    if base.func.attr == "randint":              # randint(high, size) or randint(low, high, size)
        args, dtype = args[-1:], None
    else:
        args, dtype = args[:1] if base.func.attr == "full" else args, _cast(base, env)
    try:
        sizes = const(kinds["size"], env) if "size" in kinds else const(ast.Tuple(args, ast.Load()), env)
    except NotConstant as e:
        refuse_constant(e.node if hasattr(e.node, "lineno") else base, "the size")
    sizes = _flat(sizes)
    if not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        raise GenerationError(f"line {base.lineno}: get_inputs makes a tensor of sizes {sizes}; sizes must be "
                              "positive integers")
    return sizes, dtype


def _flat(v) -> list:
    return [x for item in v for x in _flat(item)] if isinstance(v, (tuple, list)) else [v]


def _cast(call: ast.Call, env: dict) -> str | None:
    """The float dtype a maker's dtype= or a cast (.half(), .to(torch.bfloat16)) names, or None."""
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in ("half", "bfloat16", "float"):
        return TORCH_DTYPES[f.attr]
    for value in [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]:
        if isinstance(value, ast.Attribute) and ast.unparse(value).startswith("torch."):
            try:
                named = const(value, env)
            except NotConstant:
                named = None
            if not isinstance(named, Dtype):
                raise GenerationError(f"line {call.lineno}: get_inputs asks for {ast.unparse(value)}; the offline "
                                      "kernels take torch.float16, torch.bfloat16 or torch.float32")
            return named.name
    return None
