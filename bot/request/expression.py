"""An expression typed among a request's words ('relu(x + y) for fp16 4096x4096'): the longest run
of tokens that Python parses as an operation and the IR accepts, and where it stands in the text,
so that the reader blanks it out. A call meant as code that the IR refuses is refused with the IR's
reason; prose that merely parses ('input/output', 'by - 1') is not taken.
"""
from __future__ import annotations

import ast
import keyword
import re

from bot import ir
from bot.generators.interface import GenerationError
from bot.ops.node import MOVERS
from bot.request import residue
from bot.request.messages import SUPPORTED
from bot.request.torch_code import Inline, called, settled, whole_max
from bot.request.vocabulary import TENSOR_NAME

_TOKEN = re.compile(r"""
    (?P<rank>\d+-[dD]\b|\b[Tt]op-(?:[kK]|\d+)\b|\b[kK]-th\b)   # "1024-d", "top-k", "top-8", "k-th": words, not subtractions
  | (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
  | (?P<prose>[A-Za-z_]\w+(?:-[A-Za-z]\w+)+)        # row-wise, log-softmax: words, not subtractions
  | (?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)
  | (?P<str>(?P<quote>['"])(?:tanh|none|mean|sum|batchmean|-?inf|fro|same|valid|constant|reflect|replicate|
                circular|nearest(?:-exact)?|(?:bi|tri)?linear|bicubic|area|trunc|floor|[a-z.]+(?:,[a-z.]+)*->[a-z.]*)(?P=quote))
        # gelu's, a loss's reduction, float('inf'), a norm's 'fro', a convolution's padding, F.pad's and
        # F.interpolate's modes, div's rounding modes, an einsum's equation
  | (?P<op>\*\*|[<>=!]=|[-+*/<>=,@%~&|])            # ~, & and | of masks; ^ stays prose (x^2 is no xor)
  | (?P<dot>\.(?=[A-Za-z_]))                         # a method chained on a call: x.pow(2).sum(-1)
  | (?P<sub>\[(?:\s*(?:-?\d+|None|\.\.\.|:|\[\s*-?\d+\s*\])\s*(?::\s*(?:-?\d+)?\s*)*,?)+\])   # [0], [:, 1:5], [..., ::2], [:, [-1]]
  | (?P<lpar>[(\[])                                 # a list of tensors: torch.cat([x, y], dim=1)
  | (?P<rpar>[)\]])
  | (?P<other>\S)
""", re.X | re.A)
_OPERAND = {"name", "num", "str"}
_STARTS = {"name", "num", "lpar", "op"}
_ENDS = {"name", "num", "str", "rpar", "sub"}


def _spans(text: str) -> list[list[tuple[str, int, int]]]:
    """Runs of tokens that could be one expression: two operands in a row ('x for') end a run."""
    spans: list[list[tuple[str, int, int]]] = []
    cur: list[tuple[str, int, int]] = []
    prev = None
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "name" and keyword.iskeyword(m.group()) and m.group() not in ("None", "True", "False"):
            kind = "other"
        breaks = (prev in _ENDS and kind in _OPERAND) or (prev in ("num", "str", "rpar") and kind == "lpar")
        if kind in ("other", "prose", "rank") or breaks:
            if cur:
                spans.append(cur)
            cur = []
        if kind in ("other", "prose", "rank"):
            prev = None
            continue
        cur.append((kind, m.start(), m.end()))
        prev = kind
    if cur:
        spans.append(cur)
    return spans


def written_order(source: str) -> list[str]:
    """The names of an expression's source in the order they are written: the kernel's signature
    takes its inputs so, though the tree may read them in another (kl_div(x, y) is y * (log(y) - x))."""
    tree = ast.parse(source, mode="eval")
    names = sorted((n.lineno, n.col_offset, n.id) for n in ast.walk(tree) if isinstance(n, ast.Name))
    return list(dict.fromkeys(name for *_, name in names))


def inverted_names(tree: ast.expr) -> set[str]:
    """The names under ~, bare or moved (~m, ~m & (x > 0), ~torch.tril(m), ~m.T): bool masks, as torch's
    ~ reads them."""
    return {name for n in ast.walk(tree) if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Invert)
            and (name := _moved_name(n.operand))}


def _moved_name(e: ast.expr) -> str | None:
    """The input a chain of element moves (a triangle, flip, view, slice or transpose) reads, if any."""
    while True:
        if isinstance(e, ast.Name):
            return e.id
        if isinstance(e, ast.Subscript) or isinstance(e, ast.Attribute) and e.attr in ("T", "mT"):
            e = e.value
        elif isinstance(e, ast.Call) and called(e)[0] in MOVERS | {"view"} and (called(e)[1] or e.args):
            e = e.func.value if called(e)[1] else e.args[0]
        else:
            return None


def find_expression(text: str) -> tuple[ir.Node, ast.expr, int, int] | None:
    """The longest IR expression typed in the text: (node, its ast, start, end)."""
    best: tuple[int, ir.Node, ast.expr, int, int] | None = None
    rejected: tuple[int, str] | None = None
    for span in _spans(text):
        i = 0
        while i < len(span):
            hit = _longest_parse(text, span, i)
            if hit is None:
                i += 1
                continue
            j, tree = hit
            src = text[span[i][1]:span[j - 1][2]]
            tree, kept_cast = settled(Inline({}).visit(tree))       # casts dropped: the kernel computes in float32
            tree = whole_max(tree, torch_only=True)
            try:
                if kept_cast:
                    raise ir.IRError(f"{kept_cast!r} makes PyTorch's result that dtype whatever the inputs' dtype, and "
                                     "the kernel returns the inputs' dtype: cast back at the end (.to(x.dtype)) or drop "
                                     "the cast")
                node = ir.parse(ast.unparse(tree), as_written=True)
            except ir.IRError as e:
                # a call like "softmax(x, dim=0)" was meant as an expression: say why it is refused
                meant = any(isinstance(t, (ast.Call, ast.Subscript)) or _names_matmul(t) for t in ast.walk(tree))
                if meant and re.search(r"\w[(\[]|@", src) and (rejected is None or j - i > rejected[0]):
                    rejected = (j - i, str(e))
                i += 1
                continue
            if not _plausible(node, tree):
                i += 1
                continue
            if best is None or j - i > best[0]:
                best = (j - i, node, tree, span[i][1], span[j - 1][2])
            i = j
    if rejected and (best is None or rejected[0] > best[0]):
        msg = rejected[1]
        raise GenerationError(msg if ir.SUPPORTED_TEXT in msg else f"{msg}. {SUPPORTED}")
    return best[1:] if best else None


def _names_matmul(t: ast.AST) -> bool:
    """'silu(x @ w1) * (x @ w2)' is meant as code; '4096x4096 @ 4096x4096' is shapes."""
    return (isinstance(t, ast.BinOp) and isinstance(t.op, ast.MatMult)
            and not any(isinstance(side, ast.Constant) for side in (t.left, t.right)))


def _plausible(node: ir.Node, tree: ast.expr) -> bool:
    if node.op in ("input", "const"):
        return False
    names = ir.input_names(node)
    if any(len(n) > 1 and n.lower() in residue.FILLER_WORDS for n in names):
        return False                        # "by - 1", "of - x": prose around a number, not names
    has_call = any(isinstance(n, ast.Call) or _indexed(n) for n in ast.walk(tree))
    return has_call or all(TENSOR_NAME.fullmatch(n) for n in names)


def _longest_parse(text: str, span: list[tuple[str, int, int]], i: int) -> tuple[int, ast.expr] | None:
    """The longest run of tokens from span[i] that Python parses as an operation (not a bare name)."""
    if span[i][0] not in _STARTS or (span[i][0] == "op" and text[span[i][1]] not in "+-"):
        return None
    for j in range(len(span), i, -1):
        if span[j - 1][0] not in _ENDS:
            continue
        try:
            tree = ast.parse(text[span[i][1]:span[j - 1][2]], mode="eval").body
        except SyntaxError:
            continue
        part = isinstance(tree, (ast.Subscript, ast.Attribute)) and isinstance(tree.value, ast.Call)
        if isinstance(tree, (ast.Call, ast.BinOp, ast.UnaryOp, ast.Compare)) or part or _indexed(tree):
            return j, tree                  # part: max(x, 1)[0]; indexed: x[idx], a lookup
    return None


def _indexed(tree: ast.expr) -> bool:
    """x[idx], x[:, idx]: a tensor indexed by another (index_select), an operation where x[:, 0] is a view."""
    if not isinstance(tree, ast.Subscript):
        return False
    items = tree.slice.elts if isinstance(tree.slice, ast.Tuple) else [tree.slice]
    return any(isinstance(e, ast.Name) for e in items)
