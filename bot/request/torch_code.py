"""Python code as the IR reads it: a function's returned expression with its local names inlined
(tuples unpacked too: values, idx = torch.max(x, 1)) and dtype casts dropped (Inline),
torch.max(x, dim)'s parts read as amax and argmax (MaxParts), and calls whose PyTorch meaning is
not the IR op of that name refused (max/min over a dim, softmax without one), as is returning more
than one tensor. For pasted functions (bot.request.pasted) and expressions typed in the words
(bot.request.expression, bot.request.operation).
"""
from __future__ import annotations

import ast
import copy
import re

from bot import ir
from bot.generators.interface import GenerationError
from bot.ops import chain, registry
from bot.request.pasted_constants import MASK_CALLS, folded
from bot.request.slice_store import is_number, slice_store


# Syntax nodes the inlined expression may reach: a local read many times (a residual's input, the
# input of a block whose branches are concatenated) is copied into each use, so deep models grow
# exponentially when inlined; past this they are refused, rather than parsed for minutes.
MAX_INLINED = 50_000

# Casts in pasted code: the kernel computes in float32 and returns the input dtype anyway.
_CASTS = {"float", "half", "bfloat16", "to", "type_as", "contiguous", "clone", "detach"}
# Reductions and scans that take dtype=: torch casts the input to it first, so their result has that
# dtype, read as a cast of the result (x.sum(dtype=torch.float32) is x.float().sum()).
_ACCUMULATING = {"sum", "mean", "nansum", "nanmean", "prod", "cumsum", "cumprod", "softmax", "log_softmax"}
_MODULES = {"torch", "F", "nn", "functional", "math"}


class MaxParts(ast.NodeTransformer):
    """torch.max(x, dim)'s parts: [0] or .values is amax, [1] or .indices argmax (min alike)."""

    def visit_Subscript(self, n: ast.Subscript) -> ast.expr:
        self.generic_visit(n)
        part = n.slice.value if isinstance(n.slice, ast.Constant) else None
        if isinstance(n.value, ast.Tuple) and type(part) is int and -len(n.value.elts) <= part < len(n.value.elts):
            return n.value.elts[part]          # (out, weights)[0]: a layer's tuple, one part of it
        return _max_part(n.value, {0: "values", 1: "indices"}.get(part)) or n

    def visit_Attribute(self, n: ast.Attribute) -> ast.expr:
        self.generic_visit(n)
        return _max_part(n.value, n.attr) or n


class Inline(MaxParts):
    """Replace local names by their values and drop dtype casts (and read max's parts)."""

    def __init__(self, env: dict[str, ast.expr], aliases: set[str] = frozenset(),
                 helpers: dict[str, ast.FunctionDef] | None = None):
        self.env, self.aliases = env, aliases      # aliases: "import torch.nn.functional as fn"
        self.helpers = helpers or {}               # the paste's other functions, inlined where called
        self.casts = False
        self.copied = 0                            # syntax nodes copied into uses of locals so far

    def visit_Name(self, n: ast.Name) -> ast.expr:
        if n.id in self.aliases:
            return ast.Name("torch", ast.Load())
        if n.id not in self.env:
            return n
        value = copy.deepcopy(self.env[n.id])
        self.copied += sum(1 for _ in ast.walk(value))
        if self.copied > MAX_INLINED:
            raise GenerationError(f"line {n.lineno}: with its locals written in, the expression grows past "
                                  f"{MAX_INLINED:,} operations ({n.id.split('__')[0]} and others are read many "
                                  "times, as residual "
                                  "and concatenated blocks do); paste one block of the model to get its kernel")
        return value

    def visit_Call(self, n: ast.Call) -> ast.expr:
        self.generic_visit(n)
        f = n.func
        if isinstance(f, ast.Name) and f.id in self.helpers and f.id not in self.env:
            return self._helper(self.helpers[f.id], n)
        given = next((k.value for k in n.keywords if k.arg == "dtype"), None)
        if isinstance(f, ast.Attribute) and f.attr in _ACCUMULATING and given is not None:
            self.casts = True
            plain = ast.Call(f, n.args, [k for k in n.keywords if k.arg != "dtype"])
            written = ast.unparse(given)
            return _marked(_BACK, plain, "") if written.endswith(".dtype") else _marked(_FIXED, plain, f"dtype={written}")
        if isinstance(f, ast.Attribute) and f.attr in _CASTS:
            is_function = isinstance(f.value, ast.Name) and f.value.id in _MODULES
            if not is_function or n.args:
                self.casts = True
                inner = n.args[0] if is_function else f.value
                args = n.args[1:] if is_function else n.args
                if f.attr in ("float", "half", "bfloat16", "double") or any(
                        "torch." in ast.unparse(a) for a in [*args, *(k.value for k in n.keywords)]):
                    text = ast.unparse(n)           # its end names the dtype: keep that, not its start
                    return _marked(_FIXED, inner, text if len(text) <= 48 else "..." + text[-45:])
                if f.attr in ("to", "type_as") and (args or n.keywords):
                    return _marked(_BACK, inner, "")
                return inner
        return n


    def _helper(self, fn: ast.FunctionDef, n: ast.Call) -> ast.expr:
        """A call of another function of the paste (rotate_half(q)): what it returns, its parameters
        bound to the call's arguments (already inlined) or their constant defaults."""
        params = [a.arg for a in fn.args.args]
        defaults = dict(zip(params[len(params) - len(fn.args.defaults):], fn.args.defaults))
        bound = dict(zip(params, n.args)) | {k.arg: k.value for k in n.keywords if k.arg}
        missing = [p for p in params if p not in bound and not isinstance(defaults.get(p), ast.Constant)]
        if len(n.args) > len(params) or set(bound) - set(params) or missing or fn.args.vararg or fn.args.kwarg:
            raise GenerationError(f"line {n.lineno}: {ast.unparse(n)[:60]!r} does not match {fn.name}'s parameters "
                                  f"({', '.join(params)}); give each by position or name")
        helpers = {k: v for k, v in self.helpers.items() if k != fn.name}      # no recursion
        inner = Inline({p: bound.get(p, defaults.get(p)) for p in params}, self.aliases, helpers)
        inner.copied = self.copied
        value = returned(copy.deepcopy(fn), inner)       # visiting rewrites the tree it walks
        self.casts |= inner.casts
        self.copied = inner.copied
        return value


# Calls whose size arguments the IR reads as they are written (x.view(x.size(0), -1) holds for any batch):
# their x.size(d) is left for them.
_SIZED_AS_WRITTEN = {"view", "reshape", "expand", "flatten", "unflatten", "repeat", "permute", "transpose", "split",
                     "chunk", "narrow", "view_as", "expand_as", "reshape_as"}


def _shape_owner(e: ast.expr) -> ast.expr | None:
    """T of T.shape or T.size(), else None."""
    if isinstance(e, ast.Attribute) and e.attr == "shape":
        return e.value
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "size" and not e.args \
            and not e.keywords:
        return e.func.value
    return None


class SizesWritten(ast.NodeTransformer):
    """x.shape[d], x.size(d) and x.shape[-1] // 2 written as the numbers they are, where every case
    gives input x the same size there (known: input -> its shapes, a case each): a slice's bounds
    (x[..., :x.shape[-1] // 2]) and a scale (q.size(-1) ** -0.5) then read as numbers."""

    def __init__(self, known: dict[str, list[list[int]]]):
        self.known = known
        self.read: dict[str, set[int]] = {}         # input -> the dims whose size was written as a number

    def _size(self, tensor: ast.expr, dim: ast.expr) -> ast.Constant | None:
        try:
            d = ast.literal_eval(dim)              # 1, -1
        except ValueError:
            return None
        shapes, names = (self.known.get(tensor.id), [tensor.id]) if isinstance(tensor, ast.Name) else \
            self._computed(tensor)
        if not shapes or type(d) is not int:
            return None
        sizes = {tuple(s)[d] if -len(s) <= d < len(s) else None for s in shapes}
        if len(sizes) != 1 or None in sizes:
            return None
        size = sizes.pop()
        if isinstance(tensor, ast.Name):
            self.read.setdefault(tensor.id, set()).add(d % len(shapes[0]))
        else:           # a computed tensor's size: every dim of its inputs of that size keeps it (all of
            # their dims where none has it: a joined or flattened dim's size follows from several)
            equal = {n: [k for k, sz in enumerate(self.known[n][0]) if sz == size] for n in names}
            for n in names:
                kept = equal[n] if any(equal.values()) else range(len(self.known[n][0]))
                self.read.setdefault(n, set()).update(kept)
        return ast.Constant(size)

    def _computed(self, tensor: ast.expr) -> tuple[list[list[int]] | None, list[str]]:
        """A computed tensor's shape in each case ((q @ k.mT).size(-1)) and the inputs it reads, where the
        IR reads it; else (None, [])."""
        try:
            node = ir.parse(ast.unparse(tensor), as_written=True)
            names = ir.input_names(node)
            cases = len(next(iter(self.known.values()), []))
            return [ir.output_shape(node, {n: self.known[n][c] for n in names}) for c in range(cases)], names
        except (ir.IRError, KeyError, IndexError, ValueError, TypeError, RecursionError):
            return None, []

    def visit_Subscript(self, n: ast.Subscript) -> ast.expr:
        tensor = _shape_owner(n.value)          # x.shape[d], x.size()[d]; x.shape[-1:] left as written
        if tensor is None:
            self.generic_visit(n)
        elif size := self._size(tensor, n.slice):
            return ast.copy_location(size, n)
        return n

    def visit_Attribute(self, n: ast.Attribute) -> ast.expr:
        """A whole shape, w.shape (F.layer_norm(x, self.weight.shape, ...)), as the tuple of its sizes."""
        self.generic_visit(n)
        return self._whole(n.value, n) if n.attr == "shape" else n

    def _whole(self, tensor: ast.expr, n: ast.expr) -> ast.expr:
        shapes = self.known.get(tensor.id) if isinstance(tensor, ast.Name) else None
        if not shapes or any(len(s) != len(shapes[0]) for s in shapes):
            return n
        sizes = [self._size(tensor, ast.Constant(d)) for d in range(len(shapes[0]))]
        return n if None in sizes else ast.copy_location(ast.Tuple(sizes, ast.Load()), n)

    def visit_Call(self, n: ast.Call) -> ast.expr:
        f = n.func
        if isinstance(f, ast.Attribute) and f.attr in _SIZED_AS_WRITTEN:
            # its sizes as written; the tensor it views is read like any other (x.view(...) of an
            # expression holding x[:, :T])
            if isinstance(f.value, ast.Name) and f.value.id in _MODULES and n.args:
                n.args[0] = self.visit(n.args[0])          # torch.reshape(x, sizes)
            else:
                f.value = self.visit(f.value)
            return n
        self.generic_visit(n)
        if isinstance(f, ast.Attribute) and f.attr == "size" and len(n.args) == 1 and not n.keywords \
                and (size := self._size(f.value, n.args[0])):
            return ast.copy_location(size, n)
        if isinstance(f, ast.Attribute) and f.attr == "size" and not n.args and not n.keywords:
            return self._whole(f.value, n)
        return folded(n)

    def visit_BinOp(self, n: ast.BinOp) -> ast.expr:
        self.generic_visit(n)
        return folded(n)


# Casts as Inline leaves them, until settled: to one dtype (.float(), .to(torch.float32)) or back to
# an input's (.type_as(x), .to(x.dtype)). Marks (calls of these names) survive the copies of locals.
_FIXED, _BACK = "__cast_to_one_dtype__", "__cast_back__"
CAST_MARKS = (_FIXED, _BACK)        # a cast to one dtype (its text second), a cast back to the input's


def _marked(mark: str, inner: ast.expr, text: str) -> ast.Call:
    return ast.Call(ast.Name(mark, ast.Load()), [inner, ast.Constant(text)], [])


def _mark(n: ast.AST) -> str | None:
    return n.func.id if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in (_FIXED, _BACK) else None


def settled(tree: ast.expr) -> tuple[ast.expr, str | None]:
    """tree without its casts, and the cast to one dtype that PyTorch's result would keep (a tensor
    of that dtype in any operation promotes it, until cast back), if any."""
    kept = _kept_cast(tree)
    return _Unmarked().visit(tree), kept


_CAST_DTYPE = re.compile(r"\.(float|half|bfloat16|double)\(\)$|torch\.(float32|float16|bfloat16|float64|float|half|"
                         r"double)\b")
_DTYPE_NAMES = {"float": "float32", "half": "float16", "double": "float64"}


def cast_dtype(kept: str) -> str | None:
    """The dtype a kept cast's text (settled's) converts to: 'float32' for '(x > y).float()'."""
    m = _CAST_DTYPE.search(kept)
    name = m and (m.group(1) or m.group(2))
    return _DTYPE_NAMES.get(name, name) if name else None


def _kept_cast(n: ast.AST) -> str | None:
    mark = _mark(n)
    if mark == _BACK:
        return None
    if mark == _FIXED:
        return n.args[1].value
    return next((c for child in ast.iter_child_nodes(n) if (c := _kept_cast(child))), None)


_BOOLEAN_CALLS = MASK_CALLS | {"isnan", "isinf", "isfinite", "isposinf", "isneginf", "greater", "less",
                               "greater_equal", "less_equal", "not_equal", "signbit"}


class _Unmarked(ast.NodeTransformer):
    """The casts dropped; a cast of a boolean (comparison, logical op) to a float dtype is its 0 or 1
    in the float math around it (* 1.0), as PyTorch's is."""
    def visit_Call(self, n: ast.Call) -> ast.expr:
        self.generic_visit(n)
        if not _mark(n):
            return n
        inner = n.args[0]
        return ast.BinOp(inner, ast.Mult(), ast.Constant(1.0)) if _is_boolean(inner) else inner


def _is_boolean(n: ast.expr) -> bool:
    if isinstance(n, ast.Compare) or (isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Invert)):
        return True
    if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return True
    return isinstance(n, ast.Call) and called(n)[0] in _BOOLEAN_CALLS


def _max_part(call: ast.expr, part: str | None) -> ast.Call | None:
    """torch.max(x, dim=d).values -> torch.amax(x, dim=d); .indices -> torch.argmax(x, dim=d);
    torch.cummax(x, d).values -> cummax_values(x, d), the IR's cummax (its indices are not read);
    torch.sort(x, d).values -> sort_values(x, d), .indices -> argsort(x, d) (topk's, kthvalue's and median's:
    topk_values, topk_indices and so on);
    torch.var_mean(x, d)[0] -> torch.var(x, d), [1] -> torch.mean(x, d) (std_mean alike);
    torch.aminmax(x, dim=d).min or [0] -> torch.amin(x, dim=d), .max or [1] -> torch.amax."""
    if not (isinstance(call, ast.Call) and part in ("values", "indices", "min", "max")):
        return None
    name = called(call)[0]
    if name == "aminmax":
        return _renamed(call, "amin" if part in ("values", "min") else "amax")
    if part not in ("values", "indices"):
        return None
    if name in ("var_mean", "std_mean"):
        return _moment_part(call, name[:3] if part == "values" else "mean")
    if name in ("cummax", "cummin") and part == "indices":
        raise GenerationError(f"{ast.unparse(call)}.indices: {name}'s indices (where each running {name[3:]} was "
                              "found) are not supported by the offline generator; take .values")
    if name in ("cummax", "cummin") and part == "values":
        new = f"{name}_values"
    elif name in ("sort", "topk", "kthvalue", "median"):
        new = f"{name}_values" if part == "values" else "argsort" if name == "sort" else f"{name}_indices"
    elif name in ("max", "min"):
        new = ("a" if part == "values" else "arg") + name
    else:
        return None
    return _renamed(call, new)


def _two_results(tree: ast.expr) -> ast.Call | None:
    """torch.var_mean, std_mean and aminmax returned whole: outputs(...) of their two parts; else None."""
    if not (isinstance(tree, ast.Call) and called(tree)[0] in ("var_mean", "std_mean", "aminmax")):
        return None
    parts = [_max_part(tree, part) for part in ("values", "indices" if called(tree)[0] != "aminmax" else "max")]
    return ast.Call(ast.Name(chain.OUTPUTS, ast.Load()), parts, [])


def _renamed(call: ast.Call, name: str, args: list | None = None, keywords: list | None = None) -> ast.Call:
    """The call with the function (or method) renamed, its arguments kept unless given."""
    func = ast.Attribute(call.func.value, name, ast.Load()) if isinstance(call.func, ast.Attribute) else ast.Name(name)
    return ast.Call(func, call.args if args is None else args, call.keywords if keywords is None else keywords)


def _moment_part(call: ast.Call, name: str) -> ast.Call:
    """var_mean's (std_mean's) part: var (std) with its arguments, or the mean over the same dim, keepdim
    as given (torch's positional order: input, dim, unbiased, keepdim)."""
    if name != "mean":
        return _renamed(call, name)
    keywords = [k for k in call.keywords if k.arg in ("dim", "keepdim")]
    if len(call.args) > 3:
        keywords.append(ast.keyword("keepdim", call.args[3]))
    return _renamed(call, name, call.args[:2], keywords)


WITH_INDICES = {"max": "max_with_indices", "min": "min_with_indices"}


def called(call: ast.Call) -> tuple[str, bool]:
    """(the function's name, whether it is a method of a tensor: x.max(1), not torch.max(x, 1))."""
    f = call.func
    if not isinstance(f, ast.Attribute):
        return getattr(f, "id", ""), False
    return f.attr, not (isinstance(f.value, ast.Name) and f.value.id in _MODULES)


def whole_max(tree: ast.expr, torch_only: bool) -> ast.expr:
    """torch.max(x, dim) / x.min(dim) returned whole: max_with_indices(x, dim), its values and indices
    (the IR's max(x, dim) is amax). torch_only: a bare max(x, dim) typed is the IR's, left alone."""
    if not isinstance(tree, ast.Call) or (torch_only and not isinstance(tree.func, ast.Attribute)):
        return tree
    name, method = called(tree)
    args = [tree.func.value, *tree.args] if method else list(tree.args)
    if name not in WITH_INDICES or not _given_dim(tree, len(args)):
        return tree
    return ast.Call(ast.Name(WITH_INDICES[name], ast.Load()), args, tree.keywords)


def _given_dim(n: ast.Call, args: int) -> bool:
    """Whether a call names a dim: dim=d (not None), or a second positional integer."""
    dims = [k.value for k in n.keywords if k.arg == "dim"]
    return any(not (isinstance(d, ast.Constant) and d.value is None) for d in dims) or \
        (args == 2 and ir.is_int_literal(n.args[-1]))


# a call's two parts as MaxParts names them -> the call returning both
_WHOLE = {("amax", "argmax"): "max", ("amin", "argmin"): "min", ("sort_values", "argsort"): "sort",
          ("topk_values", "topk_indices"): "topk", ("kthvalue_values", "kthvalue_indices"): "kthvalue",
          ("median_values", "median_indices"): "median"}


def _values_and_indices(parts: list[ast.expr]) -> ast.expr | None:
    """(torch.amax(x, d), torch.argmax(x, d)), as `values, idx = torch.max(x, d)` then `return values,
    idx` leave them: max_with_indices(x, d) (torch.sort's and torch.topk's parts alike: sort, topk);
    None for any other tuple."""
    if len(parts) != 2 or not all(isinstance(p, ast.Call) for p in parts):
        return None
    (owner, name, rest), (owner2, name2, rest2) = (_parts_of(p) for p in parts)
    whole = _WHOLE.get((name, name2))
    if whole is None or (owner, rest) != (owner2, rest2):
        return None
    joined = _renamed(parts[0], whole)
    return whole_max(joined, torch_only=False) if whole in WITH_INDICES else joined


def _parts_of(call: ast.Call) -> tuple[str, str, str]:
    """(what the call is a method of, its name, its arguments), the first and last as ast dumps."""
    owner = ast.dump(call.func.value) if isinstance(call.func, ast.Attribute) else ""
    return owner, called(call)[0], ast.dump(ast.Call(ast.Name("f", ast.Load()), call.args, call.keywords))


def returned(fn: ast.FunctionDef, inline: Inline) -> ast.expr:
    """The returned expression with every local name inlined."""
    shares: dict[str, str] = {}         # local name -> the name whose memory it views (w = z, v = z.view(-1))
    params = {a.arg for a in fn.args.args}
    statements = [(part, read_after) for at, stmt in enumerate(fn.body)
                  for read_after in [_values_read(fn.body[at + 1:])]
                  for part in _in_place_calls(stmt, fn.name, read_after)]
    for stmt, read_after in statements:
        docstring = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        if docstring or isinstance(stmt, (ast.Pass, ast.Assert)):
            continue
        if isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Tuple):
            parts = [inline.visit(e) for e in stmt.value.elts]
            pair = _values_and_indices(parts)
            if pair is not None:
                return pair
            if len(parts) < 2:
                raise GenerationError(f"{fn.name} returns a tuple of {len(parts)} tensors, {ast.unparse(stmt.value)!r}: "
                                      "a kernel returns a tensor, or a tuple of two or more; return the tensor itself")
            return ast.Call(ast.Name(chain.OUTPUTS, ast.Load()), [whole_max(p, torch_only=False) for p in parts], [])
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            value = inline.visit(stmt.value)
            return _two_results(value) or whole_max(value, torch_only=False)
        if _appended(stmt, inline):
            continue
        updated = _in_place(stmt, fn.name, params, params | set(inline.env), shares, read_after)
        bound = updated or _assignment(stmt)
        if not bound:
            raise GenerationError(f"line {stmt.lineno} of {fn.name}: {ast.unparse(stmt)[:60]!r} is not supported; "
                                  "the function may assign local names and return one expression")
        roots = [_viewed_name(value) for _, value in bound]         # before inlining rewrites the values
        values = [inline.visit(value) for _, value in bound]       # all read before any is bound: a, b = b, a
        inline.env.update((target, v) for (target, _), v in zip(bound, values))
        for (target, _), root in zip([] if updated else bound, roots):      # updated in place: the same memory
            if root is None:                    # a new tensor of its own (z = x * 2)
                shares.pop(target, None)
            elif root != target:                # z = z.view(...): z keeps what it shares
                shares[target] = shares.get(root, root)
    raise GenerationError(f"{fn.name} returns nothing; end it with 'return <expression>'")


def _appended(stmt: ast.stmt, inline: Inline) -> bool:
    """`features.append(y)` / `.extend([...])` on a local list (later torch.cat(features, 1)): the list
    grown with the values inlined; False for other statements."""
    call = stmt.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
    if call is None or not isinstance(call.func, ast.Attribute) or call.func.attr not in ("append", "extend") \
            or not isinstance(call.func.value, ast.Name) or len(call.args) != 1 or call.keywords:
        return False
    held = inline.env.get(call.func.value.id)
    added = inline.visit(call.args[0])
    if not isinstance(held, ast.List) or (call.func.attr == "extend" and not isinstance(added, (ast.List, ast.Tuple))):
        return False
    grown = held.elts + ([added] if call.func.attr == "append" else list(added.elts))
    inline.env[call.func.value.id] = ast.List(grown, ast.Load())
    return True


# Methods and torch functions whose result shares its input's memory (a view), or is the input itself.
_VIEWS = {"view", "reshape", "transpose", "permute", "t", "unsqueeze", "squeeze", "flatten", "unflatten", "expand",
          "expand_as", "view_as", "reshape_as", "narrow", "select", "diagonal", "detach", "contiguous", "movedim",
          "moveaxis", "swapaxes", "swapdims", "as_strided", "chunk", "split", "unbind", "tensor_split", "type_as",
          "to", "float", "half", "bfloat16", "requires_grad_"}
_VIEW_ATTRS = {"T", "mT", "H", "mH", "real", "data"}


def _viewed_name(e: ast.expr) -> str | None:
    """The name whose memory e may share: the name itself, or a view of it (z.view(-1), z[:, 0], z.T,
    torch.transpose(z, 0, 1)); None for a computed tensor. A cast of one dtype to itself is the tensor
    itself, so casts count as views."""
    while True:
        if isinstance(e, ast.Name):
            return e.id
        if isinstance(e, ast.Subscript) or (isinstance(e, ast.Attribute) and e.attr in _VIEW_ATTRS):
            e = e.value
        elif isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _VIEWS:
            torch_fn = isinstance(e.func.value, ast.Name) and e.func.value.id == "torch" and e.args
            e = e.args[0] if torch_fn else e.func.value
        else:
            return None


_META = {"dtype", "shape", "device", "ndim", "is_cuda"}


def _values_read(statements: list[ast.stmt]) -> set[str]:
    """The names whose values the statements read: not those read only for their dtype or shape
    (x.dtype, x.shape, x.size(1), x.dim())."""
    meta = set()
    for n in (n for s in statements for n in ast.walk(s)):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.attr in _META | {"size", "dim"}:
            meta.add(id(n.value))
    return {n.id for s in statements for n in ast.walk(s)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in meta}


def _updated(stmt: ast.stmt, tensors: set[str]) -> tuple[str, ast.expr] | None:
    """(name, its new value written out of place) for an in-place update of a tensor name: z += y,
    z.relu_() or torch.relu_(z) (a function's name with '_', as a method of a tensor name or of a
    module: torch, F), F.relu(z, inplace=True) on a line of its own; None for other statements."""
    if getattr(stmt, "in_place_of", None):
        return stmt.in_place_of, stmt.value
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        return stmt.target.id, ast.BinOp(ast.Name(stmt.target.id, ast.Load()), stmt.op, stmt.value)
    if _masked_store(stmt, tensors):             # y[y < 0] = 0.0: where the mask holds, the number
        target = stmt.targets[0]
        return target.value.id, ast.Call(ast.Attribute(ast.Name("torch", ast.Load()), "where", ast.Load()),
                                         [target.slice, stmt.value, ast.Name(target.value.id, ast.Load())], [])
    if stored := slice_store(stmt, tensors):     # out[:, :-1, :2] = x[:, 1:, :2], y[:, 0] = 0
        return stored
    call = stmt.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
    if call is None or not isinstance(call.func, ast.Attribute) or not isinstance(call.func.value, ast.Name) \
            or not call.func.attr.endswith("_") or call.func.attr[:-1] not in registry.FUNCTIONS:
        return None
    owner, fn = call.func.value.id, call.func.attr[:-1]
    if owner in tensors:                        # z.relu_(), z.clamp_(min=0)
        return owner, ast.Call(ast.Attribute(ast.Name(owner, ast.Load()), fn, ast.Load()), call.args, call.keywords)
    if call.args and isinstance(call.args[0], ast.Name) and call.args[0].id in tensors:     # torch.relu_(z)
        return call.args[0].id, ast.Call(ast.Attribute(call.func.value, fn, ast.Load()), call.args, call.keywords)
    return None


def _masked_store(stmt: ast.stmt, tensors: set[str]) -> bool:
    """y[mask] = number with the mask a boolean (y < 0, x > y, ~(y > 1), torch.isnan(y)): a store at
    the places the mask holds; other item stores (y[:, 0] = 0, y[idx] = v) are not read."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript)):
        return False
    target = stmt.targets[0]
    return isinstance(target.value, ast.Name) and target.value.id in tensors and _is_boolean(target.slice) \
        and is_number(stmt.value)


def _in_place(stmt: ast.stmt, fn: str, params: set[str], tensors: set[str], shares: dict[str, str],
              read_after: set[str]) -> list[tuple[str, ast.expr]]:
    """An in-place update of a tensor name (_updated) as the name bound anew. Refused where another
    name shares its memory (w = z, v = z.view(-1), z = x.float() of a float32 x, or z a view of
    another) and is read after it: PyTorch's result then reads the change through it; and on an input
    (but for a layer's inplace=True), as the runner refuses a reference that writes into its inputs."""
    update = _updated(stmt, tensors)
    if update is None:
        return []
    name, value = update
    if name in params and not getattr(stmt, "in_place_of", None):
        raise GenerationError(f"line {stmt.lineno} of {fn}: {ast.unparse(stmt)!r} changes the input {name} in place: "
                              "the runner refuses a reference that writes into its inputs (the caller's tensor would "
                              f"change); write it out of place ({name} = {ast.unparse(value)})")
    root = shares.get(name, name)
    others = sorted(n for n, r in shares.items() if r == root and n != name) + ([root] if root != name else [])
    others = [n for n in others if n in read_after]
    if others:
        raise GenerationError(f"line {stmt.lineno} of {fn}: {ast.unparse(stmt)!r} changes {name} in place while "
                              f"{', '.join(others)} shares its memory (the same tensor or a view of it), so PyTorch's "
                              f"result reads the change there too; write it out of place ({ast.unparse(value)})")
    return [(name, value)]


def _in_place_calls(stmt: ast.stmt, fn: str, read_after: set[str]) -> list[ast.stmt]:
    """A call with inplace=True (F.relu(h, inplace=True), a layer made with inplace=True) changes its
    tensor. Where it is a statement's whole value over a name (y = self.relu(h), return self.relu(h)),
    the statement becomes h's update in place, then the statement over h; elsewhere the keyword is
    dropped where nothing else reads that name, and refused where something does (h + F.relu(h,
    inplace=True) reads the change or not by the order torch runs them)."""
    calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call) and any(
        k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is True for k in n.keywords)]
    for call in calls:
        call.keywords = [k for k in call.keywords if k.arg != "inplace"]
    whole = getattr(stmt, "value", None)
    if len(calls) == 1 and whole is calls[0] and isinstance(stmt, (ast.Assign, ast.Return, ast.Expr)) \
            and calls[0].args and isinstance(calls[0].args[0], ast.Name):
        name = calls[0].args[0].id
        update = ast.Expr(calls[0], lineno=stmt.lineno)
        update.in_place_of = name
        if isinstance(stmt, ast.Expr):
            return [update]
        rest = copy.copy(stmt)
        rest.value = ast.Name(name, ast.Load())
        return [update, rest]
    here = [n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    for call in calls:
        name = call.args[0].id if call.args and isinstance(call.args[0], ast.Name) else None
        if name is not None and (here.count(name) > 1 or name in read_after):
            raise GenerationError(f"line {stmt.lineno} of {fn}: {ast.unparse(call)} changes {name} in place inside a "
                                  f"larger expression, and {name} is read again; write it out of place (inplace=False) "
                                  "or on a line of its own")
    return [stmt]


def _assignment(stmt: ast.stmt) -> list[tuple[str, ast.expr]]:
    """The names a statement binds and their values; none where it is not a plain assignment."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        return _unpacked(stmt.targets[0], stmt.value)
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return [(stmt.target.id, stmt.value)]
    return []


def _unpacked(target: ast.expr, value: ast.expr) -> list[tuple[str, ast.expr]]:
    """x = value, or names unpacked from a tuple (a, b = x, y) or from a call's parts:
    values, idx = torch.max(x, dim=1) binds values to torch.max(x, dim=1)[0], which MaxParts reads."""
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if not (isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts)):
        return []
    names = [e.id for e in target.elts]
    if isinstance(value, ast.Tuple):
        return list(zip(names, value.elts)) if len(value.elts) == len(names) else []
    return [(n, ast.Subscript(copy.deepcopy(value), ast.Constant(i), ast.Load())) for i, n in enumerate(names)]


def refuse_other_meanings(fname: str, ret: ast.expr, torch_only: bool = False) -> None:
    """Calls whose PyTorch meaning is not the IR op of that name: max/min over a dim return values
    and indices, and softmax without a dim picks one by the input's rank. torch_only: in a typed
    expression, only torch.max(...) and x.max(...) (a bare max(x, dim=0) is the IR's)."""
    for n in ast.walk(ret):
        if not isinstance(n, ast.Call) or (torch_only and not isinstance(n.func, ast.Attribute)):
            continue
        name, method = called(n)
        args = len(n.args) + method
        given_dim = _given_dim(n, args)
        if name in ("max", "min") and given_dim:
            raise GenerationError(f"{fname} returns {ast.unparse(n)!r}: {name} over a dim returns (values, indices) "
                                  f"in PyTorch, which a kernel here returns only as the whole result (return "
                                  f"torch.{name}(x, dim) itself); inside an expression take its .values (torch.a{name}) "
                                  f"or its .indices (torch.arg{name})")
        if name in ("cummax", "cummin"):
            raise GenerationError(f"{fname} returns {ast.unparse(n)!r}: {name} returns (values, indices) in PyTorch; "
                                  f"take .values (the running {name[3:]}) or [0]")
        if name in ("softmax", "log_softmax") and args == 1 and not given_dim:
            raise GenerationError(f"{fname} returns {ast.unparse(n)!r}: {name} without a dim picks one by the "
                                  f"input's rank in PyTorch; give it one, e.g. dim=-1")
