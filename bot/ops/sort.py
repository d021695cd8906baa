"""The sort family: torch.sort, torch.argsort, torch.msort, torch.topk, torch.kthvalue and
torch.median over any one dim of a tensor input, ascending or descending (topk: largest or smallest),
returning the values, the int64 indices, or both as torch does ((values, indices)). Stable: equal
values keep their order, so the indices are one answer, the one torch.sort(..., stable=True) gives
(the order among ties that torch leaves open for topk, kthvalue and median is that of the stable
sort). Lowered by the sort template (bot.codegen.sort_kernel); owns its words, IR rule, reference
and catalog entries.
"""
from __future__ import annotations

import ast
import re

from bot.codegen.sort_kernel import MAX_TILE, Pick, SortKernel, _sort_tiles
from bot.ops import pointwise
from bot.ops.entry import Entry
from bot.ops.node import Call, IRError, Node, arguments, call, flag, is_int_literal, number, prints
from bot.ops.text import FLAGS as _F
from bot.ops.text import blank as _blank
from bot.ops.text import blank_span

NAME = "sort"
# op -> (the torch function, what it returns of it: both (values, indices), values or indices)
PARTS = {f"{base}{suffix}": (base, part) for base in ("sort", "topk", "kthvalue", "median")
         for suffix, part in (("", "both"), ("_values", "values"), ("_indices", "indices"))}
PARTS["argsort"] = PARTS.pop("sort_indices")
OPS = set(PARTS)
PAIRS = {op for op, (_, part) in PARTS.items() if part == "both"}          # (values, indices), as torch returns them
INDICES = {op for op, (_, part) in PARTS.items() if part == "indices"}     # the int64 indices alone
ROOT = True
SUPPORTED = ("over any one dim", "sort, argsort, topk, kthvalue and median (values, indices or both; descending, "
             "largest or smallest; stable: equal values keep their order)")
ALIASES: dict[str, str] = {}
_ARGS = {"sort": ("input", "dim", "descending", "stable"), "topk": ("input", "k", "dim", "largest", "sorted"),
         "kthvalue": ("input", "k", "dim", "keepdim"), "median": ("input", "dim", "keepdim")}
KEYWORDS = {op: set(_ARGS[base][1:]) for op, (base, _) in PARTS.items()}
KEYWORDS["msort"] = set()       # torch.msort(x): torch.sort(x, dim=0).values
OUTPUT_DTYPES = dict.fromkeys(INDICES, "int64")
WORDS: list = []            # read by sort_words, not as row words

# ---------------------------------------------------------------- words

_KTH_WORD = re.compile(r"\bk-?th\s+(?:smallest|value)\b|\bkth[\s_-]?value\b|\b(\d+)(?:st|nd|rd|th)\s+smallest\b|"
                       r"第\s*(\d+)\s*小", _F)
_MEDIAN_WORD = re.compile(r"\bmedians?\b|中位数", _F)
_TOPK_WORD = re.compile(r"\btop[\s_-]?k\s*[(=:]?\s*(?:k\s*=\s*)?(\d+)\)?|\btop[\s_-]?(k|\d+)\b|"
                        r"\b(?:smallest|largest|lowest|highest|bottom)[\s_-]?(k|\d+)\b|"
                        r"\b(\d+)\s+(?:smallest|largest|lowest|highest)\b|前\s*(\d+)\s*(?:个|大|小)", _F)
SORT_WORD = re.compile(rf"{_KTH_WORD.pattern}|{_MEDIAN_WORD.pattern}|{_TOPK_WORD.pattern}|\b(?:arg)?sort(?:s|ed|ing)?\b|"
                       r"排序", _F)
_K_WORD = re.compile(r"\bk\s*(?:=|:|of|is)?\s*(\d+)\b", _F)
_SMALLEST = re.compile(r"\b(?:smallest|lowest|bottom|minimum)\b|最小值?|前\s*\d+\s*小", _F)
_LARGEST = re.compile(r"\b(?:largest|highest|biggest|maximum)\b|最大值?", _F)
_DESCENDING = re.compile(r"\bdescending(?:\s+order)?\b|\bdecreasing\b|\blargest\s+first\b|"
                         r"\bhigh(?:est)?\s+to\s+low(?:est)?\b|降序|从大到小", _F)
_ASCENDING = re.compile(r"\bascending(?:\s+order)?\b|\bincreasing\b|\bsmallest\s+first\b|"
                        r"\blow(?:est)?\s+to\s+high(?:est)?\b|升序|从小到大", _F)
_ARGSORT = re.compile(r"\barg[\s_-]?sort\w*|\b(?:sorting|sorted)\s+(?:indices|order|permutation)\b|\bindices\s+"
                      r"(?:that|which)\s+(?:would\s+)?sort\b|排序(?:的)?(?:索引|下标)", _F)
_BOTH = re.compile(r"\b(?:values?\s+and\s+(?:their\s+|the\s+)?ind(?:ices|ex(?:es)?)|with\s+(?:its\s+|their\s+|the\s+)?"
                   r"ind(?:ices|ex(?:es)?))\b|(?:值)?(?:及其|和)(?:索引|下标)", _F)
_INDICES_ONLY = re.compile(r"\b(?:their\s+|the\s+|its\s+)?ind(?:ices|ex(?:es)?)\b|索引|下标", _F)
_VALUES_ONLY = re.compile(r"\b(?:their\s+|the\s+)?values\b|值", _F)
_STABLE = re.compile(r"\bstable\b|稳定", _F)


def sort_words(text: str) -> tuple[str, str, list[str]]:
    """(expression, text without the words read, notes) for a sort, argsort, top-k, k-th value or
    median in words: 'sort the rows descending', 'argsort over dim 0', 'top-8 values and indices',
    'the 5 smallest', 'the 3rd smallest', 'median over dim 1'. A sort and a median give their values,
    a top-k and a k-th value their values and indices, unless the words say which."""
    smallest, descending = bool(_SMALLEST.search(text)), bool(_DESCENDING.search(text))
    if smallest and descending or (descending and _ASCENDING.search(text)):
        raise IRError("ascending or descending? Say one of them, e.g. 'sort x descending'")
    top = _TOPK_WORD.search(text) or _KTH_WORD.search(text)
    k, base = None, "median" if _MEDIAN_WORD.search(text) else "sort"
    if top:
        base = "topk" if top.re is _TOPK_WORD else "kthvalue"
        said = next((g for g in top.groups() if g is not None), "k")
        k, text = int(said) if said.isdigit() else None, blank_span(text, top)
        if k is None and (m := _K_WORD.search(text)):
            k, text = int(m.group(1)), _K_WORD.sub(_blank, text)
        if k is None:
            raise IRError(f"{'top-k' if base == 'topk' else 'the k-th value'} with which k? Say e.g. 'top-8 over "
                          "the last dim', 'topk with k=50' or 'the 3rd smallest'")
    both, argsort = bool(_BOTH.search(text)), bool(_ARGSORT.search(text))
    indices = argsort or (not both and bool(_INDICES_ONLY.search(text)))
    values = not both and not indices and (base in ("sort", "median") or bool(_VALUES_ONLY.search(text)))
    for pattern in (SORT_WORD, _SMALLEST, _LARGEST, _DESCENDING, _ASCENDING, _ARGSORT, _BOTH, _INDICES_ONLY,
                    _VALUES_ONLY, _STABLE):
        text = pattern.sub(_blank, text)
    op = base + ("_values" if values else "_indices" if indices else "")
    if base == "topk":
        return f"{op}(x, {k}{', largest=False' if smallest else ''})", text, []
    if base == "kthvalue":
        return f"{op}(x, {k})", text, []
    if base == "median":
        return f"{op}(x, dim=-1)", text, []
    op = {"sort_indices": "argsort"}.get(op, op)
    return f"{op}(x{', descending=True' if descending else ''})", text, []


# ---------------------------------------------------------------- IR rule

def _flag(given: dict, key: str, default: bool) -> bool:
    return default if key not in given else flag(given[key])


def convert(c: Call) -> Node | None:
    """torch.sort(x, dim, descending, stable), torch.argsort(...), torch.topk(x, k, dim, largest,
    sorted), torch.kthvalue(x, k, dim, keepdim), torch.median(x, dim, keepdim) (also as methods);
    stable= and sorted= are accepted whatever they say: the kernel is stable and its top-k sorted,
    which either value allows."""
    if c.fname == "msort":
        c = Call("sort_values", c.written, c.args, {"dim": ast.Constant(0), **c.kw}, c.expr)
    if c.fname not in OPS:
        return None
    base = PARTS[c.fname][0]
    given = arguments(c, _ARGS[base])
    if "input" not in given:
        raise IRError(f"{c.fname} takes a tensor, e.g. torch.{base}(x, dim=-1)")
    if base == "median" and "dim" not in given:
        raise IRError("torch.median(x) without a dim is over every element; give it a dim, e.g. torch.median(x, "
                      "dim=-1) (values and indices)")
    dim = given.get("dim", ast.Constant(-1))
    if not is_int_literal(dim):
        raise IRError(f"{c.fname} takes one integer dim, e.g. dim=0; got {ast.unparse(dim)!r}")
    for key in ("stable", "sorted"):
        if key in given:
            flag(given[key])
    attrs = {"dim": int(number(dim))}
    if base == "sort":
        attrs["descending"] = _flag(given, "descending", False)
    if base in ("topk", "kthvalue"):
        k = given.get("k")
        if k is None or not is_int_literal(k) or int(number(k)) < 1:
            shown = "nothing" if k is None else repr(ast.unparse(k))
            raise IRError(f"{c.fname} takes k as a positive integer, e.g. torch.{base}(x, 8, dim=-1); got {shown}")
        attrs["k"] = int(number(k))
    if base == "topk":
        attrs["largest"] = _flag(given, "largest", True)
    if _flag(given, "keepdim", False):
        attrs["keepdim"] = True
    return call(c.fname, c.expr(given["input"]), **attrs)


@prints(*OPS)
def _text(node: Node, text) -> str:
    k = node.attr("k")
    flags = "".join(f", {key}={value}" for key, value in (("descending", True), ("largest", False), ("keepdim", True))
                    if node.attr(key) is value)
    return f"{node.op}({text(node.args[0])}{'' if k is None else f', {k}'}, dim={node.attr('dim')}{flags})"


def check(node: Node) -> None:
    if node.args[0].op != "input":
        raise IRError(f"{node.op} takes a tensor input, e.g. {node.op}(x, dim=-1); compute the expression in a "
                      "separate kernel")


def pick(node: Node) -> Pick:
    """What the kernel writes of each sorted line (bot.codegen.sort_kernel.Pick)."""
    base, part = PARTS[node.op]
    kind = {"kthvalue": "kth", "median": "median"}.get(base, "first")
    return Pick(kind, node.attr("k"), part != "indices", part != "values",
                bool(node.attr("descending") or node.attr("largest")), bool(node.attr("keepdim")))


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    """The input's shape, the dim cut to k for a top-k, dropped (kept as 1 with keepdim) for a k-th
    value or median; a line longer than one program sorts (or whose chunks' first keys, together,
    are) is refused."""
    full = list(shapes[node.args[0].name])
    dim, k, chosen = node.attr("dim"), node.attr("k"), pick(node)
    if not -len(full) <= dim < len(full):
        raise IRError(f"{node.op} over dim {dim}, but the input has {len(full)} dims (shape {full})")
    d = dim % len(full)
    if k is not None and k > full[d]:
        raise IRError(f"{node.op} with k={k}, but dim {dim} has {full[d]} elements; k must be at most that")
    if _sort_tiles({}, 1, full[d], 1, sum(chosen.span(full[d]))) is None:
        raise IRError(f"{node.op} over a dim of {full[d]} elements: a line is sorted in one program, at most "
                      f"{MAX_TILE} keys (a top-k or k-th value of a longer line: its chunks' first k together)"
                      + ("; ask for a smaller k" if k else ""))
    kept = [chosen.span(full[d])[1]] if chosen.kind == "first" else [1] if chosen.keepdim else []
    return full[:d] + kept + full[d + 1:]


def size_rules(node: Node, cases: list[dict[str, list[int]]]) -> tuple[set[int], int]:
    """A top-k's or k-th value's line keeps at least k elements when the runner shrinks a case."""
    return set(), node.attr("k") or 1


def outputs(node: Node, dtypes: list[str], shapes: list[list[int]]) -> list[dict] | None:
    """sort's and topk's two outputs, values then indices; None for one output."""
    if node.op not in PAIRS:
        return None
    return [{"name": "values", "dtypes": dtypes, "shapes": shapes},
            {"name": "indices", "dtypes": ["int64"] * len(dtypes), "shapes": shapes}]


def torch_result(node: Node, names: dict[str, str], body: str, lines: list[str]) -> str:
    """torch's stable sort, and of it: all, the first k (torch.topk's order among equal values is its
    own), the k-th or the lower median (torch.kthvalue's and torch.median's index among equal values
    alike)."""
    chosen, dim = pick(node), node.attr("dim")
    ordered = f"torch.sort({body}, dim={dim}, descending={chosen.descending}, stable=True)"
    at = (f"({body}.shape[{dim}] - 1) // 2" if chosen.kind == "median" else
          str(chosen.k - 1) if chosen.kind == "kth" else None)
    if at is not None:
        lines.append(f"# the {'lower median' if chosen.kind == 'median' else f'{chosen.k}-th smallest'} of a stable "
                     "sort: equal values keep their order")
        taken = f"t.narrow({dim}, {at}, 1)" if chosen.keepdim else f"t.select({dim}, {at})"
        lines.append(f"ordered_values, ordered_indices = ({taken} for t in {ordered})")
    elif chosen.k is not None:
        lines.append(f"# the first {chosen.k} of a stable sort: equal values keep their order")
        lines.append(f"ordered_values, ordered_indices = (t.narrow({dim}, 0, {chosen.k}) for t in {ordered})")
    else:
        lines.append(f"ordered_values, ordered_indices = {ordered}")
    return ("(ordered_values, ordered_indices)" if node.op in PAIRS else
            "ordered_indices" if node.op in INDICES else "ordered_values")


def kernel_source(spec: dict, node: Node, options: dict) -> str:
    return SortKernel.render(spec, node, options, pointwise.triton_body, pick(node))


def reference_property(node: Node) -> tuple[str, bool]:
    """The generated reference test's check_property body: the values (those the indices point at,
    where the output checked is the indices) never fall (rise, descending) along the dim; none for a
    k-th value or median, one element of each line."""
    if pick(node).kind != "first":
        return "", False
    cmp, dim = ("<=" if pick(node).descending else ">="), node.attr("dim")
    return f'''    """{node.op}: its values, or those its indices point at, are in order along dim {dim} (NaN aside)."""
    vals = got if got.is_floating_point() else inputs[0].gather({dim}, got)
    ahead, behind = vals.narrow({dim}, 1, vals.shape[{dim}] - 1), vals.narrow({dim}, 0, vals.shape[{dim}] - 1)
    assert bool(((ahead {cmp} behind) | ahead.isnan() | behind.isnan()).all()), "{node.op} is out of order"
''', False


ENTRIES = (
    Entry("sort", "sort over the last dim with indices on {shapes}, each in {dtypes}", "sort(x, dim=-1)"),
    Entry("argsort_dim0", "argsort descending over dim 0 on {shapes}, each in {dtypes}",
          "argsort(x, dim=0, descending=True)", big="4096x2048, 3001x997"),
    Entry("topk", "top-8 values and indices over the last dim on {shapes}, each in {dtypes}", "topk(x, 8, dim=-1)",
          big="4096x32000, 1024x151936, 7919x6007"),
)
