"""Request words -> operator spec: stage 1 of the offline generator.

A request is English, Chinese or a pasted PyTorch function. Reviewers' corrections
("bf16 only", "also 1x32", "eps 1e-5", "make it gelu(x + y)") are read the same way and
applied on top, later ones winning. Reading is a series of small passes over the text;
each pass takes what it understands and blanks it out, so a later pass does not read the
same words again (the "x" of 4096x4096 is not an input, "log softmax" is not log). What no pass
placed must be filler (bot.request_residue), else the request is refused naming it; the order of
operation words and the operands they name are read by bot.request_order.
"""
from __future__ import annotations

import ast
import copy
import io
import keyword
import re
import textwrap
import tokenize
from dataclasses import dataclass, field
from typing import Sequence

from bot import ir, request_residue
from bot import request_module
from bot import request_order as order
from bot import spec as specmod
from bot.generators.interface import GenerationError
from bot.ops import loss, norm, registry
from bot.ops import matmul as mmf
from bot.ops.pointwise import CLAMP_WORD as _CLAMP_WORD
from bot.ops.text import DIM as _DIM
from bot.ops.text import END as _END
from bot.ops.text import FLAGS as _F
from bot.ops.text import NUM as _NUM
from bot.ops.text import blank as _blank
from bot.ops.text import size as _dim
from bot.ops.text import sizes_text
from runner import protocol

DEFAULT_SHAPES: list[list[int]] = [[4096, 4096], [5333, 497]]   # square, and odd: no block size divides it
CORRECTION_HELP = ("Name dtypes ('bf16 only'), shapes ('shape 2048x2048', 'also 1x32'), eps ('eps 1e-5'), a dim "
                   "('over dim 0') or an operation ('make it gelu(x + y)').")
ASK_OP = "Which operation do you want? e.g. 'relu(x + y) for fp16 4096x4096'"
SUPPORTED = (f"The offline generator supports {ir.SUPPORTED_TEXT}. In words: matmul or bmm (with bias, "
             "an activation, a scale, a residual), sum/mean/max/min/argmax/argmin over a dim, softmax, "
             "layernorm, rmsnorm (also fused with an add), cross entropy, and pointwise operations.")

# ---------------------------------------------------------------- vocabulary

_DTYPE = re.compile(r"\b(?:torch\.)?(float16|fp16|f16|half|bfloat16|bf16|float32|fp32|f32|float|single)\b"
                    r"(?:\s+precision)?|半精度|单精度", _F)
_CN_DTYPE = {"半精度": "float16", "单精度": "float32"}
_ALL_DTYPES = re.compile(r"\b(?:all|each|every|any)\s+(?:of\s+the\s+)?(?:three\s+|3\s+|supported\s+)?"
                         r"(?:dtypes?|types|precisions?|data\s*types?)\b|"
                         r"(?:所有|全部|三种)(?:数据)?(?:类型|精度)", _F)
_BAD_DTYPE = re.compile(r"\b(?:u?int(?:4|8|16|32|64)|fp8\w*|float8\w*|fp64|float64|double\s+precision|tf32|fp4|"
                        r"nvfp4|mxfp\d+|complex\d*)\b|双精度", _F)

_OUT_OF_SCOPE: list[tuple[re.Pattern, str]] = [(re.compile(p, _F), what) for p, what in [
    (r"\baddmm\b|\beinsum\b|\bdot[\s-]product\b|\blinear\s+layer\b",
     "this form of matrix multiplication (say 'matmul a @ b with bias' instead)"),
    (r"\bconv(?:olution\w*|olve|[123]d)?\b|卷积", "convolution"),
    (r"\battention\b|\bsdpa\b|注意力", "attention"),
    (r"\b(?:arg)?sort\w*|排序", "sorting"),
    (r"\btop[\s_-]?k\b", "top-k"),
    (r"\bcum(?:sum|prod|max|min|ulative\w*)\b|\bprefix[\s-]sums?\b|\bscan\b|\brunning\s+(?:sum|total|max|min)\b|"
     r"累加|累积|前缀和", "a scan (cumulative sum, product, max or min)"),
    (r"\brotary\b|\brope\b", "rotary position embedding (RoPE)"),
    (r"\b(?:quick|fast)[\s_-]?gelu\b", "a fast or quick GELU (an approximation: say 'gelu with tanh approximation', or "
     "write x * sigmoid(1.702 * x))"),
    (r"\bgather\b|\bscatter\b|\bindex_\w+|\bembedding\b", "indexing (gather, scatter, embedding)"),
    (r"\bpool(?:s|ed|ing)?\b|\w*pool[123]d\b|池化", "pooling"),
    (r"\bbackward\b|\bbackprop\w*|\bgrad(?:ient)?s?\b|\btraining\b|\bautograd\b|反向|梯度",
     "a backward (gradient) kernel (the offline generator writes forward kernels)"),
    (r"\btranspose\b|\bpermute\b|\bconcat\w*|\breshape\b", "a layout change (transpose, concat, reshape)"),
    (r"\bdropout\b", "dropout"),
    (r"\b(?:batch|group|instance)[\s_-]?norm\w*", "batch, group or instance norm"),
    (r"\bbinary[\s_-]+cross[\s_-]?entropy\b|\bbce\w*|\bnll\w*|\bkl[\s_-]?div\w*|\bmse\b|\bhuber\b|\bl1[\s_-]?loss\b",
     "a loss other than cross entropy"),
    (r"\bleaky[\s_-]?relu\b|\bprelu\b|\brelu6\b|\b[sc]?elu\b|\bsoftplus\b|\bmish\b|"
     r"\bhard[\s_-]?(?:swish|sigmoid|tanh)\b|\blogsumexp\b|\bsin\b|\bcos\b|"
     r"\bfloor\b|\bceil\b|\bround\b|\bsign\b|"
     r"\bprod\b|\bvar(?:iance)?\b|\bstd\b|\bl2[\s_-]?norm\b|\bnormali[sz]e\b", ""),
]]

# Dimension phrases. Reductions run over any one dim, other row ops over the last one only.
_DIM_N = re.compile(r"\b(?:dim|axis|dimension)\s*[=:]?\s*(-?\d)\b|第\s*(-?\d)\s*维|维度\s*(-?\d)(?!\d)", _F)  # "dim 4096" is a size
_D = r"\s+(?:dim|axis|dimension)\w*"
_DIM_WORDS: list[tuple[re.Pattern, int]] = [(re.compile(p, _F), d) for p, d in [
    # earlier entries win: "second to last dim" before "last dim"
    # ("across the columns" is left out: it means dim -2 to some and one value per row to others)
    (rf"\b(?:second[\s-]+(?:to[\s-]+)?last|penultimate){_D}|\bcolumn[\s-]?wise\b|\b(?:per|each|every)[\s-]+column\b|"
     r"按列|每一?列|倒数第二维", -2),
    (rf"\b(?:first|1st|0th|leading|batch){_D}|第一维", 0),
    (rf"\b(?:second|2nd){_D}|第二维", 1),
    (rf"\b(?:third|3rd){_D}|第三维", 2),
    (rf"\b(?:last|trailing|innermost|final){_D}|\brow[\s-]?wise\b|\b(?:of\s+each|for\s+each|each|every|of\s+every)\s+row\b|"
     r"\brow\s+by\s+row\b|最后一(?:个)?维(?:度)?|按行|每一?行", -1),
]]
_WHOLE = re.compile(r"\b(?:all|every)\s+elements\b|\b(?:whole|entire|full)\s+tensor\b|\bglobal(?:ly)?\b|"
                    r"全部元素|所有元素|整个张量", _F)

_EPS = re.compile(rf"(?:\beps(?:ilon)?\b|ε)\s*(?:=|:|of|is|为|是|设为)?\s*({_NUM}){_END}", _F)
# A closed range only: "[0, 1)" is half open, which clamp cannot be, so it stays for the residue check.
_RANGE = re.compile(rf"\[\s*({_NUM})\s*,\s*({_NUM})\s*\]|\(\s*({_NUM})\s*,\s*({_NUM})\s*\)|"
                    rf"\bbetween\s+({_NUM})\s+and\s+({_NUM}){_END}|"
                    rf"\b(?:from|range(?:\s+of)?)\s+({_NUM})\s+to\s+({_NUM}){_END}|({_NUM})\s*(?:到|至)\s*({_NUM})", _F)
_BOUND = re.compile(rf"\b(min|max)(?:imum)?\s*(?:=|:|of|is)?\s*({_NUM}){_END}|"
                    rf"\b(?:at|no)\s+(most|least|more\s+than|less\s+than)\s+({_NUM}){_END}", _F)
_BOUND_KEY = {"min": "min", "max": "max", "least": "min", "most": "max", "more than": "max", "less than": "min"}

_SHAPE = re.compile(
    rf"(?<![\w.-])(?P<multi>{_DIM}(?:(?:\s*[x×]\s*|\*|\s+by\s+){_DIM})+)(?![\w]|\.\w)"
    rf"|(?<![\w)\]])[\(\[](?P<tuple>\s*{_DIM}(?:\s*,\s*{_DIM})*\s*,?\s*)[\)\]]"
    rf"|(?:\bshape[ds]?|\bsize|\blength|形状|长度)\s*(?:of|is|=|:|为|是)?\s*"
    rf"(?P<one>{_DIM})(?![\w.]|\s*[x×,*]|\s+by\s)",
    _F)
# Numbers that size something other than a tensor: "3x3 kernel", "2x2 max pool", "kernel size 3".
_PARAM_NOUN = (r"(?:kernels?|windows?|filters?|patch(?:es)?|strides?|pool\w*|tiles?|blocks?|grids?|stencils?|"
               r"conv\w*|neighbou?rhoods?|dilations?|paddings?|groups?|chunks?|steps?|heads?|窗口|卷积核|核|池化|步长)")
_PARAM_AFTER = re.compile(rf"[\s-]*(?:(?:max|min|avg|average|mean|sum)\s+)?{_PARAM_NOUN}(?![a-z])", _F)
_PARAM_BEFORE = re.compile(rf"{_PARAM_NOUN}(?:\s*(?:size|shape|is|=|:|为|大小))*\s*$", _F)
# The word a shape belongs to: "b: [4096]", "bias of shape 4096", "x 1024x4096".
_LABEL = re.compile(r"(?<![-\w])([A-Za-z_]\w*)\s*(?:(?:\b(?:is|has|with|of|shape[ds]?|size|length|a|an|the|1-?d|vector|"
                    r"tensor|matrix|array)\b|[:=]|的|形状|为|是|大小)\s*)*[(\[]?\s*$", _F)
_CORRECTION_WORDS = re.compile(r"\binstead\b(?!\s+of)|\bonly\b|\brather\b(?!\s+than)|改成|改为|换成", _F)
# Words that say a correction replaces the operation.
_REPLACE = re.compile(r"\b(?:make|change|replace|switch|use|instead|rather|actually|turn|want)\b|改成|改为|换成|改用", _F)
# "gelu(x + b) where b is a vector": a clause about an input, not where(cond, a, b).
_WHERE_CLAUSE = re.compile(r"\bwhere\b(?=\s+[A-Za-z]\w*\s+(?:is|are|has)\b)", _F)
_APPEND = re.compile(r"\b(?:also|add|plus|additionally|extra|too)\b|^\s*and\b|\bas\s+well\b|还要|再加|增加|加上|另外", _F)

_STEP_IR_OP = {"gelu_tanh": "gelu", "scale": "mul", "divide": "div", "square": "pow", "cube": "pow"}
_SCALAR_STEPS = {"scale", "divide"}

# "max"/"sum" of two tensors is elementwise; of one tensor it is a reduction.
_PAIRWISE = re.compile(r"\btwo\b|\b2\s+(?:tensors|matrices|inputs|arrays)\b|\bpair(?:s|wise)?\b|两个|"
                       r"element[\s_-]?wise|逐元素|\bbetween\b|\b[a-z]\w?\s+and\s+[a-z]\w?\b", _F)
# Words that say there are two tensors (not "elementwise", which a one-input op is too).
_TWO_TENSORS = re.compile(r"\btwo\b|\b2\s+(?:tensors|matrices|inputs|arrays)\b|\bpair(?:s|wise)?\b|两个|\bbetween\b|"
                          r"\b[a-z]\w?\s+and\s+[a-z]\w?\b", _F)
_MATRIX = re.compile(r"\bmatri(?:x|ces)\b|矩阵", _F)


# A label that names a tensor: a shape given to one that is no input is refused, not taken as a case.
_SHAPE_OWNER = re.compile(r"[A-Za-z]\d*|bias|weights?|gamma|beta|scale|shift|residual|mask|gate|other|"
                          r"out(?:put)?s?|results?|hidden|targets?|labels?|logits|predictions?", re.I)
_OWNER_AFTER = re.compile(rf"\s+({_SHAPE_OWNER.pattern})\b(?!\s*[:=(\[])", re.I)
# Inputs named like this are broadcast vectors of the last dim when no shape is given.
_VECTOR_NAME = re.compile(r"(?:bias|b|weight|w|gamma|beta|scale|shift)\d*")
# An expression without a function call is only taken when its names look like tensors, so
# prose like "input/output" or "sum/mean" is not read as a division.
_TENSOR_NAME = re.compile(r"[A-Za-z]\w?\d*|bias|weight|gamma|beta|scale|shift|residual|mask|gate|other", re.A)

# Casts in pasted code: the kernel computes in float32 and returns the input dtype anyway.
_CASTS = {"float", "half", "bfloat16", "to", "type_as", "contiguous", "clone", "detach"}
_MODULES = {"torch", "F", "nn", "functional", "math"}


# ---------------------------------------------------------------- reading one text

@dataclass
class _Reading:
    """What one text (the request or one correction) says; None/empty where it is silent."""
    node: ir.Node | None = None
    name: str | None = None                  # a pasted function's name
    inputs: list[str] | None = None          # a pasted function's tensor parameters, in order
    scalars: dict[str, float] = field(default_factory=dict)
    op_notes: list[str] = field(default_factory=list)
    eps: float | None = None
    dtypes: list[str] = field(default_factory=list)
    shapes: list[tuple[str | None, list[int]]] = field(default_factory=list)   # (label, shape)
    append: bool = False
    dims: list[int] = field(default_factory=list)
    whole: str | None = None                 # "over all elements": no one dim
    tf32: bool | None = None
    batched: bool = False
    rest: str = ""                           # prose left over, for phrases about named inputs
    left: str = ""                           # prose no pass placed: must be filler (request_residue)
    pairwise: str | None = None              # "two tensors", "between", "x and y": more than one input
    typed: bool = False                      # the operator came from code or an expression typed in it
    pasted: request_module.Pasted | None = None   # a pasted nn.Module (its reference is the pasted file)


def _read(text: str, feedback: bool, context: _State | None = None) -> _Reading:
    """context: the state a correction applies to (its matmul reads shapes as M, N, K)."""
    rd = _Reading()
    code, prose = _split_code(text)
    matmul = bool(mmf.MATMUL_WORD.search(text)) or bool(context and context.node and ir.matmul_node(context.node))
    rd.batched = bool(mmf.BATCHED_WORD.search(text)) or bool(context and context.batched)
    if matmul:
        prose, rd.tf32 = mmf.take_tf32(prose)
    prose = _take_dtypes(loss.take_index_dtype(prose), rd)
    _refuse_out_of_scope(prose)
    expr = None if code is not None else _find_expression(prose)
    if expr is not None:
        prose = _blank_range(prose, expr[2], expr[3])
    prose = _WHERE_CLAUSE.sub(_blank, _take_dims(prose, rd))
    prose = _take_scalars(prose, rd)
    if matmul:
        prose, batch = mmf.take_sizes(prose, rd.batched)
    prose = _take_shapes(prose, rd)
    if matmul:           # cases are problem sizes [B,] M, N, K: no shape belongs to one input
        rd.shapes = [(None, p) for p in mmf.problems(_operand_order(rd.shapes), rd.batched, batch, rd.op_notes)]
    if feedback:                 # "gelu instead", "only 32x32": a correction replaces what it names
        prose = _CORRECTION_WORDS.sub(_blank, prose)
    if feedback and (rd.shapes or rd.dtypes) and _APPEND.search(prose):
        rd.append = True
        prose = _APPEND.sub(_blank, prose)
    rd.typed = code is not None or expr is not None
    if code is not None:
        _read_code(code, rd)
        rd.left = prose
    else:
        rd.node = _operator(prose, expr, rd)
    if rd.tf32 is None and rd.node is not None and (mm := ir.matmul_node(rd.node)) and mm.attr("tf32"):
        rd.tf32 = True
    rd.rest = prose
    if rd.node is not None:
        _refuse_mask_inputs(rd.node)
        if rd.typed:
            _refuse_other_dtypes(rd.node)
    if rd.node is not None or feedback:
        names = ir.input_names(rd.node) if rd.node is not None else _input_names(context) if context else []
        _refuse_unplaced(rd, names, text, feedback)
    return rd


def _refuse_other_dtypes(node: ir.Node) -> None:
    """Code whose PyTorch result is not a float of the inputs' dtype: a comparison (bool), a sum or
    mean of one (int64, or an error), a where of two constants (the constants' dtype)."""
    body = node.args[0] if node.op in ir.ROOT_OPS else node
    if body.op in ir.COMPARE:
        what = "a bool tensor" if body is node else f"{node.op} of a bool tensor (int64, or an error)"
        raise GenerationError(f"{_text(node)!r} gives {what} in PyTorch, and the offline kernels return the inputs' "
                              "float dtype; multiply by 1.0 or use where(cond, x, y) to stay in it.")
    for sub in node.walk():
        if sub.op == "where" and sub.args[1].op == sub.args[2].op == "const":
            raise GenerationError(f"{_text(sub)!r} takes the dtype of its constants in PyTorch, not the inputs'; "
                                  "write one branch with an input, e.g. where(x > 0, x * 0.0 + 1.0, x * 0.0).")


def _refuse_mask_inputs(node: ir.Node) -> None:
    """where(mask, ...) over an input: a boolean mask, which the test inputs (floats) cannot be."""
    for sub in node.walk():
        if sub.op == "where" and sub.args[0].op == "input":
            raise GenerationError(f"where({sub.args[0].name}, ...) takes {sub.args[0].name} as a boolean mask, and "
                                  "mask inputs are not supported by the offline generator; write the condition as a "
                                  f"comparison, e.g. where({sub.args[0].name} > 0, ...).")


def _refuse_unplaced(rd: _Reading, names: list[str], text: str, feedback: bool) -> None:
    """Every word must be placed in the spec: refuse, naming them, where some are not."""
    left = rd.left
    for n in names:
        left = re.sub(_vector_phrase(n), _blank, left, flags=re.I)
        left = re.sub(_bare_shape_phrase(n), _blank, left, flags=re.I)
    words = request_residue.unplaced(left, set(names))
    if words:
        quoted = ", ".join(repr(w.strip()) for w in words[:6])
        if feedback:
            raise GenerationError(f"I could not apply the correction {text.strip()[:80]!r}: I could not place {quoted}. "
                                  f"{CORRECTION_HELP}", unplaced=[w.strip() for w in words])
        sizes = next((w for w in words if re.fullmatch(r"[\d\sx×*]+", w.strip())), None)
        ask = (f" If {sizes.strip()} is a tensor's shape, say so ('of a {sizes.strip()} tensor'); the sizes of windows, "
               "kernels and strides are not shapes." if sizes else "")
        raise GenerationError(f"I could not place {quoted} of {text.strip()[:80]!r} in any operation I know, so I did "
                              f"not guess.{ask} {SUPPORTED}", unplaced=[w.strip() for w in words])
    if rd.pairwise and rd.node is not None and len(ir.input_names(rd.node)) < 2:
        raise GenerationError(f"you named two tensors, but I read {_text(rd.node)!r}, which has one input; "
                              f"write the operation as an expression of both, e.g. 'mean(abs(x - y), "
                              f"dim=-1)'. {SUPPORTED}", unplaced=[rd.pairwise])


def _operand_order(shapes: list[tuple[str | None, list[int]]]) -> list[list[int]]:
    """A matmul's shapes as operands a, b in order ('b: 256x512, a: 512x256' is a, then b); a shape
    labelled for anything else (an epilogue input's) is refused, since those follow from M and N."""
    labels = [label for label, _ in shapes if label and _SHAPE_OWNER.fullmatch(label)]
    if other := [label for label in labels if label.lower() not in ("a", "b", "x", "w")]:
        raise GenerationError(f"the shape given for {other[0]} is not read: a matmul's epilogue inputs take [N] (a bias) "
                              "or the output's shape. Give the operands' shapes ('64x128 by 128x256') or M, N and K.")
    if len(labels) == 2 and [label.lower() for label in labels] in (["b", "a"], ["w", "x"]):
        return [s for _, s in shapes][::-1]
    return [s for _, s in shapes]


def _take_dtypes(text: str, rd: _Reading) -> str:
    if m := _BAD_DTYPE.search(text):
        raise GenerationError(f"unsupported dtype {m.group(0)!r}: kernels are tested in float16 (fp16), "
                              "bfloat16 (bf16) and float32 (fp32). Name one or more of those, or 'all dtypes'.")

    def canonical(m: re.Match) -> str:
        return protocol.canonical_dtype(m.group(1)) if m.group(1) else _CN_DTYPE[m.group(0)]

    named = {canonical(m) for m in _DTYPE.finditer(text)}

    owners: dict[str, str] = {}

    def take(m: re.Match) -> str:
        dtype = canonical(m)
        role = _dtype_role(text, m)
        if (owner := _DTYPE_OWNER.search(text[:m.start()])) and role == "test":
            owners.setdefault(owner.group(1), dtype)
            if len(set(owners.values())) > 1:
                raise GenerationError(f"you gave the inputs different dtypes ({', '.join(f'{n} {d}' for n, d in owners.items())}): "
                                      "the offline generator tests every input in one dtype at a time. Name the dtypes "
                                      "to test, e.g. 'fp16 and fp32'.")
        if role == "output" and named == {dtype}:
            role = "test"                    # "input/output in fp16": one dtype for both
        if role == "word":
            return m.group(0)                # "half of x", "a single kernel": left for the residue check
        if role == "compute":
            if dtype != "float32":
                raise GenerationError(f"computing or accumulating in {dtype} is not supported: the kernels compute "
                                      "and accumulate in float32, for every input dtype")
            rd.op_notes.append("the kernels compute and accumulate in float32 for every dtype, as asked")
        elif role == "output":
            raise GenerationError(f"an output in {dtype} apart from the inputs' dtype is not supported: the output "
                                  "takes the inputs' dtype. Name the dtypes to test, e.g. 'fp16 and fp32'.")
        else:
            rd.dtypes.append(dtype)
        return _blank(m)

    text = _ONLY.sub(lambda m: (m.group(1) or "").ljust(len(m.group(0))), _DTYPE.sub(take, text))
    if _ALL_DTYPES.search(text):
        rd.dtypes += protocol.DTYPES
        text = _ALL_DTYPES.sub(_blank, text)
    rd.dtypes = list(dict.fromkeys(rd.dtypes))
    return text


_COMPUTE_AFTER = re.compile(r"\s*(?:accumulat\w*|compute|computation|math|internal\w*|acc)\b", _F)
_COMPUTE_BEFORE = re.compile(r"\b(?:accumulat\w*|comput\w*|math|internally)\s+(?:in\s+|with\s+)?$", _F)
_OUTPUT_NEAR = re.compile(r"\s*(?:outputs?|results?)\b", _F)
_OUTPUT_BEFORE = re.compile(r"\b(?:outputs?|results?|returns?)\s+(?:is\s+|in\s+|as\s+)*$", _F)
_TYPE_CONTEXT = re.compile(r"\s+(?:precision|floats?|tensors?|inputs?|matri\w*|arrays?|dtypes?|values?|data)\b", _F)
# "x in fp16 and y in fp32", "bias fp32": a dtype said of one input.
_DTYPE_OWNER = re.compile(r"(?<![-\w])([A-Za-z]\d*|bias|weight|residual)\s+(?:is\s+|in\s+|as\s+)?$")
# "bf16 only", "only fp16": the dtype list said, not a qualifier of the operation.
_ONLY = re.compile(r"(;\s*)\bonly\b|\bonly\b(?=\s*;)", _F)


def _dtype_role(text: str, m: re.Match) -> str:
    """What a dtype word is there for: 'test' (a dtype to test), 'compute' ('fp32 accumulation'),
    'output' ('fp32 output'), or 'word' where half/single/float are plain English ('half of x')."""
    before, after = text[:m.start()], text[m.end():]
    if _COMPUTE_AFTER.match(after) or _COMPUTE_BEFORE.search(before):
        return "compute"
    if _OUTPUT_NEAR.match(after) or _OUTPUT_BEFORE.search(before):
        return "output"
    word = (m.group(1) or "").lower()
    plain = word in ("half", "single", "float")
    if word == "single":                     # "single precision" only: "a single tensor" is one tensor
        return "test" if "precision" in m.group(0).lower() else "word"
    typed = ("precision" in m.group(0).lower() or _TYPE_CONTEXT.match(after)
             or (re.search(r"\b(?:in|as|to|for|dtype|type)\s+$", before, re.I)
                 and not re.match(r"\s+(?:the|of|a|an|as)\b", after, re.I)))
    return "word" if plain and not typed else "test"


def _refuse_out_of_scope(text: str) -> None:
    for pattern, what in _OUT_OF_SCOPE:
        if m := pattern.search(text):
            raise GenerationError(f"{what or repr(m.group(0))} is not supported by the offline generator. {SUPPORTED} "
                                  "A combination of these can be written as an expression, "
                                  "e.g. 'where(x > 0, x, 0.01 * x)'.", unplaced=[m.group(0)])


def _take_dims(text: str, rd: _Reading) -> str:
    for m in _DIM_N.finditer(text):
        if m.group(2) and int(m.group(2)) >= 1:
            raise GenerationError(f"{m.group(0)!r}: dim {m.group(2)} counting from 0, or the {m.group(2)}th dim "
                                  f"counting from 1 (dim {int(m.group(2)) - 1})? Say 'dim {m.group(2)}' or "
                                  f"'第{int(m.group(2)) - 1}维'.")
    found = [(m.start(), int(next(g for g in m.groups() if g))) for m in _DIM_N.finditer(text)]
    text = _DIM_N.sub(_blank, text)
    for pattern, d in _DIM_WORDS:
        found += [(m.start(), d) for m in pattern.finditer(text)]
        text = pattern.sub(_blank, text)
    rd.dims = [d for _, d in sorted(found)]
    if m := _WHOLE.search(text):
        rd.whole = m.group(0)
    return _WHOLE.sub(_blank, text)


def _take_scalars(text: str, rd: _Reading) -> str:
    if m := _EPS.search(text):
        rd.eps = float(m.group(1))
        text = _blank_span(text, m)
    if _CLAMP_WORD.search(text):
        if m := _RANGE.search(text):
            lo, hi = (float(g) for g in m.groups() if g is not None)
            rd.scalars.update(min=min(lo, hi), max=max(lo, hi))
            text = _blank_span(text, m)
        for m in _BOUND.finditer(text):
            key, value = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            rd.scalars[_BOUND_KEY[re.sub(r"\s+", " ", key.lower())]] = float(value)
        text = _BOUND.sub(_blank, text)
    return text


def _blank_span(text: str, m: re.Match) -> str:
    return _blank_range(text, m.start(), m.end())


def _blank_range(text: str, start: int, end: int) -> str:
    return text[:start] + ";" + " " * (end - start - 1) + text[end:]


def _take_shapes(text: str, rd: _Reading) -> str:
    taken = []
    for m in _SHAPE.finditer(text):
        if _is_parameter(text, m):
            continue                 # "3x3 kernel", "window size 7": left for the residue check to name
        taken.append(m)
        if m.group("multi"):
            shape = [_dim(d) for d in re.split(r"\s*[x×*]\s*|\s+by\s+", m.group("multi").strip(), flags=re.I)]
        elif m.group("tuple") is not None:
            shape = [_dim(d) for d in re.findall(_DIM, m.group("tuple"), re.I)]
        else:
            shape = [_dim(m.group("one"))]
        before = text[:m.start()]
        lab = _LABEL.search(before)
        # "x and y of shape 4096x4096" is about both: no label
        # ... nor is "rmsnorm without weight 8x4096" about a weight
        both = re.search(r"\b[A-Za-z_]\w*\s+and\s+$|\b(?:without|no|w/o)\s+$", before[:lab.start(1)]) if lab else None
        label = lab.group(1) if lab and not both else None
        if not (label and _SHAPE_OWNER.fullmatch(label)) and (after := _OWNER_AFTER.match(text, m.end())):
            label = after.group(1)           # "16x1000 logits", "a 128 bias"
        rd.shapes.append((label, shape))
        if re.search(r"\dk\b", m.group(0), re.I):
            rd.op_notes.append(f"read {m.group(0).strip()!r} with k = 1024 (4k = 4096)")
    for m in reversed(taken):
        text = _blank_range(text, m.start(), m.end())
    return text


def _is_parameter(text: str, m: re.Match) -> bool:
    """Whether numbers read like a shape size a window, a kernel or a stride instead."""
    return bool(_PARAM_AFTER.match(text, m.end()) or _PARAM_BEFORE.search(text[:m.start()]))


# ---------------------------------------------------------------- expressions typed in the request

_TOKEN = re.compile(r"""
    (?P<rank>\d+-[dD]\b)                             # "1024-d", "3-D": words, not subtractions
  | (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
  | (?P<prose>[A-Za-z_]\w+(?:-[A-Za-z]\w+)+)        # row-wise, log-softmax: words, not subtractions
  | (?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)
  | (?P<str>'(?:tanh|none)'|"(?:tanh|none)")
  | (?P<op>\*\*|[<>=!]=|[-+*/<>=,@])
  | (?P<dot>\.(?=[A-Za-z_]))                         # a method chained on a call: x.pow(2).sum(-1)
  | (?P<sub>\[\s*\d\s*\])                              # torch.max(x, 1)[0]
  | (?P<lpar>\()
  | (?P<rpar>\))
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
        if kind == "name" and keyword.iskeyword(m.group()) and m.group() != "None":
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


def _find_expression(text: str) -> tuple[ir.Node, ast.expr, int, int] | None:
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
            tree = _MaxParts().visit(tree)
            try:
                node = ir.parse(ast.unparse(tree), as_written=True)
            except ir.IRError as e:
                # a call like "softmax(x, dim=0)" was meant as an expression: say why it is refused
                meant = any(isinstance(t, ast.Call) or _names_matmul(t) for t in ast.walk(tree))
                if meant and re.search(r"\w\(|@", src) and (rejected is None or j - i > rejected[0]):
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
    if any(len(n) > 1 and n.lower() in request_residue.FILLER_WORDS for n in names):
        return False                        # "by - 1", "of - x": prose around a number, not names
    has_call = any(isinstance(n, ast.Call) for n in ast.walk(tree))
    return has_call or all(_TENSOR_NAME.fullmatch(n) for n in names)


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
        if isinstance(tree, (ast.Call, ast.BinOp, ast.UnaryOp, ast.Compare)) or part:    # part: max(x, 1)[0]
            return j, tree
    return None


# ---------------------------------------------------------------- operators named in words

def _operator(prose: str, expr: tuple | None, rd: _Reading) -> ir.Node | None:
    """Compose the operator from an expression typed in the request and/or operator words."""
    if expr is not None and ir.matmul_node(expr[0]) and expr[0].op != ir.MATMUL:
        prose = mmf.MATMUL_WORD.sub(_blank, prose)       # "matmul a @ b + bias": the word names the expression
    if (expr is None or expr[0].op == ir.MATMUL) and (expr or mmf.MATMUL_WORD.search(prose)):
        return _matmul_words(prose, expr, rd)
    if expr is None and loss.CROSS_ENTROPY.search(prose):
        return _cross_entropy_words(prose, rd)
    said, (found, prose) = prose, _find_op_words(prose)
    said_pair = _TWO_TENSORS.search(prose)
    pair = bool(_PAIRWISE.search(prose))
    rd.left = _PAIRWISE.sub(_blank, prose)
    rd.pairwise = said_pair.group(0) if said_pair else None
    rows, binaries, steps, where = [], [], [], False
    for _, kind, op, value in found:
        if kind == "extreme":
            kind, op = ("binary", {"max": "maximum", "min": "minimum"}[op]) if pair else ("row", op)
        elif kind == "sum":
            kind, op = ("binary", "add") if pair else ("row", "sum")
        if kind == "row" and op not in rows:
            rows.append(op)
        elif kind == "binary" and op not in binaries:
            binaries.append(op)
        elif kind == "step" and all(op != s[0] for s in steps):
            steps.append((op, value))
        elif kind == "where":
            where = True
    if expr is not None:
        node, tree = expr[0], expr[1]
        used = {n.op for n in node.walk()}
        numbers = {n.value for n in node.walk() if n.op == "const"} | {n.attr("exponent") for n in node.walk()}
        rows = [r for r in rows if r not in used]           # words that merely describe the expression
        # a step or binary the words name must be one the expression holds, with the same number
        steps = [s for s in steps if _STEP_IR_OP.get(s[0], s[0]) not in used or
                 (s[1] is not None and s[1] not in numbers)]
        named = [s[0] for s in steps] + [b for b in binaries if b not in used]
        example = f"'{named[0]}({_text(node)})'" if named and named[0] in ir.UNARY else "'relu(x) + y' or '(x * y) * 0.5'"
        if named:
            raise GenerationError(f"I read the expression {_text(node)!r} but you also named "
                                  f"{', '.join(named)}; write the whole operation as one expression, "
                                  f"e.g. {example}.")
        _refuse_other_meanings("the expression", tree, torch_only=True)
        if node.op in ir.NORMS and norm.eps_given(tree):
            rd.eps = _one_eps(rd.eps, node.attr("eps"))
        body = _text(node)
        if where and node.op in ir.COMPARE:                 # "where x > 0 take x, else y"
            a, b = order.where_branches(said, body)
            body = f"where({body}, {a}, {b})"
            rd.op_notes.append(f"where: taking {a} where {_text(node)}, else {b}")
    else:
        if not (rows or binaries or steps or where):
            return None
        order.refuse_unclear_order(found, prose, said, pair)
        body = _base(prose, said, rows, binaries, where, rd)
        body = _apply_steps(body, steps, rd)
    if len(rows) > 1:
        raise GenerationError(f"I found {' and '.join(rows)}: one row operation per kernel. Which one do you want? "
                              f"Or write it as an expression, e.g. 'softmax(x * 0.5)'.")
    if rows:
        body = _wrap_row(rows[0], body, prose, rd)
        if rows[0] in ir.NORMS:
            for pattern in (norm.NO_WEIGHT, norm.NO_BIAS, norm.WEIGHT_WORD, norm.BIAS_WORD):
                rd.left = pattern.sub(_blank, rd.left)
    return _parse(body)


def _parse(body: str) -> ir.Node:
    try:
        return ir.parse(body, as_written=True)
    except ir.IRError as e:
        raise GenerationError(f"{e}. {SUPPORTED}") from None


def _matmul_words(prose: str, expr: tuple | None, rd: _Reading) -> ir.Node:
    """A matmul named in words, or typed bare ('a @ b'), with its epilogue in words."""
    mm = expr[0] if expr else None
    operands = tuple(x.name + (f".{mm.attr(key)}" if mm.attr(key) else "") for x, key in zip(mm.args, ("ta", "tb"))) \
        if mm else ("a", "b")
    said, (prose, epilogue) = prose, mmf.take_epilogue(prose)
    found, rd.left = _find_op_words(prose)
    mmf.check_epilogue_order(said, [(pos, op) for pos, _, op, _ in found])
    words = [(kind, op, value) for _, kind, op, value in found]
    body = mmf.matmul_expression(epilogue, words, operands, tf32=bool(mm and mm.attr("tf32")))
    if scales := [v for _, op, v in words if op == "scale"]:
        rd.scalars["scale"] = scales[0]
    return _parse(body)


def _cross_entropy_words(prose: str, rd: _Reading) -> ir.Node:
    body, prose, notes = loss.cross_entropy_words(prose)
    words, rd.left = _find_op_words(prose)
    if words:
        raise GenerationError(f"I read cross entropy but you also named {', '.join(w[2] for w in words)}; write "
                              "the whole operation as an expression, e.g. 'cross_entropy(logits * 0.5, target)'.")
    rd.op_notes += notes
    return _parse(body)


def _find_op_words(prose: str) -> tuple[list[tuple[int, str, str, float | None]], str]:
    """The operator words in prose, in order, and prose with them blanked."""
    found = []
    for pattern, kind, op in registry.WORDS:
        for m in pattern.finditer(prose):
            value = next((float(g) for g in m.groups() if g is not None), None)
            found.append((m.start(), kind, op, value))
        prose = pattern.sub(_blank, prose)
    if any(op == "gelu_tanh" for _, _, op, _ in found):      # "gelu with tanh approximation" is one gelu
        found = [f for f in found if f[2] != "gelu"]
    return sorted(found), prose


def _base(prose: str, said: str, rows: list[str], binaries: list[str], where: bool, rd: _Reading) -> str:
    """The operand(s) the words name: x, or a binary of the inputs they name in their order."""
    if len(binaries) > 1:
        raise GenerationError(f"I found {' and '.join(binaries)}; which one do you want? "
                              f"Or write it as an expression, e.g. 'x * y + z'.")
    if binaries:
        op = binaries[0]
        if op == "mul" and _MATRIX.search(prose):
            rd.op_notes.append("read 'multiply' as elementwise x * y; for a matrix product say 'matmul'")
        # "add then rmsnorm": the fused residual add; "add a bias": x + bias, a vector
        other = ("residual" if op == "add" and set(rows) & ir.NORMS else
                 "bias" if op == "add" and norm.BIAS_WORD.search(said) else "y")
        first, other = order.operands(prose, op, other)
        return f"{first} {order.SYMBOL[op]} {other}" if op in order.SYMBOL else f"{op}({first}, {other})"
    if where and not rows:
        raise GenerationError("where needs a condition: which one? e.g. 'where(x > 0, x, y)'")
    named = list(dict.fromkeys(order.named_inputs(prose)))
    if len(named) > 1:
        raise GenerationError(f"I read one input but you named {', '.join(named)}; write the operation as an "
                              f"expression of them, e.g. 'relu({named[0]} + {named[1]})'.")
    return named[0] if named else "x"


def _apply_steps(body: str, steps: list[tuple[str, float | None]], rd: _Reading) -> str:
    plain = [op for op, _ in steps if op not in _SCALAR_STEPS]
    if len(plain) > 1 or len(steps) - len(plain) > 1:
        raise GenerationError(f"I found {', '.join(op for op, _ in steps)}; in which order? Write it as an "
                              f"expression, e.g. '{steps[1][0]}({steps[0][0]}({body}))'.")
    for op, value in steps:
        if op == "scale":
            body, rd.scalars["scale"] = f"({body}) * {value!r}", value
        elif op == "divide":
            body, rd.scalars["divisor"] = f"({body}) / {value!r}", value
        elif op in ("square", "cube", "pow"):
            body = f"({body}) ** {({'square': 2.0, 'cube': 3.0}.get(op, value))!r}"
        elif op == "gelu_tanh":
            body = f"gelu({body}, approximate='tanh')"
        elif op == "clamp":
            if "min" not in rd.scalars and "max" not in rd.scalars:
                raise GenerationError("clamp needs bounds: which range? e.g. 'clamp x to [-1, 1]'")
            body = f"clamp({body}, {rd.scalars.pop('min', None)!r}, {rd.scalars.pop('max', None)!r})"
        else:
            body = f"{op}({body})"
    return body


def _wrap_row(op: str, body: str, prose: str, rd: _Reading) -> str:
    if op not in ir.NORMS:
        return f"{op}({body})"
    extras = norm.extras_in_words(op, prose, rd.op_notes)
    return f"{op}({', '.join([body, *extras])}, eps={ir.DEFAULT_EPS[op]!r})"   # eps is settled when building






# ---------------------------------------------------------------- pasted PyTorch functions

_FENCE = re.compile(r"```[\w+-]*[ \t]*\n(.*?)```", re.S)
_CODE_START = re.compile(r"^[ \t]*(?:import\s|from\s+\S+\s+import\s|@|def\s+\w+\s*\(|class\s+\w+)", re.M)


def _split_code(text: str) -> tuple[str | None, str]:
    """(code, prose): a fenced or bare `def` and the words around it."""
    for m in _FENCE.finditer(text):
        if re.search(r"^\s*def\s", m.group(1), re.M):
            return textwrap.dedent(m.group(1)), text[:m.start()] + " ; " + text[m.end():]
    m = _CODE_START.search(text)
    if not m or not re.search(r"^\s*def\s+\w+\s*\(", text[m.start():], re.M):
        return None, text
    lines = textwrap.dedent(text[m.start():]).splitlines()
    for end in range(len(lines), 0, -1):        # words after the function are prose
        try:
            ast.parse("\n".join(lines[:end]))
        except SyntaxError:
            continue
        return "\n".join(lines[:end]), text[:m.start()] + " ; " + "\n".join(lines[end:])
    return "\n".join(lines), text[:m.start()]


def pasted_class(request: str, inputs: list[str]) -> str | None:
    """The pasted module class a spec with these inputs (in order) can take as its reference, or None."""
    code, _ = _split_code(request)
    try:
        built = request_module.buildable(ast.parse(code)) if code else None
    except SyntaxError:
        return None
    return built[0] if built and built[1] == inputs else None


def pasted_source(request: str) -> str:
    """The code pasted in a request, as pasted: a pasted module's reference.py."""
    code, _ = _split_code(request)
    if code is None:
        raise GenerationError("the request holds no pasted code to use as the reference")
    return code if code.endswith("\n") else code + "\n"


class _MaxParts(ast.NodeTransformer):
    """torch.max(x, dim)'s parts: [0] or .values is amax, [1] or .indices argmax (min alike)."""

    def visit_Subscript(self, n: ast.Subscript) -> ast.expr:
        self.generic_visit(n)
        part = n.slice.value if isinstance(n.slice, ast.Constant) else None
        return _max_part(n.value, {0: "values", 1: "indices"}.get(part)) or n

    def visit_Attribute(self, n: ast.Attribute) -> ast.expr:
        self.generic_visit(n)
        return _max_part(n.value, n.attr) or n


class _Inline(_MaxParts):
    """Replace local names by their values and drop dtype casts (and read max's parts)."""

    def __init__(self, env: dict[str, ast.expr], aliases: set[str] = frozenset()):
        self.env, self.aliases = env, aliases      # aliases: "import torch.nn.functional as fn"
        self.casts = False
        self.fixed: list[str] = []                 # casts to one dtype: .float(), .to(torch.float32)
        self.back: set[int] = set()                # ids of nodes cast back to an input's dtype

    def visit_Name(self, n: ast.Name) -> ast.expr:
        if n.id in self.aliases:
            return ast.Name("torch", ast.Load())
        return copy.deepcopy(self.env[n.id]) if n.id in self.env else n

    def visit_Call(self, n: ast.Call) -> ast.expr:
        self.generic_visit(n)
        f = n.func
        if isinstance(f, ast.Attribute) and f.attr in _CASTS:
            is_function = isinstance(f.value, ast.Name) and f.value.id in _MODULES
            if not is_function or n.args:
                self.casts = True
                inner = n.args[0] if is_function else f.value
                args = n.args[1:] if is_function else n.args
                if f.attr in ("float", "half", "bfloat16", "double") or any(
                        "torch." in ast.unparse(a) for a in [*args, *(k.value for k in n.keywords)]):
                    self.fixed.append(ast.unparse(n)[:40])
                elif f.attr in ("to", "type_as") and (args or n.keywords):
                    self.back.add(id(inner))
                return inner
        return n


def _max_part(call: ast.expr, part: str | None) -> ast.Call | None:
    """torch.max(x, dim=d).values -> torch.amax(x, dim=d); .indices -> torch.argmax(x, dim=d)."""
    if not (isinstance(call, ast.Call) and part in ("values", "indices")):
        return None
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    if name not in ("max", "min"):
        return None
    new = ("a" if part == "values" else "arg") + name
    func = ast.Attribute(call.func.value, new, ast.Load()) if isinstance(call.func, ast.Attribute) else ast.Name(new)
    return ast.Call(func, call.args, call.keywords)


def _read_code(code: str, rd: _Reading) -> None:
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise GenerationError(f"the pasted code does not parse: {e.msg} (line {e.lineno})") from None
    aliases = {a.asname for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names if a.asname}
    if request_module.is_module(tree):       # a pasted nn.Module (shapes in get_inputs): read as one function
        rd.pasted = request_module.read(tree)
        tree = ast.parse(rd.pasted.function)
    else:
        _refuse_telling_comments(code, tree)
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not funcs:
        raise GenerationError("paste a plain function, e.g. 'def fused(x, bias): return F.gelu(x + bias)'")
    for stmt in tree.body:
        docstring = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
        if not (docstring or isinstance(stmt, (ast.FunctionDef, ast.Import, ast.ImportFrom))):
            raise GenerationError(f"line {stmt.lineno} of the pasted code, {ast.unparse(stmt)[:60]!r}, is not read: I read "
                                  "the function alone. Say shapes, dtypes and anything else about it in words beside "
                                  "the code, e.g. 'for fp16 8x16'.")
    fn = funcs[-1]
    env, tensors = _parameters(fn, rd)
    inline = _Inline(env, aliases)
    ret = _returned(fn, inline)
    src = ast.unparse(ret)
    where = f"line {rd.pasted.line}: forward" if rd.pasted else fn.name
    _refuse_other_meanings(where, ret)
    try:
        node = ir.parse(src, as_written=True)
    except ir.IRError as e:
        hint = " For a hand-written norm, call F.layer_norm or F.rms_norm instead." if re.search(r"\bmean\(", src) else ""
        if rd.pasted:                          # a module: its line and the one thing missing, briefly
            brief = str(e).split(" Supported:")[0].split(". The offline generator supports")[0].rstrip(".")
            raise GenerationError(f"{where} returns {src[:100]!r}: {brief}.{hint}") from None
        supported = "" if ir.SUPPORTED_TEXT in str(e) else f" {SUPPORTED}"
        raise GenerationError(f"{fn.name} returns {src!r}: {e}.{hint}{supported}") from None
    if node.op in ir.REDUCE | ir.ARG_REDUCE and node.attr("dim") is None:
        raise GenerationError(f"{where} returns {src!r}: {node.op} without a dim is over all elements (one value) "
                              f"in PyTorch, which the offline generator does not support; give it a dim, e.g. "
                              f"dim=-1 for one value per row")
    used = ir.input_names(node)
    if unknown := [n for n in used if n not in tensors]:
        raise GenerationError(f"{fn.name} uses {', '.join(unknown)}, which is not one of its parameters")
    if unused := [n for n in tensors if n not in used]:
        constants = [n for n in unused if n in ("e", "pi")]
        raise GenerationError(f"{fn.name}'s parameter {', '.join(unused)} is not used in what it returns; "
                              + (f"{constants[0]} reads as the constant there: rename the parameter"
                                 if constants else "remove it or use it"))
    if inline.fixed and id(ret) not in inline.back:
        raise GenerationError(f"{fn.name} casts with {inline.fixed[0]!r}, so in PyTorch it returns that dtype whatever "
                              "its inputs' dtype; the kernel returns its inputs' dtype. Cast back at the end "
                              "(.to(x.dtype)) or drop the cast.")
    if inline.casts:
        rd.op_notes.append("ignored dtype casts (.float(), .to(...)): inputs and output keep each tested dtype")
    if node.op in ir.NORMS and norm.eps_given(ret):
        rd.eps = _one_eps(rd.eps, node.attr("eps"))
    elif node.op == "rmsnorm":
        raise GenerationError(f"{fn.name} calls rms_norm without an eps, which in PyTorch is the dtype's machine "
                              "epsilon (9.8e-4 in float16, 1.2e-7 in float32); give eps=..., e.g. eps=1e-6")
    rd.node, rd.name, rd.inputs = node, fn.name, tensors
    if rd.pasted:
        _take_pasted(rd)


def _take_pasted(rd: _Reading) -> None:
    """A pasted module's name, and the shapes and dtype its get_inputs makes (float32 unless it says)."""
    pasted = rd.pasted
    rd.name = pasted.name
    if not pasted.shapes:
        return
    if missing := [n for n in rd.inputs if n not in pasted.shapes]:
        raise GenerationError(f"get_inputs gives no tensor for {', '.join(missing)}")
    if mm := ir.matmul_node(rd.node):
        a, b = ((x.name, mmf.logical(pasted.shapes[x.name], mm.attr(key), x.name)) for x, key in zip(mm.args, ("ta", "tb")))
        rd.shapes = [(None, mmf.operand_problem(a, b))]
        rd.batched = len(a[1]) == 3
    else:
        rd.shapes = [(n, pasted.shapes[n]) for n in rd.inputs]
    if not rd.dtypes:
        rd.dtypes = pasted.dtypes or ["float32"]
        if not pasted.dtypes:
            rd.op_notes.append("get_inputs makes float32 tensors (torch's default); say 'fp16', 'bf16' or "
                               "'all dtypes' to test others")


# Comments or docstrings that give shapes, dtypes or dims, which the code does not say.
_TELLING = re.compile(r"\d+\s*[x×,]\s*\d+|\[\s*\d|\b(?:fp16|bf16|fp32|float\d*|half|bfloat16|dtype|dim|axis|keepdim|"
                      r"shape|shapes|all\s+elements|actually|should)\b", re.I)


def _refuse_telling_comments(code: str, tree: ast.Module) -> None:
    texts = [tok.string for tok in _tokens(code) if tok.type == tokenize.COMMENT]
    texts += [ast.get_docstring(n) or "" for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Module))]
    for text in texts:
        if m := _TELLING.search(text):
            raise GenerationError(f"the pasted code's comment or docstring {text.strip()[:60]!r} says {m.group(0)!r}, "
                                  "which the code itself does not: comments are not read. Say shapes and dtypes in "
                                  "words beside the code (e.g. 'for fp16 8x16') and dims in the code.")


def _tokens(code: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return []


def _one_eps(said: float | None, written: float) -> float:
    if said is not None and said != written:
        raise GenerationError(f"the code says eps={written!r} but the words say eps {said!r}; which one?")
    return written


def _refuse_other_meanings(fname: str, ret: ast.expr, torch_only: bool = False) -> None:
    """Calls whose PyTorch meaning is not the IR op of that name: max/min over a dim return values
    and indices, and softmax without a dim picks one by the input's rank. torch_only: in a typed
    expression, only torch.max(...) and x.max(...) (a bare max(x, dim=0) is the IR's)."""
    for n in ast.walk(ret):
        if not isinstance(n, ast.Call) or (torch_only and not isinstance(n.func, ast.Attribute)):
            continue
        name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        method = isinstance(n.func, ast.Attribute) and not (isinstance(n.func.value, ast.Name)
                                                             and n.func.value.id in _MODULES)
        args = len(n.args) + method
        dims = [k.value for k in n.keywords if k.arg == "dim"]
        given_dim = any(not (isinstance(d, ast.Constant) and d.value is None) for d in dims) or \
            (args == 2 and ir.is_int_literal(n.args[-1]))
        if name in ("max", "min") and given_dim:
            raise GenerationError(f"{fname} returns {ast.unparse(n)!r}: {name} over a dim returns (values, indices) "
                                  f"in PyTorch; write torch.a{name}(..., dim=...) for the values alone")
        if name in ("softmax", "log_softmax") and args == 1 and not given_dim:
            raise GenerationError(f"{fname} returns {ast.unparse(n)!r}: {name} without a dim picks one by the "
                                  f"input's rank in PyTorch; give it one, e.g. dim=-1")


def _returned(fn: ast.FunctionDef, inline: _Inline) -> ast.expr:
    """The returned expression with every local name inlined."""
    for stmt in fn.body:
        docstring = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        if docstring or isinstance(stmt, (ast.Pass, ast.Assert)):
            continue
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            return inline.visit(stmt.value)
        target, value = _assignment(stmt)
        if target is None:
            raise GenerationError(f"line {stmt.lineno} of {fn.name}: {ast.unparse(stmt)[:60]!r} is not supported; "
                                  "the function may assign local names and return one expression")
        inline.env[target] = inline.visit(value)
    raise GenerationError(f"{fn.name} returns nothing; end it with 'return <expression>'")


def _parameters(fn: ast.FunctionDef, rd: _Reading) -> tuple[dict[str, ast.expr], list[str]]:
    """Constants for scalar parameters (recorded in rd.scalars), and the tensor parameters in order."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    env: dict[str, ast.expr] = {}
    tensors: list[str] = []
    for arg, default in [*zip(positional, defaults), *zip(a.kwonlyargs, a.kw_defaults)]:
        name, note = arg.arg, ast.unparse(arg.annotation) if arg.annotation else ""
        if name == "self":
            continue
        if "shape" in name:                       # F.layer_norm(x, normalized_shape, ...): not an input
            env[name] = ast.Tuple(elts=[], ctx=ast.Load())
        elif default is not None and not (isinstance(default, ast.Constant) and default.value is None):
            try:
                value = ast.literal_eval(default)
            except ValueError:
                raise GenerationError(f"parameter {name} has a default {ast.unparse(default)!r} "
                                      "that is not a constant") from None
            env[name] = ast.Constant(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                rd.scalars[name] = value
        elif note in ("float", "int"):
            raise GenerationError(f"parameter {name} is a number without a default; give it one, "
                                  f"e.g. '{name}: {note} = 1e-6'")
        else:
            tensors.append(name)
    return env, tensors


def _assignment(stmt: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return stmt.target.id, stmt.value
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        return stmt.target.id, ast.BinOp(ast.Name(stmt.target.id, ast.Load()), stmt.op, stmt.value)
    return None, None


# ---------------------------------------------------------------- merging readings

@dataclass
class _State:
    node: ir.Node | None = None
    name: str | None = None
    inputs: list[str] | None = None
    scalars: dict[str, float] = field(default_factory=dict)
    op_notes: list[str] = field(default_factory=list)
    eps: float | None = None
    dtypes: list[str] | None = None
    shapes: list[list[int]] | None = None            # one per case, for the main input
    input_shapes: dict[str, list[list[int] | None]] = field(default_factory=dict)   # other inputs' given shapes
    vectors: set[str] = field(default_factory=set)   # inputs said to be vectors
    dims: list[int] = field(default_factory=list)
    whole: str | None = None
    tf32: bool | None = None
    batched: bool = False
    typed: bool = False                              # the operator came from code or a typed expression
    pasted: request_module.Pasted | None = None      # the pasted module the operator came from
    pasted_shapes: dict[str, list[int]] | None = None   # its get_inputs shapes, until a correction gives others

    @property
    def matmul(self) -> bool:
        return self.node is not None and ir.matmul_node(self.node) is not None


def _apply(st: _State, rd: _Reading, feedback: bool) -> None:
    if rd.node is not None:          # a new operator brings its own inputs, scalars and eps
        if st.node is not None and st.matmul != bool(ir.matmul_node(rd.node)):
            st.shapes, st.input_shapes = None, {}        # a matmul's cases are M, N, K: not comparable
        st.node, st.name, st.inputs, st.scalars, st.op_notes = rd.node, rd.name, rd.inputs, rd.scalars, rd.op_notes
        st.eps, st.tf32, st.batched, st.typed = rd.eps, rd.tf32, rd.batched, rd.typed
        st.pasted = rd.pasted
        st.pasted_shapes = rd.pasted.shapes if rd.pasted and rd.pasted.shapes else None
    else:
        if rd.shapes:                                # a correction's shapes replace get_inputs'
            st.pasted_shapes = None
        st.op_notes = st.op_notes + rd.op_notes          # how a correction's shapes were read
        st.eps = rd.eps if rd.eps is not None else st.eps
        st.tf32 = rd.tf32 if rd.tf32 is not None else st.tf32
    # "mean instead" on "sum over dim 0" keeps the dim; "make it relu" drops it
    keeps_dim = feedback and rd.node is not None and ir.kind(rd.node) in ("reduce", "argreduce") and not rd.dims
    if (rd.node is not None or rd.dims or rd.whole) and not keeps_dim:
        st.dims, st.whole = rd.dims, rd.whole
    append = feedback and rd.append
    if rd.dtypes:
        st.dtypes = list(dict.fromkeys((st.dtypes or _default_dtypes(st)) + rd.dtypes)) if append else rd.dtypes
    names = _input_names(st)
    st.vectors |= {n for n in names if _said_vector(n, rd.rest)}
    _apply_shapes(st, rd, names, append, feedback)


def _apply_shapes(st: _State, rd: _Reading, names: list[str], append: bool, feedback: bool) -> None:
    rd.shapes = [(label[:-1] if label and label not in names and label[:-1] in names else label, s)
                 for label, s in rd.shapes]              # "targets" is the input target
    for label, s in rd.shapes:
        if label and label not in names and _SHAPE_OWNER.fullmatch(label):
            shape = "x".join(map(str, s))
            raise GenerationError(f"you gave {label} the shape {shape}, but {label} is not an input of "
                                  f"{_text(st.node)!r} (its inputs: {', '.join(names)}); the output's shape follows "
                                  "from the inputs'. Name the shape of an input, e.g. 'x of shape 64x128'.")
    main = _main_input(st, names)
    main_new = [s for label, s in rd.shapes if label not in names or label == main]
    named_new: dict[str, list[list[int] | None]] = {}
    for label, s in rd.shapes:
        if label in names and label != main:
            named_new.setdefault(label, []).append(s)
    for n in names:
        if n != main and n not in named_new and (shape := _bare_shape(n, rd.rest)):
            named_new[n] = [shape]
    if not main_new and (shape := _bare_shape(main, rd.rest)):
        main_new = [shape]                       # "relu(x), x is 512"
    if main_new:
        if append:
            old = st.shapes or _default_shapes(st)
            st.input_shapes = {n: _per_case(s, len(old), n) + [None] * len(main_new)
                               for n, s in st.input_shapes.items()}
            st.shapes = old + main_new
        else:
            st.shapes = main_new
            if feedback:             # other inputs follow the new cases unless this correction names them
                st.input_shapes = {}
    st.input_shapes.update(named_new)


def _vector_phrase(n: str) -> str:
    """'b is a vector', 'bias vector', 'b is 1-d', 'b 是向量'."""
    return (rf"\b{n}\b(?:\s+is)?(?:\s+an?)?\s+(?:1-?d\s+|row\s+)?vector\b|\bvector\s+{n}\b|"
            rf"\b{n}\s+is\s+1-?d\b|\b{n}\s*(?:是)?(?:一个)?向量")


def _said_vector(n: str, text: str) -> bool:
    return bool(re.search(_vector_phrase(n), text, re.I))


def _bare_shape_phrase(n: str) -> str:
    """'b 4096', 'bias is 4096', 'b of size 4096': a 1-D shape for a named input."""
    return rf"\b{n}\b(?:\s*(?:[:=]|\b(?:is|of|with|has|shape|size|length)\b))*\s*({_DIM})(?![\w.-])"


def _bare_shape(n: str, text: str) -> list[int] | None:
    m = re.search(_bare_shape_phrase(n), text, re.I)
    return [_dim(m.group(1))] if m else None


def _input_names(st: _State) -> list[str]:
    return st.inputs or ir.input_names(st.node)


def _is_vector(st: _State, n: str, names: list[str]) -> bool:
    if n in st.vectors or (st.node.op in ir.NORMS and n in {a.name for a in st.node.args[1:]}):
        return True
    # "a + b" names a pair, not a bias
    return len(names) > 1 and bool(_VECTOR_NAME.fullmatch(n)) and not (n == "b" and "a" in names)


def _main_input(st: _State, names: list[str]) -> str:
    """The input whose shape is a case's shape: the first one that is neither a broadcast vector
    nor class indices."""
    index = ir.index_inputs(st.node)
    return next((n for n in names if not _is_vector(st, n, names) and n not in index), names[0])


def _per_case(shapes: list, count: int, name: str) -> list:
    if len(shapes) == count:
        return shapes
    if len(shapes) == 1:
        return shapes * count
    raise GenerationError(f"{name} has {len(shapes)} shapes but there are {count} cases; "
                          "give it one shape per case, or one for all")


# ---------------------------------------------------------------- building the spec

def parse_request(text: str, feedback: Sequence[str] = (), backend: str | None = None) -> tuple[dict, list[str]]:
    """Return (spec, notes). notes says which defaults were assumed, in plain words.
    Raise GenerationError naming what is missing or unsupported, and what would work."""
    if not text or not text.strip():
        raise GenerationError(f"the request is empty. {ASK_OP}. {SUPPORTED}")
    rd = _read(text, feedback=False)
    if rd.node is None:
        raise GenerationError(f"I could not find an operation in {text.strip()[:80]!r}. {ASK_OP}. {SUPPORTED}")
    st = _State()
    _apply(st, rd, feedback=False)
    pasted = st.pasted
    for fb in feedback:
        rd = _read(fb, feedback=True, context=st)
        if not _says_something(st, rd):
            raise GenerationError(f"I could not apply the correction {fb.strip()[:80]!r}. {CORRECTION_HELP}")
        _refuse_partial_operator(st, rd, fb)
        _apply(st, rd, feedback=True)
    spec, notes = _build(st, text, backend)
    if pasted and pasted.entry:
        kept = st.pasted is pasted               # no correction replaced the pasted operation
        _pasted_reference(spec, notes, pasted, kept and (not feedback or parse_request(text, (), backend)[0]))
    return spec, notes


def _pasted_reference(spec: dict, notes: list[str], pasted: request_module.Pasted, alone: dict | bool) -> None:
    """The pasted module is the reference while the spec computes what it computes (alone: the spec
    of the request without corrections, True for the spec itself, False where a correction replaced
    the operation): a correction that changes it (an eps, a dim) leaves a generated reference."""
    alone = spec if alone is True else alone
    if alone and (alone["expression"], alone["params"]) == (spec["expression"], spec["params"]):
        spec["reference_class"] = pasted.entry
        notes.append(f"the reference is the pasted {pasted.entry}, verbatim, built as {pasted.entry}"
                     f"(*get_init_inputs())")
    else:
        notes.append(f"a correction changed what the pasted {pasted.entry} computes, so the reference is "
                     "generated from the spec")


def _refuse_partial_operator(st: _State, rd: _Reading, correction: str) -> None:
    """A correction that names an operation replaces the operator: one that drops the current
    inputs or the matmul ('scale by 0.5' on x * y, 'with relu' on a matmul) names only a part, and
    one that turns a row op into something else without saying so ('log' on softmax, 'of exp(x)'
    on a sum) may mean a part too."""
    if rd.node is None or st.node is None:
        return
    other_kind = ir.kind(rd.node) != ir.kind(st.node) and st.node.op in ir.ROOT_OPS
    if other_kind and not _REPLACE.search(correction):
        raise GenerationError(f"the correction {correction.strip()[:60]!r} reads as {_text(rd.node)!r} in place of "
                              f"{_text(st.node)!r}. Is that what you mean? Say 'make it {_text(rd.node)}', or write "
                              "the whole operation you want.")
    if rd.typed:
        return
    lost = [n for n in _input_names(st) if n not in ir.input_names(rd.node)]
    if lost or (st.matmul and not ir.matmul_node(rd.node)):
        raise GenerationError(f"the correction {correction.strip()[:60]!r} reads as {_text(rd.node)!r}, which drops "
                              f"{', '.join(lost) or 'the matmul'} of {_text(st.node)!r}. Write the whole operation, "
                              f"e.g. 'make it relu({_text(st.node)})'.")


def _says_something(st: _State, rd: _Reading) -> bool:
    said = rd.node, rd.eps, rd.tf32, rd.whole
    return any(v is not None for v in said) or bool(rd.dtypes or rd.shapes or rd.dims) or _names_mentioned(st, rd)


def _names_mentioned(st: _State, rd: _Reading) -> bool:
    """A correction like 'b 4096' or 'b is a vector' is about an input's shape."""
    return any(_said_vector(n, rd.rest) or _bare_shape(n, rd.rest) for n in _input_names(st))


def _build(st: _State, request: str, backend: str | None) -> tuple[dict, list[str]]:
    notes = list(st.op_notes)
    node = _with_eps(st, st.node, notes)
    names = _input_names(st)
    shapes = _matmul_shapes(st, node, names, notes) if st.matmul else _input_shapes(st, node, names, notes)
    if st.pasted_shapes:              # get_inputs' own shapes (a matmul's shared 2-D weight among them)
        shapes = {n: [st.pasted_shapes[n]] for n in names}
    _refuse_class_dim_1(st, node, shapes)
    dtypes = st.dtypes
    if not dtypes:
        dtypes = _default_dtypes(st)
        listed = ", ".join(dtypes[:-1]) + " and " * (len(dtypes) > 1) + dtypes[-1]
        more = " (float32 when asked for: fp32, or tf32 to allow TF32)" if "float32" not in dtypes else ""
        notes.append(f"no dtype named: testing {listed}{more}")
    if st.matmul:
        node = mmf.with_tf32(node, bool(st.tf32) and "float32" in dtypes)
    node = _with_dim(st, node, shapes[_main_input(st, names)])
    domains, index = ir.domains(node), ir.index_inputs(node)
    spec = {
        "name": st.name or _default_name(node, shapes),
        "expression": _text(node),
        "description": _describe(node, shapes),
        "inputs": [{"name": n, "dtypes": [protocol.INDEX_DTYPE] * len(dtypes) if n in index else list(dtypes),
                    "shapes": shapes[n], "domain": domains[n], **({"index_of": index[n]} if n in index else {})}
                   for n in names],
        "outputs": [],                        # filled in by spec.validate from the expression
        "params": _params(node, st.scalars),
        "backend": backend,
        "defaults_used": notes,
        "request": request,
    }
    try:
        return specmod.validate(spec), notes
    except specmod.SpecError as e:
        raise GenerationError(str(e)) from None


def _refuse_class_dim_1(st: _State, node: ir.Node, shapes: dict[str, list[list[int]]]) -> None:
    """Pasted F.cross_entropy takes N-D logits' classes on dim 1; the kernel takes them on the last."""
    if node.op in ir.LOSSES and (st.inputs or -1 not in st.dims):
        logits = ir.input_names(node.args[0])[0]
        if any(len(s) != 2 for s in shapes[logits]):
            raise GenerationError(f"{st.name or 'cross entropy'} on {len(shapes[logits][0])}-D logits, whose classes "
                                  "PyTorch takes on dim 1; the offline kernel takes 2-D logits [rows, classes]. "
                                  "Give 2-D shapes, e.g. 'for 4096x32000'.")


def _with_eps(st: _State, node: ir.Node, notes: list[str]) -> ir.Node:
    if node.op not in ir.NORMS:
        if st.eps is not None:
            raise GenerationError(f"you gave eps {st.eps!r}, but {_text(node)!r} has no eps: only layernorm and "
                                  "rmsnorm take one")
        return node
    eps = st.eps if st.eps is not None else ir.DEFAULT_EPS[node.op]
    if st.eps is None:
        notes.append(f"no eps named: using {eps!r}, the usual {node.op} default")
    return ir.call(node.op, *node.args, **{**dict(node.attrs), "eps": eps})


def _default_dtypes(st: _State) -> list[str]:
    if st.matmul:
        return ["float32"] if st.tf32 else list(mmf.MATMUL_DTYPES)
    return list(protocol.DTYPES)


def _default_shapes(st: _State) -> list[list[int]]:
    if st.matmul:
        return mmf.BMM_DEFAULTS if st.batched else mmf.MATMUL_DEFAULTS
    return DEFAULT_SHAPES


def _input_shapes(st: _State, node: ir.Node, names: list[str], notes: list[str]) -> dict[str, list[list[int]]]:
    """One shape per case for each input: the main input's cases; broadcast vectors get the last
    dim, class indices the cases without it, the rest the main input's shape."""
    main = _main_input(st, names)
    cases = _cases(st, names, main, notes)
    index = ir.index_inputs(node)
    shapes = {main: cases}
    for n in names:
        if n == main:
            continue
        given = _per_case(st.input_shapes[n], len(cases), n) if n in st.input_shapes else [None] * len(cases)
        vector = _is_vector(st, n, names)
        shapes[n] = [g or (c[:-1] if n in index else [c[-1]] if vector else list(c)) for g, c in zip(given, cases)]
        if vector and None in given and node.op not in ir.NORMS:
            notes.append(f"no shape named for {n}: using [N], the last dim of {main}, broadcast over the rows")
        elif st.inputs and not vector and n not in index and None in given:     # a pasted function's parameter
            notes.append(f"no shape named for {n}: using {main}'s shape")
    return shapes


def _matmul_shapes(st: _State, node: ir.Node, names: list[str], notes: list[str]) -> dict[str, list[list[int]]]:
    """Each input's shapes from the cases' problem sizes [B,] M, N, K."""
    problems = st.shapes
    if not problems:
        problems = _default_shapes(st)
        notes.append(f"no shape named: using {sizes_text(problems[0])} and an odd {sizes_text(problems[1])} "
                     "(no block size divides it)")
    mm = ir.matmul_node(node)
    a, b = (x.name for x in mm.args)
    epilogue = {n: _is_vector(st, n, names) for n in names if n not in (a, b)}
    if given := [n for n in st.input_shapes if n in epilogue or n in (a, b)]:
        raise GenerationError(f"the shape given for {given[0]} is not read: a matmul's shapes are its problem sizes "
                              "('64x128 by 128x256', or M, N and K), and its epilogue inputs take [N] (a bias) or "
                              "the output's shape.")
    notes += [f"no shape named for {n}: using [N], the output's last dim, broadcast over its rows"
              for n, vector in epilogue.items() if vector]
    cases = [mmf.matmul_shapes(p, a, b, epilogue, mm.attr("ta"), mm.attr("tb")) for p in problems]
    return {n: [c[n] for c in cases] for n in names}


def _cases(st: _State, names: list[str], main: str, notes: list[str]) -> list[list[int]]:
    if st.shapes:
        return st.shapes
    given = [s for n, lst in st.input_shapes.items() if n in names for s in lst if s]
    if given:                 # "b: [1024]" alone: keep the default rows, take the last dim from b
        n_last = given[0][-1]
        cases = [[rows, n_last] for rows, _ in DEFAULT_SHAPES]
        notes.append(f"no shape named for {main}: using {cases[0][0]}x{n_last} and {cases[1][0]}x{n_last} "
                     f"to match the shapes given")
        return cases
    notes.append("no shape named: using 4096x4096 and an odd 5333x497 (no block size divides it)")
    return [list(s) for s in DEFAULT_SHAPES]


def _with_dim(st: _State, node: ir.Node, cases: list[list[int]]) -> ir.Node:
    """The dim named in words: any one for a reduction (written -1 when it is the last dim of
    every case), the last one only for softmax, norms and cross entropy."""
    k = ir.kind(node)
    if k in ("pointwise", "matmul") and st.whole:
        raise GenerationError(f"you said {st.whole!r}, but {_text(node)!r} is elementwise; a reduction over all "
                              "elements (one value) is not supported by the offline generator.", unplaced=[st.whole])
    if k in ("pointwise", "matmul"):
        if st.dims:
            raise GenerationError(f"you named a dim ({', '.join(map(str, st.dims))}), but {_text(node)!r} is "
                                  "elementwise and runs over no dim. Which reduction or row operation over it did "
                                  f"you mean? {SUPPORTED}", unplaced=[f"over dim {d}" for d in st.dims])
        return node
    reduces = k in ("reduce", "argreduce")
    if st.whole:
        raise GenerationError(f"{node.op} over {st.whole!r} is not supported: {node.op} runs over one dim"
                              f"{' at a time, e.g. dim 0 or the last dim' if reduces else ', the last'}. {SUPPORTED}")
    written = node.attr("dim", -1)
    if st.dims and written is not None and st.typed and written not in st.dims:
        raise GenerationError(f"{_text(node)!r} is over dim {written}, but the words say dim {st.dims[0]}; which one?")
    dims = list(dict.fromkeys(st.dims)) or ([] if written is None else [written])
    if not dims:
        raise GenerationError(f"{node.op} over which dim? Say e.g. '{node.op} over the last dim' or 'over dim 0'. "
                              f"A {node.op} over all elements (one value) is not supported by the offline generator.")
    if len(dims) > 1:
        raise GenerationError(f"I found dims {', '.join(map(str, dims))}: {node.op} runs over one dim; which one?")
    last = all(dims[0] in (-1, len(c) - 1) for c in cases)
    if reduces:
        return ir.with_dim(node, -1 if last else dims[0])
    if not last:
        raise GenerationError(f"{node.op} over dim {dims[0]} is not supported: {node.op} runs over the last dim "
                              f"(dim=-1) only. {SUPPORTED}")
    return ir.with_dim(node, -1) if node.op in ir.ROW_PRESERVING else node


def _text(node: ir.Node) -> str:
    # to_text wraps every infix operation in parentheses; ast.unparse keeps only the needed ones
    return ast.unparse(ast.parse(ir.to_text(node), mode="eval"))


def _default_name(node: ir.Node, shapes: dict[str, list[list[int]]]) -> str:
    k = ir.kind(node)
    if k == "matmul":
        return mmf.matmul_name(node, batched=_batched(node, shapes))
    parts: list[str] = []
    for sub in node.walk():
        if sub.op in ("input", "const"):
            continue
        label = "scale" if sub.op == "mul" and any(a.op == "const" for a in sub.args) else sub.op
        if label not in parts:
            parts.append(label)
    name = "_".join(parts[:3])
    if k in ("reduce", "argreduce"):       # "sum" alone would shadow the builtin in the generated files
        d = node.attr("dim")
        name += "_last_dim" if d == -1 else f"_dim{d}" if d >= 0 else f"_dim_neg{-d}"
    elif k == "loss" and node.attr("reduction") == "none":
        name += "_per_row"
    return name


def _batched(node: ir.Node, shapes: dict[str, list[list[int]]]) -> bool:
    return any(len(s) == 3 for s in shapes[ir.matmul_node(node).args[0].name])


def _describe(node: ir.Node, shapes: dict[str, list[list[int]]]) -> str:
    k = ir.kind(node)
    if k == "pointwise":
        return f"elementwise {_text(node)}"
    if k == "matmul":
        a, b = (x.name for x in ir.matmul_node(node).args)
        title = f"{'batched ' * _batched(node, shapes)}matrix multiplication {a} @ {b}"
        return title if node.op == ir.MATMUL else f"{title} with epilogue {_text(node)}"
    inner = _text(node.args[0])
    if k == "norm":
        title = {"layernorm": "layer norm", "rmsnorm": "RMS norm"}[node.op]
        extras = " and ".join(a.name for a in node.args[1:])
        return f"{title} of {inner} over the last dim{f' with {extras}' if extras else ''}, eps={node.attr('eps')!r}"
    if k == "loss":
        return (f"cross entropy of logits {inner} against class indices {node.args[1].name} over the last dim, "
                f"reduction {node.attr('reduction')}")
    d = node.attr("dim", -1)
    return f"{node.op} of {inner} over {'the last dim' if d == -1 else f'dim {d}'}"


def _params(node: ir.Node, scalars: dict[str, float]) -> dict:
    params: dict = dict(scalars)
    for sub in node.walk():
        if sub.op in ir.NORMS:
            params["eps"] = sub.attr("eps")
        elif sub.op == "clamp":
            params.update({k: sub.attr(k) for k in ("min", "max") if sub.attr(k) is not None})
        elif sub.op == "pow":
            params["exponent"] = sub.attr("exponent")
        elif sub.op == "gelu" and sub.attr("approximate") == "tanh":
            params["approximate"] = "tanh"
        elif sub.op in ir.LOSSES:
            params["reduction"] = sub.attr("reduction")
        elif sub.op == ir.MATMUL and sub.attr("tf32"):
            params["tf32"] = True
    if ir.kind(node) in ("reduce", "argreduce") and node.attr("dim") != -1:
        params["dim"] = node.attr("dim")
    return params
