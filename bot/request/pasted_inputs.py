"""The shapes and dtypes of the tensors a pasted module's get_inputs() makes, one per parameter of
forward: torch.rand/randn/randint and their kin (sized by numbers or by another tensor's x.shape, or
*_like another tensor), shaped by arithmetic, transposes, casts and calls that keep their argument's
shape. A comparison (torch.rand(n) > 0.5) or a cast to torch.bool makes a bool mask.
"""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

from bot.generators.interface import GenerationError
from bot.ops.node import IRError
from bot.ops.view import reshaped
from bot.request.pasted_constants import (MASK_CALLS, TORCH_DTYPES, Dtype, NotConstant, assigned, bind, const,
                                          refuse_constant)
from bot.request.pasted_loops import comprehended

_MAKERS = {"rand", "randn", "ones", "zeros", "empty", "full", "randint"}
_LIKE = {"rand_like", "randn_like", "ones_like", "zeros_like", "empty_like", "full_like", "randint_like"}
MASK = "bool"           # the dtype of a bool mask
INDEX = "int64"         # the dtype of indices (torch.randint's)


def read_inputs(fn: ast.FunctionDef, env: dict, tensors: list[str]) -> tuple[dict[str, list[int]],
                                                                               dict[str, str | None],
                                                                               dict[str, list[int]]]:
    """Shapes and dtypes of forward's tensors from what get_inputs returns: (shape per tensor, dtype
    per tensor: the float dtype or bool it names, else None, torch's default float; [low, high) per
    tensor made by torch.randint directly)."""
    local = dict(env)
    made: list[ast.expr] | None = None
    for stmt in fn.body:
        if isinstance(stmt, ast.Return):
            made = _returned(stmt.value, local)
            break
        target, value = assigned(stmt)
        value = value and _sized(value, local)          # n = x.shape[0]: a size, no tensor
        if isinstance(target, ast.Name) and _is_tensor(value, local):
            local[target.id] = _Made(*_tensor(value, local, target.id), _range(value, local))
        elif isinstance(target, ast.Subscript) and isinstance(local.get(ast.unparse(target.value)), _Made):
            continue        # m[:, 0] = True sets values, which the judge draws itself (as it draws randn's)
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
    read = {name: _tensor(expr, local, name) for name, expr in zip(tensors, made)}
    # a tensor made with no dtype is float32, torch's default: beside a .half() one PyTorch would promote
    floats = {dtype or "float32" for _, dtype in read.values() if dtype not in (MASK, INDEX)}
    if len(floats) > 1:
        raise GenerationError(f"get_inputs makes tensors of {' and '.join(sorted(floats))} (float32 where no dtype is "
                              "named), which PyTorch would promote to the widest; the offline kernels take one float "
                              "dtype for every input: make them all one dtype, or all float32 and name the dtype to "
                              "test in words ('in fp16')")
    ranges = {n: r for n, expr in zip(tensors, made) if (r := _range(expr, local)) is not None}
    return {n: shape for n, (shape, _) in read.items()}, {n: dtype for n, (_, dtype) in read.items()}, ranges


def _returned(value: ast.expr | None, local: dict) -> list[ast.expr] | None:
    # [x, y], (x, y), or [torch.randn(n) for _ in range(3)]: one tensor each
    if isinstance(value, (ast.List, ast.Tuple)):
        return list(value.elts)
    return value and comprehended(value, lambda e: const(e, local), lambda e: None)


def made_shape(expr: ast.expr, env: dict, name: str) -> list[int]:
    """The shape of a tensor an expression makes the way get_inputs does (torch.randn(64, 1, 1) * 0.02);
    GenerationError where it cannot be told."""
    return _tensor(expr, env, name)[0]


def made_tensor(expr: ast.expr, env: dict, name: str) -> tuple[list[int], str | None]:
    """(shape, dtype: None for torch's default float) of a tensor made as get_inputs makes them."""
    return _tensor(expr, env, name)


@dataclass(frozen=True)
class _Made:
    """A local tensor of get_inputs: its shape and dtype (None: torch's default), and [low, high) where
    torch.randint made it."""
    shape: list[int]
    dtype: str | None
    range: list[int] | None = None


def _range(expr: ast.expr, env: dict) -> list[int] | None:
    """[low, high) of torch.randint(high, size) or randint(low, high, size) (or a name bound to one)."""
    if isinstance(expr, ast.Name) and isinstance(env.get(expr.id), _Made):
        return env[expr.id].range
    if not (isinstance(expr, ast.Call) and _maker(expr) and expr.func.attr == "randint"):
        return None
    kinds = {k.arg: k.value for k in expr.keywords}
    written = list(expr.args if "size" in kinds else expr.args[:-1])
    given = {"low": ast.Constant(0), **dict(zip(("low", "high") if len(written) == 2 else ("high",), written)),
             **{k: v for k, v in kinds.items() if k in ("low", "high")}}
    try:
        low, high = const(given["low"], env), const(given["high"], env)
    except (NotConstant, KeyError):
        return None
    return [low, high] if type(low) is int and type(high) is int else None


# Functions and methods that keep their tensor argument's shape (get_inputs often shapes values:
# torch.rand(n) * scale, .softmax(dim=-1), torch.triu(...)).
_SAME_SHAPE = {"abs", "exp", "log", "sigmoid", "tanh", "relu", "softmax", "log_softmax", "triu", "tril", "clamp",
               "sign", "neg", "sqrt", "contiguous", "cuda", "to", "type", "half", "float", "bfloat16", "bool", "long", "clone",
               "detach", "requires_grad_", "mul", "add", "sub", "div", "bernoulli"}
# ... and MASK_CALLS make a bool mask of that shape (x.gt(0.5), torch.logical_not(m)).


def _is_tensor(value: ast.expr | None, env: dict) -> bool:
    return value is not None and any(isinstance(n, ast.Call) and _maker(n) or
                                     isinstance(n, ast.Name) and isinstance(env.get(n.id), _Made)
                                     for n in ast.walk(value))


def _maker(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) == "torch" \
        and call.func.attr in _MAKERS | _LIKE


def _tensor(expr: ast.expr, env: dict, name: str) -> tuple[list[int], str | None]:
    """(shape, dtype or None) of a tensor get_inputs makes."""
    if isinstance(expr, ast.Name) and isinstance(env.get(expr.id), _Made):
        return env[expr.id].shape, env[expr.id].dtype
    if isinstance(expr, ast.Call) and _maker(expr):
        return _made(expr, env, name)
    if isinstance(expr, ast.Compare) and _is_tensor(expr, env):          # torch.rand(n) > 0.5: a bool mask
        sides = [s for s in (expr.left, *expr.comparators) if _is_tensor(s, env)]
        return _broadcast([_tensor(s, env, name)[0] for s in sides], expr, name), MASK
    if isinstance(expr, ast.BinOp):
        made = [_tensor(s, env, name) for s in (expr.left, expr.right) if _is_tensor(s, env)]
        if made:
            return _broadcast([s for s, _ in made], expr, name), _combined_dtype(expr.op, [d for _, d in made])
    if isinstance(expr, ast.UnaryOp) and _is_tensor(expr.operand, env):
        return _tensor(expr.operand, env, name)
    if isinstance(expr, ast.Attribute) and expr.attr in ("T", "mT") and _is_tensor(expr.value, env):
        shape, dtype = _tensor(expr.value, env, name)
        return shape[:-2] + shape[-2:][::-1], dtype
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _RESHAPES \
            and _is_tensor(expr.func.value, env):
        shape, dtype = _tensor(expr.func.value, env, name)
        return _reshaped(expr, shape, env), dtype
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _SAME_SHAPE | MASK_CALLS:
        inner = expr.func.value if _is_tensor(expr.func.value, env) else next(
            (a for a in expr.args if _is_tensor(a, env)), None)
        if inner is not None:
            shape, dtype = _tensor(inner, env, name)
            return shape, MASK if expr.func.attr in MASK_CALLS else _cast(expr, env) or dtype
    if not _is_tensor(expr, env):
        try:
            value = const(expr, env)
        except NotConstant:
            value = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return [], None             # a number forward takes: a 0-d tensor input, drawn like any other
        raise GenerationError(f"line {expr.lineno}: get_inputs gives {name} {ast.unparse(expr)[:40]}, which is "
                              "neither a tensor nor a number; make it a constant in forward or an __init__ argument")
    raise GenerationError(f"line {expr.lineno}: I cannot tell the shape get_inputs gives {name} from "
                          f"{ast.unparse(expr)[:60]!r}; make it with torch.rand/randn/randint(sizes, dtype=...)")


_RESHAPES = {"view", "reshape", "unsqueeze"}


def _reshaped(call: ast.Call, shape: list[int], env: dict) -> list[int]:
    """The shape of x.view(sizes), x.reshape(sizes) (numbers, one of them -1 at most) or x.unsqueeze(d)
    of a tensor of `shape` (a buffer's torch.tril(torch.ones(n, n)).view(1, 1, n, n))."""
    try:
        args = [const(a, env) for a in call.args]
    except NotConstant as e:
        refuse_constant(e.node if hasattr(e.node, "lineno") else call, "the size")
    if call.func.attr == "unsqueeze" and len(args) == 1 and isinstance(args[0], int) and \
            -len(shape) - 1 <= args[0] <= len(shape):
        d = args[0] % (len(shape) + 1)
        return shape[:d] + [1] + shape[d:]
    sizes = _flat(args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args)
    if all(isinstance(s, int) and (s > 0 or s == -1) for s in sizes) and sizes.count(-1) <= 1:
        try:
            return reshaped(shape, sizes)
        except IRError:
            pass
    raise GenerationError(f"line {call.lineno}: {ast.unparse(call)[:60]!r} does not fit a tensor of shape {shape}")


def _broadcast(shapes: list[list[int]], at: ast.expr, name: str) -> list[int]:
    rank = max(len(s) for s in shapes)
    out = []
    for sizes in zip(*([1] * (rank - len(s)) + s for s in shapes)):
        if len(set(sizes) - {1}) > 1:
            raise GenerationError(f"line {at.lineno}: get_inputs combines tensors of shapes "
                                  f"{' and '.join(map(str, shapes))} for {name}, which do not broadcast")
        out.append(max(sizes))
    return out


def _combined_dtype(op: ast.operator, dtypes: list[str | None]) -> str | None:
    """The dtype of tensors combined by op: the first float one named; indices among themselves (and
    numbers) stay int64; masks and-ed, or-ed or xor-ed stay bool; a mask in arithmetic takes torch's
    default float dtype (None)."""
    floats = [d for d in dtypes if d not in (None, MASK, INDEX)]
    if floats:
        return floats[0]
    if INDEX in dtypes and None not in dtypes:
        return INDEX
    logical = isinstance(op, (ast.BitAnd, ast.BitOr, ast.BitXor))
    return MASK if logical and all(d == MASK for d in dtypes) else None


def _made(base: ast.Call, env: dict, name: str) -> tuple[list[int], str | None]:
    """torch.rand(*sizes, dtype=...) and its kin; torch.zeros_like(x, dtype=...) and its kin."""
    kinds = {k.arg: k.value for k in base.keywords}
    args, dtype = list(base.args), _cast(base, env)
    if base.func.attr in _LIKE:
        if not args or not _is_tensor(args[0], env):
            raise GenerationError(f"line {base.lineno}: torch.{base.func.attr} needs a tensor get_inputs made, "
                                  f"e.g. torch.{base.func.attr}(x)")
        shape, like = _tensor(args[0], env, name)
        return shape, dtype or like
    if base.func.attr == "randint":              # randint(high, size) or randint(low, high, size): int64
        args, dtype = args[-1:], dtype or INDEX
    elif base.func.attr == "full":
        args = args[:1]
    try:
        sized = _sized(kinds["size"] if "size" in kinds else ast.Tuple(args, ast.Load()), env)
        sizes = const(sized, env)
    except NotConstant as e:
        refuse_constant(e.node if hasattr(e.node, "lineno") else base, "the size")
    sizes = _flat(sizes)
    if not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        raise GenerationError(f"line {base.lineno}: get_inputs makes a tensor of sizes {sizes}; sizes must be "
                              "positive integers")
    return sizes, dtype


class _Sizes(ast.NodeTransformer):
    """x.shape and x.size(d) of a tensor get_inputs made, written as its sizes."""

    def __init__(self, env: dict):
        self.env = env

    def _sizes(self, n: ast.expr) -> ast.Tuple | None:
        made = self.env.get(n.id) if isinstance(n, ast.Name) else None
        if not isinstance(made, _Made):
            return None
        return ast.copy_location(ast.Tuple([ast.Constant(d) for d in made.shape], ast.Load()), n)

    def visit_Attribute(self, n: ast.Attribute) -> ast.expr:
        sizes = self._sizes(n.value) if n.attr == "shape" else None
        return sizes or self.generic_visit(n)

    def visit_Call(self, n: ast.Call) -> ast.expr:
        f = n.func
        sizes = self._sizes(f.value) if isinstance(f, ast.Attribute) and f.attr == "size" and not n.keywords else None
        if sizes is None or len(n.args) > 1:
            return self.generic_visit(n)
        return ast.copy_location(ast.Subscript(sizes, n.args[0], ast.Load()), n) if n.args else sizes


def _sized(expr: ast.expr, env: dict) -> ast.expr:
    """expr with the sizes of tensors get_inputs made written in (torch.randint(0, 2, x.shape))."""
    return _Sizes(env).visit(copy.deepcopy(expr))


def _flat(v) -> list:
    return [x for item in v for x in _flat(item)] if isinstance(v, (tuple, list)) else [v]


def _cast(call: ast.Call, env: dict) -> str | None:
    """The dtype a maker's dtype= or a cast (.half(), .bool(), .to(torch.bfloat16)) names, or None."""
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in ("half", "bfloat16", "float", "bool", "long"):
        return TORCH_DTYPES[f.attr]
    for value in [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]:
        if isinstance(value, ast.Attribute) and ast.unparse(value).startswith("torch."):
            try:
                named = const(value, env)
            except NotConstant:
                named = None
            if not isinstance(named, Dtype):
                raise GenerationError(f"line {call.lineno}: get_inputs asks for {ast.unparse(value)}; the offline "
                                      "kernels take torch.float16, torch.bfloat16 or torch.float32, torch.bool "
                                      "for a mask and torch.int64 for indices")
            return named.name
    return None
