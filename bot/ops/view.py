"""Views: unsqueeze, squeeze, flatten and reshape/view to unit dims. They move no data, so no kernel
is written for one: in a chain (bot.ops.chain) a view is a stage of its own whose operand is an input
or an earlier stage's output, and the entry takes the view of that tensor (`stage0.unsqueeze(1)`)
before handing it to the next kernel, whose family then reads an ordinary input of the new shape
(broadcast where it has unit dims). `A.unsqueeze(1) * B` is one pointwise kernel over a view of A;
`max_pool1d(relu(x @ w).unsqueeze(1)).squeeze(1)` is a matmul kernel and a pooling kernel.

Reshapes are read where every size is a number (1 or -1 inserting or removing unit dims, `bias.view(1, -1, 1,
1)`; others, `x.view(-1, 40)`, keep the shapes the request gives: the runner draws no other sizes there),
flatten over any dims, sizes that name the tensor's own dims (`x.view(x.size(0), -1)`, `x.view(b, c, h * w)`
after `b, c, h, w = x.shape`: flattens) and another tensor's shape (`y.view(b, c, h, w)` with those names,
`y.view_as(x)`: reshape_as).
"""
from __future__ import annotations

import ast
import math

from bot.ops.entry import Entry
from bot.ops.node import MOVERS, Call, IRError, Node, arguments, call, is_int_literal, is_none, number, prints

NAME = "view"
UNSQUEEZE, SQUEEZE, FLATTEN, RESHAPE, RESHAPE_AS = "unsqueeze", "squeeze", "flatten", "reshape", "reshape_as"
SLICE, SELECT, UNFLATTEN, EXPAND, EXPAND_AS = "slice", "select", "unflatten", "expand", "expand_as"
OPS = {UNSQUEEZE, SQUEEZE, FLATTEN, RESHAPE, RESHAPE_AS, SLICE, SELECT, UNFLATTEN, EXPAND, EXPAND_AS}
MOVERS.update(OPS)
ROOT = False
SUPPORTED = ("", "views of a tensor between kernels (unsqueeze, squeeze, flatten, reshape/view to unit dims, "
             "joining dims or splitting one by a constant (x.view(b, t, heads, -1), x.unflatten(2, (heads, -1))), "
             "view_as; slices x[:, a:b], x[..., 0], narrow, select, chunk(n, dim)[i], split(size, dim)[i], "
             "unbind(dim)[i]); expand and expand_as (broadcast to sizes, -1 keeping a dim); torch.diff(x, n, dim) "
             "(differences of neighbours: two slices subtracted)")
ALIASES = {"view": RESHAPE, "view_as": RESHAPE_AS}
KEYWORDS = {UNSQUEEZE: {"dim"}, SQUEEZE: {"dim"}, FLATTEN: {"start_dim", "end_dim"}, RESHAPE: {"shape"},
            RESHAPE_AS: {"other"}, "narrow": {"dim", "start", "length"}, SELECT: {"dim", "index"},
            UNFLATTEN: {"dim", "sizes"}, EXPAND: {"size"}, EXPAND_AS: {"other"}, "diff": {"n", "dim", "prepend", "append"}}
WORDS: list = []
OUTPUT_DTYPES: dict[str, str] = {}
ENTRIES: tuple[Entry, ...] = ()
MAX_RANK = 5
MAX_NUMEL = 2**31 - 1


def convert(c: Call) -> Node | None:
    if c.fname not in OPS | {"narrow", "diff"}:
        return None
    if c.fname == SLICE:
        raise IRError("slice a tensor with Python's syntax, x[:, a:b], or x.narrow(dim, start, length)")
    if not c.args:
        raise IRError(f"{c.fname} needs a tensor, e.g. x.{c.fname}(...)")
    x = c.expr(c.args[0])
    if x.op == "const":
        raise IRError(f"{c.fname} of a number: write the number itself")
    c = Call(c.fname, c.written, c.args[1:], c.kw, c.expr)
    if c.fname == UNSQUEEZE:
        return call(UNSQUEEZE, x, dim=_int(c, arguments(c, ("dim",)).get("dim"), "dim"))
    if c.fname == SQUEEZE:
        given = arguments(c, ("dim",)).get("dim")
        return call(SQUEEZE, x, dim=None if is_none(given) else _int(c, given, "dim"))
    if c.fname == FLATTEN:
        given = arguments(c, ("start_dim", "end_dim"))
        return call(FLATTEN, x, start=_int(c, given.get("start_dim", ast.Constant(0)), "start_dim"),
                    end=_int(c, given.get("end_dim", ast.Constant(-1)), "end_dim"))
    if c.fname in ("narrow", SELECT):
        return _narrow_or_select(c, x)
    if c.fname == "diff":
        return _diff(c, x)
    if c.fname == UNFLATTEN:
        given = arguments(c, ("dim", "sizes"))
        sizes = given.get("sizes")
        if not isinstance(sizes, (ast.Tuple, ast.List)) or len(sizes.elts) != 2:
            raise IRError("unflatten is read splitting one dim in two, e.g. x.unflatten(2, (heads, -1))")
        return _split(c, x, _int(c, given.get("dim"), "dim"), sizes.elts, None)
    if c.fname == EXPAND:
        written = c.kw.pop("size", None)
        elts = list(c.args) if written is None else [written]
        if len(elts) == 1 and isinstance(elts[0], (ast.Tuple, ast.List)):
            elts = list(elts[0].elts)
        return sized(EXPAND, x, [_expand_size(e, c) for e in elts])
    if c.fname == EXPAND_AS:
        other = arguments(c, ("other",)).get("other")
        if other is None:
            raise IRError("expand_as needs the tensor whose shape to take, e.g. b.expand_as(x)")
        return call(EXPAND_AS, x, c.expr(other))
    if c.fname == RESHAPE_AS:
        other = arguments(c, ("other",)).get("other")
        if other is None:
            raise IRError("reshape_as/view_as needs the tensor whose shape to take, e.g. y.view_as(x)")
        return call(RESHAPE_AS, x, c.expr(other))
    return _reshape(c, x)


def _reshape(c: Call, x: Node) -> Node:
    """x.view(sizes): unit dims (all sizes 1 or -1), flattens (sizes naming x's own dims), or reshape_as
    (sizes naming every dim of another tensor, in order)."""
    written = c.kw.pop("shape", None)
    elts = list(c.args) if written is None else [written]
    if len(elts) == 1 and isinstance(elts[0], (ast.Tuple, ast.List)):
        elts = list(elts[0].elts)
    if len(elts) == 1 and (whole := _shape_of(elts[0], c)) is not None:      # x.view(y.shape)
        return x if whole == x else call(RESHAPE_AS, x, whole)
    refs = [_dims_named(e, c) for e in elts]
    if not any(refs) and all(is_int_literal(e) for e in elts):
        return call(RESHAPE, x, sizes=_unit_sizes(c, elts))
    if len(refs) == 1 and refs[0]:      # one size, whoever's dims name it (targets.view(B * T)): all of x, as torch has it
        return call(FLATTEN, x, start=0, end=-1)
    owners = {r[0] for group in refs if group for r in group}
    if len(owners) == 1 and x not in owners and all(g and len(g) == 1 for g in refs) \
            and [g[0][1] for g in refs] == list(range(len(refs))):
        return call(RESHAPE_AS, x, owners.pop(), dims=len(refs))       # y.view(b, c): x's first dims
    if len(owners) == 1 and x not in owners and len(refs) > 1 and _is_minus_one(elts[-1]) \
            and all(g and len(g) == 1 for g in refs[:-1]) and [g[0][1] for g in refs[:-1]] == list(range(len(refs) - 1)):
        # out.view(B, T, -1) after B, T, _ = x.shape: x's first dims, the rest joined
        return call(RESHAPE_AS, x, owners.pop(), dims=len(refs) - 1, rest=True)
    kept = _named_then_units(refs, elts)
    if kept and len(owners) == 1:
        # y.view(b, c, 1, 1) after b, c = x.shape[:2] (a squeeze-excite gate): y as x's first dims, then
        # unit dims added (not a split of a dim y may not have)
        node = call(RESHAPE_AS, x, owners.pop(), dims=kept)
        for _ in range(len(refs) - kept):
            node = call(UNSQUEEZE, node, dim=-1)
        return node
    split = _split_at(refs) if len(owners) == 1 else None
    if split is not None:           # sizes naming x's dims, or another's of the same shape (B, T, C = x.size())
        return _split(c, x, split, elts[split:split + 2], len(refs) - 1, owners.pop())
    products = [_product(e, c) for e in elts]
    computed = all(s is not None for s in products) and sum(s == -1 for s in products) <= 1
    if owners == {x}:
        try:
            return _flattened(c, x, elts, refs)
        except IRError:
            if not computed:
                raise
    if computed:
        # sizes computed from inputs' sizes as written, each case's own (repeat_kv's
        # u.reshape(b, h * n_rep, t, d) after b, h, t, d = k.shape; a window partition's
        # x.view(b, h // ws, ws, w // ws, ws, c))
        return sized(RESHAPE, x, products)
    raise _unsupported(c, elts)


def _product(e: ast.expr, c: Call) -> int | tuple | None:
    """A view's size: a whole number (or -1), or (number, (input, dim), ...) for a product of inputs'
    sizes and numbers (k.shape[1] * 2), a factor (input, dim, k) for a size divided by k (x.shape[1] // 4);
    None for anything else."""
    if is_int_literal(e):
        return int(number(e)) if number(e) >= 1 or number(e) == -1 else None
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
        left, right = _product(e.left, c), _product(e.right, c)
        if left is None or right is None or -1 in (left, right):
            return None
        parts = [p for side in (left, right) for p in ((side,) if isinstance(side, int) else side)]
        return (math.prod(p for p in parts if isinstance(p, int)), *[p for p in parts if isinstance(p, tuple)])
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.FloorDiv) and is_int_literal(e.right) and number(e.right) >= 1:
        inner = _product(e.left, c)           # x.shape[1] // 4: one size divided (a window's count)
        if isinstance(inner, tuple) and inner[0] == 1 and len(inner) == 2 and len(inner[1]) == 2:
            return 1, (*inner[1], int(number(e.right)))
        return None
    named = _dims_named(e, c)
    if named and len(named) == 1 and named[0][0].op == "input":
        return 1, (named[0][0], named[0][1])
    return None


def sized(op: str, x: Node, sizes: list) -> Node:
    """A reshape or expand to sizes that may read inputs' sizes: those inputs join its operands (after
    x, which is operand 0), so every file names them as it names any input, and each size's (input,
    dim) becomes (operand, dim), resolved in each case (_resolved)."""
    sources: list[Node] = [x]
    for s in sizes:
        for factor in (s[1:] if isinstance(s, tuple) else ()):
            if factor[0] not in sources:
                sources.append(factor[0])
    indexed = tuple(s if isinstance(s, int) else (s[0], *[(sources.index(f[0]), *f[1:]) for f in s[1:]]) for s in sizes)
    return call(op, *sources, sizes=indexed)


def _resolved(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    """A reshape's or expand's sizes in one case: products of its operands' sizes read off their shapes."""
    return [s if isinstance(s, int) else s[0] * math.prod(shapes[node.args[f[0]].name][f[1]] // (f[2:] or (1,))[0]
                                                          for f in s[1:]) for s in node.attr("sizes")]


def _sizes_text(node: Node, texts: list[str]) -> str:
    """The sizes as PyTorch code; texts: the operands' texts (x's first)."""
    def one(s: int | tuple) -> str:
        if isinstance(s, int):
            return str(s)
        factors = [f"{operand_text(texts[f[0]])}.shape[{f[1]}]" + (f" // {f[2]}" if len(f) > 2 else "") for f in s[1:]]
        if len(factors) > 1 or s[0] != 1:
            factors = [f"({t})" if "//" in t else t for t in factors]
        return " * ".join(factors + [str(s[0])] * (s[0] != 1))
    return ", ".join(map(one, node.attr("sizes")))


def _expand_size(e: ast.expr, c: Call) -> int | tuple:
    """One size of x.expand(...): a whole number (-1 keeps the dim), or an input's size read as
    written, k.shape[2] (repeat_kv's k[:, :, None].expand(b, h, n_rep, t, d)), which each case
    resolves: a dim of 1 grows to it, any other must be it."""
    size = _product(e, c)
    if size is None or (isinstance(size, tuple) and (size[0] != 1 or len(size) != 2)):
        raise IRError("expand is read with its sizes as whole numbers (-1 keeping a dim) or an input's sizes: "
                      "x.expand(-1, 40), x.expand(y.shape[0], -1), or x.expand_as(y)")
    return size


def _named_then_units(refs: list, elts: list) -> int:
    """k where a view's sizes name one tensor's dims 0 .. k-1 in order (the first may be -1), then are 1s
    (at least one); else 0. A -1 there is read as that dim: where it would be another size, the view
    is refused (the numbers of elements differ), not read otherwise."""
    k = len(refs)
    while k and refs[k - 1] is None and is_int_literal(elts[k - 1]) and number(elts[k - 1]) == 1:
        k -= 1
    first = 1 if k > 1 and refs[0] is None and _is_minus_one(elts[0]) else 0
    named = k < len(refs) and all(g and len(g) == 1 for g in refs[first:k]) \
        and [g[0][1] for g in refs[first:k]] == list(range(first, k))
    return k if k and named else 0


def _is_minus_one(e: ast.expr) -> bool:
    return is_int_literal(e) and number(e) == -1


def _split_at(refs: list) -> int | None:
    """Where x.view(sizes) splits x's dim d in two: sizes naming x's dims 0 .. d-1, two sizes that
    name none (numbers, -1, x.size(d) // n), then x's dims d+1 ... in order; None where it does not."""
    for d in range(len(refs) - 1):
        around = [g for k, g in enumerate(refs) if k not in (d, d + 1)]
        if all(g and len(g) == 1 for g in around) and [g[0][1] for g in around] == \
                [*range(d), *range(d + 1, len(refs) - 1)] and all(g is None for g in refs[d:d + 2]):
            return d
    return None


def _split(c: Call, x: Node, d: int, pair: list, rank: int | None, like: Node | None = None) -> Node:
    """x's dim d split in two: sizes a number and -1, two numbers, or a number and `x.size(d) // number`.
    rank: the rank x must have (a view naming its other dims: with more, the view would merge them);
    like: the tensor whose dims the view's sizes name, x or one that must have x's shape."""
    owner, sizes = like if like is not None else x, []
    for e in pair:
        if is_int_literal(e) and (number(e) > 0 or number(e) == -1):
            sizes.append(int(number(e)))
        elif isinstance(e, ast.BinOp) and isinstance(e.op, ast.FloorDiv) and is_int_literal(e.right) \
                and _dims_named(e.left, c) == [(owner, d)] and number(e.right) in [number(p) for p in pair if p is not e]:
            sizes.append(-1)
        else:
            raise _unsupported(c, [*pair])
    if sizes.count(-1) > 1:
        raise _unsupported(c, [*pair])
    args = (x,) if owner == x else (x, owner)
    return call(UNFLATTEN, *args, dim=d, sizes=tuple(sizes), **({"rank": rank} if rank is not None else {}))


def _narrow_or_select(c: Call, x: Node) -> Node:
    """x.narrow(dim, start, length) (length a number, or x.size(dim) - k: up to k before the end) and
    x.select(dim, index), as slices."""
    if c.fname == SELECT:
        given = arguments(c, ("dim", "index"))
        return call(SELECT, x, dim=_int(c, given.get("dim"), "dim"), index=_int(c, given.get("index"), "index"))
    given = arguments(c, ("dim", "start", "length"))
    dim, start = _int(c, given.get("dim"), "dim"), _int(c, given.get("start"), "start")
    length = given.get("length")
    if length is not None and is_int_literal(length):
        stop = start + int(number(length))
        if start < 0 < stop:
            raise IRError(f"narrow from {start} over {stop - start} elements runs past the end of dim {dim}")
        if start < 0 and stop == 0:
            return sliced(x, dim, start, None)
        return sliced(x, dim, start, stop, within=True)
    short = _size_less(length, c, x, dim)
    if short is None or start < 0 or start - short > 0:
        raise IRError(f"narrow takes a length as a number or as x.size({dim}) - k, got "
                      f"{'nothing' if length is None else repr(ast.unparse(length))}")
    return sliced(x, dim, start, start - short if start - short else None)


def _size_less(e: ast.expr | None, c: Call, x: Node, dim: int) -> int | None:
    """k where e is `x.size(dim) - k` or `x.shape[dim] - k` (k >= 0), else None."""
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Sub) and is_int_literal(e.right):
        named = _dims_named(e.left, c)
        if named == [(x, dim)] and number(e.right) >= 0:
            return int(number(e.right))
    return None


def _diff(c: Call, x: Node) -> Node:
    """torch.diff(x, n, dim): x[1:] - x[:-1] along dim, n times."""
    given = arguments(c, ("n", "dim", "prepend", "append"))
    if any(not is_none(given.get(k)) for k in ("prepend", "append")):
        raise IRError("torch.diff is read without prepend and append; torch.cat them onto x first")
    n, dim = (_int(c, given.get(k, ast.Constant(default)), k) for k, default in (("n", 1), ("dim", -1)))
    if n < 1:
        raise IRError(f"torch.diff with n={n}: n of 1 or more is read (n=0 is x itself)")
    for _ in range(n):
        x = call("sub", sliced(x, dim, 1, None), sliced(x, dim, None, -1))
    return x


def sliced(x: Node, dim: int, start: int | None, stop: int | None, step: int = 1, within: bool = False,
           whole: int | None = None) -> Node:
    """x[..., start:stop:step] along dim; within (narrow, split): torch raises where it runs past the dim,
    where Python's slice would stop short; whole (split by a list of sizes): the dim's size the sizes add
    up to, which torch requires."""
    return call(SLICE, x, dim=dim, start=start, stop=stop, step=step, **({"within": True} if within else {}),
                **({"whole": whole} if whole is not None else {}))


def subscript(n: ast.Subscript, expr) -> Node:
    """x[...] with slices, integers and one Ellipsis (dims after it counted from the end), and one piece
    of a tensor cut along a dim: x.chunk(n, dim)[i], x.split(size, dim)[i], x.unbind(dim)[i]."""
    if isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Attribute) \
            and n.value.func.attr in ("chunk", "split", "unbind", "tensor_split"):
        return _piece(n, expr)
    if isinstance(n.value, ast.Call) and _called(n.value.func) in TUPLES:
        raise IRError(f"{ast.unparse(n)}: {_called(n.value.func)} gives a tuple; write the part as its own op "
                      "(torch.amax(x, dim) for max's values, argmax for its indices)")
    items = list(n.slice.elts) if isinstance(n.slice, ast.Tuple) else [n.slice]
    if sum(isinstance(e, ast.List) for e in items) == 1 and all(isinstance(e, (ast.List, ast.Slice)) or (
            isinstance(e, ast.Constant) and e.value is Ellipsis) for e in items):
        items = [_kept(e) for e in items]   # one list among slices; several, or beside integers, index jointly
    if any(is_none(e) for e in items):
        return _with_new_dims(n, items, expr)
    tensors = [k for k, e in enumerate(items) if isinstance(e, ast.Name)]
    if len(tensors) == 1 and all(k in tensors or _whole(e) for k, e in enumerate(items)):
        # x[idx], x[:, idx]: the rows (columns) a 1-D index tensor names, as index_select takes them
        return call("index_select", expr(n.value), expr(items[tensors[0]]), dim=tensors[0])
    dots = [k for k, e in enumerate(items) if isinstance(e, ast.Constant) and e.value is Ellipsis]
    if len(dots) > 1 or any(not isinstance(e, ast.Slice) and not is_int_literal(e) for k, e in enumerate(items)
                            if k not in dots):
        raise IRError(f"unsupported indexing {ast.unparse(n)!r}: slices with number bounds (x[:, 1:-1], x[..., :64], "
                      "x[:, ::2]), integers (x[:, 0]) and one ... are read")
    cut = dots[0] if dots else len(items)
    after = items[cut + 1:]         # after the Ellipsis, dims counted from the end: -len(after), ..., -1
    dims = list(enumerate(items[:cut])) + [(k - len(after), e) for k, e in enumerate(after)]
    node = expr(n.value)
    # a select removes its dim: dims from 0 are taken right to left, dims from the end left to right
    for d, e in sorted((p for p in dims if p[0] >= 0), key=lambda p: -p[0]) + [p for p in dims if p[0] < 0]:
        if isinstance(e, ast.Slice):
            bounds = [None if b is None else _bound(b, n) for b in (e.lower, e.upper, e.step)]
            if bounds[2] is not None and bounds[2] < 1:
                raise IRError(f"{ast.unparse(n)}: a slice's step must be positive")
            if bounds[:2] != [None, None] or (bounds[2] or 1) != 1:
                node = sliced(node, d, bounds[0], bounds[1], bounds[2] or 1)
        else:
            node = call(SELECT, node, dim=d, index=int(number(e)))
    return node


def _kept(e: ast.expr) -> ast.expr:
    """A list of one index, x[:, [-1]], is the slice that keeps its dim: x[:, -1:]."""
    if not (isinstance(e, ast.List) and len(e.elts) == 1 and is_int_literal(e.elts[0])):
        return e
    k = int(number(e.elts[0]))
    return ast.Slice(ast.Constant(k), None if k == -1 else ast.Constant(k + 1), None)


def _whole(e: ast.expr) -> bool:
    """':' alone."""
    return isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None


def _with_new_dims(n: ast.Subscript, items: list[ast.expr], expr) -> Node:
    """x[:, None], s[..., None, None]: the indexing without its Nones, then a unit dim where each None
    stands in the result (counted from the front before an Ellipsis, from the end after it)."""
    dots = next((k for k, e in enumerate(items) if isinstance(e, ast.Constant) and e.value is Ellipsis), len(items))
    keeps = [is_none(e) or isinstance(e, ast.Slice) for e in items]      # what makes a dim of the result
    front = [sum(keeps[:k]) for k, e in enumerate(items[:dots]) if is_none(e)]
    back = [-sum(keeps[k:]) for k, e in enumerate(items) if k > dots and is_none(e)]
    rest = [e for e in items if not is_none(e)]
    inner = ast.Subscript(n.value, ast.Tuple(rest, ast.Load()) if rest else ast.Slice(), ast.Load())
    node = subscript(inner, expr)
    for d in front + sorted(back, reverse=True):      # front ones left to right, end ones from the end
        node = call(UNSQUEEZE, node, dim=d)
    return node


# functions whose result is a tuple (values, indices): indexing it is not a slice of a tensor
TUPLES = {"max", "min", "cummax", "cummin", "sort", "topk", "kthvalue", "median", "mode", "aminmax", "var_mean",
          "std_mean", "frexp", "unique", "histogram", "lu", "qr", "svd", "eig", "eigh", "slogdet"}


def _called(f: ast.expr) -> str:
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _bound(b: ast.expr, n: ast.Subscript) -> int:
    if not is_int_literal(b):
        raise IRError(f"unsupported indexing {ast.unparse(n)!r}: a slice's bounds must be numbers")
    return int(number(b))


def _piece(n: ast.Subscript, expr) -> Node:
    """x.chunk(n, dim)[i], x.split(size, dim)[i] (a size or a list of sizes), x.unbind(dim)[i]."""
    f = n.value
    how, args, kw = f.func.attr, list(f.args), {k.arg: k.value for k in f.keywords}
    # torch.split(x, ...)[i], torch.chunk(x, ...)[i]: the function form takes the tensor first
    tensor = args.pop(0) if ast.unparse(f.func.value) == "torch" and args else f.func.value
    names = {"chunk": ("chunks", "dim"), "split": ("split_size_or_sections", "dim"), "unbind": ("dim",),
             "tensor_split": ()}[how]
    given = {**dict(zip(names, args)), **kw}
    if how == "tensor_split" or set(given) - set(names) or not is_int_literal(n.slice) \
            or not all(isinstance(v, (ast.List, ast.Tuple)) or is_int_literal(v) for v in given.values()):
        raise IRError(f"unsupported indexing {ast.unparse(n)!r}: x.chunk(n, dim)[i], x.split(size, dim)[i] and "
                      "x.unbind(dim)[i] with numbers are read")
    x, i = expr(tensor), int(number(n.slice))
    dim = int(number(given.get("dim", ast.Constant(0))))
    if how == "unbind":
        return call(SELECT, x, dim=dim, index=i)
    if i < 0:
        raise IRError(f"{ast.unparse(n)}: take a piece by its position from 0")
    if how == "chunk":
        return call(SLICE, x, dim=dim, chunks=(int(number(given["chunks"])), i), start=None, stop=None, step=1)
    sizes = given["split_size_or_sections"]
    if is_int_literal(sizes):
        size = int(number(sizes))
        return call(SLICE, x, dim=dim, chunks=(-size, i), start=None, stop=None, step=1)
    lengths = [int(number(e)) for e in sizes.elts]
    if i >= len(lengths):
        raise IRError(f"{ast.unparse(n)}: split into {len(lengths)} pieces has no piece {i}")
    return sliced(x, dim, sum(lengths[:i]), sum(lengths[:i + 1]), within=True, whole=sum(lengths))


def _unsupported(c: Call, elts: list) -> IRError:
    text = ", ".join(ast.unparse(e) for e in elts)
    return IRError(f"reshape/view to ({text}) is not supported: the offline generator reads views that add or remove "
                   "unit dims (sizes 1 or -1, one -1: b.view(1, -1, 1, 1)), that join neighbouring dims of the tensor "
                   "itself (x.view(x.size(0), -1), x.view(b, c, h * w) after b, c, h, w = x.shape), or that take "
                   "another tensor's whole shape (y.view(b, c, h, w), y.view_as(x)); other sizes would not follow "
                   "the shapes the runner draws")


def _shape_of(e: ast.expr, c: Call) -> Node | None:
    """The tensor T of `T.shape` or `T.size()`, else None."""
    if isinstance(e, ast.Attribute) and e.attr == "shape":
        return c.expr(e.value)
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "size" and not e.args:
        return c.expr(e.func.value)
    return None


def _dims_named(e: ast.expr, c: Call) -> list[tuple[Node, int]] | None:
    """[(T, i), ...] for `T.shape[i]`, `T.size(i)` or a product of such; None for anything else."""
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
        left, right = _dims_named(e.left, c), _dims_named(e.right, c)
        return left + right if left and right else None
    if isinstance(e, ast.Subscript) and is_int_literal(e.slice):
        tensor, index = _shape_of(e.value, c), e.slice
    elif isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "size" \
            and len(e.args) == 1 and is_int_literal(e.args[0]):
        tensor, index = c.expr(e.func.value), e.args[0]
    else:
        return None
    return [(tensor, int(number(index)))] if tensor is not None else None


def _flattened(c: Call, x: Node, elts: list, refs: list) -> Node:
    """x.view(sizes naming x's own dims, one -1 at most): flattens of x's neighbouring dims. Sizes
    before the -1 name dims 0, 1, ... in order, sizes after it the last dims counted from the end
    (x.size(-1)): counted from 0 there, the -1 would take whatever dims x has beyond them."""
    minus = [k for k, g in enumerate(refs) if g is None]
    if len(minus) > 1 or any(not is_int_literal(elts[k]) or number(elts[k]) != -1 for k in minus):
        raise _unsupported(c, elts)
    cut = minus[0] if minus else len(refs)
    head = [d for g in refs[:cut] for _, d in g]
    tail = [d for g in refs[cut + 1:] for _, d in g]
    if head != list(range(len(head))) or (tail and tail != list(range(-len(tail), 0))):
        raise _unsupported(c, elts)
    groups = [(g[0][1], g[-1][1]) if g else (len(head), -len(tail) - 1) for g in refs]
    if not minus:           # x.view(b, c) of [b, c, 1, 1]: the last size takes the (unit) dims after it
        groups[-1] = (groups[-1][0], -1)
    node, shift = x, 0
    for first, last in groups:          # left to right: a flatten shifts the dims after it counted from 0
        if first != last and (first, last) != (-1, -1):
            node = call(FLATTEN, node, start=first - shift if first >= 0 else first,
                        end=last - shift if last >= 0 else last)
            shift += last - first if last >= 0 else 0
    return node


def _int(c: Call, n: ast.expr | None, what: str) -> int:
    if n is None or not is_int_literal(n):
        raise IRError(f"{c.fname} takes {what} as an integer, e.g. x.{c.fname}(1); got "
                      f"{'nothing' if n is None else repr(ast.unparse(n))}")
    return int(number(n))


def _unit_sizes(c: Call, elts: list) -> tuple[int, ...]:
    """reshape's sizes as numbers (one -1 at most): unit dims (1 or -1), or sizes written for the shapes
    given (x.view(-1, 40)), which size_rules then keeps."""
    if not elts or not all(is_int_literal(e) and (number(e) == -1 or number(e) >= 1) for e in elts) \
            or sum(number(e) == -1 for e in elts) > 1:
        raise _unsupported(c, elts)
    return tuple(int(number(e)) for e in elts)


def check(node: Node) -> None:
    """A view stands over an input or an earlier stage's output: the chain makes it so."""
    if node.op not in OPS or any(a.op != "input" for a in node.args):
        raise IRError(f"{node.op} is taken between kernels, over an input or a kernel's output")


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    shape = list(shapes[node.args[0].name])
    if node.op == RESHAPE:
        return reshaped(shape, _resolved(node, shapes))
    if node.op == SLICE:
        return _sliced_shape(node, shape)
    if node.op == SELECT:
        d = _dim(node, "dim", len(shape))
        if not -shape[d] <= node.attr("index") < shape[d]:
            raise IRError(f"select: index {node.attr('index')} is out of range for dim {node.attr('dim')} of size {shape[d]}")
        return shape[:d] + shape[d + 1:]
    if node.op == UNFLATTEN:
        if len(node.args) == 2 and shapes[node.args[1].name] != shape:
            raise IRError(f"{node.args[0].name} {shape} is viewed with the sizes of {node.args[1].name} "
                          f"{list(shapes[node.args[1].name])}, whose shape differs; view it with its own sizes")
        if node.attr("rank") not in (None, len(shape)):
            raise IRError(f"a view naming {node.attr('rank') - 1} of the dims of a {len(shape)}-D tensor {shape} "
                          "besides the one it splits would merge the others; write x.unflatten(dim, (a, -1))")
        d, sizes = _dim(node, "dim", len(shape)), list(node.attr("sizes"))
        try:
            return shape[:d] + reshaped([shape[d]], sizes) + shape[d + 1:]
        except IRError:
            raise IRError(f"dim {node.attr('dim')} of {shape} has {shape[d]} elements, which do not split into "
                          f"{tuple(sizes)}") from None
    if node.op == RESHAPE_AS:
        other = list(shapes[node.args[1].name])[:node.attr("dims")]
        if node.attr("rest") and other and math.prod(other) and math.prod(shape) % math.prod(other) == 0:
            return other + [math.prod(shape) // math.prod(other)]
        if node.attr("rest") or math.prod(other) != math.prod(shape):
            raise IRError(f"a tensor of shape {shape} cannot be viewed as the shape {other} of {node.args[1].name}")
        return other
    if node.op in (EXPAND, EXPAND_AS):
        return _expanded(shape, _resolved(node, shapes) if node.op == EXPAND else list(shapes[node.args[1].name]))
    if node.op == UNSQUEEZE:
        return shape[:_dim(node, "dim", len(shape) + 1)] + [1] + shape[_dim(node, "dim", len(shape) + 1):]
    if node.op == SQUEEZE:
        dim = node.attr("dim")
        if dim is None:
            return [s for s in shape if s != 1]
        d = _dim(node, "dim", max(len(shape), 1))
        return shape[:d] + shape[d + 1:] if shape and shape[d] == 1 else shape
    start, end = _dim(node, "start", max(len(shape), 1)), _dim(node, "end", max(len(shape), 1))
    if start > end:
        raise IRError(f"flatten: start_dim {node.attr('start')} comes after end_dim {node.attr('end')}")
    return shape[:start] + [math.prod(shape[start:end + 1])] + shape[end + 1:]


def _expanded(shape: list[int], sizes: list[int]) -> list[int]:
    """torch's expand: sizes aligned to the right; -1 keeps a dim, a size of 1 grows, new dims lead."""
    lead = len(sizes) - len(shape)
    out = [s if s != -1 or k >= lead else None for k, s in enumerate(sizes)]
    for k, n in enumerate(shape):
        s = sizes[lead + k] if lead + k >= 0 else None
        out_k = n if s == -1 else s
        if lead < 0 or not (n == 1 or out_k == n):
            raise IRError(f"a tensor of shape {shape} cannot be expanded to {tuple(sizes)}: each dim keeps its size "
                          "(or -1) unless it is 1, and new dims come first")
        out[lead + k] = out_k
    if None in out:
        raise IRError(f"expand to {tuple(sizes)}: a new leading dim takes a size, not -1")
    return out


def _sliced_shape(node: Node, shape: list[int]) -> list[int]:
    d = _dim(node, "dim", len(shape))
    if node.attr("chunks"):         # (n, i): chunk(n)'s piece i; (-size, i): split(size)'s
        n, i = node.attr("chunks")
        size = -(-shape[d] // n) if n > 0 else -n
        if i * size >= shape[d]:
            what = f"chunk({n}" if n > 0 else f"split({-n}"
            raise IRError(f"{what}, dim={node.attr('dim')}) of a dim of size {shape[d]} gives fewer than {i + 1} pieces")
        return shape[:d] + [min(size, shape[d] - i * size)] + shape[d + 1:]
    start, stop = node.attr("start"), node.attr("stop")
    if node.attr("within") and not (-shape[d] <= (start or 0) <= shape[d] and (stop is None or stop <= shape[d])):
        raise IRError(f"narrow or split of [{start}, {stop}) runs past dim {node.attr('dim')}'s size {shape[d]}")
    if node.attr("whole") not in (None, shape[d]):
        raise IRError(f"split sizes adding up to {node.attr('whole')} do not cover dim {node.attr('dim')} of size "
                      f"{shape[d]}: torch.split needs sizes that add up to the dim's size")
    size = len(range(shape[d])[start:stop:node.attr("step")])
    return shape[:d] + [size] + shape[d + 1:]


def size_rules(node: Node, cases: list[dict[str, list[int]]]) -> tuple[set[int], int]:
    """A slice or select keeps the size of the dim it cuts and of the piece it takes (its bounds are
    numbers written for them, and what meets the piece has its size); a reshape_as every size of both
    tensors (their element counts stay equal)."""
    if node.op in (RESHAPE_AS, EXPAND_AS):
        return {d for case in cases for a in node.args for d in case[a.name]}, 1
    if node.op == RESHAPE and set(node.attr("sizes")) - {1, -1}:     # sizes as numbers: the shapes stay
        products = [s for s in node.attr("sizes") if isinstance(s, tuple)]
        numbers = {s for s in node.attr("sizes") if isinstance(s, int)} | {s[0] for s in products} | \
            {case[node.args[f[0]].name][f[1]] for case in cases for s in products for f in s[1:]}   # those it reads, too
        return numbers - {-1} | {d for case in cases for d in case[node.args[0].name]}, 1
    if node.op == EXPAND:               # the sizes it names are numbers: what they meet keeps its size
        named = {s for s in node.attr("sizes") if isinstance(s, int) and s != -1}
        return named | {d for case in cases for d in case[node.args[0].name] if d != 1}, 1
    if node.op == UNFLATTEN:            # the split dim and its parts keep their sizes: they divide
        d = node.attr("dim")
        return {s for case in cases for s in (case[node.args[0].name][d], *output_shape(node, case))}, 1
    if node.op not in (SLICE, SELECT):
        return set(), 1
    dim = node.attr("dim")
    return {d for case in cases for d in (case[node.args[0].name][dim], *output_shape(node, case)[dim:dim + 1])}, 1


def _dim(node: Node, key: str, rank: int) -> int:
    d = node.attr(key)
    if rank == 0:
        raise IRError(f"{node.op} of a 0-d tensor (one value): there is no dim {d} to take")
    if not -rank <= d < rank:
        raise IRError(f"{node.op} at dim {d}, but that tensor has {rank - (node.op == UNSQUEEZE)} dims")
    return d % rank


def reshaped(shape: list[int], sizes: list[int]) -> list[int]:
    """The shape of a tensor of `shape` viewed as `sizes` (positive, one -1 at most); IRError where it does not fit."""
    known = math.prod(s for s in sizes if s != -1)
    if math.prod(shape) % known or (-1 not in sizes and math.prod(shape) != known):
        raise IRError(f"a tensor of shape {shape} cannot be viewed as {tuple(sizes)}")
    return [math.prod(shape) // known if s == -1 else s for s in sizes]


def torch_text(node: Node, x: str, *others: str) -> str:
    """The view of x (an expression's text) in PyTorch: the reference's body, the chain's entry and
    the expression's own text all write it so. others: the texts of its other operands (reshape_as's
    tensor, the inputs whose sizes a reshape reads), where given (the chain's entry names a tensor
    once: x itself where omitted)."""
    x = operand_text(x)
    other = others[0] if others else None
    if node.op == RESHAPE_AS:
        if node.attr("dims"):
            o = operand_text(other or x)
            rest = ", -1" if node.attr("rest") else ""
            return f"{x}.reshape({', '.join(f'{o}.shape[{k}]' for k in range(node.attr('dims')))}{rest})"
        return f"{x}.reshape_as({other or x})"
    if node.op == SELECT:
        return f"{x}.select({node.attr('dim')}, {node.attr('index')})"
    if node.op == EXPAND:
        return f"{x}.expand({_sizes_text(node, [x, *others])})"
    if node.op == EXPAND_AS:
        return f"{x}.expand_as({other or x})"
    if node.op == SLICE:
        return _slice_text(node, x)
    if node.op == RESHAPE:
        return f"{x}.reshape({_sizes_text(node, [x, *others])})"
    if node.op == FLATTEN:
        return f"{x}.flatten({node.attr('start')}, {node.attr('end')})"
    if node.op == UNFLATTEN:
        return f"{x}.unflatten({node.attr('dim')}, {tuple(node.attr('sizes'))})"
    dim = node.attr("dim")
    return f"{x}.{node.op}({'' if dim is None else dim})"


def _slice_text(node: Node, x: str) -> str:
    d = node.attr("dim")
    if node.attr("chunks"):
        n, i = node.attr("chunks")
        return f"{x}.chunk({n}, dim={d})[{i}]" if n > 0 else f"{x}.split({-n}, dim={d})[{i}]"
    if node.attr("whole") is not None:        # pieces around the slice, so the text keeps the sizes' total
        start, stop, whole = node.attr("start"), node.attr("stop"), node.attr("whole")
        return f"{x}.split([{start}, {stop - start}, {whole - stop}], dim={d})[1]"
    if node.attr("within") and node.attr("stop") is not None:
        return f"{x}.narrow({d}, {node.attr('start')}, {node.attr('stop') - node.attr('start')})"
    start, stop, step = ("" if v is None else str(v) for v in (node.attr("start"), node.attr("stop"), node.attr("step")))
    bounds = f"{start}:{stop}" + (f":{step}" if step != "1" else "")
    return f"{x}[{':, ' * d}{bounds}]" if d >= 0 else f"{x}[..., {bounds}{', :' * (-d - 1)}]"


def operand_text(x: str) -> str:
    """x parenthesised where a method call on it would bind to its last part."""
    if not isinstance(ast.parse(x, mode="eval").body, (ast.Name, ast.Call, ast.Attribute, ast.Subscript)) \
            and not _parenthesised(x):
        return f"({x})"
    return x


def _parenthesised(x: str) -> bool:
    """Whether x is one parenthesised expression ("(a + b)", not "(a) + (b)")."""
    try:
        return x.startswith("(") and x.endswith(")") and bool(ast.parse(x[1:-1], mode="eval"))
    except SyntaxError:
        return False


TORCH_OPS = {op: (lambda node, a: torch_text(node, *a)) for op in OPS}


@prints(*OPS)
def _text(node: Node, text) -> str:
    return torch_text(node, *map(text, node.args))


def kernel_source(spec: dict, node: Node, options: dict) -> str:
    raise IRError(f"{node.op} alone moves no data: there is no kernel to write; ask for the computation around it")


def reference_property(node: Node) -> tuple[str, bool]:
    return "", False
