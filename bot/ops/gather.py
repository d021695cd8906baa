"""The gather family: reads of a tensor at positions an int64 index tensor holds. index_select (whole
slices along a dim, e.g. rows), embedding lookup (rows of a table, one per index: F.embedding,
nn.Embedding) and gather (one element per index along a dim: torch.gather).

index_select and embedding: the table is [outer, N, inner] around the indexed dim; one program
copies a BLOCK_K x BLOCK_I tile (BLOCK_K indices, BLOCK_I neighbouring elements of each slice),
loading its indices once and each slice's elements as whole lines. gather: one program per BLOCK
outputs, each split into its coordinates by the index tensor's shape and read from the table at
the same coordinates but the index along the dim.

Indices come from the index input: the runner draws them uniformly over the indexed dim (spec
"index_of" and "index_dim"; no padding value, which these ops would reject). An index outside the
dim reads 0 where torch raises: the kernel never reads outside the table.
"""
from __future__ import annotations

import ast
import re

from bot.codegen.code import Code, jit_source, launch
from bot.codegen.kernel_file import KernelFile
from bot.ops import pointwise
from bot.ops.entry import Entry
from bot.ops.node import (MOVERS, Call, IRError, Node, arguments, call, input_names, is_int_literal, is_none,
                          keywords_text, literal_keywords, number, prints)
from bot.ops.text import FLAGS as _F, blank as _blank

NAME = "gather"
INDEX_SELECT, GATHER, EMBEDDING = "index_select", "gather", "embedding"
# index_grad(table, index, up, kind=..., dim=..., padding_idx=...): a training kernel's part (bot.autodiff
# writes it), the table's gradient of a lookup of kind given the output's, up: up added at the positions read
GRAD = "index_grad"
OPS = {INDEX_SELECT, GATHER, EMBEDDING, GRAD}
ROOT = True
MAX_RANK = 5
MAX_NUMEL = 2**34                   # the kernels index with int64 where a tensor needs it
SUPPORTED = ("", "index_select(x, dim, index), torch.gather(x, dim, index), embedding lookup (F.embedding, "
             "nn.Embedding)")
ALIASES: dict[str, str] = {}
TAKE_ALONG = "take_along_dim"
KEYWORDS = {INDEX_SELECT: {"dim", "index"}, GATHER: {"dim", "index", "sparse_grad"}, TAKE_ALONG: {"indices", "dim"},
            EMBEDDING: {"weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"},
            GRAD: {"kind", "dim", "padding_idx"}}
OUTPUT_DTYPES: dict[str, str] = {}
WORDS: list = []

# rows (index_select, embedding): BLOCK_K indices x BLOCK_I elements of each slice, and warps
ROWS_CONFIGS = [{"BLOCK_K": k, "BLOCK_I": i, "num_warps": w}
                for k, i, w in [(4, 1024, 4), (1, 1024, 4), (16, 128, 4), (64, 32, 4), (8, 512, 8), (2, 2048, 8)]]
# gather: outputs a program and warps
GATHER_CONFIGS = [{"BLOCK": b, "num_warps": w} for b, w in [(1024, 4), (2048, 8), (512, 4), (4096, 8)]]


# ---------------------------------------------------------------- words

# "embedding lookup with a 32000x4096 table and 16x512 token ids", "index_select rows of 10000x128 with
# 512 indices", "嵌入查表", "gather along dim 1 of a 1024x512 tensor with 1024x16 indices"; not a
# collective's all-gather.
LOOKUP_WORD = re.compile(r"\bembedding(?:s)?(?:[\s_-]+lookup)?\b|\bembed\b|\bindex[\s_-]?select(?:ion)?\b|"
                         r"嵌入(?:查找|查表)?|(?<![\w-])(?<!all )(?:torch\.)?gather\b", _F)
_GATHER_WORD = re.compile(r"gather\b", _F)
_SOURCE_WORD = re.compile(r"\b(?:tensors?|inputs?|source|values|matri(?:x|ces)|x)\b|张量|输入", _F)
_INDEX_NAMES = ("idx", "index", "indices", "ids", "索引", "下标")
_TABLE_WORD = re.compile(r"\b(?:tables?|weights?|vocab(?:ulary)?|matrix)\b|词表|权重|表", _F)
_INDICES = r"(?:(?:token[\s_-]+)?ids|indices|indexes|tokens)\b"
_INDEX_WORD = re.compile(rf"\b{_INDICES}|\bindex\b|索引|下标", _F)
_ROWS = re.compile(r"\brows\b|行", _F)
_COUNT = re.compile(rf"\b(\d+)\s+{_INDICES}", _F)


def lookup_words(text: str, shapes: list[tuple[str | None, list[int]]], dims: list[int],
                 said_at: list[tuple[int, int]] | None = None) -> tuple[str, str, list[str], list[tuple[str, list[int]]]]:
    """(expression, text without the words read, notes, the table's and the indices' shapes) for an
    embedding lookup, an index_select or a gather in words; said_at: where in text each shape was said
    (start, end)."""
    if _GATHER_WORD.search(text):
        return _gather_words(text, shapes, dims, said_at)
    embedding = not re.search(r"index[\s_-]?select", text, re.I)
    given = [s for _, s in shapes]
    counted = len(given) == 1 and (m := _COUNT.search(text))
    if counted:                                                 # "with 512 indices": a 1-D index of 512
        given.append([int(m.group(1))])
        text = text[:m.start(1)] + " " * len(m.group(1)) + text[m.end(1):]
    if len(given) != 2:
        raise IRError("a lookup in words needs two shapes, the table's and the indices', e.g. 'embedding lookup with "
                      "a 32000x4096 table and 16x512 token ids'")
    ranks = [len(s) for s in given]
    if counted:
        table, index = given
    elif ranks.count(2) == 1 and (embedding or ranks.count(1) == 1):
        table, index = (given[0], given[1]) if ranks[0] == 2 else (given[1], given[0])
    else:
        table, index = _by_words(text, shapes, said_at, _TABLE_WORD, "e.g. 'a 32000x4096 table and 16x512 ids'")
    text = _blank_words(text, _TABLE_WORD)
    if embedding:
        if len(table) != 2:
            raise IRError(f"an embedding table is 2-D [rows, width]; got {table}")
        return "embedding(ids, weight)", text, [], [("weight", table), ("ids", index)]
    if len(index) != 1 or len(dims) > 1:
        raise IRError("index_select takes a 1-D index and one dim, e.g. 'index_select rows of 10000x128 with 512 "
                      "indices' (dim 0) or 'along dim 1'")
    dim = dims[0] if dims else 0
    notes = [] if dims else ["no dim named: selecting along dim 0 (rows)"]
    return f"index_select(x, {dim}, idx)", text, notes, [("x", table), ("idx", index)]


def _gather_words(text: str, shapes: list[tuple[str | None, list[int]]], dims: list[int],
                  said_at: list[tuple[int, int]] | None) -> tuple[str, str, list[str], list[tuple[str, list[int]]]]:
    """torch.gather in words: the tensor's shape and the index's (of the output's shape, the same
    rank), told apart by their names or words; along the dim named, else the last."""
    if len(shapes) != 2 or len(dims) > 1:
        raise IRError("a gather in words needs the tensor's and the indices' shapes (of one rank: the output takes "
                      "the indices' shape) and at most one dim, e.g. 'gather along dim 1 of a 1024x512 tensor with "
                      "1024x16 indices'")
    source, index = _by_words(text, shapes, said_at, _SOURCE_WORD, "e.g. 'a 1024x512 tensor with 1024x16 indices'")
    dim = dims[0] if dims else -1
    if len(source) != len(index) or not -len(source) <= dim < len(source):
        raise IRError(f"gather reads a {source} tensor at {index} indices along dim {dim}: torch.gather needs the "
                      "indices to have the tensor's rank, and the dim within it")
    d = dim % len(source)
    if any(i > s for k, (i, s) in enumerate(zip(index, source)) if k != d):
        raise IRError(f"gather's {index} indices are larger than the {source} tensor outside dim {dim}: torch.gather "
                      "needs each of the indices' sizes to be at most the tensor's, except along dim")
    notes = [] if dims else [f"no dim named: gathering along the last dim ({d})"]
    return f"gather(x, {dim}, idx)", _blank_words(text, _SOURCE_WORD), notes, [("x", source), ("idx", index)]


def _by_words(text: str, shapes: list[tuple[str | None, list[int]]], said_at: list[tuple[int, int]] | None,
              source_word: re.Pattern, example: str) -> tuple[list[int], list[int]]:
    """(the tensor read's shape, the indices'): by the names the shapes were given ('idx 1024x16'),
    else the shape said next to the indices' word ('1024x16 indices') or the tensor's, else the order
    of those words."""
    named = [name in _INDEX_NAMES for name, _ in shapes]
    if sum(named) == 1:
        return (shapes[1][1], shapes[0][1]) if named[0] else (shapes[0][1], shapes[1][1])
    text = LOOKUP_WORD.sub(_blank, text)
    index_word, source = _INDEX_WORD.search(text), source_word.search(text)
    for m, is_index in ((index_word, True), (source, False)):
        if said_at and m:
            far = [_apart(text, at, m.span()) for at in said_at]
            if far[0] != far[1]:
                near = far.index(min(far))
                return (shapes[1 - near][1], shapes[near][1]) if is_index else (shapes[near][1], shapes[1 - near][1])
    if not (index_word and source):
        raise IRError(f"which shape is the tensor read and which the indices? Say which, {example}")
    return (shapes[0][1], shapes[1][1]) if source.start() < index_word.start() else (shapes[1][1], shapes[0][1])


def _apart(text: str, a: tuple[int, int], b: tuple[int, int]) -> tuple[bool, int]:
    """How far apart two spans of text are: whether a comma or colon parts them, then characters."""
    gap = text[min(a[1], b[1]):max(a[0], b[0])]
    return bool(re.search(r"[,，、:：]", gap)), len(gap.strip())


def _blank_words(text: str, source_word: re.Pattern) -> str:
    for pattern in (LOOKUP_WORD, source_word, _INDEX_WORD, _ROWS):
        text = pattern.sub(_blank, text)
    return text


# ---------------------------------------------------------------- IR rule

def convert(c: Call) -> Node | None:
    if c.fname in (INDEX_SELECT, GATHER):
        given = arguments(c, ("input", "dim", "index"))
        given.pop("sparse_grad", None)           # how the gradient is stored: the forward is the same
        if set(given) != {"input", "dim", "index"} or not is_int_literal(given["dim"]):
            raise IRError(f"{c.fname} takes a tensor, an integer dim and an index tensor, e.g. "
                          f"torch.{c.fname}(x, 1, idx)")
        return call(c.fname, _tensor(c, given["input"]), index_operand(c, given["index"]), dim=int(number(given["dim"])))
    if c.fname == TAKE_ALONG:
        given = arguments(c, ("input", "indices", "dim"))
        if set(given) != {"input", "indices", "dim"} or not is_int_literal(given["dim"]):
            raise IRError("take_along_dim is read along one integer dim, e.g. torch.take_along_dim(x, idx, dim=1) "
                          "(without a dim it indexes the flattened tensor)")
        # gather where the index has the tensor's sizes but along dim (take_along_dim would broadcast them)
        return call(GATHER, _tensor(c, given["input"]), index_operand(c, given["indices"]), dim=int(number(given["dim"])),
                    along=True)
    if c.fname == EMBEDDING:
        return _embedding(c)
    if c.fname == GRAD:
        usage = f"{GRAD} takes (table, index, up), the lookup's kind, dim and padding_idx, as bot.autodiff writes it"
        attrs = literal_keywords(c, usage)
        if len(c.args) != 3 or set(attrs) != KEYWORDS[GRAD] or attrs["kind"] not in (INDEX_SELECT, GATHER, EMBEDDING):
            raise IRError(usage)
        return call(GRAD, *(_tensor(c, a) for a in c.args), **attrs)
    return None


def index_operand(c: Call, e: ast.expr) -> Node:
    """An operand read as int64 indices: an input, moved or viewed (actions.unsqueeze(1)), or counted from
    numbers (torch.arange). Indices computed from an input (t // 2, t + 1) are refused: that input would
    be drawn as floats, and the computation run in float."""
    node = _tensor(c, e)
    if any(sub.op not in MOVERS | {"input"} and input_names(sub) for sub in node.walk()):
        raise IRError(f"{c.fname}'s indices {ast.unparse(e)!r} are computed from an input; pass the indices "
                      "themselves as an int64 input (a view or move of one, or torch.arange, is read too)")
    return node


def _tensor(c: Call, e: ast.expr) -> Node:
    node = c.expr(e)
    if node.op == "const":
        raise IRError(f"{c.fname} of a number: its operands are tensors")
    return node


def _embedding(c: Call) -> Node:
    """F.embedding(input, weight, padding_idx=None, max_norm=None, ...): rows of weight. padding_idx
    and scale_grad_by_freq change only the gradient (kept for it), sparse only how it is stored;
    max_norm rewrites the table, refused."""
    given = arguments(c, ("input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"))
    if "input" not in given or "weight" not in given:
        raise IRError("embedding takes the indices and the table, e.g. F.embedding(ids, weight)")
    if not is_none(given.get("max_norm")):
        raise IRError("embedding with max_norm renormalises the table's rows in place; the offline generator "
                      "reads the lookup alone (max_norm=None)")
    attrs = {}
    if not is_none(given.get("padding_idx")):
        if not is_int_literal(given["padding_idx"]):
            raise IRError(f"embedding's padding_idx is an integer, got {ast.unparse(given['padding_idx'])!r}")
        attrs["padding_idx"] = int(number(given["padding_idx"]))
    scale = given.get("scale_grad_by_freq")
    if scale is not None and not (isinstance(scale, ast.Constant) and scale.value in (True, False)):
        raise IRError(f"embedding's scale_grad_by_freq is True or False, got {ast.unparse(scale)!r}")
    if scale is not None and scale.value:
        attrs["scale_grad_by_freq"] = True
    return call(EMBEDDING, index_operand(c, given["input"]), _tensor(c, given["weight"]), **attrs)


def operands(node: Node) -> tuple[Node, Node]:
    """(the tensor read, the index): embedding's are written (ids, weight), the others' (x, index)."""
    return (node.args[1], node.args[0]) if node.op == EMBEDDING else (node.args[0], node.args[1])


def _embedding_keywords(node: Node) -> str:
    return "".join(f", {k}={node.attr(k)!r}" for k in ("padding_idx", "scale_grad_by_freq")
                   if node.attr(k) is not None and node.attr(k) is not False)


@prints(INDEX_SELECT, GATHER, EMBEDDING)
def _text(node: Node, text) -> str:
    table, index = (text(a) for a in operands(node))
    if node.op == EMBEDDING:
        return f"embedding({index}, {table}{_embedding_keywords(node)})"
    if node.attr("along"):
        return f"{TAKE_ALONG}({table}, {index}, dim={node.attr('dim')})"
    return f"{node.op}({table}, {node.attr('dim')}, {index})"


prints(GRAD)(keywords_text)


def check(node: Node) -> None:
    """The table and the indices are inputs or earlier stages' outputs."""
    if any(a.op != "input" for a in node.args):
        raise IRError(f"{node.op} reads a tensor at an index tensor's positions: each is an input or a kernel's output")


def index_inputs(node: Node) -> dict[str, dict]:
    """The index input's spec fields: the table it indexes and along which dim; no padding value."""
    table, index = operands(node)
    dim = 0 if EMBEDDING in (node.op, node.attr("kind")) else node.attr("dim")
    return {index.name: {"index_of": table.name, "index_dim": dim, "padding": False}}


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    table, index = (list(shapes[a.name]) for a in operands(node))
    if node.op == GRAD:
        lookup = call(node.attr("kind"), *(node.args[1::-1] if node.attr("kind") == EMBEDDING else node.args[:2]),
                      **({} if node.attr("kind") == EMBEDDING else {"dim": node.attr("dim")}))
        if list(shapes[node.args[2].name]) != output_shape(lookup, shapes):
            raise IRError(f"{GRAD}: the upstream gradient must have the lookup's shape")
        return table
    if node.op == EMBEDDING:
        if len(table) != 2:
            raise IRError(f"embedding's table is [num_embeddings, embedding_dim]; got {table}")
        return index + table[1:]
    d = node.attr("dim")
    if not -len(table) <= d < max(len(table), 1):
        raise IRError(f"{node.op} along dim {d} of a tensor of shape {table}")
    d %= max(len(table), 1)
    if node.op == INDEX_SELECT:
        if len(index) > 1:
            raise IRError(f"index_select takes a 1-d index, got shape {index}")
        return table[:d] + [index[0] if index else 1] + table[d + 1:]
    if node.attr("along") and (len(index) != len(table) or any(i != t for k, (i, t) in enumerate(zip(index, table))
                                                                if k != d)):
        raise IRError(f"take_along_dim along dim {d}: the indices {index} must have the tensor's sizes {table} in every "
                      "other dim (broadcasting them is not supported; expand them first, or use gather)")
    if len(index) != len(table) or any(i > t for k, (i, t) in enumerate(zip(index, table)) if k != d):
        raise IRError(f"gather along dim {d}: the index {index} must have the tensor's rank and no larger a size "
                      f"in any other dim than the tensor {table}")
    return index


def torch_text(node: Node, a: list[str]) -> str:
    if node.op == GRAD:
        raise IRError(f"{GRAD} is a part of a training kernel: the judge checks it through the forward's autograd")
    table, index = a[::-1] if node.op == EMBEDDING else a
    if node.op == EMBEDDING:
        return f"torch.nn.functional.embedding({index}, {table}{_embedding_keywords(node)})"
    return f"torch.{node.op}({table}, {node.attr('dim')}, {index})"


TORCH_OPS = {op: torch_text for op in OPS}


def over_text(node: Node) -> str:
    return ""


def reference_property(node: Node) -> tuple[str, bool]:
    return "", False


# ---------------------------------------------------------------- launcher helpers (copied into kernel.py)

def _rows_config(k, inner):
    # Whole slices of up to 1024 elements a program, as many indices as fit 4096 elements.
    block_i = min(1024, max(32, 1 << (inner - 1).bit_length()))
    return {"BLOCK_K": max(1, min(64, 4096 // block_i, 1 << (k - 1).bit_length())), "BLOCK_I": block_i,
            "num_warps": 4}


def _gather_config(n):
    return {"BLOCK": 2048, "num_warps": 8} if n >= 1 << 22 else {"BLOCK": 1024, "num_warps": 4}


# ---------------------------------------------------------------- kernel.py

def kernel_source(spec: dict, node: Node, options: dict | None = None) -> str:
    """kernel.py of an index_select, an embedding lookup or a gather, or of its table's gradient."""
    if node.op == GRAD:
        return (_GatherGradKernel if node.attr("kind") == GATHER else _RowsGradKernel).render(spec, node, options)
    return (_GatherKernel if node.op == GATHER else _RowsKernel).render(spec, node, options)


class _IndexKernel(KernelFile):
    """What both kernels share: the table and index inputs, and the launcher's head."""

    def __init__(self, spec, node, inputs, options):
        self.table, self.index = (next(i for i in inputs if i.name == a.name) for a in operands(node))
        super().__init__(spec, pointwise.triton_body(operands(node)[0], [self.table]), inputs, [], options)
        self.node = node
        self.dim = node.attr("dim")

    def _head(self) -> str:
        """The signature, the dim from 0, the output, the indexed dim's size n, and whether any
        tensor needs int64 offsets."""
        t, i = self.table.local, self.index.local
        dim = 0 if EMBEDDING in (self.node.op, self.node.attr("kind")) else self.dim
        return (self._signature_and_prologue()
                + f"    dim = {dim} % max({t}.dim(), 1)\n"
                f"    out = {self._output()}\n"
                f"    if out.numel() == 0 or {i}.numel() == 0:\n        return {self._result()}\n"
                f"    n = {t}.shape[dim] if {t}.dim() else 1\n"
                f"    big = max({t}.numel(), out.numel(), {i}.numel()) >= 2**31\n")

    def _output(self) -> str:
        t = self.table.local
        return f"torch.empty({self._out_shape()}, dtype={self.out_dtype(t)}, device={t}.device)"

    def _result(self) -> str:
        return "out"

    def _pointers(self) -> list[str]:
        return ["table_ptr", "index_ptr", "out_ptr"]

    def _tensors(self) -> list[str]:
        return [self.table.local, self.index.local, "out"]

    def _moves(self, found: str, written: str, idx: str) -> list[str]:
        """The lines moving each element: read at src where found, written at dst (idx: each
        element's index)."""
        return [f"val = tl.load(table_ptr + src, mask={found}, other=0.0)",
                f"tl.store(out_ptr + dst, val.to(out_ptr.dtype.element_ty), mask={written})"]


class _RowsKernel(_IndexKernel):
    block_key = "BLOCK_I"
    description = ("The table as [outer, N, inner] around the indexed dim: one program copies BLOCK_K indexed\n"
                   "slices' BLOCK_I neighbouring elements, loading its indices once.")

    def configs(self) -> list[dict]:
        return self._space(ROWS_CONFIGS)

    def _out_shape(self) -> str:
        t, i = self.table.local, self.index.local
        if self.node.op == EMBEDDING:
            return f"[*{i}.shape, {t}.shape[1]]"
        return f"[*{t}.shape[:dim], {i}.numel(), *{t}.shape[dim + 1:]]"

    def source(self) -> str:
        return self._file([self._kernel()], [_rows_config], self._launcher())

    def _kernel(self) -> str:
        params = [*self._pointers(), "k", "n", "inner", "INT64: tl.constexpr", "BLOCK_K: tl.constexpr",
                  "BLOCK_I: tl.constexpr"]
        code = Code()("tiles_i = tl.cdiv(inner, BLOCK_I)",
                      "tiles_k = tl.cdiv(k, BLOCK_K)",
                      "pid = tl.program_id(0)",
                      "t_i = pid % tiles_i",
                      "t_k = (pid // tiles_i) % tiles_k",
                      "o = (pid // (tiles_i * tiles_k)).to(tl.int64)",
                      "offs_k = t_k * BLOCK_K + tl.arange(0, BLOCK_K)",
                      "offs_i = t_i * BLOCK_I + tl.arange(0, BLOCK_I)",
                      "idx = tl.load(index_ptr + offs_k, mask=offs_k < k, other=0)",
                      "# an index outside the dim reads nothing (0): never outside the table",
                      "found = (idx >= 0) & (idx < n) & (offs_k < k)")
        with code.block("if INT64:"):
            code("offs_k = offs_k.to(tl.int64)", "offs_i = offs_i.to(tl.int64)")
        code("inside = offs_i[None, :] < inner",
             "src = o * n * inner + idx[:, None].to(offs_i.dtype) * inner + offs_i[None, :]",
             "dst = o * k * inner + offs_k[:, None] * inner + offs_i[None, :]",
             *self._moves("found[:, None] & inside", "(offs_k[:, None] < k) & inside", "idx[:, None]"))
        return jit_source(f"{self.name}_kernel", params, code.lines)

    def _launcher(self) -> str:
        t, i = self.table.local, self.index.local
        text = self._head()
        text += (f"    k = {i}.numel()\n"
                 f"    outer = math.prod({t}.shape[:dim])\n"
                 f"    inner = {t}.numel() // max(outer * n, 1)\n")
        text += self._config_line("_rows_config(k, inner)")
        text += ('    BLOCK_K, BLOCK_I = config["BLOCK_K"], config["BLOCK_I"]\n'
                 "    grid = (_cdiv(inner, BLOCK_I) * _cdiv(k, BLOCK_K) * outer,)\n")
        args = [*self._tensors(), "k", "n", "inner", "INT64=big", "BLOCK_K=BLOCK_K", "BLOCK_I=BLOCK_I",
                'num_warps=config["num_warps"]']
        return text + launch(f"{self.name}_kernel", "grid", args, "    ") + f"\n    return {self._result()}\n"


class _GatherKernel(_IndexKernel):
    block_key = "BLOCK"
    description = ("One program per BLOCK outputs: each split into its coordinates by the index's shape and read\n"
                   "from the tensor at those coordinates, the index's value along the dim.")

    def __init__(self, spec, node, inputs, options):
        super().__init__(spec, node, inputs, options)
        self.rank = max(len(s) for s in self.index.shapes)     # lower ranks run with leading unit dims

    def configs(self) -> list[dict]:
        return self._space(GATHER_CONFIGS)

    def _out_shape(self) -> str:
        return f"{self.index.local}.shape"

    def source(self) -> str:
        return self._file([self._kernel()], [_gather_config], self._launcher())

    def _kernel(self) -> str:
        r = self.rank
        params = [*self._pointers(), "total", "n", "dim", *(f"size{k}" for k in range(1, r)),
                  *(f"stride{k}" for k in range(r)), "INT64: tl.constexpr", "BLOCK: tl.constexpr"]
        code = Code()("offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
                      "mask = offs < total")
        with code.block("if not INT64:"):
            code("# int32 index math where every tensor allows: int64 division is much slower",
                 "offs = offs.to(tl.int32)")
        code("idx = tl.load(index_ptr + offs, mask=mask, other=0)",
             "# an index outside the dim reads nothing (0): never outside the tensor",
             "found = mask & (idx >= 0) & (idx < n)",
             "idx = idx.to(offs.dtype)",
             "# the tensor's offset: the output's coordinates, the index's value along dim",
             "src = tl.zeros_like(offs)",
             "rest = offs")
        for k in reversed(range(r)):
            code(f"src += tl.where(dim == {k}, idx, {f'rest % size{k}' if k else 'rest'}) * stride{k}")
            if k:
                code(f"rest = rest // size{k}")
        code("dst = offs", *self._moves("found", "mask", "idx"))
        return jit_source(f"{self.name}_kernel", params, code.lines)

    def _launcher(self) -> str:
        t, i, r = self.table.local, self.index.local, self.rank
        text = self._head()
        text += (f"    pad = {r} - {t}.dim()\n"
                 f"    if {i}.dim() != {t}.dim() or pad < 0:\n"
                 f"        raise ValueError(f\"gather takes an index of the tensor's rank, up to {r} here; got "
                 f"{{list({t}.shape)}} and {{list({i}.shape)}}\")\n"
                 "    # lower ranks run with leading unit dims\n"
                 f"    sizes, strides = [1] * pad + list({i}.shape), [0] * pad + list({t}.stride())\n")
        text += self._config_line(f"_gather_config({i}.numel())")
        text += f"    grid = (_cdiv({i}.numel(), config[\"BLOCK\"]),)      # one index a lane\n"
        args = [*self._tensors(), f"{i}.numel()", "n", "dim + pad", "*sizes[1:]", "*strides", "INT64=big",
                'BLOCK=config["BLOCK"]', 'num_warps=config["num_warps"]']
        return text + launch(f"{self.name}_kernel", "grid", args, "    ") + f"\n    return {self._result()}\n"


class _Scatter:
    """What turns a lookup's kernel into its table's gradient (index_grad): the upstream read where the
    lookup wrote, added where it read (atomically: indices repeat) into float32 zeros of the table's
    shape, cast to its dtype after; an embedding's padding_idx row gets none."""
    description = ("The table's gradient of the lookup: the same walk as the lookup's kernel, each element of\n"
                   "up (read where the lookup wrote) added atomically at the position the lookup read, in\n"
                   "float32, an embedding's padding row left out.")

    def __init__(self, spec, node, inputs, options):
        super().__init__(spec, node, inputs, options)
        self.up = next(i for i in inputs if i.name == node.args[2].name)

    def _output(self) -> str:
        return f"torch.zeros({self.table.local}.shape, dtype=torch.float32, device={self.table.local}.device)"

    def _result(self) -> str:
        return f"out.to({self.table.local}.dtype)"

    def _pointers(self) -> list[str]:
        return ["up_ptr", "index_ptr", "out_ptr", "pad"]

    def _tensors(self) -> list[str]:
        padding = self.node.attr("padding_idx")
        return [self.up.local, self.index.local, "out", "-1" if padding is None else f"{padding} % n"]

    def _moves(self, found: str, written: str, idx: str) -> list[str]:
        return ["# the padding row (an embedding's padding_idx; -1: none) gets no gradient",
                f"keep = {found} & ({idx} != pad)",
                "val = tl.load(up_ptr + dst, mask=keep, other=0.0).to(tl.float32)",
                "tl.atomic_add(out_ptr + src, val, mask=keep)"]


class _RowsGradKernel(_Scatter, _RowsKernel):
    """The gradient of an index_select's or an embedding's table."""


class _GatherGradKernel(_Scatter, _GatherKernel):
    """The gradient of a gather's tensor."""


ENTRIES: tuple[Entry, ...] = ()
