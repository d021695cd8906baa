"""A store into a slice of a tensor in pasted code, `out[:, :-1, :2] = x[:, 1:, :2]` or `y[:, 0] = 0`,
written out of place as torch.cat of the tensor's pieces around the region and the stored value:
along each sliced dim, the part before the region, the region, the part after it. Cat and slices
with number bounds hold for any size, so the runner's other cases keep the same meaning. The value
takes the region's shape as torch broadcasts it (expand_as; a number fills it). Steps other than 1,
tensor indices and masks (bot.request.torch_code's masked store) are not read here.
"""
from __future__ import annotations

import ast

_TORCH = ast.Name("torch", ast.Load())


def slice_store(stmt: ast.stmt, tensors: set[str]) -> tuple[str, ast.expr] | None:
    """(name, its new value) for `name[slices and integers] = value` with name a tensor; None for
    other statements."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript)):
        return None
    target = stmt.targets[0]
    if not (isinstance(target.value, ast.Name) and target.value.id in tensors):
        return None
    cuts = _cuts(target.slice)
    if cuts is None:
        return None
    return target.value.id, _placed(ast.Name(target.value.id, ast.Load()), stmt.value, cuts)


def _cuts(index: ast.expr) -> list[tuple[int, int | None, int | None, bool]] | None:
    """(dim, start, stop, selected) per dim the index narrows (dims after an Ellipsis counted from the
    end); None where it is not slices of step 1, integers, ':' and one Ellipsis."""
    items = list(index.elts) if isinstance(index, ast.Tuple) else [index]
    dots = [k for k, e in enumerate(items) if isinstance(e, ast.Constant) and e.value is Ellipsis]
    if len(dots) > 1:
        return None
    cut = dots[0] if dots else len(items)
    dims = list(enumerate(items[:cut])) + [(k - len(items[cut + 1:]), e) for k, e in enumerate(items[cut + 1:])]
    cuts = []
    for d, e in dims:
        if isinstance(e, ast.Slice):
            bounds = [_int(b) for b in (e.lower, e.upper, e.step)]
            if any(b is False for b in bounds) or bounds[2] not in (None, 1) or not _sized_alike(*bounds[:2]):
                return None
            if bounds[:2] != [None, None]:
                cuts.append((d, bounds[0], bounds[1], False))
        elif (k := _int(e)) is not None and k is not False:
            cuts.append((d, k, k + 1 if k != -1 else None, True))
        else:
            return None
    return cuts or None


def _sized_alike(start: int | None, stop: int | None) -> bool:
    """Bounds whose region is not empty at any size: counted from the same end, start before stop.
    (1:-1 is empty at sizes up to 2, where torch stores nothing and the cat would grow the tensor.)"""
    if start is None or stop is None:
        return True
    return (start >= 0) == (stop >= 0) and start < stop


def _int(e: ast.expr | None) -> int | None | bool:
    """A bound written as a whole number; None where absent; False for anything else."""
    if e is None:
        return None
    try:
        value = ast.literal_eval(e)
    except ValueError:
        return False
    return value if type(value) is int else False


def _placed(base: ast.expr, value: ast.expr, cuts: list) -> ast.expr:
    """base with the region cuts name replaced by value: a cat along the first cut's dim of base's
    part before, the region (with the rest placed inside it) and the part after."""
    (d, start, stop, selected), rest = cuts[0], cuts[1:]
    region = _sliced(base, d, start, stop)
    if rest:
        # a selected dim stays in the region, of size 1, so the other cuts keep their dims
        inner = _placed(region, _unsqueezed(value, d) if selected else value, rest)
    else:
        inner = _filled(region, _unsqueezed(value, d) if selected else value)
    pieces = ([_sliced(base, d, None, start)] if start not in (None, 0) else []) + [inner] + \
        ([_sliced(base, d, stop, None)] if stop is not None else [])
    if len(pieces) == 1:
        return inner
    return ast.Call(ast.Attribute(_TORCH, "cat", ast.Load()), [ast.List(pieces, ast.Load())],
                    [ast.keyword("dim", ast.Constant(d))])


def _sliced(base: ast.expr, d: int, start: int | None, stop: int | None) -> ast.expr:
    """base[..., start:stop] along dim d (counted from the front, or from the end where negative)."""
    piece = ast.Slice(None if start is None else ast.Constant(start), None if stop is None else ast.Constant(stop), None)
    whole = [ast.Slice(None, None, None)] * (d if d >= 0 else -d - 1)
    items = [*whole, piece] if d >= 0 else [ast.Constant(Ellipsis), piece, *whole]
    return ast.Subscript(base, ast.Tuple(items, ast.Load()) if len(items) > 1 else piece, ast.Load())


def _unsqueezed(value: ast.expr, d: int) -> ast.expr:
    """A value stored at one index of dim d (y[:, 0] = v): v with that dim back, of size 1."""
    if is_number(value):
        return value
    return ast.Call(ast.Attribute(value, "unsqueeze", ast.Load()), [ast.Constant(d)], [])


def _filled(region: ast.expr, value: ast.expr) -> ast.expr:
    """The value in the region's shape, as torch broadcasts what a slice store writes."""
    if is_number(value):
        return ast.Call(ast.Attribute(_TORCH, "full_like", ast.Load()), [region, value], [])
    return ast.Call(ast.Attribute(value, "expand_as", ast.Load()), [region], [])


def is_number(e: ast.expr) -> bool:
    """A value written as a number (2, -1.5, float('-inf')), not a tensor."""
    return (isinstance(e, ast.Constant) and isinstance(e.value, (int, float))) or \
        (isinstance(e, ast.UnaryOp) and isinstance(e.operand, ast.Constant)) or \
        (isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "float")
