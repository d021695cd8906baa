"""A pasted module's loops and branches written out as straight-line statements.

Modules stack layers in loops (`for layer in self.layers: x = layer(x)`, `for i in range(n): ...`)
and pick branches on constructor flags (`if self.use_bias: ...`). The kernel is one expression, so
each `for` whose iterations are known when the module is read is unrolled (its variable written in
as each item), and each `if` whose test is a constant keeps the branch it takes. Loops over tensor
values, `while`, `break`/`continue` and `for ... else` are refused naming their line: reading them
any other way would compute something else.
"""
from __future__ import annotations

import ast
import copy
from typing import Any, Callable

from bot.generators.interface import GenerationError
from bot.request.pasted_constants import NotConstant, literal

MAX_STATEMENTS = 4096       # unrolled statements at most: a bigger loop is not a kernel's body

Value = Callable[[ast.expr], Any]                      # a constant expression's value; NotConstant if not
Modules = Callable[[ast.expr], "list[ast.expr] | None"]  # self.<module list>'s items as expressions, else None


def unrolled(body: list[ast.stmt], value: Value, modules: Modules) -> list[ast.stmt]:
    """body with every `for` unrolled and every `if` reduced to the branch its constant test takes."""
    out: list[ast.stmt] = []
    for stmt in body:
        step = expanded(stmt, value, modules)
        out += [stmt] if step is None else unrolled(step, value, modules)
        if len(out) > MAX_STATEMENTS:
            raise GenerationError(f"line {stmt.lineno}: unrolled, the loops here give more than {MAX_STATEMENTS} "
                                  "statements; that is not one kernel")
    return out


def expanded(stmt: ast.stmt, value: Value, modules: Modules) -> list[ast.stmt] | None:
    """One step: a `for` as its iterations' bodies one after another (the variable written in), an `if`
    as the branch it takes; None for a statement that is neither. The constants are read now, so a
    caller that assigns as it goes (__init__) expands each loop with the names bound before it."""
    if isinstance(stmt, ast.For):
        return _for(stmt, value, modules)
    if isinstance(stmt, ast.If):
        return stmt.body if _test(stmt, value) else stmt.orelse
    if isinstance(stmt, (ast.While, ast.AsyncFor, ast.With, ast.Try, ast.Break, ast.Continue)):
        raise GenerationError(f"line {stmt.lineno}: {type(stmt).__name__.lower()} is not read here; a kernel "
                              "is read from assignments, `for` over a range or a module list, and `if` on "
                              "constants")
    return None


def _test(stmt: ast.If, value: Value) -> bool:
    try:
        return bool(value(stmt.test))
    except NotConstant:
        raise GenerationError(f"line {stmt.lineno}: `if {ast.unparse(stmt.test)[:60]}` depends on what is not a "
                              "constant (a tensor's values, or an attribute I cannot evaluate); a kernel takes one "
                              "path, so write the branch the module takes") from None


def _for(stmt: ast.For, value: Value, modules: Modules) -> list[ast.stmt]:
    if stmt.orelse:
        raise GenerationError(f"line {stmt.lineno}: `for ... else` is not read here; write the loop without else")
    names = _names(stmt.target, stmt)
    for n in ast.walk(ast.Module(stmt.body, [])):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id in names:
            raise GenerationError(f"line {n.lineno}: the loop assigns its own variable {n.id}; use another name")
    out: list[ast.stmt] = []
    for item in items(stmt.iter, value, modules):
        bound = dict(zip(names, _parts(stmt.target, item, stmt)))
        out += [_Substitute(bound).visit(copy.deepcopy(s)) for s in stmt.body]
        if len(out) > MAX_STATEMENTS:
            raise GenerationError(f"line {stmt.lineno}: unrolled, this loop gives more than {MAX_STATEMENTS} "
                                  "statements; that is not one kernel")
    return out


def items(it: ast.expr, value: Value, modules: Modules) -> list[ast.expr]:
    """What a loop runs over, as one expression per iteration."""
    listed = modules(it)
    if listed is not None:
        return listed
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in ("enumerate", "zip", "reversed"):
        return _combined(it, value, modules)
    try:
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and not it.keywords:
            bounds = [value(a) for a in it.args]
            if not all(isinstance(b, int) for b in bounds) or len(range(*bounds)) > MAX_STATEMENTS:
                raise NotConstant(it)
            return [ast.Constant(k) for k in range(*bounds)]
        seq = value(it)
        if isinstance(seq, (tuple, list)):
            return [literal(v, it) for v in seq]
    except (NotConstant, TypeError, ValueError):
        pass
    raise GenerationError(f"line {it.lineno}: the loop runs over {ast.unparse(it)[:60]!r}, which is not a range of "
                          "constants, a tuple of them or a module list set in __init__ (nn.ModuleList, "
                          "nn.Sequential); a kernel's loops must be known when it is written")


def comprehended(e: ast.expr, value: Value, modules: Modules) -> list[ast.expr] | None:
    """A list comprehension of one `for` and no `if` ([torch.randn(n) for _ in range(3)]) as its items,
    the loop variable written into each; None for any other expression."""
    if not (isinstance(e, ast.ListComp) and len(e.generators) == 1 and not e.generators[0].ifs
            and not e.generators[0].is_async):
        return None
    gen = e.generators[0]
    loop = ast.For(gen.target, gen.iter, [ast.Expr(e.elt)], [], lineno=e.lineno)
    return [stmt.value for stmt in unrolled([loop], value, modules)]


def _combined(it: ast.Call, value: Value, modules: Modules) -> list[ast.expr]:
    """enumerate(xs[, start]), zip(xs, ys, ...), reversed(xs)."""
    how = it.func.id
    if it.keywords or not it.args or (how == "reversed" and len(it.args) != 1):
        raise GenerationError(f"line {it.lineno}: {ast.unparse(it)[:60]!r}: {how} is read with its positional "
                              "arguments only")
    if how == "reversed":
        return items(it.args[0], value, modules)[::-1]
    if how == "enumerate":
        start = value(it.args[1]) if len(it.args) > 1 else 0
        return [ast.Tuple([ast.Constant(start + k), x], ast.Load())
                for k, x in enumerate(items(it.args[0], value, modules))]
    return [ast.Tuple(list(xs), ast.Load()) for xs in zip(*(items(a, value, modules) for a in it.args))]


def _names(target: ast.expr, stmt: ast.For) -> list[str]:
    names = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
    if not all(isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.Store)) for n in ast.walk(target)):
        raise GenerationError(f"line {stmt.lineno}: the loop variable {ast.unparse(target)!r} is not a name or a "
                              "tuple of names")
    return names


def _parts(target: ast.expr, item: ast.expr, stmt: ast.For) -> list[ast.expr]:
    """The item's parts in the order _names lists the target's names."""
    if isinstance(target, ast.Name):
        return [item]
    if not isinstance(item, ast.Tuple) or len(item.elts) != len(target.elts):
        raise GenerationError(f"line {stmt.lineno}: {ast.unparse(item)[:60]!r} does not unpack into "
                              f"{ast.unparse(target)!r}")
    return [p for t, x in zip(target.elts, item.elts) for p in _parts(t, x, stmt)]


class _Substitute(ast.NodeTransformer):
    """The loop variable's reads replaced by this iteration's item."""

    def __init__(self, bound: dict[str, ast.expr]):
        self.bound = bound

    def visit_Name(self, n: ast.Name) -> ast.expr:
        if isinstance(n.ctx, ast.Load) and n.id in self.bound:
            return ast.copy_location(copy.deepcopy(self.bound[n.id]), n)
        return n
