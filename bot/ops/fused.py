"""The fused-reduction family: pointwise expressions holding reductions over one dim that keep it, or
over every element (x / x.norm(p=2, dim=1, keepdim=True), x - x.mean(-1, keepdim=True),
exp(x - max) / sum(exp(x - max)), x / torch.norm(x)), and the reductions torch computes in more than
one step (var and std with a correction, logsumexp, vector norms of any order, prod), at the root or
inside such an expression.

The expression's full shape is viewed as [A, D, B], D the reduced dim (every element: [1, N, 1]);
each of the A x B rows is reduced over D. A program takes BLOCK_X rows (neighbouring in memory:
rows of the last dim, or side by side along B) and walks D in BLOCK_D chunks, one pass for each
level of reductions (a reduction over another's result is a level up; all reductions of a level
share a pass), then a last pass writing the output. Each reduction keeps its running state in
float32 (sum, extreme, product; count, mean and squared deviations by Chan et al.'s merge for var
and std; running max and rescaled sum for logsumexp) and finishes it into its value. Where few rows
would leave SMs idle, D is split over programs: each level is a kernel writing its chunk's states,
which the next kernels merge (the same merge, over the split) before their own pass.

Owns the IR rule of prod, var, std, logsumexp, norm, F.normalize and F.cosine_similarity and their
words ("variance with correction 0", "L2 norm", "L1 normalize", "对数求和指数"), which expressions are its
(claims), their check and shape, the torch calls, the kernels with their config space and default rule,
and its catalog entries.
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import replace

from bot.codegen.code import jit_source, launch
from bot.codegen.expr import fmt_const
from bot.codegen.kernel_file import NEG_INF, POS_INF, KernelFile, KernelInput, _expanded_strides
from bot.ops import pointwise
from bot.ops.entry import Entry
from bot.ops.node import (ALL, Call, IRError, Node, arguments, broadcast_shapes, call, inp, input_names, is_none,
                          keepdim, number, over_dim, prints, substitute, to_text)
from bot.ops.text import FLAGS as _F

NAME = "fused"
OPS = {"prod", "var", "std", "logsumexp", "norm"}
BASIC = {"sum", "mean", "max", "min"}           # the reduce family's, read here where they sit inside
REDUCTIONS = OPS | BASIC
ROOT = False
MAX_RANK = 5
MAX_NUMEL = 2**34                               # the kernels index with int64
SUPPORTED = ("", "reductions that keep their dim inside an expression (x / x.norm(dim=1, keepdim=True), "
             "x - x.mean(-1, keepdim=True)), prod, var, std, logsumexp, norm, F.normalize, F.cosine_similarity")
ALIASES = {"vector_norm": "norm"}
KEYWORDS = {"prod": {"dim", "keepdim"}, "var": {"dim", "correction", "unbiased", "keepdim"},
            "std": {"dim", "correction", "unbiased", "keepdim"}, "logsumexp": {"dim", "keepdim"},
            "norm": {"p", "ord", "dim", "keepdim"}, "normalize": {"p", "dim", "eps"},
            "cosine_similarity": {"x1", "x2", "dim", "eps"}}
OUTPUT_DTYPES: dict[str, str] = {}
NORMALIZE_EPS = 1e-12          # F.normalize's

# A vector norm's order, said in its name: (pattern, p; None: the number said, "L3", "2-norm").
# Frobenius is the 2-norm, of every element where no dim is said (bot.request.operation).
_FROBENIUS = r"\bfrobenius\b|\bfro\b|F(?=\s*范数)"
_CN_NOUN = r"(?=\s*(?:范数|归一化))"             # 二范数: a Chinese order only right before its noun
_ORDERS = [
    (rf"\bL[\s_-]?(?:inf(?:inity)?|∞)|\binf(?:inity)?\b|\bmax(?:imum)?(?:[\s_-]abs(?:olute)?)?\b|\bsup(?:remum)?\b|"
     rf"\bchebyshev\b|(?:无穷|最大){_CN_NOUN}", "inf"),
    (rf"{_FROBENIUS}|\beuclid(?:ean)?\b|(?:欧几里得|欧氏|二){_CN_NOUN}", 2.0),
    (rf"\bmanhattan\b|\btaxicab\b|(?:曼哈顿|一){_CN_NOUN}", 1.0),
    (r"\bL[\s_-]?\d+(?:\.\d+)?(?![\w.])|(?<![\w.])\d+(?:\.\d+)?[\s-]?(?=norm|范数|normali[sz]|归一化)", None),
]
_ORDER = "|".join(f"(?:{p})" for p, _ in _ORDERS)
_WHICH_ORDER = re.compile("|".join(f"(?P<o{i}>{p})" for i, (p, _) in enumerate(_ORDERS)), _F)
_ORDER_LIST = rf"(?:{_ORDER})(?:\s*(?:,|\band\b|\bor\b|和|或)\s*(?:{_ORDER}))*"      # "L1 and L2 norm": asked which
FROBENIUS = re.compile(_FROBENIUS, _F)
NORM_WORD = re.compile(rf"{_ORDER_LIST}[\s_-]*(?:norms?\b|范数)", _F)
NORMALIZE_WORD = re.compile(rf"{_ORDER_LIST}[\s_-]*(?:normali[sz](?:e|es|ed|ing|ation)\b|归一化)|"
                            rf"\bnormali[sz]e[sd]?[;\s]+(?:(?:each|the)?[;\s]+)?(?:[a-z]\w?|rows?|columns?|vectors?)?\s*by\s+"
                            rf"(?:its|their|the)\s+(?:{_ORDER})[\s_-]*norms?\b", _F)
# var's and std's correction: said as a number, or by name (unbiased, sample: 1; biased, population: 0).
CORRECTION_WORD = re.compile(r"\b(?:correction|ddof)\s*(?:of|=|:|is)?\s*(\d+)(?![\w.])|\bbessel'?s\s+correction\b|"
                             r"\b(?:un)?biased\b|\bsample\b|\bpopulation\b|无偏|有偏|样本|总体", _F)
_BY_NAME = re.compile(r"\bbessel|\bunbiased|\bsample|无偏|样本", _F)          # the names that say correction 1
# prod is "paired", as reduce's sum and max are: of two tensors it is elementwise (x * y).
WORDS = [(re.compile(p, _F) if isinstance(p, str) else p, kind, op) for p, kind, op in [
    (NORMALIZE_WORD, "row", "normalize"),
    (NORM_WORD, "row", "norm"),
    (r"\blog[\s_-]?sum[\s_-]?exp\b|对数求和指数", "row", "logsumexp"),
    (r"\bvariances?\b|\bvar\b|方差", "row", "var"),
    (r"\bstandard[\s_-]deviations?\b|\bstd(?:dev)?\b|标准差", "row", "std"),
    (r"\bprod(?:uct)?\b|乘积|连乘", "paired", "prod"),
]]
WORD_OPS = {op for _, _, op in WORDS}

# The space the benchmark sweeps: rows a program, chunk depth, warps, programs a row at least.
CONFIGS = [{"BLOCK_X": x, "BLOCK_D": d, "num_warps": w} for x, d, w in
           [(1, 2048, 4), (4, 1024, 4), (16, 256, 4), (64, 64, 4), (256, 16, 4), (1, 8192, 8), (128, 32, 8)]]


# ---------------------------------------------------------------- IR rule

def convert(c: Call) -> Node | None:
    if c.fname == "normalize":
        return _normalize(c)
    if c.fname == "cosine_similarity":
        return _cosine_similarity(c)
    if c.fname not in OPS:
        return None
    if c.fname == "norm":
        p = _order(c)
        kept = keepdim(c)
        dim = over_dim(c, all_by_default=True, several=True)
        return _reduction("norm", c, ALL if dim is None else dim, kept, p=p)
    correction = None
    if c.fname in ("var", "std"):
        correction = _correction(c)
    kept = keepdim(c)
    dim = over_dim(c, all_by_default=True, several=c.fname != "prod")      # torch.prod takes one dim
    if c.fname == "logsumexp" and dim is None:
        raise IRError("logsumexp needs a dim, e.g. torch.logsumexp(x, dim=-1)")
    return _reduction(c.fname, c, ALL if dim is None else dim, kept,
                      **({"correction": correction} if correction is not None else {}))


def _reduction(op: str, c: Call, dim, kept: bool, **attrs) -> Node:
    if len(c.args) != 1:
        raise IRError(f"{c.fname} takes one tensor, got {len(c.args)} arguments")
    if kept and dim == ALL:
        raise IRError(f"{c.fname} over every element with keepdim=True is not supported; name the dim, or drop "
                      "keepdim (one value, broadcast where it is used)")
    return call(op, c.expr(c.args[0]), dim=dim, **({"keepdim": True} if kept else {}), **attrs)


def _order(c: Call) -> float | str:
    """A vector norm's order: p= (torch.norm, x.norm) or ord= (linalg.vector_norm), or the second
    positional argument of torch.norm; 'fro' and 2 are the 2-norm, inf the largest magnitude."""
    p = c.kw.pop("p", c.kw.pop("ord", None))
    if p is None and len(c.args) >= 2 and not (isinstance(c.args[1], ast.Constant) and isinstance(c.args[1].value, int)
                                               and c.fname != "norm"):
        p = c.args.pop(1)
    if is_none(p) or (isinstance(p, ast.Constant) and p.value == "fro"):
        return 2.0
    text = ast.unparse(p)
    if text in ("inf", "float('inf')", 'float("inf")', "math.inf", "torch.inf"):
        return "inf"
    try:
        value = number(p)
    except IRError:
        raise IRError(f"norm of order {text} is not supported; use a positive number, 'fro' or inf") from None
    if value <= 0:
        raise IRError(f"norm of order {text} is not supported; use a positive number, 'fro' or inf")
    return value


def _correction(c: Call) -> int:
    """var/std's correction: correction=, unbiased= (True: 1) or a bool after the dim, else 1."""
    correction = c.kw.pop("correction", None)
    unbiased = c.kw.pop("unbiased", None)
    if unbiased is None and len(c.args) >= 3 and isinstance(c.args[2], ast.Constant) and \
            isinstance(c.args[2].value, bool):
        unbiased = c.args.pop(2)
    if correction is not None:
        value = number(correction)
        if value != int(value) or value < 0:
            raise IRError(f"{c.fname} takes an integer correction >= 0, got {ast.unparse(correction)}")
        return int(value)
    if unbiased is not None:
        if not (isinstance(unbiased, ast.Constant) and isinstance(unbiased.value, bool)):
            raise IRError(f"{c.fname} takes unbiased=True or False, got {ast.unparse(unbiased)}")
        return int(unbiased.value)
    return 1


def _normalize(c: Call) -> Node:
    """F.normalize(x, p=2, dim=1, eps=1e-12): x divided by its norm over dim, at least eps."""
    order = ("input", "p", "dim", "eps")
    given = dict(zip(order, c.args)) | c.kw
    c.kw.clear()
    p = 2.0 if is_none(given.get("p")) else _order(Call("norm", "", [given["input"]], {"p": given["p"]}, c.expr))
    dim = 1 if is_none(given.get("dim")) else int(number(given["dim"]))
    eps = NORMALIZE_EPS if is_none(given.get("eps")) else number(given["eps"])
    return normalized(c.expr(given["input"]), p, dim, eps)


def normalized(x: Node, p: float | str, dim: int | None, eps: float) -> Node:
    """x / max(norm(x, p, dim), eps), the norm kept over dim (dim None: to be said, see over)."""
    return call("div", x, call("clamp", call("norm", x, dim=dim, keepdim=True, p=p), min=eps, max=None))


def _cosine_similarity(c: Call) -> Node:
    """F.cosine_similarity(x1, x2, dim=1, eps=1e-8) as torch computes it: each input over its own 2-norm
    along dim, each norm at least eps, their product summed over dim. torch broadcasts x1 and x2 to one
    shape first: an input broadcast over other dims than dim ([1, D] beside [N, D]) reads the same
    here, one broadcast over dim is refused (output_shape)."""
    given = arguments(c, ("x1", "x2", "dim", "eps"))
    if "x1" not in given or "x2" not in given:
        raise IRError("cosine_similarity takes two tensors, e.g. F.cosine_similarity(x1, x2, dim=1)")
    dim = 1 if is_none(given.get("dim")) else int(number(given["dim"]))
    eps = 1e-8 if is_none(given.get("eps")) else number(given["eps"])
    return call("sum", call("mul", *(normalized(c.expr(given[x]), 2.0, dim, eps) for x in ("x1", "x2"))), dim=dim)


# ---------------------------------------------------------------- words

def words_node(op: str, body: Node, said: str, keep: bool = False, eps: float | None = None) -> tuple[Node, list[str]]:
    """op (one of WORD_OPS) of body as the words say it: a norm's order and var's or std's correction
    read from said, keep (keepdim) for a reduction, eps for normalize; every reduction's dim None,
    left to the dim the words name (over). With notes of the defaults taken."""
    kept = {"keepdim": True} if keep else {}
    if op == "normalize":
        notes = [] if eps is not None else [f"no eps named: using {NORMALIZE_EPS!r}, F.normalize's (the least norm "
                                            "divided by)"]
        return normalized(body, _said_order(NORMALIZE_WORD, said), None,
                          NORMALIZE_EPS if eps is None else eps), notes
    if op == "norm":
        return call(op, body, dim=None, p=_said_order(NORM_WORD, said), **kept), []
    if op not in ("var", "std"):
        return call(op, body, dim=None, **kept), []
    correction = said_correction(said)
    notes = [] if correction is not None else [f"no correction named: using correction=1 (the unbiased estimate, "
                                               f"torch.{op}'s default); say 'correction 0' or 'population' for the "
                                               "biased one"]
    return call(op, body, dim=None, correction=1 if correction is None else correction, **kept), notes


def _said_order(pattern: re.Pattern, said: str) -> float | str:
    """The order of the norm words in said name; IRError where they name several."""
    orders = {_order_named(o) for m in pattern.finditer(said) for o in _WHICH_ORDER.finditer(m.group(0))}
    if len(orders) > 1:
        names = ", ".join(sorted("L-inf" if p == "inf" else f"L{p:g}" for p in orders))
        raise IRError(f"I read norms {names}: one per kernel. Which one?")
    p = orders.pop()
    if p != "inf" and p <= 0:
        raise IRError(f"a norm of order {p:g} is not supported (an L0 'norm' counts nonzeros); name a positive order, "
                      "e.g. 'L1 norm', 'L2 norm', or 'max norm'")
    return p


def _order_named(o: re.Match) -> float | str:
    p = _ORDERS[int(o.lastgroup[1:])][1]
    return float(re.search(r"\d+(?:\.\d+)?", o.group(0)).group(0)) if p is None else p


def said_correction(said: str) -> int | None:
    """var's and std's correction the words say, if any; IRError where they say two."""
    corrections = {int(m.group(1)) if m.group(1) else int(bool(_BY_NAME.match(m.group(0))))
                   for m in CORRECTION_WORD.finditer(said)}
    if len(corrections) > 1:
        raise IRError(f"I read corrections {' and '.join(map(str, sorted(corrections)))} (1: unbiased, sample; 0: "
                      "biased, population). Which one?")
    return corrections.pop() if corrections else None


def dim_unsaid(node: Node) -> bool:
    """Whether the tree was named in words and waits for their dim: a reduction's dim is None (code
    always gives one, ALL where it names none)."""
    return claims(node) and any(sub.op in REDUCTIONS and sub.attr("dim", ALL) is None for sub in node.walk())


def over(node: Node, dim: int | str) -> Node:
    """A tree named in words with every reduction the words named over dim (one typed with its dim
    keeps it); over every element (ALL) none keeps its dim (one value, broadcast where it is used:
    the caller refuses a root kept over every element)."""
    attrs = dict(node.attrs)
    if node.op in REDUCTIONS and node.attr("dim", ALL) is None:
        attrs["dim"] = dim
        if dim == ALL:
            attrs.pop("keepdim", None)
    return replace(node, args=tuple(over(a, dim) for a in node.args), attrs=tuple(sorted(attrs.items())))


def word_op(node: Node) -> str:
    """What the words named a tree of this family: its root reduction, or normalize (x / its norm)."""
    return node.op if node.op in REDUCTIONS else "normalize"


@prints(*OPS)
def _print(node: Node, text) -> str:
    dim = node.attr("dim")
    parts = [text(node.args[0])]
    if node.op == "norm":
        parts.append(f"p={node.attr('p')!r}" if node.attr("p") != "inf" else "p=float('inf')")
    parts.append("dim=None" if dim == ALL else f"dim={dim}")
    if node.attr("correction") is not None and node.attr("correction") != 1:
        parts.append(f"correction={node.attr('correction')}")
    if node.attr("keepdim"):
        parts.append("keepdim=True")
    return f"{node.op}({', '.join(parts)})"


def claims(node: Node) -> bool:
    """Whether the tree is this family's: one of its reductions anywhere, a reduction below the root,
    or a reduction over several dims at once."""
    return any(sub.op in OPS or (sub.op in REDUCTIONS and isinstance(sub.attr("dim"), tuple)) for sub in node.walk()) \
        or any(sub.op in REDUCTIONS for a in node.args for sub in a.walk())


def reduced_dims(dim, rank: int) -> list[int]:
    """A reduction's dims, non-negative and sorted (one dim, or several given as a tuple); IRError
    where several are not neighbours: the kernel reduces one run of neighbouring dims."""
    dims = sorted(d % rank for d in (dim if isinstance(dim, tuple) else (dim,)))
    if any(not -rank <= d < rank for d in (dim if isinstance(dim, tuple) else (dim,))):
        raise IRError(f"reduction over dim {dim}, but the input has {rank} dims")
    if dims != list(range(dims[0], dims[0] + len(dims))):
        raise IRError(f"a reduction over dims {dim} is not supported: the offline kernel reduces neighbouring dims "
                      "(e.g. dim=(2, 3)); reduce them in two steps")
    return dims


def reductions(node: Node) -> list[Node]:
    """The tree's distinct reductions, inner ones first."""
    found: list[Node] = []
    for sub in _post_order(node):
        if sub.op in REDUCTIONS and sub not in found:
            found.append(sub)
    return found


def _post_order(node: Node) -> list[Node]:
    return [s for a in node.args for s in _post_order(a)] + [node]


def check(node: Node) -> None:
    """Pointwise ops around reductions over one common dim (or every element); a reduction below the
    root keeps its dim (keepdim=True) or reduces every element, so its value broadcasts."""
    allowed = pointwise.OPS | REDUCTIONS | {"input", "const"}
    for sub in node.walk():
        if sub.op not in allowed:
            raise IRError(f"{sub.op} inside an expression with reductions is not supported; such an expression "
                          "takes pointwise ops and reductions (sum, mean, max, min, prod, var, std, logsumexp, norm)")
    found = reductions(node)
    dims = {r.attr("dim") for r in found}
    if len(dims) > 1:
        raise IRError(f"reductions over dims {sorted(map(str, dims))} in one expression: the offline kernel takes one "
                      "reduced dim (or every element) per expression")
    for r in found:
        if r is not node and not r.attr("keepdim") and r.attr("dim") != ALL:
            raise IRError(f"{to_text(r)} inside an expression must keep its dim (keepdim=True) so it broadcasts "
                          "back over it")
        if not outer_inputs(r.args[0]):
            # a reduction of values that are already one a row (logsumexp(mean(x, 1, keepdim=True), 1)) reduces
            # a dim of size 1, not D copies of them: a kernel of its own does that
            raise IRError(f"{to_text(r)} reduces a value that is already reduced over dim {r.attr('dim')}; it runs "
                          "as a kernel of its own")
    outer = set(outer_inputs(node))
    for r in found:
        # The kernel reduces rows of the shape the whole expression broadcasts to. A reduction of inputs
        # the rest does not read (min(y, 1, keepdim=True) + bias) may reduce rows of another shape
        # (y [N, D] beside bias [C, 1, 1]): it runs as a kernel of its own.
        if outer and not outer & set(input_names(r.args[0])):
            raise IRError(f"{to_text(r)} reduces inputs the rest of the expression does not read; it runs as a "
                          "kernel of its own")


def collapsed(node: Node) -> Node:
    """The tree with each reduction of a value already reduced over its dim (logsumexp(mean(x, 1,
    keepdim=True), 1, keepdim=True), y - y.mean(1, keepdim=True) for y = x.amax(1, keepdim=True))
    written as what it is over that dim of size 1: the value itself (its absolute value for a norm, 0
    for a variance without correction). Torch's result is the same; a kernel would reduce one element."""
    args = tuple(collapsed(a) for a in node.args)
    node = Node(node.op, args, node.name, node.value, node.attrs)
    if node.op not in REDUCTIONS or not _constant_over(args[0], node.attr("dim"), node.attr("keepdim")):
        return node
    body = args[0]
    if node.op == "norm" and node.attr("p") != 0:
        return call("abs", body)
    if node.op in ("var", "std") and node.attr("correction") == 0:
        return call("sub", body, body)
    return body if node.op in BASIC | {"prod", "logsumexp"} else node


def _constant_over(body: Node, dim, keepdim: bool) -> bool:
    """Whether body reads its inputs only through reductions over dim that keep the same shape as a
    reduction over dim with this keepdim would give it (so reducing body over dim changes nothing)."""
    inner = reductions(body)
    if not inner or outer_inputs(body) or not (keepdim or dim == ALL):
        return False
    return all(r.attr("dim") in (dim, ALL) and bool(r.attr("keepdim")) == bool(keepdim) for r in inner)


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    full = broadcast_shapes([shapes[n] for n in input_names(node)])
    for r in reductions(node):
        dim = r.attr("dim")
        if dim != ALL and not all(-len(full) <= d < len(full) for d in (dim if isinstance(dim, tuple) else (dim,))):
            raise IRError(f"{r.op} over dim {dim}, but the input has {len(full)} dims (shape {full})")
        # The kernel reduces each row of the full shape: a body broadcast over other dims ([1, D] beside
        # [N, D]) gives each row its own value, as torch does; one broadcast over a reduced dim would be
        # counted once a row of the full shape, where torch counts it once.
        body = _shape(r.args[0], shapes, full)
        reduced = range(len(full)) if dim == ALL else reduced_dims(dim, len(full))
        if len(body) != len(full) or any(body[d] != full[d] for d in reduced):
            raise IRError(f"{to_text(r)} reduces a body of shape {body}, but the expression's shape is {full}; "
                          "the offline kernel takes reductions of a body of the full rank and the full size on "
                          "the dims they reduce")
    return _shape(node, shapes, full)


def _shape(node: Node, shapes: dict[str, list[int]], full: list[int]) -> list[int]:
    """The shape of a subtree: an input's, a reduction's (as of the full shape: it is computed a row of
    it), the broadcast of the rest."""
    if node.op == "input":
        return list(shapes[node.name])
    if node.op in REDUCTIONS:
        dim = node.attr("dim")
        if dim == ALL:
            return [1] * len(full) if node.attr("keepdim") else []
        dims = reduced_dims(dim, len(full))
        kept = [1] * len(dims) if node.attr("keepdim") else []
        return full[:dims[0]] + kept + full[dims[-1] + 1:]
    return broadcast_shapes([_shape(a, shapes, full) for a in node.args] or [[]])


def outer_inputs(node: Node) -> list[str]:
    """The inputs the expression reads outside its reductions."""
    if node.op == "input":
        return [node.name]
    if node.op in REDUCTIONS:
        return []
    return list(dict.fromkeys(n for a in node.args for n in outer_inputs(a)))


def reduced_dim(node: Node) -> int | list[int] | None:
    """The dim the expression reduces (several: a list; None: every element), for the tolerance."""
    dim = reductions(node)[0].attr("dim")
    return None if dim == ALL else list(dim) if isinstance(dim, tuple) else dim


# ---------------------------------------------------------------- the reference

def _torch_reduction(node: Node, a: list[str]) -> str:
    dim, kept = node.attr("dim"), ", keepdim=True" if node.attr("keepdim") else ""
    over = "" if dim == ALL else f", dim={dim}"
    if node.op == "logsumexp":
        return f"torch.logsumexp({a[0]}, dim={dim}{kept})" if dim != ALL else f"torch.logsumexp({a[0]}.flatten(), dim=0)"
    if node.op == "norm":
        p = "float('inf')" if node.attr("p") == "inf" else fmt_const(node.attr("p"))
        return f"torch.linalg.vector_norm({a[0]}, ord={p}{over}{kept})"
    if node.op in ("var", "std"):
        return f"torch.{node.op}({a[0]}{over}, correction={node.attr('correction')}{kept})"
    fn = {"max": "torch.amax", "min": "torch.amin"}.get(node.op, f"torch.{node.op}")
    return f"{fn}({a[0]}{over}{kept})"


TORCH_OPS = {op: _torch_reduction for op in REDUCTIONS}


def reference_property(node: Node) -> tuple[str, bool]:
    return "", False


# ---------------------------------------------------------------- per reduction: state, fold, merge, value

def _states(r: Node) -> list[str]:
    """The float32 state variables of a reduction (their names carry its index)."""
    if r.op in ("var", "std"):
        return ["n", "mu", "m2"]
    if r.op == "logsumexp":
        return ["m", "s"]
    return ["acc"]


def _init(r: Node) -> list[float | str]:
    if r.op in ("var", "std"):
        return ["0.0", "0.0", "0.0"]
    if r.op == "logsumexp":
        return [NEG_INF, "0.0"]
    if r.op in ("max",) or (r.op == "norm" and r.attr("p") == "inf"):
        return [NEG_INF]
    if r.op == "min":
        return [POS_INF]
    return ["1.0" if r.op == "prod" else "0.0"]


def _term(r: Node, v: str) -> str:
    """What a sum-like reduction adds up for a value v."""
    p = r.attr("p")
    if r.op != "norm" or p == "inf":
        return v
    if p == 1.0:
        return f"tl.abs({v})"
    if p == 2.0:
        return f"{v} * {v}"
    return f"tl.exp2({fmt_const(p)} * tl.log2(tl.abs({v})))"


def _fold(r: Node, i: int, v: str, mask: str) -> list[str]:
    """Lines folding a chunk v (masked lanes outside mask) into reduction i's state."""
    s = [f"{name}{i}" for name in _states(r)]
    red = "tl.sum({x}, axis=AXIS, keep_dims=True)"
    if r.op in ("var", "std"):
        return [f"k{i} = tl.sum({mask}.to(tl.float32), axis=AXIS, keep_dims=True)",
                f"cm{i} = tl.sum(tl.where({mask}, {v}, 0.0), axis=AXIS, keep_dims=True) / tl.maximum(k{i}, 1.0)",
                f"dv{i} = tl.where({mask}, {v} - cm{i}, 0.0)",
                f"dl{i} = cm{i} - {s[1]}",
                f"tot{i} = {s[0]} + k{i}",
                f"{s[1]} += dl{i} * (k{i} / tl.maximum(tot{i}, 1.0))",
                f"{s[2]} += tl.sum(dv{i} * dv{i}, axis=AXIS, keep_dims=True) + dl{i} * dl{i} * "
                f"({s[0]} * k{i} / tl.maximum(tot{i}, 1.0))",
                f"{s[0]} = tot{i}"]
    if r.op == "logsumexp":
        return [f"tm{i} = tl.max(tl.where({mask}, {v}, {NEG_INF}), axis=AXIS, keep_dims=True)",
                f"nm{i} = tl.maximum({s[0]}, tm{i})",
                f"sm{i} = tl.where(nm{i} == {NEG_INF}, 0.0, nm{i})",
                f"{s[1]} = {s[1]} * tl.exp({s[0]} - sm{i}) + "
                + red.format(x=f"tl.where({mask}, tl.exp({v} - sm{i}), 0.0)"),
                f"{s[0]} = nm{i}"]
    if r.op in ("max", "min") or (r.op == "norm" and r.attr("p") == "inf"):
        op = "max" if r.op != "min" else "min"
        fill = NEG_INF if op == "max" else POS_INF
        value = f"tl.abs({v})" if r.op == "norm" else v
        return [f"{s[0]} = _{op}_nan({s[0]}, tl.reduce(tl.where({mask}, {value}, {fill}), AXIS, _{op}_nan, "
                "keep_dims=True))"]
    if r.op == "prod":
        return [f"{s[0]} = {s[0]} * tl.reduce(tl.where({mask}, {v}, 1.0), AXIS, _mul, keep_dims=True)"]
    return [f"{s[0]} += " + red.format(x=f"tl.where({mask}, {_term(r, v)}, 0.0)")]


def _merge(r: Node, i: int, parts: list[str], have: str) -> list[str]:
    """Lines merging a reduction's states over the split (tiles of parts[k], masked by have) into
    its state variables."""
    s = [f"{name}{i}" for name in _states(r)]
    if r.op in ("var", "std"):
        n, mu, m2 = parts
        return [f"{s[0]} = tl.sum({n}, axis=AXIS, keep_dims=True)",
                f"{s[1]} = tl.sum({n} * {mu}, axis=AXIS, keep_dims=True) / tl.maximum({s[0]}, 1.0)",
                f"{s[2]} = tl.sum({m2} + {n} * ({mu} - {s[1]}) * ({mu} - {s[1]}), axis=AXIS, keep_dims=True)"]
    if r.op == "logsumexp":
        m, sm = parts
        return [f"{s[0]} = tl.max(tl.where({have}, {m}, {NEG_INF}), axis=AXIS, keep_dims=True)",
                f"sm{i} = tl.where({s[0]} == {NEG_INF}, 0.0, {s[0]})",
                f"{s[1]} = tl.sum(tl.where({have}, {sm} * tl.exp({m} - sm{i}), 0.0), axis=AXIS, keep_dims=True)"]
    if r.op in ("max", "min") or (r.op == "norm" and r.attr("p") == "inf"):
        op = "max" if r.op != "min" else "min"
        return [f"{s[0]} = tl.reduce({parts[0]}, AXIS, _{op}_nan, keep_dims=True)"]
    if r.op == "prod":
        return [f"{s[0]} = tl.reduce({parts[0]}, AXIS, _mul, keep_dims=True)"]
    return [f"{s[0]} = tl.sum({parts[0]}, axis=AXIS, keep_dims=True)"]


def _value(r: Node, i: int) -> str:
    """Reduction i's value from its state (D: the reduced length)."""
    if r.op in ("var", "std"):
        var = f"m2{i} / (n{i} - {r.attr('correction')})"
        return f"tl.sqrt({var})" if r.op == "std" else var
    if r.op == "logsumexp":
        return f"tl.where(m{i} == {NEG_INF}, 0.0, m{i}) + tl.log(s{i})"
    if r.op == "mean":
        return f"acc{i} / D"
    if r.op == "norm":
        p = r.attr("p")
        if p == 2.0:
            return f"tl.sqrt(acc{i})"
        if p == "inf" or p == 1.0:
            return f"acc{i}"
        return f"tl.exp2(tl.log2(acc{i}) / {fmt_const(p)})"
    return f"acc{i}"


# ---------------------------------------------------------------- launcher helpers (copied into kernel.py)

def _reduced_run(shape, dim):
    # The reduced dims as a run (first, last), non-negative: one dim, or a tuple of neighbours.
    dims = sorted(d % len(shape) for d in (dim if isinstance(dim, tuple) else (dim,)))
    return dims[0], dims[-1]


def _adb(shape, dim):
    # (A, D, B): the shape viewed around the reduced dims (None: every element, [1, N, 1]).
    if dim is None:
        return 1, math.prod(shape), 1
    first, last = _reduced_run(shape, dim)
    return math.prod(shape[:first]), math.prod(shape[first:last + 1]), math.prod(shape[last + 1:])


def _reduced_shape(shape, dim, kept):
    # The shape with the reduced dims kept as 1s, or gone (None: every element).
    if dim is None:
        return [1] * len(shape) if kept else []
    first, last = _reduced_run(shape, dim)
    return [*shape[:first], *([1] * (last - first + 1) if kept else []), *shape[last + 1:]]


def _stepped(x, full, dim):
    # (x, its strides over the [A, D, B] view of the full shape): x as it is where it steps through
    # that view, else copied out to the full shape (a bias broadcast over some of A's dims only).
    strides = _adb_strides(x.shape, full, dim)
    if strides is None:
        x = x.expand(full).contiguous()
        strides = _adb_strides(x.shape, full, dim)
    return x, strides


def _adb_strides(shape, full, dim):
    # An input's element strides over the [A, D, B] view of the full shape (0 where it broadcasts),
    # or None where it cannot step through it: its dims before the reduced one must step as one
    # (all broadcast, or laid out like the full shape's), likewise those after it.
    strides = _expanded_strides(shape, full)
    if dim is None:
        groups = [[], list(range(len(full))), []]
    else:
        first, last = _reduced_run(full, dim)
        groups = [list(range(first)), list(range(first, last + 1)), list(range(last + 1, len(full)))]
    out = []
    for dims in groups:
        live = [d for d in dims if full[d] > 1]
        if not live or all(strides[d] == 0 for d in live):
            out.append(0)
            continue
        step = strides[live[-1]]
        for d, nxt in zip(live, live[1:]):
            if strides[d] != strides[nxt] * full[nxt] or step == 0:
                return None
        out.append(step)
    return out


def _fused_config(A, D, B):
    # The default config: whole rows of the last dim a program (a chunk as deep as the row, up to
    # 8K), or 64 neighbouring rows x 64-deep chunks where rows lie side by side (B > 1).
    if B > 1:
        return {"BLOCK_X": 64, "BLOCK_D": 64, "num_warps": 4} if B >= 64 else {"BLOCK_X": 16, "BLOCK_D": 256, "num_warps": 4}
    if D > 4096:
        return {"BLOCK_X": 1, "BLOCK_D": 8192, "num_warps": 8}
    return {"BLOCK_X": 1, "BLOCK_D": 2048, "num_warps": 4} if D > 512 else {"BLOCK_X": 16, "BLOCK_D": 256, "num_warps": 4}


def _fused_tiles(config, rows, D, sms):
    # (BLOCK_X, BLOCK_D, split, chunk): the config fitted to rows x D, and how many programs share a
    # row: enough for about two waves on the SMs, each with at least four chunks.
    bx = min(config["BLOCK_X"], 1 << (rows - 1).bit_length())
    bd = min(config["BLOCK_D"], 1 << (D - 1).bit_length())
    programs = -(-rows // bx)
    split = max(1, min(-(-2 * sms // programs), D // (4 * bd)))
    chunk = -(-D // (split * bd)) * bd
    return bx, bd, -(-D // chunk), chunk


# ---------------------------------------------------------------- kernel.py

def kernel_source(spec: dict, node: Node, options: dict | None = None) -> str:
    return _FusedKernel.render(spec, node, options)


class _FusedKernel(KernelFile):
    block_key = "BLOCK_D"
    description = ("The expression's shape viewed as [A, D, B], D reduced; BLOCK_X rows (A x B) a program, walking\n"
                   "D in BLOCK_D chunks: a pass for each level of reductions (float32 states, each finished\n"
                   "into its value), then a pass writing the output. Where few rows would leave SMs idle, D is\n"
                   "split: each level a kernel writing its chunks' states, merged by the kernels after it.")

    def __init__(self, spec, node, inputs, options):
        check(node)
        self.node = node
        self.reds = reductions(node)
        self.level = {}
        for r in self.reds:
            inner = [self.level[q] for q in self.reds if q is not r and _contains(r.args[0], q)]
            self.level[r] = 1 + max(inner, default=-1)
        self.levels = 1 + max(self.level.values())
        self.root_reduces = node.op in REDUCTIONS
        # one value a row: no input read but through the reductions (a broadcast one aside)
        self.per_row = self.root_reduces or not outer_inputs(node) or self._outer_broadcast(spec, node)
        names = input_names(node)
        self.used = [i for i in inputs if i.name in names]
        placeholders = [KernelInput(f"<r{i}>", f"r{i}", []) for i in range(len(self.reds))]
        self.bodies = [self._body(r.args[0], placeholders) for r in self.reds]
        super().__init__(spec, self._body(node, placeholders), inputs, self.used, options)
        self.dim = self.reds[0].attr("dim")

    @staticmethod
    def _outer_broadcast(spec: dict, node: Node) -> bool:
        """Whether every input outside the reductions is broadcast over the reduced dim (size 1 there)."""
        dim = reductions(node)[0].attr("dim")
        if dim == ALL:
            return all(math.prod(s) == 1 for i in spec["inputs"] if i["name"] in outer_inputs(node) for s in i["shapes"])
        rank = max(len(s) for i in spec["inputs"] for s in i["shapes"][:1])
        dims = reduced_dims(dim, rank)
        return all(len(s) - rank + d < 0 or s[len(s) - rank + d] == 1
                   for i in spec["inputs"] if i["name"] in outer_inputs(node) for s in i["shapes"] for d in dims)

    def _body(self, node: Node, placeholders: list[KernelInput]):
        """node in Triton over the inputs' values and the reductions' (r0, r1, ...)."""
        for i in reversed(range(len(self.reds))):       # outer first: an inner one's replacement changes them
            node = substitute(node, self.reds[i], inp(f"<r{i}>"))
        return pointwise.triton_body(node, [*placeholders, *self._locals()])

    def _locals(self) -> list[KernelInput]:
        return [KernelInput(i.name, i.local, i.shapes) for i in self.used]

    def _body_helper(self) -> list[str]:
        return []           # the expression is written inline: it reads the reductions' values too

    def source(self) -> str:
        kernels = [self._whole_kernel(), *(self._level_kernel(k) for k in range(self.levels)), self._out_kernel()]
        return self._file(kernels, [_reduced_run, _adb, _reduced_shape, _stepped, _adb_strides, _fused_config,
                                    _fused_tiles, _expanded_strides],
                          self._launcher())

    def configs(self) -> list[dict]:
        return self._space(CONFIGS)

    # ------------------------------------------------------------ the pieces every kernel shares

    def _params(self, extra: list[str]) -> list[str]:
        ptrs = [f"{i.local}_ptr" for i in self.used]
        strides = [f"{i.local}_s{a}" for i in self.used for a in "adb"]
        return [*ptrs, "out_ptr", "part_ptr", "rows", "D", "B", "split", "chunk", *strides, *extra,
                "COLS: tl.constexpr", "AXIS: tl.constexpr", "BLOCK_X: tl.constexpr", "BLOCK_D: tl.constexpr",
                "SPLIT_P2: tl.constexpr"]

    def _head(self) -> list[str]:
        return ["# This program's rows (neighbours in memory) as a tile axis, and its share of D.",
                "if COLS:",
                "    xs = (tl.program_id(0) * BLOCK_X + tl.arange(0, BLOCK_X)).to(tl.int64)[None, :]",
                "    lane = tl.arange(0, BLOCK_D)[:, None]",
                "else:",
                "    xs = (tl.program_id(0) * BLOCK_X + tl.arange(0, BLOCK_X)).to(tl.int64)[:, None]",
                "    lane = tl.arange(0, BLOCK_D)[None, :]",
                "x_ok = xs < rows",
                "a = xs // B",
                "b = xs % B",
                *(f"{i.local}_at = a * {i.local}_sa + b * {i.local}_sb" for i in self.used),
                "part = tl.program_id(1)",
                "start = part * chunk",
                "stop = tl.minimum(start + chunk, D)"]

    def _loads(self, indent: str = "    ") -> list[str]:
        return [f"{indent}d = d0 + lane",
                f"{indent}mask = x_ok & (d < stop)",
                *(f"{indent}{i.local} = tl.load({i.local}_ptr + {i.local}_at + d * {i.local}_sd, mask=mask, "
                  f"other=0.0).to(tl.float32)" for i in self.used)]

    def _pass(self, level: int) -> list[str]:
        """A pass over this program's chunk folding every reduction of the level."""
        inits = [f"{name}{i} = tl.full([{{}}], {value}, tl.float32)" for i, r in enumerate(self.reds)
                 if self.level[r] == level for name, value in zip(_states(r), _init(r))]
        lines = ["if COLS:", *(f"    {t.format('1, BLOCK_X')}" for t in inits),
                 "else:", *(f"    {t.format('BLOCK_X, 1')}" for t in inits)]
        lines.append("for d0 in range(start, stop, BLOCK_D):")
        lines += self._loads()
        for i, r in enumerate(self.reds):
            if self.level[r] == level:
                body = self.bodies[i]
                lines += [f"    {t}" for t in body.lines]
                lines += [f"    {t}" for t in _fold(r, i, f"({body.expr})", "mask")]
        return lines

    def _finish(self, level: int) -> list[str]:
        return [f"r{i} = {_value(r, i)}" for i, r in enumerate(self.reds) if self.level[r] == level]

    def _store_states(self, level: int) -> list[str]:
        """This chunk's states of the level's reductions, as partials [state, split, rows]."""
        return [f"tl.store(part_ptr + ({self._slot(r, name)} * split + part) * rows + xs, {name}{i}, mask=x_ok)"
                for i, r in enumerate(self.reds) if self.level[r] == level for name in _states(r)]

    def _slot(self, r: Node, name: str) -> int:
        """The partial buffer's row of one state of one reduction."""
        slots = [(q, n) for q in self.reds for n in _states(q)]
        return slots.index((r, name))

    def _merge_level(self, level: int) -> list[str]:
        """Every reduction of the level from the split's partials (each program merges the same)."""
        lines = ["if COLS:",
                 "    j = tl.arange(0, SPLIT_P2)[:, None]",
                 "else:",
                 "    j = tl.arange(0, SPLIT_P2)[None, :]",
                 "have = (j < split) & x_ok"]
        for i, r in enumerate(self.reds):
            if self.level[r] != level:
                continue
            parts = []
            for name in _states(r):
                fill = NEG_INF if name == "m" or (name == "acc" and _init(r)[0] == NEG_INF) else \
                    POS_INF if _init(r)[0] == POS_INF else "1.0" if r.op == "prod" else "0.0"
                lines.append(f"p{name}{i} = tl.load(part_ptr + ({self._slot(r, name)} * split + j) * rows + xs, "
                             f"mask=have, other={fill})")
                parts.append(f"p{name}{i}")
            lines += _merge(r, i, parts, "have")
        return lines + self._finish(level)

    def _output(self) -> list[str]:
        """The last pass: the expression over this program's chunk; or, where it reads no input but
        through its reductions (a reduction at the root, sum(x, keepdim=True) * 2), its value a row,
        reading what else it takes at d = 0 (broadcast over D)."""
        if self.per_row:
            outer = [i for i in self.used if i.name in outer_inputs(self.node)]
            return ["# The expression's value: one per row.",
                    "if part == 0:",
                    *(f"    {i.local} = tl.load({i.local}_ptr + {i.local}_at, mask=x_ok, other=0.0).to(tl.float32)"
                      for i in outer),
                    *(f"    {t}" for t in self.body_lines),
                    f"    tl.store(out_ptr + xs, ({self.body_expr}).to(out_ptr.dtype.element_ty), mask=x_ok)"]
        return ["for d0 in range(start, stop, BLOCK_D):",
                *self._loads(),
                *(f"    {t}" for t in self.body_lines),
                "    at = a * (D * B) + d * B + b",
                f"    tl.store(out_ptr + at, ({self.body_expr}).to(out_ptr.dtype.element_ty), mask=mask)"]

    # ------------------------------------------------------------ the kernels

    def _whole_kernel(self) -> str:
        """One program per row block over all of D: every level's pass in turn, then the output."""
        lines = self._head()
        for level in range(self.levels):
            lines += self._pass(level) + self._finish(level)
        lines += self._output()
        return jit_source(f"{self.name}_kernel", self._params([]), lines)

    def _level_kernel(self, level: int) -> str:
        """Split D: the level's partial states of this program's chunk, the levels below merged first."""
        lines = self._head()
        for below in range(level):
            lines += self._merge_level(below)
        lines += self._pass(level) + self._store_states(level)
        return jit_source(f"{self.name}_level{level}_kernel", self._params([]), lines)

    def _out_kernel(self) -> str:
        """Split D: every level merged, then this program's chunk of the output."""
        lines = self._head()
        for level in range(self.levels):
            lines += self._merge_level(level)
        lines += self._output()
        return jit_source(f"{self.name}_out_kernel", self._params([]), lines)

    def _launcher(self) -> str:
        first = self.inputs[0].local
        dim = None if self.dim == ALL else self.dim
        # inner reductions keep their dim (over every element: one value, no dims)
        kept = bool(self.node.attr("keepdim")) if self.root_reduces else self.dim != ALL
        reduced = f"_reduced_shape(shape, {dim}, {kept})"
        outer = [i.local for i in self.used if i.name in outer_inputs(self.node)]
        out_shape = ("shape" if not self.per_row else reduced if self.root_reduces or not outer else
                     f"list(_broadcast_shape({reduced}, {', '.join(o + '.shape' for o in outer)}))")
        text = self._signature_and_prologue()
        text += (f"    shape = list(_broadcast_shape({', '.join(i.local + '.shape' for i in self.used)}))\n"
                 f"    A, D, B = _adb(shape, {dim})\n"
                 f"    out = torch.empty({out_shape}, dtype={self.out_dtype(first)}, device={first}.device)\n"
                 "    if A * D * B == 0:\n        return out\n")
        for i in self.used:
            text += f"    {i.local}, {i.local}_strides = _stepped({i.local}, shape, {dim})\n"
        text += self._config_line("_fused_config(A, D, B)")
        text += (f"    sms = torch.cuda.get_device_properties({first}.device).multi_processor_count "
                 f"if {first}.is_cuda else 4\n"
                 "    rows = A * B\n"
                 "    BLOCK_X, BLOCK_D, split, chunk = _fused_tiles(config, rows, D, sms)\n"
                 "    grid = (_cdiv(rows, BLOCK_X), split)\n")
        common = ["rows", "D", "B", "split", "chunk", *(f"*{i.local}_strides" for i in self.used),
                  "COLS=B > 1", "AXIS=0 if B > 1 else 1", "BLOCK_X=BLOCK_X", "BLOCK_D=BLOCK_D",
                  "SPLIT_P2=triton.next_power_of_2(split)", 'num_warps=config["num_warps"]']
        ptrs = [i.local for i in self.used]
        slots = sum(len(_states(r)) for r in self.reds)
        text += "    if split == 1:\n"
        text += launch(f"{self.name}_kernel", "grid", [*ptrs, "out", "out", *common], "        ") + "\n"
        text += "        return out\n"
        text += ("    # D split over programs: each level's partial states, merged by the kernels after it.\n"
                 f"    part = torch.empty(({slots}, split, rows), dtype=torch.float32, device={first}.device)\n")
        for level in range(self.levels):
            text += launch(f"{self.name}_level{level}_kernel", "grid", [*ptrs, "out", "part", *common], "    ") + "\n"
        text += launch(f"{self.name}_out_kernel", "grid", [*ptrs, "out", "part", *common], "    ") + "\n"
        return text + "    return out\n"


def _contains(node: Node, sub: Node) -> bool:
    return any(s == sub for s in node.walk())


ENTRIES: tuple[Entry, ...] = ()
