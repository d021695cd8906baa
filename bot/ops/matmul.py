"""The matmul family: a @ b (2-D, batched [..., M, K] @ [..., K, N] over the same batch dims, or
[..., M, K] by a shared 2-D b) inside a pointwise epilogue, e.g. relu(a @ b + bias) * 0.5 + residual,
as one tiled tl.dot kernel: a program computes a BLOCK_M x BLOCK_N tile of a [M, K] @ b [K, N] into
a float32 accumulator, applies the epilogue to that tile, and stores it once in the output dtype.

The kernel is persistent (a few programs per SM walk the tiles of the whole batch) and loads its
operand tiles with TMA (host-made tensor descriptors). A float16/bfloat16 output with aligned rows
is stored by TMA, in two halves, and its tile loop and K loop are flattened into one pipelined
loop. TMA needs the operands' rows to start on 16-byte boundaries; an odd K or N breaks that, so
(as Inductor's pad_mm does) the launcher first copies such operands into zero-padded buffers
(bot/ops/matmul_pad.py).

The product's upper or lower triangle (torch.triu(a @ b, diagonal=1), tril) is masked in the epilogue,
and a tile wholly outside it skips its K loop.

Owns its words (matmul, bmm, the epilogue's bias, activation, scale and residual, the triangle, problem
sizes M/N/K), its IR rule and shape check, the torch call, the kernel with its config space and default
rule, and its catalog entries.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Callable, NamedTuple

from bot.codegen import fixed
from bot.codegen.code import indented, jit_source, launch
from bot.codegen.expr import call_writer
from bot.codegen.kernel_file import KernelFile, KernelInput, _expanded_strides
from bot.codegen.row_kernel import sm_count_line
from bot.generators.interface import GenerationError
from bot.ops import einsum_sum, layout, pointwise, remap, softmax, view
from bot.ops.entry import MATMUL_BIG, MATMUL_SMALL, Entry
from bot.ops.node import (ALL, MOVERS, Call, IRError, Node, arguments, arity, broadcast_shapes, call, const, flag, inp,
                          input_names, inputs_outside, is_int_literal, is_none, number, prints, substitute, to_text)
from bot.ops.text import DIM, FLAGS as _F, blank as _blank, blank_span, fmt_shape, size as _size
from runner import protocol

NAME = "matmul"
MATMUL = "matmul"                   # one per expression; the rest is its epilogue
TRANSPOSE = "transpose"             # x.T, x.mT, x.t(), x.transpose(-2, -1): a matmul operand only
MOVERS.add(TRANSPOSE)            # a transpose moves elements: of a mask, a mask
EINSUM = "einsum"                   # read where it is a matrix product
# diag(d) as an operand of a product: diag(d) @ b scales b's rows by d, b @ diag(d) its columns.
DIAG = "diag"
DIAG_ALONE = ("torch.diag(d) is read as an operand of a product (torch.diag(d) @ b, b @ torch.diag(d)); a diagonal "
              "matrix on its own, or the diagonal of a matrix, is not supported")
OPS = {MATMUL, TRANSPOSE, DIAG}
ROOT = False
# torch.triu(a @ b, diagonal) keeps the elements with col - row >= diagonal of each matrix (the last
# two dims), tril those with col - row <= diagonal: read as the matmul's attrs tri and diagonal.
TRIANGLES = {"triu": ">=", "tril": "<="}
SUPPORTED = ("", "matmul a @ b (2-D, batched [..., M, K] @ [..., K, N], or [..., M, K] @ [K, N]; a 1-D operand as a "
             "matrix-vector product; tf32=True for "
             "float32; einsum of such a product) with a pointwise epilogue, e.g. relu(a @ b + bias), and its upper or lower triangle, "
             "torch.triu(a @ b, diagonal=1); torch.diag(d) @ b and b @ torch.diag(d), d 1-D, as scaled rows or columns")
ALIASES = {"mm": "matmul", "bmm": "matmul", "mv": "matmul", "dot": "matmul", "vdot": "matmul"}   # real tensors: vdot is dot
KEYWORDS = {MATMUL: {"tf32"}, TRANSPOSE: set(), "t": set(), DIAG: {"diagonal"}, "linear": {"weight", "bias"}, EINSUM: set(),
            "addmm": {"beta", "alpha"}, "baddbmm": {"beta", "alpha"},
            **dict.fromkeys(TRIANGLES, {"diagonal"})}
OUTPUT_DTYPES: dict[str, str] = {}
WORDS: list = []                    # read apart, with their sizes: MATMUL_WORD, take_epilogue
TORCH_OPS = {MATMUL: lambda node, a: triangle_text(triangle(node), call_writer("torch.matmul")(node, [
    x + (f".{node.attr(key)}" if node.attr(key) else "") for x, key in zip(a, ("ta", "tb"))]), "torch.")}
PAD = Path(__file__).with_name("matmul_pad.py")

MAX_BLOCK = 256             # a wider tile's operands no longer fit in shared memory


# The space the benchmark sweeps, biggest tile first (the order _default_config walks). Hopper
# matmul tiles from Triton's tutorial and Inductor's mm configs: 128x256 and 256x128 with 8 warps
# (two warpgroups) are the fastest at large sizes (BLOCK_K 64 and 3 stages the best of the space
# at 4096^3 fp16 on an H100 and an H200, 2026-12-06); 128x128 trades reuse for more
# programs; the small tiles keep small matrices spread over the SMs. BLOCK_K 64 is 128 bytes of
# fp16 per row, one full shared-memory swizzle line; GROUP_M 8 as in the tutorial.
CONFIGS = [
    {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": w, "num_stages": s}
    for bm, bn, bk, w, s in [(128, 256, 64, 8, 3), (128, 256, 32, 8, 4), (256, 128, 64, 8, 3), (128, 128, 64, 8, 4),
                             (128, 128, 64, 4, 4), (128, 128, 32, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
                             (64, 64, 64, 4, 3), (64, 64, 32, 4, 4), (32, 32, 64, 2, 3)]
]



# ---------------------------------------------------------------- IR rule

def convert(c: Call) -> Node | None:
    if c.fname in (TRANSPOSE, "t"):
        return _transpose_call(c)
    if c.fname in TRIANGLES:
        return _triangle(c)
    if c.fname == DIAG:
        return _diag(c)
    if c.fname == "linear":
        return _linear(c)
    if c.fname == EINSUM:
        return _einsum(c)
    if c.fname in ("addmm", "baddbmm"):
        return _added_product(c)
    if c.fname != MATMUL:
        return None
    arity(c.fname, c.args, 2)
    return product(c.expr(c.args[0]), c.expr(c.args[1]), tf32=flag(c.kw.get("tf32")))


def _diag(c: Call) -> Node:
    """torch.diag(d): kept as a marker that product() turns into a scaling; diag(d, k) (off the main
    diagonal) and a diagonal matrix on its own are refused."""
    given = arguments(c, ("input", "diagonal"))
    if "input" not in given or (given.get("diagonal") is not None and number(given["diagonal"]) != 0):
        raise IRError("diag is read as torch.diag(d) with d 1-D, on the main diagonal, as an operand of a product: "
                      "torch.diag(d) @ b or b @ torch.diag(d)")
    return call(DIAG, c.expr(given["input"]))


def _added_product(c: Call) -> Node:
    """torch.addmm(input, a, b, beta=1, alpha=1) and baddbmm: beta * input + alpha * (a @ b), the product
    with its epilogue (beta 0 leaves input out, as torch does, NaN in it included)."""
    arity(c.fname, c.args, 3)
    beta, alpha = (number(c.kw.get(k, ast.Constant(1.0))) for k in ("beta", "alpha"))
    mm = product(c.expr(c.args[1]), c.expr(c.args[2]), tf32=False)
    scaled = mm if alpha == 1 else call("mul", mm, const(alpha))
    if beta == 0:
        return scaled
    added = c.expr(c.args[0]) if beta == 1 else call("mul", c.expr(c.args[0]), const(beta))
    return call("add", added, scaled)


def _linear(c: Call) -> Node:
    """F.linear(x, weight, bias=None): x @ weight.T (+ bias), weight [N, K] read K-major as it lies."""
    if "weight" in c.kw:
        c.args.append(c.kw.pop("weight"))
    if "bias" in c.kw:
        c.args.append(c.kw.pop("bias"))
    if len(c.args) not in (2, 3):
        raise IRError(f"linear takes (input, weight, bias=None), got {len(c.args)} arguments")
    out = product(c.expr(c.args[0]), transposed(c.expr(c.args[1]), "T"), tf32=False)
    bias = c.args[2] if len(c.args) == 3 else None
    return out if is_none(bias) else call("add", out, c.expr(bias))


def _triangle(c: Call) -> Node:
    """torch.triu(a @ b, diagonal=k), a.matmul(b).tril(k): the product with its triangle as attrs; the
    triangle of anything else, the remap family's op."""
    given = arguments(c, ("input", "diagonal"))
    diagonal = given.get("diagonal")
    if "input" not in given or (diagonal is not None and not is_int_literal(diagonal)):
        raise IRError(f"{c.fname} takes a tensor and an integer diagonal, e.g. torch.{c.fname}(a @ b, diagonal=1)")
    x = c.expr(given["input"])
    k = int(number(diagonal)) if diagonal is not None else 0
    if x.op != MATMUL or x.attr("tri"):             # a tensor's triangle: a kernel of its own
        return remap.triangle(x, c.fname, k)
    return _with_attrs(x, tri=c.fname, diagonal=k)


def triangle(mm: Node) -> tuple[str, int] | None:
    """The matmul's triangle: ("triu" or "tril", diagonal), or None for the whole product."""
    return (mm.attr("tri"), mm.attr("diagonal")) if mm.attr("tri") else None


def triangle_text(tri: tuple[str, int] | None, text: str, module: str = "") -> str:
    """text (a product) inside the call of its triangle tri, if any: triu(text, diagonal=1)."""
    return f"{module}{tri[0]}({text}{f', diagonal={tri[1]}' if tri[1] else ''})" if tri else text


def _with_attrs(node: Node, **attrs) -> Node:
    """node with attrs set (others kept)."""
    return dataclasses.replace(node, attrs=tuple(sorted({**dict(node.attrs), **attrs}.items())))


def product(a: Node, b: Node, **attrs) -> Node:
    """a @ b. A transposed operand is the input itself with the product's flag ta (tb) saying how
    it was written: "T" (x.T, x.t(): a 2-D transpose) or "mT" (x.mT, x.transpose(-2, -1): the last two
    dims), so the kernel reads the operand as it lies in memory."""
    if a.op == DIAG or b.op == DIAG:
        return _scaled(a, b)
    flags = {}
    for key, operand in (("ta", a), ("tb", b)):
        if operand.op == TRANSPOSE:
            flags[key] = operand.attr("form")
    a, b = (x.args[0] if x.op == TRANSPOSE else x for x in (a, b))
    return call(MATMUL, a, b, **attrs, **flags)


def _scaled(a: Node, b: Node) -> Node:
    """diag(d) @ b: b's rows times d, d.view(-1, 1) * b; a @ diag(d): a's columns times d. The view
    makes a d of any rank but 1 fail to broadcast instead of meaning something else."""
    if a.op == DIAG and b.op == DIAG:
        raise IRError("diag(d1) @ diag(d2) is the diagonal matrix of d1 * d2: the offline generator builds no diagonal matrices")
    if a.op == DIAG:
        return call("mul", call(view.RESHAPE, a.args[0], sizes=(-1, 1)), b)
    return call("mul", a, call(view.RESHAPE, b.args[0], sizes=(1, -1)))


def _einsum(c: Call) -> Node:
    """torch.einsum: a matrix product the kernel takes where it is one ('ik,kj->ij', 'bij,bjk->bik',
    'bijl,lk->bijk', either operand transposed: 'ik,jk->ij' is a @ b.T), else a broadcast product
    summed over the dropped indices (bot.ops.einsum_sum: 'i,j->ij', 'bi,bi->b', 'ij->ji')."""
    if len(c.args) < 2 or not (isinstance(c.args[0], ast.Constant) and isinstance(c.args[0].value, str)):
        raise IRError("einsum is read with an equation and its operands, e.g. torch.einsum('ik,kj->ij', a, b)")
    equation = c.args[0].value.replace(" ", "")
    lhs, _, out = equation.partition("->")
    operands = lhs.split(",")
    letters = "".join(operands)
    if "->" not in equation:            # implicit output: the letters used once, in order
        out = "".join(sorted(x for x in set(letters) if letters.count(x) == 1))
    if len(operands) != len(c.args) - 1 or "." in equation or any(len(set(o)) != len(o) for o in operands):
        raise IRError(f"einsum {equation!r}: the offline generator reads einsum with one subscript per operand, "
                      "without '...' or an index repeated within one operand")
    nodes = [c.expr(x) for x in c.args[1:]]
    for ta, tb in ((False, False), (False, True), (True, False), (True, True)) if len(nodes) == 2 else ():
        sa, sb = _swapped(operands[0], ta), _swapped(operands[1], tb)
        batched_ok = len(sb) == 2 or (len(sa) == len(sb) >= 3 and sa[:-2] == sb[:-2])
        if len(sa) >= 2 and len(sb) >= 2 and sa[-1] == sb[-2] and sa[-1] not in out and batched_ok \
                and sa[:-1] + sb[-1] == out:
            return product(_transposed_as(nodes[0], operands[0], ta), _transposed_as(nodes[1], operands[1], tb),
                           tf32=False)
    return einsum_sum.summed_product(equation, operands, out, nodes, c.expr)


def _swapped(subscripts: str, swap: bool) -> str:
    return subscripts[:-2] + subscripts[-1] + subscripts[-2] if swap and len(subscripts) >= 2 else subscripts


def _transposed_as(x: Node, subscripts: str, swap: bool) -> Node:
    return transposed(x, "T" if len(subscripts) == 2 else "mT") if swap else x


def transposed(x: Node, form: str) -> Node:
    """x.T (form "T") or x.mT ("mT"), for a matmul to take as its operand."""
    return call(TRANSPOSE, x, form=form)


def _transpose_call(c: Call) -> Node:
    """x.t() and x.transpose(d0, d1): the last two dims (or 0 and 1 of a 2-D x)."""
    if c.fname == "t":
        arity("t", c.args, 1)
        return transposed(c.expr(c.args[0]), "T")
    arity("transpose", c.args, 3)
    dims = {ast.unparse(d) for d in c.args[1:]}
    if dims == {"-2", "-1"}:
        return transposed(c.expr(c.args[0]), "mT")
    if dims == {"0", "1"}:         # a matmul reads it as x.T; elsewhere it swaps dims 0 and 1 of any rank
        return call(TRANSPOSE, c.expr(c.args[0]), form="T", swap=(0, 1))
    if not all(is_int_literal(d) for d in c.args[1:]):
        raise IRError(f"transpose takes two integer dims, e.g. x.transpose(1, 2); got {', '.join(sorted(dims))}")
    return layout.swapped(c.expr(c.args[0]), *(int(number(d)) for d in c.args[1:]))


@prints(MATMUL)
def _print(node: Node, text) -> str:
    a, b = (text(x) + (f".{node.attr(key)}" if node.attr(key) else "") for x, key in zip(node.args, ("ta", "tb")))
    return triangle_text(triangle(node), f"matmul({a}, {b}{', tf32=True' * bool(node.attr('tf32'))})")


@prints(TRANSPOSE)
def _print_transpose(node: Node, text) -> str:
    return f"{text(node.args[0])}.{node.attr('form')}"


def logical(shape: list[int], form: str | None, name: str = "") -> list[int]:
    """An operand's shape as the product reads it: transposed (form "T" or "mT") or as it is."""
    if not form:
        return list(shape)
    if form == "T" and len(shape) != 2:
        raise IRError(f"{name}.T of a {len(shape)}-D tensor reverses all its dims; write {name}.mT (or "
                      f"{name}.transpose(-2, -1)) for its matrices' transpose")
    return [*shape[:-2], shape[-1], shape[-2]]


def matmul_node(node: Node) -> Node | None:
    return next((sub for sub in node.walk() if sub.op == MATMUL), None)


def check(node: Node) -> None:
    """One matmul of two plain inputs, the root of its tree or inside a pointwise epilogue."""
    if any(sub.op == DIAG for sub in node.walk()):
        raise IRError(DIAG_ALONE)
    matmuls = [sub for sub in node.walk() if sub.op == MATMUL]
    if matmuls:
        body = node if node.op == MATMUL or node.op in pointwise.OPS else None
        _check_matmul(node, body, matmuls)


def _check_matmul(node: Node, body: Node, matmuls: list[Node]) -> None:
    if node is not body:
        raise IRError(f"a matmul inside {node.op} is not supported; a matmul takes a pointwise epilogue, "
                      "e.g. relu(a @ b + bias)")
    if len(set(matmuls)) > 1:            # one product used twice (a local named twice) is one matmul
        raise IRError("one matmul per kernel; chain them as separate operators")
    mm = matmuls[0]
    if any(a.op != "input" for a in mm.args):
        raise IRError("matmul operands must be inputs, e.g. a @ b; compute a prologue in a separate kernel")
    if any(a.name in inputs_outside(node, mm) for a in mm.args):
        raise IRError("matmul operands cannot also be used in the epilogue")


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    mm = matmul_node(node)
    a, b = (logical(shapes[x.name], mm.attr(key), x.name) for x, key in zip(mm.args, ("ta", "tb")))
    full = broadcast_shapes([_matmul_shape(a, b)] + [shapes[n] for n in input_names(node)
                                                     if n not in {x.name for x in mm.args}])
    if full != _matmul_shape(a, b):
        raise IRError(f"the epilogue's inputs broadcast the matmul's output to {full}; they must fit inside it")
    return full


def _matmul_shape(a: list[int], b: list[int]) -> list[int]:
    if len(a) < 2 or len(b) < 2 or (len(b) > 2 and len(a) != len(b)):
        vector = (" (a vector operand: write the product as the reduction it is, sum(a * v, dim=-1) for a @ v, "
                  "as the request reader does)"
                  if min(len(a), len(b)) < 2 else "")
        raise IRError(f"matmul takes a [M, K] @ b [K, N], batched a [..., M, K] @ b [..., K, N], or a [..., M, K] @ "
                      f"b [K, N]; got {a} @ {b}{vector}")
    if a[-1] != b[-2]:
        raise IRError(f"matmul: a {a} has K = {a[-1]} but b {b} has K = {b[-2]}; they must match")
    if len(b) > 2 and b[:-2] != a[:-2]:
        raise IRError(f"batched matmul: a {a} and b {b} have different batch dims (the kernel does not broadcast "
                      "them; expand the operand first)")
    return a[:-1] + [b[-1]]


# ---------------------------------------------------------------- words

MATMUL_WORD = re.compile(r"\bmat[\s_-]?mul\b|\bmatrix[\s-]+(?:multipl\w*|mult|product)\b|\bgemm\b|\bb?mm\b|"
                         r"矩阵乘法?|[\w)\]](?:@|[ \t]+@[ \t]+)[\w(]", _F)     # "a @ b", not "hi @bob"

BATCHED_WORD = re.compile(r"\bbatch(?:ed|es)?\b|\bbmm\b|批(?:量|次)?", _F)

MATMUL_DTYPES = ["float16", "bfloat16"]         # float32 only when asked for (fp32, tf32)


# Problem sizes [M, N, K] / [B, M, N, K]: square, and odd and non-square (no block size divides
# it, and a kernel that mixes up M, N and K fails on it).
MATMUL_DEFAULTS = [[4096, 4096, 4096], [1000, 1500, 700]]

BMM_DEFAULTS = [[32, 512, 512, 512], [3, 1000, 1500, 700]]

ACTIVATIONS = {"relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"}

_CONNECTIVES = {"add", "mul"}                  # "plus residual", "a times b": already read


_TF32 = re.compile(r"\btf32\b", _F)


_TF32_FLAG = re.compile(r",?\s*\btf32\s*=\s*(True|False)\b")      # typed: matmul(a, b, tf32=True)


_NO_TF32 = re.compile(r"\b(?:no|without|disable|disallow)\s+tf32\b|(?:不用|禁用|不允许)\s*tf32", _F)

_BIAS = re.compile(r"\bbias\b|偏置", _F)

_NO_BIAS = re.compile(r"\b(?:without|no|w/o)\s+(?:a\s+)?bias\b|(?:无|不带|没有)偏置", _F)

_RESIDUAL = re.compile(r"\bresidual\b|\bskip[\s-]connection\b|残差", _F)


# Between a matmul's operands or its shapes: "a times b", "4096x4096 @ 4096x4096", "矩阵乘 A 乘 B".
_OPERAND_JOINS = re.compile(r"@|\b(?:two|pair\s+of)\b|乘(?!以)|加|两个", _F)

_ACTIVATION_WORD = re.compile(r"\bactivation\b|激活", _F)

# "upper triangular matmul", "下三角矩阵乘法": the product's triangle, torch.triu / torch.tril.
_TRIANGLE_WORD = re.compile(r"\b(upper|lower)[\s-]+triang(?:ular|le)\b|([上下])三角", _F)

_SIZE_RUN = re.compile(rf"(?:\b[bmnk]\s*[=:]?\s*{DIM}(?![\w.])[\s,;]*(?:and\s+)?){{2,4}}", _F)

_SIZE = re.compile(rf"\b([bmnk])\s*[=:]?\s*({DIM})", _F)

_CUBE = re.compile(rf"(?<![\w.])({DIM})\s*(?:\^\s*3|\*\*\s*3|³)(?![\w.])|(?<![\w.])({DIM})\s+cubed\b", _F)

_BATCH = re.compile(r"\bbatch(?:es)?(?:\s+(?:size|count|of))?\s*[=:]?\s*(\d+)\b(?!\s*[x×*])|"
                    r"\b(\d+)\s+batch(?:es)?\b|批(?:量|次)?(?:大小)?\s*[=:为]?\s*(\d+)(?![\d\s]*[x×*])", _F)


# "4096x4096 by 4096x4096" is two operands; the generic reader would take "by" as a dim separator.
_OPERAND_BY = re.compile(rf"({DIM}\s*[x×*]\s*{DIM})(\s+by\s+)(?={DIM}\s*[x×*])", _F)

_NO_BATCH = "a batched matmul needs a batch count, e.g. 'batch 32 of 512x512x512' or '32x512x512 by 32x512x512'"


class Epilogue(NamedTuple):
    bias: bool
    residual: bool
    activation_named: bool     # "activation"/"激活" said, whichever function it names
    triangle: tuple[str, int] | None = None    # ("triu" or "tril", diagonal): the product's triangle


def take_tf32(text: str) -> tuple[str, bool | None]:
    """'tf32' names float32 that allows TF32: read it as fp32 in place (keeping the dtypes' order);
    True/False when TF32 is asked for / refused, None when not mentioned."""
    if m := _TF32_FLAG.search(text):
        return blank_span(text, m), m.group(1) == "True"
    if _NO_TF32.search(text):
        return _NO_TF32.sub(_blank, text), False
    if _TF32.search(text):
        return _TF32.sub("fp32", text), True
    return text, None


def take_sizes(text: str, batched: bool) -> tuple[str, int | None]:
    """(text, batch): a batch count ('batch 32 of ...') taken out, sizes spelled 'M=4096 N=4096
    K=4096' or '4096^3' rewritten in place as MxNxK (BxMxNxK) for the generic shape reader, and
    'A by B' operand pairs split apart."""
    batch = None
    if m := _BATCH.search(text):
        batch = int(next(g for g in m.groups() if g))
        text = blank_span(text, m)

    def problem(sizes: list[int]) -> str:
        if batched and batch is None and len(sizes) == 3:
            raise GenerationError(_NO_BATCH)
        return f" {fmt_shape(sizes)} "

    def named(m: re.Match) -> str:
        sizes = {k.upper(): _size(v) for k, v in _SIZE.findall(m.group(0))}
        if not {"M", "N", "K"} <= sizes.keys():
            raise GenerationError(f"{m.group(0).strip()!r}: name all of M, N and K, e.g. 'M=4096 N=4096 K=4096'")
        return problem([sizes[k] for k in "BMNK" if k in sizes])

    text = _CUBE.sub(lambda m: problem([_size(m.group(1) or m.group(2))] * 3), _SIZE_RUN.sub(named, text))
    text = _OPERAND_BY.sub(lambda m: m.group(1) + ";" + " " * (len(m.group(2)) - 1), text)
    return text, batch


def problems(shapes: list[list[int]], batched: bool, batch: int | None, notes: list[str]) -> list[list[int]]:
    """Problem sizes, one per case, from the shapes in a matmul request: MxNxK (BxMxNxK) as
    written, a pair of operands [M, K] [K, N], or one square operand (both operands that shape)."""
    operand_rank = 3 if batched and batch is None else 2
    out: list[list[int]] = []
    i = 0
    while i < len(shapes):
        s, nxt = shapes[i], shapes[i + 1] if i + 1 < len(shapes) else None
        i += 1
        pair = len(s) == operand_rank and nxt is not None and len(nxt) == operand_rank
        if pair and s[-1] == nxt[-2] and s[:-2] == nxt[:-2]:
            out.append([*s[:-2], s[-2], nxt[-1], s[-1]])
            i += 1
        elif len(s) == operand_rank and s[-1] == s[-2]:       # "4096x4096 and 1024x1024": two cases
            notes.append(f"read {fmt_shape(s)} as the shape of both operands (M = N = K = {s[-1]})")
            out.append([*s, s[-1]])
        elif pair:
            raise GenerationError(f"a {fmt_shape(s)} and b {fmt_shape(nxt)} do not multiply: a's K is {s[-1]} but b's "
                                  f"is {nxt[-2]}{'' if s[:-2] == nxt[:-2] else ', and the batch sizes differ'}")
        elif len(s) == 4 and nxt is not None and len(nxt) == 4 and s[:2] == nxt[:2] and s[3] == nxt[2]:
            raise GenerationError(f"{fmt_shape(s)} by {fmt_shape(nxt)} reads as two 4-D operands, which the offline matmul does "
                                  "not take; give a batch of 3-D operands ('batched matmul 16x128x64 by 16x64x128').")
        elif not batched and len(s) == 3 and nxt is not None and len(nxt) == 3 and s[0] == nxt[0] and s[2] == nxt[1]:
            raise GenerationError(f"is {fmt_shape(s)} by {fmt_shape(nxt)} a batched matmul ({s[0]} of {fmt_shape(s[1:])} by "
                                  f"{fmt_shape(nxt[1:])})? Say 'batched matmul'; a single 3-number size reads as M x N x K.")
        elif len(s) in (operand_rank + 1, 4):
            if len(set(s)) > 1:
                notes.append(f"read {fmt_shape(s)} as {' x '.join('BMNK'[4 - len(s):])}")
            out.append(list(s))
        else:
            raise GenerationError(f"I cannot read {fmt_shape(s)} as a matmul shape. Give M, N and K ('4096x4096x4096', "
                                  "'M=4096 N=4096 K=4096', '4096^3') or both operands ('1024x4096 by 4096x2048'); "
                                  "batched: 'batch 32 of 512x512x512' or '32x512x512 by 32x512x512'.")
    return [[batch, *p] if batch is not None and len(p) == 3 else p for p in out]


def take_epilogue(text: str) -> tuple[str, Epilogue]:
    """The matmul, bias, residual and activation words, blanked so that what is left are the
    epilogue's functions and scale for the generic operator reader."""
    epilogue = Epilogue(bool(_BIAS.search(text)) and not _NO_BIAS.search(text), bool(_RESIDUAL.search(text)),
                        bool(_ACTIVATION_WORD.search(text)), _triangle_word(text))
    for pattern in (_NO_BIAS, _BIAS, _RESIDUAL, _ACTIVATION_WORD, _TRIANGLE_WORD, MATMUL_WORD, BATCHED_WORD,
                    _OPERAND_JOINS):
        text = pattern.sub(_blank, text)
    return text, epilogue


def _triangle_word(text: str) -> tuple[str, int] | None:
    """("triu", 0) for 'upper triangular' (上三角), ("tril", 0) for 'lower', None when neither is said."""
    named = {"triu" if m.group(0)[0] in "uU上" else "tril" for m in _TRIANGLE_WORD.finditer(text)}
    if len(named) > 1:
        raise GenerationError("you named both the upper and the lower triangle; which one? Or write the expression, "
                              "e.g. 'torch.triu(a @ b, diagonal=1)'.")
    return (named.pop(), 0) if named else None


def _row_after_position(text: str, pos: int, op: str) -> int:
    """Where a row op named beside a product applies: after it ('matmul then softmax'), or, said of
    it ('softmax of the matmul'), last; said before it otherwise ('softmax then matmul'), refused."""
    product = MATMUL_WORD.search(text)
    if product is None or pos > product.start():
        return pos
    word = next(m for pattern, _, name in softmax.WORDS if name == op and (m := pattern.match(text, pos)))
    if re.fullmatch(r"\s*of\s+(?:the\s+|a\s+)?", text[word.end():product.start()], re.I):
        return len(text)
    raise GenerationError(f"you named {op} before the product: is it {op}(a @ b) or {op} of an operand? Write the "
                          f"expression, e.g. '{op}(a @ b)' or '{op}(a) @ b'.")


def check_epilogue_order(text: str, found: list[tuple[int, str]]) -> None:
    """The epilogue is activation(triu(a @ b) + bias) * scale + residual: words that name its parts in
    another order ('plus residual then relu', 'scaled by 0.125 then gelu') are refused."""
    parts = [(m.start(), -1, "the triangle") for m in _TRIANGLE_WORD.finditer(text)]
    parts += [(m.start(), 0, "bias") for m in _BIAS.finditer(text) if not _NO_BIAS.search(text)]
    parts += [(m.start(), 3, "residual") for m in _RESIDUAL.finditer(text)]
    parts += [(pos, 1 if op in ACTIVATIONS else 2, op) for pos, op in found if op in ACTIVATIONS or op == "scale"]
    parts += [(_row_after_position(text, pos, op), 4, op) for pos, op in found if op in ROW_AFTER]
    parts.sort()
    for (_, r1, p1), (_, r2, p2) in zip(parts, parts[1:]):
        if r1 > r2 and {r1, r2} != {0, 3}:          # bias and residual are both added: either order
            product = triangle_text(_triangle_word(text), "a @ b")
            raise GenerationError(f"you named {p1} before {p2}, but the epilogue applies {p2} first: it is "
                                  f"activation({product} + bias) * scale + residual. For another order write the "
                                  "expression, e.g. 'relu(a @ b + residual)'.")


# Row ops that words may name after a product ('matmul with bias then softmax'): the last dim of the
# epilogue's result, a second kernel over the product's rows. Norms take weights whose names would
# meet the epilogue's bias: written as an expression instead.
ROW_AFTER = ("softmax", "log_softmax")


def matmul_expression(epilogue: Epilogue, words: list[tuple[str, str, float | None]],
                      operands: tuple[str, str] = ("a", "b"), tf32: bool = False) -> str:
    """activation(a @ b + bias) * scale + residual from the epilogue and the other operator words
    ((kind, op, value) as bot.request.operation finds them), inside softmax or log_softmax where named."""
    acts = list(dict.fromkeys(op for _, op, _ in words if op in ACTIVATIONS))
    scales = [value for _, op, value in words if op == "scale"]
    other = [op for kind, op, _ in words
             if op not in ACTIVATIONS and op != "scale" and not (kind == "binary" and op in _CONNECTIVES)]
    rows = [op for op in dict.fromkeys(other) if op in ROW_AFTER]     # 'matmul then softmax': over the output's rows
    other = [op for op in other if op not in ROW_AFTER] + rows[1:]
    if other or len(scales) > 1:
        raise GenerationError(f"a matmul's epilogue takes a bias, one activation (relu, gelu, silu, sigmoid, tanh), "
                              f"a scale and a residual, not {', '.join(other) or 'two scales'}. Write other "
                              "epilogues as an expression, e.g. 'relu(a @ b + bias) * 0.5 + residual'.")
    if len(acts) > 1:
        raise GenerationError(f"I found the activations {' and '.join(acts)}; which one do you want?")
    if epilogue.activation_named and not acts:
        raise GenerationError("which activation? relu, gelu, silu, sigmoid or tanh, e.g. 'matmul with bias and relu'")
    a, b = operands
    body = triangle_text(epilogue.triangle, f"matmul({a}, {b}, tf32={tf32})") + " + bias" * epilogue.bias
    if acts:
        body = f"gelu({body}, approximate='tanh')" if acts[0] == "gelu_tanh" else f"{acts[0]}({body})"
    if scales:
        body = f"({body}) * {scales[0]!r}"
    body += " + residual" * epilogue.residual
    return f"{rows[0]}({body})" if rows else body


def vector_products(node: Node, shapes: dict[str, list[int]]) -> Node:
    """node with each product of a 1-D input operand written as the reduction torch's matmul makes of
    it: [.., M, K] @ v [K] is sum(a * v, dim=-1) ([.., M]), v [K] @ [.., K, N] is sum(v.reshape(-1, 1)
    * b, dim=-2) ([.., N]), two vectors sum(a * b) (one value). A product of N = 1 is a matrix-vector
    product, memory bound: the reduction kernels read the matrix once, where a matmul tile would
    spend a tensor-core tile's width on one column."""
    for mm in [sub for sub in node.walk() if sub.op == MATMUL]:
        a, b = mm.args
        ranks = [len(shapes.get(x.name, [0, 0])) if x.op == "input" else 2 for x in (a, b)]
        if 1 not in ranks:
            continue
        vector, matrix = (b, a) if ranks[1] == 1 else (a, b)
        if ranks == [1, 1]:
            product = call("sum", call("mul", a, b), dim=ALL)
        elif (vector is b) != bool(mm.attr("ta") or mm.attr("tb")):     # the matrix's rows dotted with v
            product = call("sum", call("mul", matrix, vector), dim=-1)
        else:                                                           # its columns
            product = call("sum", call("mul", call(view.RESHAPE, vector, sizes=(-1, 1)), matrix), dim=-2)
        node = substitute(node, mm, product)
    return node


def broadcast_batches(node: Node, shape_of: Callable[[Node], list[int]]) -> Node:
    """node with each product whose operands' batch dims broadcast (attention weights [B, H, T, T] @ a
    shared v [B, 1, T, D]; a [M, K] @ b [B, K, N]) reading them expanded to the common batch: the kernel
    multiplies operands of one batch. A size comes from the other operand: read off it where it is an
    input (so it holds in every case), else the number it is (which the runner then keeps). shape_of:
    an operand's shape as it lies. Products of one batch, or of a 2-D b shared by every matrix of a,
    stay as they are."""
    node = dataclasses.replace(node, args=tuple(broadcast_batches(a, shape_of) for a in node.args))   # inner first
    if node.op != MATMUL:
        return node
    sa, sb = (shape_of(x) for x in node.args)
    if sa is None or sb is None or len(sa) < 2 or len(sb) < 2:
        return node
    rank = max(len(sa), len(sb)) - 2
    pa, pb = ([1] * (rank - len(s) + 2) + s[:-2] for s in (sa, sb))
    if sa[:-2] == sb[:-2] or len(sb) == 2 or any(x != y and 1 not in (x, y) for x, y in zip(pa, pb)):
        return node
    a, b = node.args
    return dataclasses.replace(node, args=(_to_batch(a, sa, b, sb, rank), _to_batch(b, sb, a, sa, rank)))


def _to_batch(x: Node, sx: list[int], other: Node, so: list[int], rank: int) -> Node:
    """x expanded to the batch both operands broadcast to: a dim of 1 (or one x lacks) takes the other's
    size; x itself where its batch is that already."""
    lead, lead_other = rank - (len(sx) - 2), rank - (len(so) - 2)
    sizes: list = []
    for i in range(rank):
        mine = sx[i - lead] if i >= lead else None
        theirs = so[i - lead_other] if i >= lead_other else 1
        if mine is not None and (mine == theirs or theirs == 1):
            sizes.append(-1)
        elif theirs == 1:
            sizes.append(1)                                     # a new leading dim both lack
        else:
            sizes.append((1, (other, i - lead_other)) if other.op == "input" else theirs)
    if all(s == -1 for s in sizes) and lead == 0:
        return x
    return view.sized(view.EXPAND, x, [*sizes, -1, -1])


def operand_problem(a: tuple[str, list[int]], b: tuple[str, list[int]]) -> list[int]:
    """The problem [.., M, N, K] of operands (name, shape) a [.., M, K] @ b [.., K, N] (the same batch
    dims, any number of them); b may be one 2-D weight shared by every matrix of a."""
    (na, sa), (nb, sb) = a, b
    if len(sa) < 2 or not (len(sb) == 2 or len(sa) == len(sb)) or sa[-1] != sb[-2] \
            or (len(sb) > 2 and sa[:-2] != sb[:-2]):
        raise GenerationError(f"{na} {fmt_shape(sa)} @ {nb} {fmt_shape(sb)} is not a product the offline matmul takes: "
                              "[M, K] @ [K, N], [..., M, K] @ [..., K, N] (the same batch dims) or [..., M, K] @ [K, N]")
    return [*sa[:-2], sa[-2], sb[-1], sa[-1]]


def matmul_shapes(problem: list[int], a: str, b: str, epilogue: dict[str, bool], ta: str | None = None,
                  tb: str | None = None) -> dict[str, list[int]]:
    """Each input's shape for one problem [.., M, N, K] (a transposed operand's as it lies in
    memory: a.T is [K, M]); epilogue inputs are [N] vectors (True) or the output's shape."""
    *batch, m, n, k = problem
    shapes = {a: [*batch, *((k, m) if ta else (m, k))], b: [*batch, *((n, k) if tb else (k, n))]}
    return shapes | {e: [n] if vector else [*batch, m, n] for e, vector in epilogue.items()}


def with_tf32(node: Node, tf32: bool) -> Node:
    """The expression with its matmul's tf32 flag set."""
    if node.op == MATMUL:
        return _with_attrs(node, tf32=tf32)
    return dataclasses.replace(node, args=tuple(with_tf32(a, tf32) for a in node.args))


def matmul_name(node: Node, batched: bool) -> str:
    """'matmul_triu_bias_relu_scale_residual': the matmul and its triangle, then its epilogue from the
    inside out."""
    mm = matmul_node(node)
    operands = {a.name for a in mm.args}
    parts = ["bmm" if batched else "matmul"] + ([mm.attr("tri")] if mm.attr("tri") else [])
    for sub in _inside_out(node):
        if sub.op in ("input", "const", MATMUL):
            continue
        leaves = [a.name for a in sub.args if a.op == "input" and a.name not in operands]
        if sub.op == "mul" and any(a.op == "const" for a in sub.args):
            label = "scale"
        elif sub.op in pointwise.BINARY and leaves:
            label = leaves[0]                           # "+ bias", "+ residual"
        else:
            label = sub.op
        if label not in parts:
            parts.append(label)
    return "_".join(parts[:5])


def _inside_out(node: Node) -> list[Node]:
    return [sub for a in node.args for sub in _inside_out(a)] + [node]


# ---------------------------------------------------------------- launcher helpers (copied into kernel.py)

def _matmul_dims(a_name, a_shape, b_name, b_shape):
    # (batch, M, N, K) of a [M, K] @ b [K, N], a [B, M, K] @ b [B, K, N] or a [..., M, K] @ b [K, N]
    # (every matrix of a times the one b: a's leading dims are the batch).
    ok = len(a_shape) >= 2 and (len(b_shape) == 2 or len(b_shape) == len(a_shape) >= 3) \
        and a_shape[-1] == b_shape[-2]
    if not ok or (len(b_shape) > 2 and list(b_shape[:-2]) != list(a_shape[:-2])):
        raise ValueError(f"cannot multiply {a_name} {list(a_shape)} by {b_name} {list(b_shape)}: this kernel "
                         "multiplies [M, K] @ [K, N], [..., M, K] @ [..., K, N] (the same batch dims) or "
                         "[..., M, K] @ [K, N]")
    batch = 1
    for d in a_shape[:-2]:
        batch *= d
    return batch, a_shape[-2], b_shape[-1], a_shape[-1]


def _folded_shape(shape, lead, batch):
    # An epilogue input's shape as the kernel reads it where the output's leading dims (lead) fold
    # into one batch: one matrix where its own leading dims are all 1, else one per batch.
    if len(lead) < 2 or len(shape) < 3:
        return list(shape)
    return [1 if all(d == 1 for d in shape[:-2]) else batch, *shape[-2:]]


def _folded(e, lead, batch):
    # The epilogue input laid out as _folded_shape says: a [B, 1, T, T] mask over [B, H] matrices
    # is copied out to one matrix per batch (B * H), since the kernel reads one batch stride.
    shape = _folded_shape(e.shape, lead, batch)
    if shape == list(e.shape) or shape[0] == 1:
        return e.reshape(shape)
    return e.expand(*lead, *e.shape[-2:]).contiguous().reshape(shape)


def _epilogue_strides(name, shape, out_shape, along=(True, True)):
    # The element strides the kernel reads an epilogue input with (0 where it broadcasts): over the
    # batch, then over the output's rows and columns where the kernel was generated to read it
    # along them (`along`); a bias [N] is read as one row, a per-row [M, 1] as one column.
    m, n = out_shape[-2:]
    if len(shape) > len(out_shape) or any(d not in (1, o) for d, o in zip(reversed(shape), reversed(out_shape))):
        raise ValueError(f"input {name} has shape {list(shape)}, which does not broadcast to the matmul's output "
                         f"{list(out_shape)}; the epilogue reads a vector [{n}], one value per row [{m}, 1], the full "
                         f"{list(out_shape)}" + (f" or [{m}, {n}]" if len(out_shape) == 3 else "")
                         + " or a single value [1]")
    sb, sm, sn = _expanded_strides(shape, [1] * (3 - len(out_shape)) + list(out_shape))
    if (sm and not along[0]) or (sn and not along[1]):
        kind = {(False, True): f"a vector [{n}]", (True, False): f"one value per row [{m}, 1]"}.get(
            tuple(along), "a single value [1]")
        raise ValueError(f"input {name} has shape {list(shape)}, but this kernel was generated for {kind} there; "
                         "regenerate it for these shapes")
    return [sb] + [stride for stride, read in zip((sm, sn), along) if read]


def _default_config(batch, M, N):
    # The biggest tile of CONFIGS (listed biggest first) that still gives every one of an H200's
    # 132 SMs a program: a bigger tile reuses each operand tile it loads more, a smaller one keeps
    # a small problem spread over the GPU. 128 x 256 tiles only from three programs an SM: at
    # 3001 x 3007 (288 of them) 128 x 128 was faster, 1.84x with a gelu epilogue.
    for config in CONFIGS:
        least = 3 * 132 if config["BLOCK_M"] * config["BLOCK_N"] >= 128 * 256 else 132
        if batch * -(-M // config["BLOCK_M"]) * -(-N // config["BLOCK_N"]) >= least:
            return config
    return CONFIGS[-1]


def _shared_bytes(bm, bn, bk, num_stages, itemsize):
    # Shared memory a program of these tiles takes: num_stages buffered operand tiles, and half an
    # output tile that a TMA store stages (float32 tiles take twice fp16's).
    return ((bm + bn) * bk * num_stages + bm * bn // 2) * itemsize


def _fit_config(config, M, N, K, itemsize):
    # (BLOCK_M, BLOCK_N, BLOCK_K, num_stages) of config for this problem, so any config runs any
    # case: no tile side wider than its matrix needs (a power of two, at least 16, tl.dot's least),
    # and BLOCK_K halved until the program fits in 208 KB of shared memory (an H200 has 227 KB per
    # block, an A100 163 KB).
    bm, bn, bk = (min(config[key], max(16, 1 << (n - 1).bit_length()))
                  for key, n in (("BLOCK_M", M), ("BLOCK_N", N), ("BLOCK_K", K)))
    while _shared_bytes(bm, bn, bk, config["num_stages"], itemsize) > 208 * 1024 and bk > 16:
        bk //= 2
    return bm, bn, bk, config["num_stages"]


def _per_sm(bm, bn, bk, num_stages, itemsize):
    # How many programs of these tiles one SM holds at once, by the shared memory they take (an
    # H200 SM has 228 KB): the persistent grid starts that many per SM, so small tiles keep several
    # programs' loads in flight (one program per SM left small tiles far behind big ones).
    return max(1, 224 * 1024 // _shared_bytes(bm, bn, bk, num_stages, itemsize))


def _split_k(tiles, k_tiles, sms):
    # Splits of K (a power of two, at most 32) while the output's tiles leave SMs without a program:
    # decode-shaped (few rows) and long-K products. Each split keeps at least 8 K tiles, so the
    # workspace's extra traffic stays small beside the operands'. On an H200, splitting 224 tiles
    # (32 x 14336, K 4096) in two was slower than not: tiles enough for every SM are not split.
    splits = 1
    while splits < 32 and tiles * splits < sms and k_tiles // (splits * 2) >= 8:
        splits *= 2
    return splits


def _padded_length(n, itemsize):
    # The length to store rows of n elements with: n where such rows start on 16-byte boundaries,
    # else n rounded up to a multiple of 64 (to a power of two from 16 when shorter), so a padded K
    # is a multiple of every BLOCK_K in CONFIGS: its K loop reads no tile past the padding.
    # _fit_config picks the same tiles for the padded length as for n. An empty K becomes 16 zeros:
    # TMA needs every dim positive, and the product is then zeros, as torch's is.
    if n and n * itemsize % 16 == 0:
        return n
    return -(-n // 64) * 64 if n > 64 else max(16, 1 << (n - 1).bit_length())


# ---------------------------------------------------------------- kernel.py

def kernel_source(spec: dict, node: Node, options: dict | None = None) -> str:
    """kernel.py for a tree holding one matmul of two inputs inside a pointwise epilogue: the
    tuning block, the @triton.jit kernel and a launcher `def <spec name>(<inputs>, *, config=None)`
    with the reference's signature. options may carry {"block": int, "num_warps": int} from a
    reviewer's correction ('block size 64': 64 x 64 output tiles), kept by every config."""
    if (options or {}).get("block", 0) > MAX_BLOCK:
        raise ValueError(f"a matmul tile side is at most {MAX_BLOCK} (the operand tiles live in shared memory), "
                         f"got {options['block']}")
    return _MatmulKernel.render(spec, node, options)


class _MatmulKernel(KernelFile):
    block_key = "BLOCK_M"
    imports = "from triton.tools.tensor_descriptor import TensorDescriptor\n"
    description = ("Persistent programs, as many per SM as fit, each computing BLOCK_M x BLOCK_N tiles of the\n"
                   "output (of any matrix of the batch) in turn: a K loop of tl.dot on operand tiles that TMA\n"
                   "copies into shared memory, into a float32 accumulator, then the epilogue on the tile and its\n"
                   "store. A float16/bfloat16 output whose rows are 16-byte aligned is stored by TMA, and its tile\n"
                   "loop and K loop are pipelined as one, so the next tile's loads overlap this tile's epilogue.\n"
                   "Tiles are walked in groups of GROUP_M rows, so tiles loaded together are reused from L2.\n"
                   "Operands whose rows do not start on 16-byte boundaries (odd K or N) are first copied\n"
                   "into zero-padded buffers (_pad), as TMA requires.")

    def __init__(self, spec, node, inputs, options):
        check(node)         # one matmul of two inputs, inside a pointwise epilogue
        matmul = matmul_node(node)
        if matmul is None:
            raise ValueError(f"{to_text(node)} has no matmul; lower it with bot.ops.pointwise")
        by_name = {i.name: i for i in inputs}
        self.a, self.b = (by_name[arg.name] for arg in matmul.args)
        if self.a is self.b:    # x @ x: b's own local, which the launcher pads or transposes apart from a's
            self.b = dataclasses.replace(self.b, local=f"{self.b.local}_b")
        self.tf32 = bool(matmul.attr("tf32"))
        # Transposed operands (a.T, b.mT): how each was written, None when not transposed.
        self.ta, self.tb = matmul.attr("ta"), matmul.attr("tb")
        self.tri, self.diagonal = triangle(matmul) or (None, 0)     # triu or tril, or None
        # The epilogue is the tree with the matmul replaced by `acc`, its float32 tile. The
        # placeholder's name cannot clash with an input's: it is no identifier.
        placeholder = f"({self.a.name} @ {self.b.name})"
        epilogue = substitute(node, matmul, inp(placeholder))
        names = input_names(epilogue)
        self.epilogue_inputs = [i for i in inputs if i.name in names]
        acc = KernelInput(placeholder, "acc", [])
        super().__init__(spec, pointwise.triton_body(epilogue, [acc] + self.epilogue_inputs), inputs,
                         [acc] + self.epilogue_inputs, options)
        self.cases = []     # (M, N, K) per case; unsupported shapes are refused now, not at launch
        strides = {e.name: [] for e in self.epilogue_inputs}
        for case in range(len(self.a.shapes)):
            a_shape, b_shape = logical(self.a.shapes[case], self.ta), logical(self.b.shapes[case], self.tb)
            batch, m, n, k = _matmul_dims(self.a.name, a_shape, self.b.name, b_shape)
            self.cases.append((m, n, k))
            for e in self.epilogue_inputs:
                shape = _folded_shape(e.shapes[case], a_shape[:-2], batch)     # the output's lead is a's
                strides[e.name].append(_epilogue_strides(e.name, shape, [batch, m, n]))
        # Whether the kernel reads each epilogue input along the rows and along the columns: only
        # where some case varies there. A bias [N] is then one row of loads, not a whole tile.
        self.along = {name: (any(s[1] for s in cases), any(s[2] for s in cases)) for name, cases in strides.items()}

    def source(self) -> str:
        helpers = [_matmul_dims, _default_config, _shared_bytes, _fit_config, _per_sm, _split_k, _padded_length]
        if self.epilogue_inputs:
            helpers += [_expanded_strides, _folded_shape, _folded, _epilogue_strides]
        return self._file([self._kernel(), "\n\n".join(fixed.sources(PAD, {"_pad"}))], helpers, self._launcher())

    def pins(self) -> dict[str, int]:
        """A reviewer's 'block size N' is a square N x N output tile."""
        pins = super().pins()
        if "BLOCK_M" in pins:
            pins["BLOCK_N"] = pins["BLOCK_M"]
        return pins

    def configs(self) -> list[dict]:
        # Configs that every case shrinks to the same tiles as an earlier one are dropped: sweeping
        # them would time one kernel twice. (Tiles equal at fp16's 2 bytes are equal at any width.)
        # A float32-only spec lists each config with the BLOCK_K the launcher gives it in shared
        # memory (128x256x64 in 3 stages runs with BLOCK_K 32), so tables and TUNED name it right.
        widths = {protocol.ITEMSIZE[d] for i in self.spec["inputs"] if i["name"] == self.a.name for d in i["dtypes"]}
        candidates = CONFIGS if widths != {4} else [
            {**c, "BLOCK_K": _fit_config(c, 1 << 30, 1 << 30, 1 << 30, 4)[2]} for c in CONFIGS]
        return self._space(candidates, lambda config: [
            (_fit_config(config, m, n, k, 2), config["GROUP_M"], config["num_warps"]) for m, n, k in self.cases])

    def _kernel(self) -> str:
        params = ["a_desc", "b_desc"] + [f"{e.local}_ptr" for e in self.epilogue_inputs]
        params += ["out_ptr", "out_desc", "ws_ptr", "M", "N", "K", "batches", "b_batched", "splits"]
        params += [param for e in self.epilogue_inputs for param, _ in self._strides(e)]
        constexprs = ("INPUT_PRECISION", "B_KMAJOR", "TMA_STORE", "PHASE", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
        params += [f"{c}: tl.constexpr" for c in constexprs]
        lines = [
            "# Persistent: program p computes output tiles p, p + P, p + 2P, ... of all the batch's (P",
            "# programs: per SM, as many as its shared memory holds), so no last wave leaves SMs idle.",
            "# With a TMA store, flatten merges this loop and the K loop into one pipelined loop: the",
            "# next tile's operand loads are in flight during this tile's epilogue. A pointer store stays nested:",
            "# flattened, its layout change could not reuse the operand buffers, and a float32 128 x 256",
            "# tile with an epilogue then needed 272 KB of shared memory.",
            "# Split K (PHASE 1, then 2): where the output has too few tiles to fill the GPU and K is",
            "# long, PHASE 1 computes each tile's product over one of `splits` slices of K into a float32",
            "# workspace, and PHASE 2 adds the slices in order (the same sum every run) and applies the",
            "# epilogue. PHASE 0 does both at once.",
            "tiles_m = tl.cdiv(M, BLOCK_M)",
            "tiles_n = tl.cdiv(N, BLOCK_N)",
            "tiles = tiles_m * tiles_n",
            "group_size = GROUP_M * tiles_n",
            "total = batches * tiles",
            "if PHASE == 1:",
            "    total = total * splits",
            "for job in tl.range(tl.program_id(0), total, tl.num_programs(0), flatten=TMA_STORE):",
            "    # Tiles run down GROUP_M row tiles before moving one column tile right, so the programs",
            "    # running at once share their tiles of a and b in L2 instead of each streaming all of b.",
            "    split = job // (batches * tiles)",
            "    tile = job % (batches * tiles)",
            "    matrix = tile // tiles",
            "    pid = tile % tiles",
            "    first_m = (pid // group_size) * GROUP_M",
            "    group_m = min(tiles_m - first_m, GROUP_M)",
            "    pid_m = first_m + (pid % group_size) % group_m",
            "    pid_n = (pid % group_size) // group_m",
            "    # a is [batches, M, K] and b [1 or batches, K, N] (K-major: [.., N, K]), read by TMA: each",
            "    # tile is one asynchronous copy into shared memory, pipelined over the K loop, and what lies",
            "    # past an edge reads as zeros, so partial tiles need no masks. Where the launcher padded",
            "    # them, K is the padded length and the added columns of a and rows of b are zeros too.",
            "    batch = matrix.to(tl.int64)",
            "    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)[:, None]",
            "    tile_cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)[None, :]",
            "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
            "    if PHASE == 2:",
            "        for piece in range(0, splits):",
            "            acc += tl.load(ws_ptr + ((piece * batches + batch) * M + rows) * N + tile_cols,",
            "                           mask=(rows < M) & (tile_cols < N), other=0.0)",
            "    else:",
            *indented(self._k_loop()),
            "            a_tile = a_desc.load([matrix, pid_m * BLOCK_M, k * BLOCK_K]).reshape(BLOCK_M, BLOCK_K)",
            "            if B_KMAJOR:",
            "                # b was copied K-major, the layout TF32 tensor cores (wgmma) read float32 B in.",
            "                b_tile = b_desc.load([matrix * b_batched, pid_n * BLOCK_N, k * BLOCK_K]).reshape(BLOCK_N, BLOCK_K)",
            "                acc = tl.dot(a_tile, tl.trans(b_tile), acc, input_precision=INPUT_PRECISION)",
            "            else:",
            "                b_tile = b_desc.load([matrix * b_batched, k * BLOCK_K, pid_n * BLOCK_N]).reshape(BLOCK_K, BLOCK_N)",
            "                acc = tl.dot(a_tile, b_tile, acc, input_precision=INPUT_PRECISION)",
        ]
        epilogue = [
            "    # The epilogue and the store, in two halves of BLOCK_N // 2 columns: each half's epilogue",
            "    # inputs and temporaries take half the registers, which keeps epilogues with inputs from",
            "    # spilling. int64 offsets, so outputs past 2**31 elements are safe.",
        ]
        # Inputs that do not vary along the columns (one value per row or per matrix) load once
        # for both halves; the others, per half.
        per_half = [e for e in self.epilogue_inputs if self.along[e.name][1]]
        for e in self.epilogue_inputs:
            if e not in per_half:
                epilogue += indented(self._epilogue_load(e))
        epilogue += [
            "    left, right = tl.split(tl.permute(acc.reshape(BLOCK_M, 2, BLOCK_N // 2), (0, 2, 1)))",
            "    for half in tl.static_range(2):",
            "        if half == 0:",
            "            acc = left",
            "        else:",
            "            acc = right",
            "        first_col = pid_n * BLOCK_N + half * (BLOCK_N // 2)",
            "        cols = first_col + tl.arange(0, BLOCK_N // 2)[None, :]",
            "        mask = (rows < M) & (cols < N)",
        ]
        if self.tri:
            epilogue += ["        # The product's elements outside the kept triangle are zeros, before the epilogue.",
                      f"        acc = tl.where(cols - rows {TRIANGLES[self.tri]} {self.diagonal}, acc, 0.0)"]
        for e in per_half:
            epilogue += indented(self._epilogue_load(e), 2)
        if not self.is_bare_input:
            epilogue.append(f"        acc = {self.body_call()}")
        epilogue += [
            "        if TMA_STORE:",
            "            # A TMA store of the half (what lies past an edge is not written): its staging",
            "            # buffer in shared memory is half a tile, which leaves room for the operand stages.",
            "            out_desc.store([matrix, pid_m * BLOCK_M, first_col],",
            "                           acc.to(out_ptr.dtype.element_ty).reshape(1, BLOCK_M, BLOCK_N // 2))",
            "        else:",
            "            tl.store(out_ptr + batch * M * N + rows * N + cols, acc.to(out_ptr.dtype.element_ty), mask=mask)",
        ]
        lines += ["    if PHASE == 1:",
                  "        tl.store(ws_ptr + ((split * batches + batch) * M + rows) * N + tile_cols, acc,",
                  "                 mask=(rows < M) & (tile_cols < N))",
                  "    else:", *indented(epilogue)]
        return jit_source(f"{self.name}_kernel", params, lines)

    def _k_loop(self) -> list[str]:
        """The K loop's head: over every K tile (PHASE 1: its split's slice of them), or none where
        triu/tril zeroes the whole tile."""
        head = ["    k_lo, k_hi = 0, tl.cdiv(K, BLOCK_K)",
                "    if PHASE == 1:",
                "        per_split = tl.cdiv(k_hi, splits)",
                "        k_lo = split * per_split",
                "        k_hi = tl.minimum(k_lo + per_split, k_hi)"]
        if not self.tri:
            return head + ["    for k in range(k_lo, k_hi):"]
        corner = {"triu": "(pid_n * BLOCK_N + BLOCK_N - 1) - pid_m * BLOCK_M",       # the largest col - row
                  "tril": "pid_n * BLOCK_N - (pid_m * BLOCK_M + BLOCK_M - 1)"}[self.tri]   # the smallest
        kept = f"{TRIANGLES[self.tri]} {self.diagonal}"
        return head + [f"    # {self.tri} keeps col - row {kept}. A tile whose corner nearest that triangle lies outside",
                       "    # it is all zeros: its K loop runs no steps (about half the tiles of a square product),",
                       "    # only its epilogue does. (flatten merges no K loop of varying length: these loops stay",
                       "    # nested.)",
                       f"    kept = {corner} {kept}",
                       "    for k in range(k_lo, tl.where(kept, k_hi, k_lo)):"]

    def _strides(self, e: KernelInput) -> list[tuple[str, str]]:
        """(kernel parameter, offset term) of each stride the kernel reads epilogue input e with."""
        reads = zip(("sb", "sm", "sn"), ("batch", "rows", "cols"), (True, *self.along[e.name]))
        return [(f"{e.local}_{s}", f"{index} * {e.local}_{s}") for s, index, read in reads if read]

    def _epilogue_load(self, e: KernelInput) -> list[str]:
        """Load an epilogue input over the tile: the whole tile, one row or one column of it
        (broadcast by the arithmetic), or one value per matrix."""
        mask = {(True, True): ", mask=mask, other=0.0", (True, False): ", mask=rows < M, other=0.0",
                (False, True): ", mask=cols < N, other=0.0", (False, False): ""}[self.along[e.name]]
        return [f"{e.local}_offs = {' + '.join(term for _, term in self._strides(e))}",
                f"{e.local} = tl.load({e.local}_ptr + {e.local}_offs{mask}).to(tl.float32)"]

    def _launcher(self) -> str:
        a, b, first = self.a, self.b, self.inputs[0].local
        # A transposed operand's shape as the product reads it (x.mT of [.., K, M] is [.., M, K]).
        a_read, b_read = (f"{x.local}.mT" if flag else x.local for x, flag in ((a, self.ta), (b, self.tb)))
        text = self._signature_and_prologue()
        if a.name == b.name:
            text += f"    {b.local} = {a.local}     # both operands: each copied (padded, transposed) on its own\n"
        text += (f'    batch, M, N, K = _matmul_dims("{a.name}", {a_read}.shape, "{b.name}", {b_read}.shape)\n'
                 f"    shape = (*{a_read}.shape[:-1], N)\n")
        if self.epilogue_inputs:
            text += ("    # The epilogue reads each input with its batch stride, and its row and column strides\n"
                     "    # where the kernel reads it along rows and columns; 0 where it broadcasts.\n")
            text += "".join(f"    {e.local} = _folded({e.local}, shape[:-2], batch)\n"
                            f'    {e.local}_strides = _epilogue_strides("{e.name}", {e.local}.shape, (batch, M, N), '
                            f'{self.along[e.name]})\n' for e in self.epilogue_inputs)
        text += (f"    out = torch.empty(shape, dtype={self.out_dtype(first)}, device={first}.device)\n"
                 "    if out.numel() == 0:\n        return out      # no rows, columns or matrices: nothing to compute\n")
        text += self._config_line("_default_config(batch, M, N)")
        if self.tf32:
            text += "    # float32 inputs round to TF32 on the tensor cores (the spec allows it).\n"
        else:
            text += ("    # float32 inputs multiply on the tensor cores as three TF32 products of their high and low\n"
                     "    # parts (Triton's tf32x3): an error at IEEE float32's, at tensor-core speed (plain TF32's\n"
                     "    # rounding the spec does not allow). float16 and bfloat16 take tl.dot's default.\n")
        text += f'    precision = "{"tf32" if self.tf32 else "tf32x3"}" if {a.local}.dtype == torch.float32 else None\n'
        if self.tb:
            text += f"    # {b.local} [.., N, K] lies K-major, as the tensor cores read B in every dtype.\n"
        else:
            text += ("    # The tensor cores read float32 tiles of B only K-major: a row-major B would load element\n"
                     "    # by element. A float32 B is copied transposed (below).\n"
                     "    b_kmajor = precision is not None\n")
        text += self._padding()
        text += ("    # The config's tiles, shrunk to this problem and to shared memory.\n"
                 f"    BLOCK_M, BLOCK_N, BLOCK_K, num_stages = _fit_config(config, M, N, K_pad, "
                 f"{a.local}.element_size())\n")
        b_block = "[1, BLOCK_N, BLOCK_K]" if self.tb else "[1, BLOCK_N, BLOCK_K] if b_kmajor else [1, BLOCK_K, BLOCK_N]"
        text += ("    # TMA descriptors of the operands as [matrices, rows, columns] (one matrix when 2-d), in\n"
                 "    # tiles of the config; tiles past an edge read as zeros.\n"
                 f"    a_desc = TensorDescriptor.from_tensor({a.local}.reshape(-1, *{a.local}.shape[-2:]), "
                 "[1, BLOCK_M, BLOCK_K])\n"
                 f"    b_desc = TensorDescriptor.from_tensor({b.local}.reshape(-1, *{b.local}.shape[-2:]), {b_block})\n"
                 "    # A float16 or bfloat16 output is stored by TMA too where its rows start on 16-byte\n"
                 "    # boundaries, else (an odd N, or float32) through pointers. A float32 tile's epilogue with\n"
                 "    # inputs took up to 336 KB of shared memory with the TMA store (128 x 256 compiled for\n"
                 "    # sm_90), more than an SM has; through pointers TF32 ran as fast.\n"
                 "    tma_store = out.element_size() == 2 and N * 2 % 16 == 0\n"
                 "    out_desc = TensorDescriptor.from_tensor(out.reshape(-1, M, N), [1, BLOCK_M, BLOCK_N // 2]) if tma_store else None\n"
                 "    # Persistent programs: as many as the SMs hold at once, or one per tile where there are fewer.\n"
                 + sm_count_line("sms", "out")
                 + f"    per_sm = _per_sm(BLOCK_M, BLOCK_N, BLOCK_K, num_stages, {a.local}.element_size())\n"
                 + "    tiles = batch * _cdiv(M, BLOCK_M) * _cdiv(N, BLOCK_N)\n"
                 + "    splits = config.get(\"SPLIT_K\") or _split_k(tiles, _cdiv(K_pad, BLOCK_K), sms)\n"
                 + "    # Split K: slices of K into a float32 workspace (phase 1), then their sum in order and the\n"
                 + "    # epilogue (phase 2); else one phase (0).\n"
                 + "    ws = torch.empty((splits, batch, M, N), dtype=torch.float32, device=out.device) if splits > 1 else out\n"
                 + "    for phase in (1, 2) if splits > 1 else (0,):\n"
                 + "        grid = (min(tiles * (splits if phase == 1 else 1), sms * per_sm),)\n")
        args = ["a_desc", "b_desc"] + [e.local for e in self.epilogue_inputs]
        args += ["out", "out_desc", "ws", "M", "N", "K_pad", "batch", f"1 if {b.local}.dim() > 2 else 0", "splits"]
        args += [f"*{e.local}_strides" for e in self.epilogue_inputs]
        args += ["INPUT_PRECISION=precision", f"B_KMAJOR={'True' if self.tb else 'b_kmajor'}",
                 "TMA_STORE=tma_store and phase == 0", "PHASE=phase",
                 "BLOCK_M=BLOCK_M", "BLOCK_N=BLOCK_N", "BLOCK_K=BLOCK_K", 'GROUP_M=config["GROUP_M"]',
                 'num_warps=config["num_warps"]', "num_stages=num_stages"]
        text += launch(f"{self.name}_kernel", "grid", args, "        ") + "\n"
        return text + "    return out\n"

    def _padding(self) -> str:
        """The launcher's copy of operands whose rows are not 16-byte aligned into padded buffers."""
        a, b = self.a.local, self.b.local
        return ("    # TMA reads an operand only if its start and its rows start on 16-byte boundaries (an\n"
                "    # odd K or N breaks that, and pointer loads of such rows fall back to scalar loads). Such\n"
                "    # operands are copied into zero-padded buffers with aligned rows first: zero columns of "
                f"{a}\n"
                f"    # times zero rows of {b} add nothing (so {b} takes K_pad rows whenever K is padded), and the\n"
                "    # output stays [M, N]. Aligned operands are used as they are (4096 x 4096: no copy).\n"
                f"    K_pad, N_pad = _padded_length(K, {a}.element_size()), _padded_length(N, {b}.element_size())\n"
                + self._pad_a() + self._pad_b())

    def _pad_a(self) -> str:
        """The launcher's copy of a where it needs one; a transposed a is always copied, transposed."""
        a = self.a.local
        if self.ta:
            return (f"    # {a} [.., K, M] (read transposed) is copied to [.., M, K_pad]: transposed and padded at once.\n"
                    f"    {a} = _pad({a}, K_pad, M, transpose=True)\n")
        return f"    if K_pad != K or {a}.data_ptr() % 16:\n        {a} = _pad({a}, M, K_pad)\n"

    def _pad_b(self) -> str:
        """The launcher's copy of b where it needs one; a float32 b is copied transposed (K-major, as the
        tensor cores read it)."""
        b = self.b.local
        if self.tb:
            return (f"    if K_pad != K or {b}.data_ptr() % 16:     # K-major as it lies: padded where K is\n"
                    f"        {b} = _pad({b}, N, K_pad)\n")
        pad = f"(K_pad, N_pad) != (K, N) or {b}.data_ptr() % 16:\n        {b} = _pad({b}, K_pad, N_pad)\n"
        return (f"    if b_kmajor:     # [.., N, K_pad]: padded and transposed in one copy\n"
                f"        {b} = _pad({b}, K_pad, N, transpose=True)\n"
                f"    elif {pad}")


def reference_property(node: Node) -> tuple[str, bool]:
    """The generated reference test's check_property body for this op, and whether it calls
    body(): none here."""
    return "", False


ENTRIES = (
    Entry("matmul", "matmul {shapes}, each in {dtypes}", "a @ b", "matmul",
          MATMUL_BIG, MATMUL_SMALL, "fp16, bf16"),
    Entry("matmul_epilogue", "matmul with bias, gelu and residual, {shapes}, each in {dtypes}",
          "gelu(a @ b + bias) + residual", "matmul", MATMUL_BIG, MATMUL_SMALL, "fp16, bf16"),
    Entry("matmul_tf32", "matmul with tf32, {shapes}, in fp32", "matmul(a, b, tf32=True)", "matmul",
          MATMUL_BIG, MATMUL_SMALL, "fp32", "fp32"),
    Entry("bmm", "batched matmul {shapes}, each in {dtypes}", "a @ b", "matmul",
          "32x1024x1024 by 32x1024x1024, 7x999x1003 by 7x1003x997", "3x20x30 by 3x30x10", "fp16, bf16"),
)
