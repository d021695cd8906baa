"""The sort family: torch.sort, torch.argsort and torch.topk over any one dim of a tensor input,
ascending or descending (topk: largest or smallest), returning the values, the int64 indices, or both
as torch does ((values, indices)). Stable: equal values keep their order, so the indices are one
answer, the one torch.sort(..., stable=True) gives (topk's order among ties, which torch leaves
open, is that of the stable sort). Lowered by the sort template (bot.codegen.sort_kernel); owns its
words, IR rule, reference and catalog entries.
"""
from __future__ import annotations

import ast
import re

from bot.codegen.sort_kernel import MAX_TILE, SortKernel, _sort_tiles
from bot.ops import pointwise
from bot.ops.entry import Entry
from bot.ops.node import Call, IRError, Node, arguments, call, flag, is_int_literal, number, prints
from bot.ops.text import FLAGS as _F
from bot.ops.text import blank as _blank

NAME = "sort"
SORTS = {"sort", "argsort", "sort_values"}
TOPKS = {"topk", "topk_values", "topk_indices"}
OPS = SORTS | TOPKS
PAIRS = {"sort", "topk"}                    # (values, indices), as torch returns them
INDICES = {"argsort", "topk_indices"}       # the int64 indices alone
ROOT = True
SUPPORTED = ("over any one dim", "sort, argsort and topk (values, indices or both; descending, largest or "
             "smallest; stable: equal values keep their order)")
ALIASES: dict[str, str] = {}
_SORT_ARGS = ("input", "dim", "descending", "stable")
_TOPK_ARGS = ("input", "k", "dim", "largest", "sorted")
KEYWORDS = {**dict.fromkeys(SORTS, set(_SORT_ARGS[1:])), **dict.fromkeys(TOPKS, set(_TOPK_ARGS[1:]))}
OUTPUT_DTYPES = dict.fromkeys(INDICES, "int64")
WORDS: list = []            # read by sort_words, not as row words

# ---------------------------------------------------------------- words

SORT_WORD = re.compile(r"\b(?:arg)?sort(?:s|ed|ing)?\b|\btop[\s_-]?(?:k|\d+)\b|\b(?:smallest|largest|lowest|highest|"
                       r"bottom)[\s_-]?(?:k|\d+)\b|\b\d+\s+(?:smallest|largest|lowest|highest)\b|排序|前\s*\d+\s*(?:个|大|小)",
                       _F)
_TOPK_WORD = re.compile(r"\btop[\s_-]?(k|\d+)\b|\b(?:smallest|largest|lowest|highest|bottom)[\s_-]?(k|\d+)\b|"
                        r"\b(\d+)\s+(?:smallest|largest|lowest|highest)\b|前\s*(\d+)\s*(?:个|大|小)", _F)
_K_WORD = re.compile(r"\bk\s*(?:=|:|of|is)?\s*(\d+)\b", _F)
_SMALLEST = re.compile(r"\b(?:smallest|lowest|bottom|minimum)\b|最小|前\s*\d+\s*小", _F)
_DESCENDING = re.compile(r"\bdescending\b|\bdecreasing\b|\blargest\s+first\b|\bhigh(?:est)?\s+to\s+low(?:est)?\b|"
                         r"降序|从大到小", _F)
_ASCENDING = re.compile(r"\bascending\b|\bincreasing\b|\bsmallest\s+first\b|\blow(?:est)?\s+to\s+high(?:est)?\b|"
                        r"升序|从小到大", _F)
_ARGSORT = re.compile(r"\barg[\s_-]?sort\w*|\b(?:sorting|sorted)\s+(?:indices|order|permutation)\b|\bindices\s+"
                      r"(?:that|which)\s+(?:would\s+)?sort\b|排序(?:的)?(?:索引|下标)", _F)
_BOTH = re.compile(r"\b(?:values?\s+and\s+(?:their\s+|the\s+)?ind(?:ices|ex(?:es)?)|with\s+(?:its\s+|their\s+|the\s+)?"
                   r"ind(?:ices|ex(?:es)?))\b|(?:值)?(?:及其|和)(?:索引|下标)", _F)
_INDICES_ONLY = re.compile(r"\b(?:their\s+|the\s+|its\s+)?ind(?:ices|ex(?:es)?)\b|索引|下标", _F)
_VALUES_ONLY = re.compile(r"\b(?:their\s+|the\s+)?values\b|值", _F)
_STABLE = re.compile(r"\bstable\b|稳定", _F)


def sort_words(text: str) -> tuple[str, str, list[str]]:
    """(expression, text without the words read, notes) for a sort, argsort or top-k in words: 'sort
    the rows descending', 'argsort over dim 0', 'top-8 values and indices', 'the 5 smallest'. A sort
    gives its values, a top-k its values and indices, unless the words say which."""
    top = _TOPK_WORD.search(text)
    k = None
    if top:
        said = next(g for g in top.groups() if g is not None)
        k = int(said) if said.isdigit() else None
        if k is None and (m := _K_WORD.search(text)):
            k, text = int(m.group(1)), _K_WORD.sub(_blank, text)
        if k is None:
            raise IRError("top-k with which k? Say e.g. 'top-8 over the last dim' or 'topk with k=50'")
    both, argsort = bool(_BOTH.search(text)), bool(_ARGSORT.search(text))
    indices = argsort or (not both and bool(_INDICES_ONLY.search(text)))
    values = not both and not indices and (top is None or bool(_VALUES_ONLY.search(text)))
    smallest, descending = bool(_SMALLEST.search(text)), bool(_DESCENDING.search(text))
    if smallest and descending or (descending and _ASCENDING.search(text)):
        raise IRError("ascending or descending? Say one of them, e.g. 'sort x descending'")
    for pattern in (SORT_WORD, _TOPK_WORD, _SMALLEST, _DESCENDING, _ASCENDING, _ARGSORT, _BOTH, _INDICES_ONLY,
                    _VALUES_ONLY, _STABLE):
        text = pattern.sub(_blank, text)
    if top is not None:
        op = "topk_values" if values else "topk_indices" if indices else "topk"
        return f"{op}(x, {k}{', largest=False' if smallest else ''})", text, []
    op = "sort_values" if values else "argsort" if indices else "sort"
    return f"{op}(x{', descending=True' if descending else ''})", text, []


# ---------------------------------------------------------------- IR rule

def _flag(given: dict, key: str, default: bool) -> bool:
    return default if key not in given else flag(given[key])


def convert(c: Call) -> Node | None:
    """torch.sort(x, dim, descending, stable), torch.argsort(...), torch.topk(x, k, dim, largest,
    sorted) (also as methods); stable= and sorted= are accepted whatever they say: the kernel is
    stable and its top-k sorted, which either value allows."""
    if c.fname not in OPS:
        return None
    given = arguments(c, _TOPK_ARGS if c.fname in TOPKS else _SORT_ARGS)
    if "input" not in given:
        raise IRError(f"{c.fname} takes a tensor, e.g. torch.{c.fname.split('_')[0]}(x, dim=-1)")
    dim = given.get("dim", ast.Constant(-1))
    if not is_int_literal(dim):
        raise IRError(f"{c.fname} takes one integer dim, e.g. dim=0; got {ast.unparse(dim)!r}")
    for key in ("stable", "sorted"):
        if key in given:
            flag(given[key])
    x, dim = c.expr(given["input"]), int(number(dim))
    if c.fname in SORTS:
        return call(c.fname, x, dim=dim, descending=_flag(given, "descending", False))
    k = given.get("k")
    if k is None or not is_int_literal(k) or int(number(k)) < 1:
        shown = "nothing" if k is None else repr(ast.unparse(k))
        raise IRError(f"{c.fname} takes k as a positive integer, e.g. torch.topk(x, 8, dim=-1); got {shown}")
    return call(c.fname, x, k=int(number(k)), dim=dim, largest=_flag(given, "largest", True))


@prints(*OPS)
def _text(node: Node, text) -> str:
    if node.op in SORTS:
        return f"{node.op}({text(node.args[0])}, dim={node.attr('dim')}{', descending=True' * node.attr('descending')})"
    smallest = ", largest=False" if not node.attr("largest") else ""
    return f"{node.op}({text(node.args[0])}, {node.attr('k')}, dim={node.attr('dim')}{smallest})"


def check(node: Node) -> None:
    if node.args[0].op != "input":
        raise IRError(f"{node.op} takes a tensor input, e.g. {node.op}(x, dim=-1); compute the expression in a "
                      "separate kernel")


def descending(node: Node) -> bool:
    """Whether the kernel puts the largest first: a descending sort, or a top-k of the largest."""
    return bool(node.attr("descending") if node.op in SORTS else node.attr("largest"))


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    """The input's shape, the dim cut to k for a top-k; a line longer than one program sorts (a
    top-k's: its chunks' first k together) is refused."""
    full = list(shapes[node.args[0].name])
    dim = node.attr("dim")
    if not -len(full) <= dim < len(full):
        raise IRError(f"{node.op} over dim {dim}, but the input has {len(full)} dims (shape {full})")
    d, k = dim % len(full), node.attr("k")
    if k is not None and k > full[d]:
        raise IRError(f"{node.op} with k={k}, but dim {dim} has {full[d]} elements; k must be at most that")
    if k is None and full[d] > MAX_TILE:
        raise IRError(f"{node.op} over a dim of {full[d]} elements: this kernel sorts lines of at most {MAX_TILE} "
                      "in one program (top-k takes longer lines)")
    if k is not None and _sort_tiles({}, 1, full[d], 1, k) is None:
        raise IRError(f"{node.op} with k={k} over {full[d]} elements: its chunks' first k would not fit one "
                      f"program's {MAX_TILE} (k times the chunks); ask for a smaller k")
    return full[:d] + [k if k is not None else full[d]] + full[d + 1:]


def size_rules(node: Node, cases: list[dict[str, list[int]]]) -> tuple[set[int], int]:
    """A top-k's line keeps at least k elements when the runner shrinks a case."""
    return set(), node.attr("k") or 1


def outputs(node: Node, dtypes: list[str], shapes: list[list[int]]) -> list[dict] | None:
    """sort's and topk's two outputs, values then indices; None for one output."""
    if node.op not in PAIRS:
        return None
    return [{"name": "values", "dtypes": dtypes, "shapes": shapes},
            {"name": "indices", "dtypes": ["int64"] * len(dtypes), "shapes": shapes}]


def torch_result(node: Node, names: dict[str, str], body: str, lines: list[str]) -> str:
    """torch's stable sort; a top-k as its first k (torch.topk's order among equal values is its own)."""
    ordered = f"torch.sort({body}, dim={node.attr('dim')}, descending={descending(node)}, stable=True)"
    if node.op in TOPKS:
        lines.append(f"# the first {node.attr('k')} of a stable sort: equal values keep their order")
        lines.append(f"ordered_values, ordered_indices = (t.narrow({node.attr('dim')}, 0, {node.attr('k')}) "
                     f"for t in {ordered})")
    else:
        lines.append(f"ordered_values, ordered_indices = {ordered}")
    return ("(ordered_values, ordered_indices)" if node.op in PAIRS else
            "ordered_indices" if node.op in INDICES else "ordered_values")


def kernel_source(spec: dict, node: Node, options: dict) -> str:
    return SortKernel.render(spec, node, options, pointwise.triton_body)


def reference_property(node: Node) -> tuple[str, bool]:
    """The generated reference test's check_property body: the values (those the indices point at,
    where the output checked is the indices) never fall (rise, descending) along the dim."""
    cmp, dim = ("<=" if descending(node) else ">="), node.attr("dim")
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
