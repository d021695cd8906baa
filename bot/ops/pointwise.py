"""The pointwise family: elementwise arithmetic, comparisons, where, the activations and their
compositions. It is also the body language every other family's prologue and epilogue is written
in, so it owns the op tables both lowerings write bodies with (torch for the reference, Triton for
the kernel) and the constant folding they share.

Owns: its words (English and Chinese), its IR rules, the torch and Triton op tables, the flat
elementwise kernel (one program per BLOCK outputs, broadcasting inputs by strides) with its config
space and default rule, and its catalog entries.
"""
from __future__ import annotations

import ast
import copy
import math
import re
from typing import Callable

from bot.ops.entry import Entry
from bot.codegen.code import Code, body_text, doc_text, jit_source, launch
from bot.codegen.expr import COMPARE, ExprWriter, OpWriter, call_writer, fmt_const
from bot.codegen.kernel_file import (Body, KernelFile, KernelInput, _expanded_strides, _require_full, empty_line,
                                     shape_lines)
from bot.ops.node import (MOVERS, Call, IRError, Node, arity, broadcast_shapes, call, const, fmt_num, inp, input_names,
                          is_int_literal, is_none, number, plain_text, prints, substitute, to_text)
from bot.ops.text import END as _END, FLAGS as _F, NUM as _NUM

NAME = "pointwise"
ROOT = False
OUTPUT_DTYPES: dict[str, str] = {}
UNARY = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "relu", "gelu", "silu", "sigmoid", "tanh", "erf", "pow", "clamp",
         "sin", "cos", "floor", "ceil", "atan"}
BINARY = {"add", "sub", "mul", "div", "maximum", "minimum", "fmod"}
# Rotary embedding's rotate_half(x) = cat((-x[..., D/2:], x[..., :D/2]), dim=-1) of an input x: the
# request reader writes that cat so where every case's last dim is 2 * D/2 (rotation); the kernel
# reads x a half-row over instead of building the cat.
ROTATE_HALF = "rotate_half"
# F.prelu(x, weight): its weight is one value or one per channel (x's dim 1), which NumPy broadcasting
# would put on the last dim; prelu_settled writes it out once x's rank is known.
PRELU = "prelu"
OPS = UNARY | BINARY | COMPARE | {"where", ROTATE_HALF, PRELU}
# Inputs whose values reach these ops need a restricted domain.
POSITIVE_DOMAIN_OPS = {"log", "sqrt", "rsqrt"}
# Ops whose result is exact on values already in the dtype: they add no rounding (generated tests).
EXACT = {"neg", "abs", "relu", "maximum", "minimum", "clamp", "where", ROTATE_HALF} | COMPARE
SUPPORTED = ("pointwise", "+ - * / ** (by a constant), neg, abs, exp, log, sqrt, rsqrt, relu, erf, sin, cos, tan, floor, "
             "ceil, trunc, frac, round, atan, atan2, asin, acos, sinh, cosh, asinh, atanh, hypot, fmod, remainder "
             "(x % y), floor_divide (x // y, div's rounding_mode), copysign, cross (with its dim), one_hot (a mask), erfc, logit, xlogy, sinc, heaviside, deg2rad, "
             "rad2deg, "
             "gelu (approximate='none' or 'tanh'), silu, sigmoid, tanh, maximum, minimum, "
             "where(cond, a, b), masked_fill(x, mask, value), clamp(x, min, max), clamp_min, clamp_max, "
             "expm1, log1p, log2, log10, exp2, sign, addcmul, addcdiv, lerp, logaddexp, the activations of "
             "torch.nn.functional (softmin, threshold, glu, pairwise_distance, prelu, rrelu out of training too), "
             "torch.outer, torch.cdist, nan_to_num (with posinf and neginf), dropout with p=0, "
             "comparisons, constants")
ALIASES = {"negative": "neg", "swish": "silu", "clip": "clamp", "multiply": "mul", "divide": "div",
           "true_divide": "div", "subtract": "sub", "square": "square", "gelu_tanh": "gelu_tanh",
           "reciprocal": "reciprocal", "arctan": "atan", "arctan2": "atan2", "arcsin": "asin", "arccos": "acos",
           "arcsinh": "asinh", "arctanh": "atanh"}

# PyTorch activations written in the IR's own ops: (parameters with PyTorch's defaults, formula), from
# PyTorch's documented definitions. Their kernels and generated references compute the formula; a
# pasted module's reference is the pasted call itself, so the formula is checked against PyTorch.
_SOFTPLUS = "where(x * beta > threshold, x, log(1.0 + exp(x * beta)) / beta)"


COMPOSITES: dict[str, tuple[tuple[tuple[str, float | None], ...], str]] = {
    "leaky_relu": ((("x", None), ("negative_slope", 0.01)), "where(x > 0, x, x * negative_slope)"),
    "elu": ((("x", None), ("alpha", 1.0)), "where(x > 0, x, alpha * (exp(x) - 1.0))"),
    "celu": ((("x", None), ("alpha", 1.0)), "where(x > 0, x, alpha * (exp(x / alpha) - 1.0))"),
    "selu": ((("x", None),), "1.0507009873554804934193349852946 * where(x > 0, x, "
                             "1.6732632423543772848170429916717 * (exp(x) - 1.0))"),
    "relu6": ((("x", None),), "clamp(x, 0.0, 6.0)"),
    "hardtanh": ((("x", None), ("min_val", -1.0), ("max_val", 1.0)), "clamp(x, min_val, max_val)"),
    "hardsigmoid": ((("x", None),), "clamp(x / 6.0 + 0.5, 0.0, 1.0)"),
    "hardswish": ((("x", None),), "x * clamp(x + 3.0, 0.0, 6.0) / 6.0"),
    "softsign": ((("x", None),), "x / (1.0 + abs(x))"),
    "softplus": ((("x", None), ("beta", 1.0), ("threshold", 20.0)), _SOFTPLUS),
    "mish": ((("x", None),), "x * tanh(where(x > 20.0, x, log(1.0 + exp(x))))"),
    "logsigmoid": ((("x", None),), "-where(-x > 20.0, -x, log(1.0 + exp(-x)))"),
    "tanhshrink": ((("x", None),), "x - tanh(x)"),
    "softshrink": ((("x", None), ("lambd", 0.5)), "where(x > lambd, x - lambd, where(x < -lambd, x + lambd, 0.0))"),
    "hardshrink": ((("x", None), ("lambd", 0.5)), "where(abs(x) > lambd, x, 0.0)"),
    # PyTorch's math functions written in the IR's ops (a parameter without a default is a tensor or a number)
    "expm1": ((("x", None),), "exp(x) - 1.0"),
    "log1p": ((("x", None),), "log(1.0 + x)"),
    "log2": ((("x", None),), "log(x) * 1.4426950408889634"),
    "log10": ((("x", None),), "log(x) * 0.4342944819032518"),
    "exp2": ((("x", None),), "exp(x * 0.6931471805599453)"),
    "tan": ((("x", None),), "sin(x) / cos(x)"),
    "trunc": ((("x", None),), "where(x < 0.0, ceil(x), floor(x))"),
    "frac": ((("x", None),), "x - where(x < 0.0, ceil(x), floor(x))"),
    # torch.round: half to even. r = floor(x), d = x - r exactly; a tie goes to the even of r and r + 1.
    # From 2**23 on every float is an integer (and inf, NaN stay as they are).
    "round": ((("x", None),), "where(abs(x) < 8388608.0, where(x - floor(x) > 0.5, floor(x) + 1.0, "
                              "where(x - floor(x) < 0.5, floor(x), floor(x) + (floor(x) - 2.0 * floor(floor(x) * 0.5)))), x)"),
    # atan of the quotient, moved to the quadrant (other, x) lies in; on the axes torch's values, NaN
    # where either is (a zero's sign is not read: atan2(-0.0, -1.0) is pi here, -pi in torch)
    "atan2": ((("x", None), ("other", None)),
              "where(other > 0.0, atan(x / other), where(other < 0.0, where(x >= 0.0, atan(x / other) + "
              "3.141592653589793, atan(x / other) - 3.141592653589793), where(other == 0.0, where(x > 0.0, "
              "1.5707963267948966, where(x < 0.0, -1.5707963267948966, x * 0.0)), x + other)))"),
    "asin": ((("x", None),), "atan(x / sqrt(1.0 - x * x))"),
    "acos": ((("x", None),), "1.5707963267948966 - atan(x / sqrt(1.0 - x * x))"),
    "sinh": ((("x", None),), "(exp(x) - exp(-x)) * 0.5"),
    "cosh": ((("x", None),), "(exp(x) + exp(-x)) * 0.5"),
    # odd, so computed on |x|: x + sqrt(x * x + 1) cancels for x << 0
    "asinh": ((("x", None),), "where(x < 0.0, -log(abs(x) + sqrt(x * x + 1.0)), log(abs(x) + sqrt(x * x + 1.0)))"),
    "atanh": ((("x", None),), "0.5 * (log(1.0 + x) - log(1.0 - x))"),
    "hypot": ((("x", None), ("other", None)), "sqrt(x * x + other * other)"),
    # torch.remainder (Python's %): fmod moved by one divisor where its sign is not the divisor's
    "remainder": ((("x", None), ("other", None)),
                  "where((fmod(x, other) < 0.0) != (other < 0.0), where(fmod(x, other) != 0.0, fmod(x, other) + other, "
                  "fmod(x, other)), fmod(x, other))"),
    # torch.copysign: |x| with other's sign bit (-0.0 and -inf read as negative through 1 / other)
    "copysign": ((("x", None), ("other", None)), "where((other < 0.0) | (1.0 / other < 0.0), -abs(x), abs(x))"),
    # torch.floor_divide and //, as torch computes them for floats: (x - fmod) / other, one less where
    # fmod's sign is not other's, then rounded to the nearest whole number (the quotient is within
    # rounding of one); a zero quotient keeps the true quotient's sign; x / other where other is 0 (or NaN)
    "floor_divide": ((("x", None), ("other", None)),
                     "where(abs(other) > 0.0, where(_q != 0.0, where(_q - floor(_q) > 0.5, floor(_q) + 1.0, "
                     "floor(_q)), (x / other) * 0.0), x / other)".replace(
                         "_q", "where((fmod(x, other) != 0.0) & ((other < 0.0) != (fmod(x, other) < 0.0)), _d - 1.0, _d)")
                     .replace("_d", "((x - fmod(x, other)) / other)")),
    # torch.cross of 3-vectors along dim (asked for: torch.cross's own default is the first dim of size 3)
    "cross": ((("x", None), ("other", None), ("dim", None)),
              "torch.cat([x.narrow(dim, 1, 1) * other.narrow(dim, 2, 1) - x.narrow(dim, 2, 1) * other.narrow(dim, 1, 1), "
              "x.narrow(dim, 2, 1) * other.narrow(dim, 0, 1) - x.narrow(dim, 0, 1) * other.narrow(dim, 2, 1), "
              "x.narrow(dim, 0, 1) * other.narrow(dim, 1, 1) - x.narrow(dim, 1, 1) * other.narrow(dim, 0, 1)], dim=dim)"),
    "erfc": ((("x", None),), "1.0 - erf(x)"),
    # torch.logit(x, eps): x clamped to [eps, 1 - eps] first; the default -1 leaves every x in [-1, 2]
    # as it is, and those outside have no logit either way (NaN)
    "logit": ((("x", None), ("eps", -1.0)), "log(clamp(x, eps, 1.0 - eps)) - log(1.0 - clamp(x, eps, 1.0 - eps))"),
    "xlogy": ((("x", None), ("other", None)), "where(x == 0.0, x * 0.0, x * log(other))"),
    "sinc": ((("x", None),), "where(x == 0.0, x * 0.0 + 1.0, sin(3.141592653589793 * x) / (3.141592653589793 * x))"),
    "heaviside": ((("x", None), ("values", None)), "where(x == 0.0, values, where(x > 0.0, 1.0, values * 0.0))"),
    "deg2rad": ((("x", None),), "x * 0.017453292519943295"),
    "rad2deg": ((("x", None),), "x * 57.29577951308232"),
    # PyTorch's functions of views and reductions, in the ops that compute them
    "glu": ((("x", None), ("dim", -1)), "x.chunk(2, dim)[0] * sigmoid(x.chunk(2, dim)[1])"),
    "pairwise_distance": ((("x1", None), ("x2", None), ("p", 2.0), ("eps", 1e-6)), "norm(x1 - x2 + eps, p=p, dim=-1)"),
    "outer": ((("x", None), ("vec2", None)), "x.reshape(-1, 1) * vec2"),
    # every row of x1 against every row of x2 (batched over leading dims), the differences read directly:
    # torch's own p=2 path through a product cancels where points are close, this does not
    "cdist": ((("x1", None), ("x2", None), ("p", 2.0)), "norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p=p, dim=-1)"),
    "threshold": ((("x", None), ("threshold", None), ("value", None)), "where(x <= threshold, value, x)"),   # NaN: x
    # torch: 0 for NaN and -0.0; the last branch a tensor (x * 0.0) so the result keeps x's dtype
    "sign": ((("x", None),), "where(x > 0.0, 1.0, where(x < 0.0, -1.0, where(x != x, 0.0, x * 0.0)))"),
    "clamp_min": ((("x", None), ("min", None)), "maximum(x, min)"),
    "clamp_max": ((("x", None), ("max", None)), "minimum(x, max)"),
    "addcmul": ((("x", None), ("tensor1", None), ("tensor2", None), ("value", 1.0)), "x + value * tensor1 * tensor2"),
    "addcdiv": ((("x", None), ("tensor1", None), ("tensor2", None), ("value", 1.0)), "x + value * tensor1 / tensor2"),
    "lerp": ((("x", None), ("end", None), ("weight", None)), "x + weight * (end - x)"),
    "logaddexp": ((("x", None), ("other", None)), "maximum(x, other) + log(1.0 + exp(-abs(x - other)))"),
    # NaN and infinity tests (bool, as comparisons are)
    "isnan": ((("x", None),), "x != x"),
    "isinf": ((("x", None),), "abs(x) == inf"),
    "isfinite": ((("x", None),), "abs(x) < inf"),
    "isposinf": ((("x", None),), "x == inf"),
    "isneginf": ((("x", None),), "x == -inf"),
    # a tensor of x's shape and dtype holding one value, whatever x holds (inf and NaN take the other branch)
    "zeros_like": ((("x", None),), "where(abs(x) < inf, x * 0.0, 0.0)"),
    "ones_like": ((("x", None),), "where(abs(x) < inf, x * 0.0 + 1.0, 1.0)"),
    "full_like": ((("x", None), ("fill_value", 0.0)), "where(abs(x) < inf, x * 0.0 + fill_value, fill_value)"),
}

# torch's logical functions of two masks -> logical()'s op
LOGICAL = {"logical_and": "and", "logical_or": "or", "logical_xor": "xor"}

# The keywords each function is read with (any other is refused: it may change the result).
KEYWORDS = {"gelu": {"approximate"}, "clamp": {"min", "max"}, "masked_fill": {"mask", "value"}, "div": {"rounding_mode"},
            "one_hot": {"num_classes"},
            "dropout": {"p", "training", "inplace"}, PRELU: {"weight"}, "rrelu": {"lower", "upper", "training"},
            "nan_to_num": {"nan", "posinf", "neginf"},
            **{name: {p for p, _ in params[1:]} for name, (params, _) in COMPOSITES.items()}}
# Functions read with no keyword at all.
FUNCTIONS = set(KEYWORDS) | UNARY | BINARY | COMPARE | {"square", "reciprocal", "gelu_tanh", "pow", "where",
                                                      "logical_not", "bool", ROTATE_HALF, *LOGICAL}

# tl.maximum/minimum drop NaN by default; torch's maximum, minimum, relu, clamp and max/min keep it.
NAN_WINS = "propagate_nan=tl.PropagateNan.ALL"
CLAMP_WORD = re.compile(r"\bclamp\w*|\bclip\w*|限幅|截断", _F)
# "swiglu of x and y", "geglu on 8x4096 with hidden 11008" (the MLP: both projections of x, then the gate)
GATED_WORD = re.compile(r"\b(swi|ge|re)[\s_-]?glu\b", _F)
_GATES = {"swi": "silu", "ge": "gelu", "re": "relu"}
_HIDDEN_NAME = re.compile(r"hidden|intermediate|inner|ffn", re.I)
_HIDDEN = re.compile(rf"\b(?:{_HIDDEN_NAME.pattern})(?:[\s_-]+(?:size|dim|features))?\s*(?:of|=|:|is)?\s*(\d+)\b", _F)


def gated_words(text: str, shapes: list[tuple[str | None, list[int]]]) -> tuple[str, str, list[str], list]:
    """(expression, text without the words read, notes, the inputs' shapes) for a gated activation in
    words: act(x) * y of two tensors (the shapes as said), or with a hidden size, the MLP act(x @ w1) *
    (x @ w2), w1 and w2 [features, hidden] of x's last dim (x the shape said)."""
    m = GATED_WORD.search(text)
    act = _GATES[m.group(1).lower()]
    hidden = _HIDDEN.search(text)
    text = re.sub(rf"\b(?:{_HIDDEN_NAME.pattern})\b", " ", _HIDDEN.sub(" ", GATED_WORD.sub(" ", text)), flags=re.I)
    # "hidden size 11008" the shape reader took as a shape of that name
    sized = [s[0] for label, s in shapes if label and _HIDDEN_NAME.fullmatch(label) and len(s) == 1]
    shapes = [(label, s) for label, s in shapes if not (label and _HIDDEN_NAME.fullmatch(label))]
    hidden = int(hidden.group(1)) if hidden else sized[0] if sized else None
    if hidden is None:
        return f"{act}(x) * y", text, [f"read {m.group(0)!r} as {act}(x) * y, the gate over two tensors; give a "
                                       "hidden size ('with hidden 11008') for the MLP's two projections"], shapes
    if not shapes or any(len(s) != 2 for _, s in shapes):
        raise IRError(f"{m.group(0)} with a hidden size projects the rows of a 2-D x: give its shape, e.g. "
                      f"'{m.group(0)} on 16x4096 with hidden 11008' (other ranks: type 'silu(x @ w1) * (x @ w2) with "
                      "x 2x8x4096, w1 4096x11008, w2 4096x11008')")
    # each case's problem [M, N, K]: x's rows by the hidden size over its features
    problems = [(None, [s[0], hidden, s[1]]) for _, s in shapes]
    return f"{act}(x @ w1) * (x @ w2)", text, [], problems


# Request words, in the order they are looked for (an earlier word wins: "square root" before
# "square"): (pattern, kind, op). kind "step" applies to the operand so far, "binary" joins two
# inputs, "where" selects.
_PARAM = rf"(?:\s+(?:with\s+)?(?:an?\s+)?(?:(?:negative[\s_-]+)?slope|alpha|beta|lambda|lambd)\s*(?:of|=|:|is)?\s*({_NUM}){_END})?"


def _keyword(name: str, said: str = "") -> str:
    """An activation's keyword argument in words ('threshold 10', 'and max 2'), as the named group
    `name` (the request reader passes named groups as keywords)."""
    return (rf"(?:\s*(?:,|and)?\s*(?:with\s+)?(?:an?\s+|the\s+)?(?:{said or name})\s*(?:of|=|:|is)?\s*"
            rf"(?P<{name}>{_NUM}){_END})?")
# A bias named before an activation, the add ("bias gelu", "bias + relu", "bias_silu"): the separator
# is the bias word's, so the activation's word stands alone.
BIAS_THEN = r"[\s_-]*\+?[\s_-]*(?=(?:gelu|relu|silu|swish|sigmoid|tanh|mish|leaky|elu|selu)\b)"
# Words that hold other families' or this one's ('outer product' holds 'product'; 'bias gelu' names
# an add before the gelu): looked for before every other word.
EARLY_WORDS = [(re.compile(p, _F), kind, op) for p, kind, op in [
    (r"\bouter[\s_-]+product\b|外积", "binary", "outer"),
    (rf"\bbias{BIAS_THEN}", "binary", "add"),
]]
WORDS = EARLY_WORDS + [(re.compile(p, _F), kind, op) for p, kind, op in [
    # activations PyTorch builds from these (COMPOSITES), before the words their names hold (tanh, sigmoid, relu)
    # relu(x) ** 2 (Primer's activation), read before "relu" and "square" apart
    (r"\bsquared[\s_-]+relu\b|\brelu[\s_-]*(?:squared|\^\s*2|²)|平方\s*relu|relu\s*平方", "step", "squared_relu"),
    (rf"\bleaky[\s_-]?relu\b{_PARAM}|(?:带)?泄[漏露]\s*(?:的\s*)?relu{_PARAM}", "step", "leaky_relu"),
    (r"\brelu[\s_-]?6\b", "step", "relu6"),
    (rf"\belu\b{_PARAM}", "step", "elu"),
    (rf"\bcelu\b{_PARAM}", "step", "celu"),
    (r"\bselu\b", "step", "selu"),
    (rf"\bsoft[\s_-]?plus\b{_keyword('beta')}{_keyword('threshold')}", "step", "softplus"),
    (r"\bsoft[\s_-]?sign\b", "step", "softsign"),
    (r"\bhard[\s_-]?sigmoid\b", "step", "hardsigmoid"),
    (r"\bhard[\s_-]?swish\b", "step", "hardswish"),
    (rf"\bhard[\s_-]?tanh\b{_keyword('min_val', 'min(?:_val|imum)?')}{_keyword('max_val', 'max(?:_val|imum)?')}",
     "step", "hardtanh"),
    (r"\bmish\b", "step", "mish"),
    (r"\blog[\s_-]?sigmoid\b", "step", "logsigmoid"),
    (r"\btanh[\s_-]?shrink\b", "step", "tanhshrink"),
    (rf"\bsoft[\s_-]?shrink\b{_PARAM}", "step", "softshrink"),
    (rf"\bhard[\s_-]?shrink\b{_PARAM}", "step", "hardshrink"),
    (r"\bgelu[\s_-]*\(?\s*tanh(?:[\s_-]+approx\w*)?\b|\btanh[\s-]+approx\w*|\bapprox\w*\s*[=:]?\s*['\"]?tanh\b|"
     r"\bnew[\s_-]?gelu\b", "step", "gelu_tanh"),            # NewGELU: GPT-2's tanh approximation
    (r"\b(?:exact\s+)?gelu(?:[\s_-]*\(?\s*(?:erf|exact))?\b", "step", "gelu"),
    (r"\bsilu\b|\bswish\b", "step", "silu"),
    (r"\bsigmoid\b", "step", "sigmoid"),
    (r"\btanh\b", "step", "tanh"),
    (r"\brelu\b", "step", "relu"),
    (r"\brsqrt\b|\b(?:reciprocal|inverse)\s+(?:of\s+(?:the\s+)?)?square[\s-]root\b|平方根倒数|倒数平方根",
     "step", "rsqrt"),
    (r"\breciprocal\b|倒数", "step", "reciprocal"),
    (r"\bsqrt\b|\bsquare[\s-]root\b|平方根|开方", "step", "sqrt"),
    (r"\bexp(?:onential)?\b|指数", "step", "exp"),
    (r"\berf\b|\berror\s+function\b|误差函数", "step", "erf"),
    (r"\blog(?:arithm)?\b|\bln\b|对数", "step", "log"),
    (r"\babs(?:olute(?:\s+value)?)?\b|绝对值", "step", "abs"),
    (r"\bneg(?:ate|ation)?\b|取负|相反数", "step", "neg"),
    (rf"\bscal(?:e|ed|es|ing)\b(?:\s+[a-z]\w?)?\s+by\s+(?:alpha\s*=?\s*)?({_NUM}){_END}|"
     rf"\b(?:scale(?:\s+factor)?|alpha)\s*(?:=|:|of|is)?\s*({_NUM}){_END}|"
     rf"缩放\s*(?:系数|因子)?\s*(?:为|是|=|:)?\s*({_NUM}){_END}\s*倍?|乘以\s*({_NUM}){_END}", "step", "scale"),
    (rf"\b(?:multipl(?:y|ied|ication)|times)\s+(?:[a-z]\w?\s+)?(?:by\s+)?(?:(?:a|the)\s+)?(?:scalar\s+(?:value\s+)?"
     rf"(?:of\s+)?)?({_NUM}){_END}", "step", "scale"),
    # a softmax's (or any body's) temperature divides it: "softmax with temperature 0.7"
    (rf"\bdivid(?:e|ed)\s+(?:[a-z]\w?\s+)?by\s+({_NUM}){_END}|除以\s*({_NUM}){_END}|"
     rf"\btemperature\s*(?:t\s*)?(?:of|=|:|is)?\s*({_NUM}){_END}|温度\s*(?:系数)?\s*(?:为|是|=|:)?\s*({_NUM}){_END}",
     "step", "divide"),
    (rf"\b(?:pow(?:er)?|to\s+the\s+power(?:\s+of)?|exponent)\s*(?:of|=|:)?\s*({_NUM}){_END}", "step", "pow"),
    (r"\bsquared?\b|平方", "step", "square"),
    (r"\bcubed?\b|立方", "step", "cube"),
    (CLAMP_WORD.pattern, "step", "clamp"),
    (r"\bbias[\s_-]?add\b|\badd(?:s|ed|ing|ition)?\b|\bplus\b|加法|相加", "binary", "add"),
    (r"\bsub(?:tract\w*)?\b|\bdifference\b|\bminus\b|减法|相减|(?:的|之)差(?!异)|(?<![相])减(?!法)去?", "binary", "sub"),
    (r"\bmul(?:tiply|tiplied|tiplication)?\b|\btimes\b|乘法|相乘", "binary", "mul"),    # "product": fused's
    (r"\bdiv(?:ide[ds]?|ision)?\b|\bquotient\b|除法|相除|除以(?!\s*[-+.\d])", "binary", "div"),
    (r"\bwhere\b(?!\s+[A-Za-z]\w*\s+(?:is|are|has)\b)|\bselect\b", "where", "where"),
]]


# ---------------------------------------------------------------- IR rules

def convert(c: Call) -> Node | None:
    """The IR of a pointwise call, or None when fname is not one of this family's."""
    fname, args, kw = c.fname, c.args, c.kw
    if fname in ("square",):
        return call("pow", c.expr(args[0]), exponent=2.0)
    if fname == "reciprocal":
        return call("div", const(1.0), c.expr(args[0]))
    if fname == "gelu_tanh":
        return call("gelu", c.expr(args[0]), approximate="tanh")
    if fname == "div" and not is_none(kw.get("rounding_mode")):
        return _rounded_division(c)
    if fname == "one_hot":
        return _one_hot(c)
    if fname == "copysign" and len(args) == 2 and _is_number_written(args[1]):
        # a number's sign bit is known here (-0.0 included); a tensor's is read in the kernel
        magnitude = call("abs", c.expr(args[0]))
        return magnitude if math.copysign(1.0, number(args[1])) > 0 else call("neg", magnitude)
    if fname in BINARY | COMPARE:
        arity(fname, args, 2)
        return call(fname, c.expr(args[0]), c.expr(args[1]))
    if fname == "pow":
        arity(fname, args, 2)
        return power(args[0], args[1], c.expr)
    if fname == "clamp":
        if len(args) > 3:
            raise IRError(f"clamp takes x, min and max, got {len(args)} arguments")
        written = (args[1] if len(args) > 1 else kw.get("min"), args[2] if len(args) > 2 else kw.get("max"))
        if any(not _is_bound(w) for w in written):
            return _clamped_by_tensors(c.expr(args[0]), *(None if is_none(w) else c.expr(w) for w in written))
        lo, hi = (_bound(w) for w in written)
        if lo is None and hi is None:
            raise IRError("clamp needs min, max or both, e.g. clamp(x, -1.0, 1.0)")
        return call("clamp", c.expr(args[0]), min=lo, max=hi)
    if fname == "gelu":
        arity(fname, args, 1)                        # approximate is keyword-only in PyTorch
        approx = kw.get("approximate")
        mode = approx.value if isinstance(approx, ast.Constant) else ("none" if approx is None else approx)
        if mode not in ("none", "tanh"):
            mode = ast.unparse(mode) if isinstance(mode, ast.AST) else mode
            raise IRError(f"gelu approximate must be 'none' or 'tanh', got {mode!r}")
        return call("gelu", c.expr(args[0]), approximate=mode)
    if fname == "where":
        arity(fname, args, 3)
        return call("where", *(c.expr(a) for a in args))
    if fname == "masked_fill":
        return _masked_fill(c)
    if fname == "dropout":
        return _dropout(c)
    if fname == PRELU:
        return _prelu(c)
    if fname == "rrelu":
        return _rrelu(c)
    if fname == "nan_to_num":
        return _nan_to_num(c)
    if fname == ROTATE_HALF:
        arity(fname, args, 1)
        x = c.expr(args[0])
        if x.op != "input":
            raise IRError("rotate_half takes an input tensor, e.g. rotate_half(q)")
        return call(ROTATE_HALF, x)
    if fname in LOGICAL:             # torch.logical_and(a, b) on masks, as a & b
        arity(fname, args, 2)
        return logical(LOGICAL[fname], c.expr(args[0]), c.expr(args[1]))
    if fname in ("logical_not", "bool"):     # a mask's complement; x.bool(): where x is not 0
        arity(fname, args, 1)
        return call("eq" if fname == "logical_not" else "ne", c.expr(args[0]), const(0.0))
    if fname in UNARY:
        arity(fname, args, 1)
        return call(fname, c.expr(args[0]))
    if fname in COMPOSITES:
        return _convert_composite(c)
    return None


def _is_number_written(e: ast.expr) -> bool:
    try:
        number(e)
        return True
    except IRError:
        return False


def _one_hot(c: Call) -> Node:
    """F.one_hot(t, num_classes): t compared with every class (torch.arange), a mask; a cast to float
    (.float()) makes it 0 and 1. num_classes is asked for: torch's default takes the largest index
    plus one, which depends on the values."""
    given = dict(zip(("x", "num_classes"), c.args)) | c.kw
    k = given.get("num_classes")
    if "x" not in given or k is None or not is_int_literal(k) or number(k) < 1:
        raise IRError("F.one_hot is read with num_classes as a whole number, e.g. F.one_hot(t, 10) (its default, "
                      "-1, takes the largest index plus one, which depends on the values)")
    classes = ast.Call(ast.Attribute(ast.Name("torch", ast.Load()), "arange", ast.Load()), [k], [])
    column = ast.Call(ast.Attribute(given["x"], "unsqueeze", ast.Load()), [ast.Constant(-1)], [])
    return c.expr(ast.Compare(column, [ast.Eq()], [classes]))


def _rounded_division(c: Call) -> Node:
    """torch.div(x, y, rounding_mode='trunc' or 'floor'): the quotient rounded toward zero, or floor_divide."""
    mode = c.kw.pop("rounding_mode")
    if not (isinstance(mode, ast.Constant) and mode.value in ("trunc", "floor")) or len(c.args) != 2:
        raise IRError(f"div takes x, y and rounding_mode None, 'trunc' or 'floor'; got {ast.unparse(mode)}")
    if mode.value == "floor":
        return _convert_composite(Call("floor_divide", c.written, c.args, c.kw, c.expr))
    return _convert_composite(Call("trunc", c.written, [ast.BinOp(c.args[0], ast.Div(), c.args[1])], c.kw, c.expr))


def _rrelu(c: Call) -> Node:
    """F.rrelu out of training: leaky_relu with the slope (lower + upper) / 2; in training its slopes are random."""
    given = dict(zip(("x", "lower", "upper", "training"), c.args)) | c.kw
    training = given.get("training", ast.Constant(False))
    if not (isinstance(training, ast.Constant) and training.value is False):
        raise IRError("rrelu in training mode draws a random slope per element: no kernel can be checked against it "
                      "(training=False, F.rrelu's default, is leaky_relu with slope (lower + upper) / 2)")
    lower, upper = (number(given[k]) if k in given else d for k, d in (("lower", 1 / 8), ("upper", 1 / 3)))
    x = c.expr(given["x"])
    return call("where", call("ge", x, const(0.0)), x, call("mul", x, const((lower + upper) / 2)))


def _nan_to_num(c: Call) -> Node:
    """torch.nan_to_num with both infinities' replacements given; torch's defaults for them are the
    output dtype's largest finite values, which a float32 body cannot name, so they are asked for."""
    given = dict(zip(("x", "nan", "posinf", "neginf"), c.args)) | c.kw
    if len(c.args) > 4 or not set(given) <= {"x", "nan", "posinf", "neginf"} or "x" not in given:
        raise IRError("nan_to_num takes x, nan, posinf and neginf, e.g. torch.nan_to_num(x, nan=0.0, posinf=1e4, "
                      "neginf=-1e4)")
    if any(is_none(given.get(k)) for k in ("posinf", "neginf")):
        raise IRError("nan_to_num without posinf and neginf puts the output dtype's largest finite values for "
                      "the infinities, which the offline generator does not write: give both, e.g. "
                      "torch.nan_to_num(x, nan=0.0, posinf=1e4, neginf=-1e4)")
    nan, posinf, neginf = (const(number(given[k]) if k in given else 0.0) for k in ("nan", "posinf", "neginf"))
    x = c.expr(given["x"])
    finite = call("where", call("eq", x, const(float("-inf"))), neginf, x)
    return call("where", call("ne", x, x), nan, call("where", call("eq", x, const(float("inf"))), posinf, finite))


def _prelu(c: Call) -> Node:
    """F.prelu(x, weight): x where positive, else weight * x; a number for a weight is leaky_relu's slope."""
    given = dict(zip(("x", "weight"), c.args)) | c.kw
    if len(c.args) > 2 or set(given) != {"x", "weight"}:
        raise IRError("prelu takes x and weight (one value, or one per channel of x's dim 1), e.g. F.prelu(x, w)")
    x, weight = c.expr(given["x"]), c.expr(given["weight"])
    if weight.op == "const":
        return _negative_scaled(x, weight)
    if weight.op != "input":
        raise IRError("prelu's weight must be a tensor input (nn.PReLU's weight) or a number")
    return call(PRELU, x, weight)


def prelu_settled(node: Node, shape_of: Callable[[Node], list[int]]) -> Node:
    """Each prelu(x, w) as where(x > 0, x, w * x), w viewed onto x's dim 1 where x has more than 2 dims
    and w more than one value (shape_of: a subexpression's shape in the first case)."""
    node = Node(node.op, tuple(prelu_settled(a, shape_of) for a in node.args), node.name, node.value, node.attrs)
    if node.op != PRELU:
        return node
    x, weight = node.args
    shape, n = shape_of(x), math.prod(shape_of(weight))
    channels = shape[1] if len(shape) > 1 else 1
    if n not in (1, channels):
        raise IRError(f"prelu's weight has {n} values; it takes 1 or one per channel (dim 1 of x, {channels})")
    if n > 1 and len(shape) > 2:
        weight = call("reshape", weight, sizes=(-1,) + (1,) * (len(shape) - 2))
    return _negative_scaled(x, weight)


def _negative_scaled(x: Node, slope: Node) -> Node:
    """where(x > 0, x, slope * x): a prelu, its slope a number or the weight."""
    return call("where", call("gt", x, const(0.0)), x, call("mul", slope, x))


def _dropout(c: Call) -> Node:
    """F.dropout with p=0 or training=False is its input; any other is random, which no kernel can be
    checked against."""
    given = dict(zip(("x", "p", "training", "inplace"), c.args)) | c.kw
    p = number(given.get("p", ast.Constant(0.5)))
    training = given.get("training", ast.Constant(True))
    if p == 0 or (isinstance(training, ast.Constant) and training.value is False):
        return c.expr(given["x"])
    raise IRError(f"dropout with p={fmt_num(p)} in training mode is random: no kernel can be checked against it "
                  "(p=0 or training=False is the input itself)")


def _masked_fill(c: Call) -> Node:
    """x.masked_fill(mask, value): value where the mask is True, else x."""
    bound = dict(zip(("x", "mask", "value"), c.args)) | {k: c.kw.pop(k) for k in ("mask", "value") if k in c.kw}
    if len(c.args) > 3 or len(bound) != 3:
        raise IRError("masked_fill takes x, a bool mask and a number, e.g. x.masked_fill(mask, 0.0)")
    return call("where", c.expr(bound["mask"]), const(number(bound["value"])), c.expr(bound["x"]))


def power(base: ast.expr, exponent: ast.expr, expr: Callable[[ast.expr], Node]) -> Node:
    """base ** exponent: by a number (x ** 2), or a positive number to a tensor's power (2.0 ** x, as
    exp(x * log(2))); a tensor to a tensor's power is refused (its sign decides torch's result)."""
    try:
        return call("pow", expr(base), exponent=number(exponent))
    except IRError:
        pass
    try:
        value = number(base)
    except IRError:
        raise IRError(f"{ast.unparse(base)} ** {ast.unparse(exponent)}: a power is read by a number (x ** 2), or of "
                      "a positive number (2.0 ** x); for a positive tensor base write exp(y * log(x))") from None
    if value <= 0:
        raise IRError(f"{fmt_num(value)} ** {ast.unparse(exponent)}: a number raised to a tensor's power is read for a "
                      "positive number (0 and negatives give inf, NaN or a sign by the exponent)")
    return call("exp", call("mul", expr(exponent), const(math.log(value))))


def _is_mask(n: Node) -> bool:
    """A bool tensor: a comparison, a bool input (a mask), masks joined by logical(), or a mask moved
    (a triangle of one, a view of one)."""
    return n.op in COMPARE or n.op == "input" or (n.op == "where" and _is_mask(n.args[1]) and _is_mask(n.args[2])) \
        or (n.op in MOVERS and _is_mask(n.args[0]))


def inverted(m: Node) -> Node:
    """~m of a mask: m == 0. An input under ~ is a bool mask (torch's ~ of a float tensor is an error):
    the request reader marks it so (bot.request.expression.inverted_names)."""
    if not _is_mask(m):
        raise IRError(f"~ is the logical not of a mask (a comparison such as x > 0, or a bool input); of {to_text(m)} "
                      "torch's ~ is a bitwise op on integers (not supported)")
    return call("eq", m, const(0.0))


def logical(op: str, a: Node, b: Node) -> Node:
    """a & b, a | b, a ^ b of two masks, written in the ops both lowerings read: and is where(a, b, a),
    or where(a, a, b), xor a != b. Of anything but masks torch's & is a bitwise op on integers (refused)."""
    if not (_is_mask(a) and _is_mask(b)):
        raise IRError(f"{op} joins two masks (comparisons such as x > 0, or bool inputs); the bitwise {op} of other "
                      "tensors is not supported")
    return {"and": call("where", a, b, a), "or": call("where", a, a, b), "xor": call("ne", a, b)}[op]


def _is_bound(n: ast.expr | None) -> bool:
    """Whether n is a clamp bound as a number (or none): not a tensor."""
    try:
        _bound(n)
    except IRError:
        return False
    return True


def _clamped_by_tensors(x: Node, lo: Node | None, hi: Node | None) -> Node:
    """torch.clamp(x, min=lo, max=hi) with tensor bounds: the larger of x and lo, then the smaller of
    that and hi (hi where lo > hi, as torch; NaN in x stays NaN)."""
    if lo is not None:
        x = call("maximum", x, lo)
    return x if hi is None else call("minimum", x, hi)


def _bound(n: ast.expr | None) -> float | None:
    """A clamp bound: a number, or None for 'no bound'."""
    if n is None or (isinstance(n, ast.Constant) and n.value is None):
        return None
    return number(n)


def _convert_composite(c: Call) -> Node:
    """A PyTorch activation written in the IR's own ops: its parameters bound (PyTorch's order and
    defaults) and substituted into its formula."""
    fname, args, kw = c.fname, c.args, c.kw
    params, formula = COMPOSITES[fname]
    if len(args) > len(params):
        raise IRError(f"{fname} takes at most {len(params)} arguments ({', '.join(p for p, _ in params)})")
    bound = dict(zip((p for p, _ in params), args))
    for p, default in params:
        if p in kw:
            bound[p] = kw.pop(p)
        bound.setdefault(p, None if default is None else ast.Constant(default))
    if missing := [p for p, _ in params if bound[p] is None]:
        raise IRError(f"{fname} takes {', '.join(p for p, _ in params)}; {', '.join(missing)} missing")
    # a parameter with a default is a number (an integer where its default is: a dim); one without, an
    # operand (a tensor or a number)
    values = {p: bound[p] if default is None else _number_like(fname, p, bound[p], default) for p, default in params}
    return c.expr(Bind(values).visit(ast.parse(formula, mode="eval").body))


def _number_like(fname: str, name: str, written: ast.expr, default: float | int) -> ast.Constant:
    value = number(written)
    if type(default) is not int:
        return ast.Constant(value)
    if value != int(value):
        raise IRError(f"{fname} takes {name} as an integer, got {ast.unparse(written)!r}")
    return ast.Constant(int(value))


class Bind(ast.NodeTransformer):
    """Substitutes arguments (Python syntax) for a formula's names."""

    def __init__(self, values: dict[str, ast.expr]):
        self.values = values

    def visit_Name(self, n: ast.Name) -> ast.expr:
        return copy.deepcopy(self.values[n.id]) if n.id in self.values else n


_INFIX_TEXT = {"add": "+", "sub": "-", "mul": "*", "div": "/", "gt": ">", "ge": ">=", "lt": "<", "le": "<=",
               "eq": "==", "ne": "!="}


@prints(*_INFIX_TEXT, "pow", "clamp", "gelu")
def _print(node: Node, text: Callable[[Node], str]) -> str:
    if node.op in _INFIX_TEXT:
        return f"({text(node.args[0])} {_INFIX_TEXT[node.op]} {text(node.args[1])})"
    if node.op == "pow":
        return f"({text(node.args[0])} ** {fmt_num(node.attr('exponent'))})"
    if node.op == "clamp":
        return f"clamp({text(node.args[0])}, {node.attr('min')}, {node.attr('max')})"
    if node.op == "gelu" and node.attr("approximate") == "tanh":
        return f"gelu({text(node.args[0])}, approximate='tanh')"
    return f"{node.op}({text(node.args[0])})"


def domains(node: Node, mark: Callable[[Node, str], None]) -> None:
    """Mark the inputs under node's domain-restricted ops: 'positive' under log/sqrt/rsqrt and a
    fractional pow (not under the sqrt of a sum of squares, which any values keep finite), 'unit' under
    log(1 - p) (binary cross entropy's probabilities) and sqrt(1 - p) (asin's), 'nonzero'
    in a denominator or under a negative pow, 'sign' where compared for equality with 1 or -1 (a
    target picking a branch: drawn as -1 and 1, each branch is taken), 'zeros' with 0 (m == 0, a
    mask of ones: drawn with half its values 0)."""
    if node.op in ("log", "sqrt") and (p := _complement(node.args[0])) is not None:
        if p.op != "sigmoid":                   # 1 - sigmoid(x) is in (0, 1) for any x
            mark(p, "unit")
    elif node.op in POSITIVE_DOMAIN_OPS and not positive(node.args[0]) \
            and not (node.op == "sqrt" and nonnegative(node.args[0])):
        mark(node.args[0], "positive")
    elif node.op in ("eq", "ne") and any(a.op == "const" and abs(a.value) in (0, 1) for a in node.args) \
            and not any(a.op in COMPARE for a in node.args):        # not a mask's complement: (x > 0) == 0
        c = next(a for a in node.args if a.op == "const")
        compared = next((a for a in node.args if a.op != "const"), None)       # None: two numbers compared
        if compared is not None:
            mark(compared, "zeros" if c.value == 0 else "sign")
    elif node.op == "pow":
        e = node.attr("exponent")
        if e != int(e):
            mark(node.args[0], "positive")
        elif e < 0:
            mark(node.args[0], "nonzero")
    elif node.op in ("div", "fmod"):
        mark(node.args[1], "nonzero")


def _complement(node: Node) -> Node | None:
    """p where node is 1 - p (or 1 + -p): under a log, p is a probability, below 1 and, where log(p) is
    taken too, above 0."""
    if node.op == "sub" and node.args[0] == const(1.0):
        return node.args[1]
    if node.op == "add" and node.args[0] == const(1.0) and node.args[1].op == "neg":
        return node.args[1].args[0]
    return None


# Reductions of other families whose value is non-negative where their terms are (norm: always).
_SUMS = {"sum", "mean"}


def positive(node: Node) -> bool:
    """Whether node's value is above 0 whatever its inputs hold (short of overflow): exp, sigmoid, a
    constant > 0, a sum of one such and non-negative terms (1 + exp(-abs(x)), softplus's), products."""
    if node.op == "const":
        return node.value > 0
    if node.op in ("exp", "sigmoid"):
        return True
    if node.op == "sqrt":
        return positive(node.args[0])
    if node.op == "add":
        return any(positive(a) for a in node.args) and all(nonnegative(a) for a in node.args)
    return node.op in ("mul", "div") and all(positive(a) for a in node.args)


def nonnegative(node: Node) -> bool:
    """Whether node's value is non-negative whatever its inputs hold: a square (x * x, an even
    power), abs, relu, exp, sqrt, a norm, a constant >= 0, or sums, products, quotients, means of those."""
    if node.op == "const":
        return node.value >= 0
    if node.op in ("abs", "relu", "exp", "sigmoid", "sqrt", "norm"):
        return True
    if node.op == "pow":
        return node.attr("exponent") % 2 == 0
    if node.op == "mul" and node.args[0] == node.args[1]:
        return True
    return node.op in {"add", "mul", "div", "maximum"} | _SUMS and all(nonnegative(a) for a in node.args)


def check(node: Node) -> None:
    """Nothing beyond the IR's own rules: every op here takes any operands."""


# How PyTorch reads a bool tensor (a mask input) as an operand: as itself in where's condition and in
# comparisons; as 1 or 0 beside a float operand of +, *, maximum, minimum, where's branches and a
# division's numerator, the result taking the float's dtype, as the kernels' float math reads it.
# Anything else it refuses (neg, abs, relu, mask - x) or computes in another dtype (mask + mask is a
# logical or, sum(mask) an int64, mask * 2.0 a float32).
_MASK_AS_NUMBER = {"add", "mul", "maximum", "minimum", "where", "div"}


def reads_mask(node: Node, k: int, floats: set[str]) -> bool:
    """Whether node reads its k-th operand, a bool mask, as the kernels do (above); floats: the
    inputs holding floats."""
    if node.op in COMPARE or (node.op == "where" and k == 0) or (node.op in MOVERS and k == 0):
        return True             # (a mask moved, a triangle of one, is a mask: where's condition, compared)
    others = [a for i, a in enumerate(node.args) if i != k and not (node.op == "where" and i == 0)]
    beside_float = any(n in floats for a in others for n in input_names(a))
    return node.op in _MASK_AS_NUMBER and beside_float and not (node.op == "div" and k == 1)


def where_conditions(node: Node) -> set[str]:
    """The inputs standing as a where's condition, bare or moved (a triangle or a flip of one): bool
    masks, as torch.where reads them."""
    found = set()
    for s in node.walk():
        if s.op == "where":
            cond = s.args[0]
            while cond.op in MOVERS:
                cond = cond.args[0]
            if cond.op == "input":
                found.add(cond.name)
    return found


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    if node.op == PRELU:                        # before prelu_settled: x's shape (its weight is checked there)
        return output_shape(node.args[0], shapes)
    if any(n.op == PRELU for n in node.walk()):
        return broadcast_shapes([output_shape(a, shapes) for a in node.args if a.op != "const"] or [[]])
    return broadcast_shapes([shapes[n] for n in input_names(node)])


# ---------------------------------------------------------------- constant folding (both lowerings)

def fold_constants(node: Node) -> Node:
    """Replace subtrees without inputs by their value, so `x / sqrt(2.0)` never asks
    torch or Triton to apply a function to a bare Python number."""
    if node.op in ("input", "const"):
        return node
    args = tuple(fold_constants(a) for a in node.args)
    if node.op == "where" and args[0].op == "const":
        return args[1] if args[0].value != 0 else args[2]
    if any(a.op != "const" for a in args) or not args:       # no operands: a constant tensor (fill's)
        return Node(node.op, args, attrs=node.attrs)
    try:
        value = _CONST_OPS[node.op](*(a.value for a in args), **dict(node.attrs))
    except (ValueError, TypeError, OverflowError, ZeroDivisionError):   # TypeError: a complex power
        raise ValueError(f"the constant part {to_text(node)} has no finite value") from None
    if not math.isfinite(value):
        raise ValueError(f"the constant part {to_text(node)} has no finite value")
    return const(value)


def _gelu(v: float, approximate: str = "none") -> float:
    if approximate == "tanh":
        return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
    return 0.5 * v * (1 + math.erf(v / math.sqrt(2)))


def _clamp(v: float, **bounds: float | None) -> float:
    if bounds.get("min") is not None:
        v = max(v, bounds["min"])
    if bounds.get("max") is not None:
        v = min(v, bounds["max"])
    return v


_CONST_OPS: dict[str, Callable[..., float]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
    "maximum": max, "minimum": min,
    "gt": lambda a, b: float(a > b), "ge": lambda a, b: float(a >= b), "lt": lambda a, b: float(a < b),
    "le": lambda a, b: float(a <= b), "eq": lambda a, b: float(a == b), "ne": lambda a, b: float(a != b),
    "neg": lambda a: -a, "abs": abs, "exp": math.exp, "erf": math.erf, "log": math.log, "sqrt": math.sqrt,
    "rsqrt": lambda a: 1 / math.sqrt(a), "relu": lambda a: max(a, 0.0), "gelu": _gelu,
    "silu": lambda a: a / (1 + math.exp(-a)), "sigmoid": lambda a: 1 / (1 + math.exp(-a)), "tanh": math.tanh,
    "pow": lambda a, exponent: float(a**exponent), "clamp": _clamp, "sin": math.sin, "cos": math.cos,
    "floor": lambda a: float(math.floor(a)), "ceil": lambda a: float(math.ceil(a)), "atan": math.atan,
    "fmod": math.fmod,
}


# ---------------------------------------------------------------- the torch op table (reference)

def _torch_binary_max_min(fn: str, clamp_key: str) -> OpWriter:
    # torch.maximum needs two tensors; against a constant, clamp does the same.
    def write(node: Node, a: list[str]) -> str:
        for tensor, other in ((0, 1), (1, 0)):
            if node.args[other].op == "const":
                return f"torch.clamp({a[tensor]}, {clamp_key}={a[other]})"
        return f"{fn}({a[0]}, {a[1]})"
    return write


def _torch_clamp(node: Node, a: list[str]) -> str:
    bounds = [f"{k}={fmt_const(node.attr(k))}" for k in ("min", "max") if node.attr(k) is not None]
    return f"torch.clamp({a[0]}, {', '.join(bounds)})"


def _torch_gelu(node: Node, a: list[str]) -> str:
    mode = ", approximate='tanh'" if node.attr("approximate") == "tanh" else ""
    return f"torch.nn.functional.gelu({a[0]}{mode})"


def torch_ops(anchor: str) -> dict[str, OpWriter]:
    """The torch op table; `anchor` is the first input, whose dtype and device a
    where() of two constants takes (torch.where(c, 1.0, 0.0) alone would be float32)."""
    def where(node: Node, a: list[str]) -> str:
        if node.args[1].op == "const" and node.args[2].op == "const":
            a = [a[0], f"{anchor}.new_tensor({a[1]})", a[2]]
        return f"torch.where({', '.join(a)})"

    return {
        **{op: call_writer(f"torch.{op}") for op in ("abs", "exp", "log", "sqrt", "rsqrt", "relu", "sigmoid", "tanh",
                                                      "erf", "sin", "cos", "floor", "ceil", "atan")},
        "fmod": lambda node, a: f"torch.fmod({f'{anchor}.new_tensor({a[0]})' if node.args[0].op == 'const' else a[0]}, "
                                f"{a[1]})",
        "silu": call_writer("torch.nn.functional.silu"),
                "gelu": _torch_gelu,
        "pow": lambda node, a: f"torch.pow({a[0]}, {fmt_const(node.attr('exponent'))})",
        "clamp": _torch_clamp,
        "maximum": _torch_binary_max_min("torch.maximum", "min"),
        "minimum": _torch_binary_max_min("torch.minimum", "max"),
        "where": where,
        ROTATE_HALF: lambda node, a: (f"torch.cat((-{a[0]}[..., {a[0]}.shape[-1] // 2:], "
                                      f"{a[0]}[..., :{a[0]}.shape[-1] // 2]), dim=-1)"),
    }


def size_rules(node: Node, cases: list[dict[str, list[int]]]) -> tuple[set[int], int]:
    """A rotated input's last dim keeps its size: the halves were written for it."""
    return {c[n.args[0].name][-1] for n in node.walk() if n.op == ROTATE_HALF for c in cases}, 1


def rotations(node: Node, cases: list[dict[str, list[int]]]) -> Node:
    """cat((-x[..., h:], x[..., :h]), dim=-1) of an input x whose last dim is 2h in every case, where x
    has the output's shape, in a pointwise expression: rotate_half(x), which the kernel reads in place."""
    def is_half(n: Node, start, stop) -> bool:
        return n.op == "slice" and n.args[0].op == "input" and (n.attr("start"), n.attr("stop"), n.attr("step")) == \
            (start, stop, 1)

    def full(case: dict[str, list[int]]) -> list[int] | None:
        try:        # None where the inputs meet through other ops than broadcasting (an outer product)
            return broadcast_shapes([case[name] for name in input_names(node)])
        except IRError:
            return None

    def rotated(n: Node) -> Node:
        n = Node(n.op, tuple(rotated(a) for a in n.args), n.name, n.value, n.attrs)
        if n.op != "cat" or len(n.args) != 2 or n.args[0].op != "neg":
            return n
        high, low = n.args[0].args[0], n.args[1]
        h = low.attr("stop") if low.op == "slice" else None
        if not (is_half(high, h, None) and is_half(low, None, h) and high.args[0] == low.args[0]):
            return n
        x = low.args[0].name
        dims = {n.attr("dim"), high.attr("dim"), low.attr("dim")}
        if all(c[x] and c[x][-1] == 2 * h and dims <= {-1, len(c[x]) - 1} and list(c[x]) == full(c) for c in cases):
            return call(ROTATE_HALF, low.args[0])
        return n
    return rotated(node)


# ---------------------------------------------------------------- the Triton op table (kernel)

def _triton_pow(node: Node, a: list[str]) -> str:
    e = node.attr("exponent")
    if e == 0:
        return f"({a[0]} * 0.0 + 1.0)"
    if e == 0.5:
        return f"tl.sqrt({a[0]})"
    if e == -0.5:
        return f"tl.rsqrt({a[0]})"
    if e == int(e):
        power = f"_powi({a[0]}, {abs(int(e))})"
        return power if e > 0 else f"(1.0 / {power})"
    return f"tl.exp2({fmt_const(e)} * tl.log2({a[0]}))"    # fractional: domain is positive


def _triton_clamp(node: Node, a: list[str]) -> str:
    text = a[0]
    if node.attr("min") is not None:
        text = f"tl.maximum({text}, {fmt_const(node.attr('min'))}, {NAN_WINS})"
    if node.attr("max") is not None:
        text = f"tl.minimum({text}, {fmt_const(node.attr('max'))}, {NAN_WINS})"
    return text


TRITON_OPS: dict[str, OpWriter] = {
    **{op: call_writer(f"tl.{op}") for op in ("abs", "exp", "log", "sqrt", "rsqrt", "sigmoid", "where", "sin", "cos",
                                              "floor", "ceil")},
    "maximum": lambda node, a: f"tl.maximum({a[0]}, {a[1]}, {NAN_WINS})",
    "minimum": lambda node, a: f"tl.minimum({a[0]}, {a[1]}, {NAN_WINS})",
    "tanh": call_writer("_tanh"),
    "erf": call_writer("_erf"),
    "atan": call_writer("_atan"),
    "fmod": lambda node, a: f"({a[0]} % {a[1]})",       # Triton's float % is C's fmod, exact
    "silu": call_writer("_silu"),
    "relu": lambda node, a: f"tl.maximum({a[0]}, 0.0, {NAN_WINS})",
    "gelu": lambda node, a: f"_gelu_tanh({a[0]})" if node.attr("approximate") == "tanh" else f"_gelu({a[0]})",
    "pow": _triton_pow,
    "clamp": _triton_clamp,
}


def triton_body(node: Node, inputs: list[KernelInput]) -> Body:
    """A body in Triton (float32) over the inputs' local names, for any family's kernel."""
    writer = ExprWriter(TRITON_OPS, {i.name: i.local for i in inputs}, as_number="to(tl.float32)", taken=set())
    expr = writer.write(fold_constants(node))
    return Body(writer.lines, expr, node.op == "input", doc_text(plain_text(node)))


class TensorArgsFile(KernelFile):
    """A kernel.py whose op reads each of its arguments as a tensor (a family's gradient part: pool_grad,
    cumext_grad): `tensors`, the kernel inputs they name, in order; the body is the first, as it is."""

    def __init__(self, spec, node, inputs, options):
        self.node = node
        by_name = {i.name: i for i in inputs}
        self.tensors = [by_name[a.name] for a in node.args]
        super().__init__(spec, triton_body(node.args[0], self.tensors[:1]), inputs, self.tensors[:1], options)


# ---------------------------------------------------------------- the elementwise kernel

# The config spaces the benchmark stage sweeps on each case (docs/CONTRACTS.md, tuning contract).
# Pointwise: block size x warps; the default (_pointwise_config) is one of them.
POINTWISE_CONFIGS = [{"BLOCK": block, "num_warps": warps} for block in (1024, 2048, 4096) for warps in (4, 8)]


def _pointwise_config(n):
    # Measured on an H200: 1024-element blocks; 8 warps while the grid is about one wave, 4 once
    # blocks are many (as fast for plain reads, faster where broadcast index math costs registers).
    return {"BLOCK": 1024, "num_warps": 4 if n >= 1 << 22 else 8}


def _broadcast_layout(shape, shapes, rank=None):
    # Output dims and each input's strides over them (0 where broadcast). Neighbouring dims that
    # every input steps through contiguously are merged: fewer dims, fewer divisions per element.
    # Padded with leading size-1 dims to `rank`, the number of dims the kernel was generated for.
    strides = [_expanded_strides(s, shape) for s in shapes]
    dims, merged = [], [[] for _ in shapes]
    for d in reversed(range(len(shape))):
        if shape[d] == 1:
            continue
        if dims and all(st[d] == m[0] * dims[0] for st, m in zip(strides, merged)):
            dims[0] *= shape[d]
            continue
        dims.insert(0, shape[d])
        for st, m in zip(strides, merged):
            m.insert(0, st[d])
    if rank is None:
        return dims, merged
    if len(dims) > rank:
        raise ValueError(f"inputs of shapes {[list(s) for s in shapes]} broadcast over {len(dims)} separate dims of "
                         f"{list(shape)}; this kernel was generated for at most {rank}: regenerate it for these shapes")
    pad = rank - len(dims)
    return [1] * pad + dims, [[0] * pad + m for m in merged]


def kernel_source(spec: dict, node: Node, options: dict) -> str:
    """kernel.py of a pointwise expression: one flat kernel over the output's elements."""
    return _PointwiseKernel.render(spec, node, options)


class _PointwiseKernel(KernelFile):
    description = ("One program per BLOCK outputs of the flattened output. Full blocks load and store without a\n"
                   "mask (vectorized whatever the size); only the last, partial block is masked.")
    block_key = "BLOCK"

    def __init__(self, spec, node, inputs, options):
        # rotate_half(x): a value of its own, x read half a row over (loaded in _load_compute_store)
        self.rotated = [i for i in inputs if call(ROTATE_HALF, inp(i.name)) in set(node.walk())]
        rot = {i.name: KernelInput(f"rotate_half({i.name})", f"{i.local}_rot", i.shapes) for i in self.rotated}
        for name, r in rot.items():
            node = substitute(node, call(ROTATE_HALF, inp(name)), inp(r.name))
        super().__init__(spec, triton_body(node, inputs + list(rot.values())), inputs, inputs + list(rot.values()),
                         options)
        out_shapes = spec["outputs"][0]["shapes"]
        # Inputs with every output element in every case are read at the flat offset (the fast
        # path); the others get a constexpr flag and broadcast strides, decided at launch.
        self.broadcast = [i for i in inputs if any(math.prod(s) != math.prod(o) for s, o in zip(i.shapes, out_shapes))]
        self.rank = max([1] + [len(_broadcast_layout(o, [i.shapes[c] for i in self.broadcast])[0])
                               for c, o in enumerate(out_shapes)])

    def configs(self) -> list[dict]:
        return self._space(POINTWISE_CONFIGS)

    def source(self) -> str:
        helpers = [_pointwise_config, _require_full] + ([_expanded_strides, _broadcast_layout] if self.broadcast else [])
        return self._file([self._offsets_helper(), self._kernel()], helpers, self._launcher())

    def _offsets_helper(self) -> str:
        if not self.broadcast:
            return ""
        r = self.rank
        lines = []
        for k in range(r - 1, 0, -1):
            lines += [f"off {'=' if k == r - 1 else '+='} (i % dim{k}) * s{k}", f"i = i // dim{k}"]
        lines.append("return off + i * s0" if r > 1 else "return i * s0")
        params = ["i"] + [f"dim{k}" for k in range(1, r)] + [f"s{k}" for k in range(r)]
        comment = ("    # Offset into a broadcast input of output element i: split i into one index per output\n"
                   "    # dim and weight each by the input's stride there (0 where it is broadcast).\n")
        return jit_source("_broadcast_offsets", params, lines, comment)

    def _kernel(self) -> str:
        r = self.rank
        params = [f"{i.local}_ptr" for i in self.inputs] + ["out_ptr", "n_elements"] + \
            [f"{i.local}_half" for i in self.rotated]
        if self.broadcast:
            params += [f"dim{k}" for k in range(1, r)]
            params += [f"{i.local}_s{k}" for i in self.broadcast for k in range(r)]
            params += [f"{i.local}_full: tl.constexpr" for i in self.broadcast] + ["INT32_INDEX: tl.constexpr"]
        params.append("BLOCK: tl.constexpr")
        code = Code()("# int64 offsets: more than 2**31 elements are safe.",
                      "block_start = tl.program_id(0).to(tl.int64) * BLOCK",
                      "offs = block_start + tl.arange(0, BLOCK)")
        if self.broadcast:
            code("# Broadcast index math in int32 when the output allows: int64 division is much slower.")
            with code.block("if INT32_INDEX:"):
                code("idx = offs.to(tl.int32)")
            with code.block("else:"):
                code("idx = offs")
        for i in self.broadcast:
            args = ", ".join(["idx"] + [f"dim{k}" for k in range(1, r)] + [f"{i.local}_s{k}" for k in range(r)])
            with code.block(f"if {i.local}_full:"):
                code(f"{i.local}_offs = offs")
            with code.block("else:"):
                code(f"{i.local}_offs = _broadcast_offsets({args})")
        with code.block("if block_start + BLOCK <= n_elements:"):
            code("# A full block: no mask, so loads and stores vectorize even when n_elements is odd.")
            code.extend(self._load_compute_store(masked=False))
        with code.block("else:"):
            code("# The one partial block at the end.", "mask = offs < n_elements")
            code.extend(self._load_compute_store(masked=True))
        return jit_source(f"{self.name}_kernel", params, code.lines)

    def _load_compute_store(self, masked: bool) -> list[str]:
        mask = ", mask=mask" if masked else ""
        lines = []
        for i in self.inputs:
            offs = f"{i.local}_offs" if i in self.broadcast else "offs"
            lines.append(f"{i.local} = tl.load({i.local}_ptr + {offs}{mask}).to(tl.float32)")
        for i in self.rotated:      # rotate_half: the element half a row over, negated in the first half
            first = f"(offs % (2 * {i.local}_half)) < {i.local}_half"
            lines += [f"{i.local}_rot = tl.load({i.local}_ptr + tl.where({first}, offs + {i.local}_half, "
                      f"offs - {i.local}_half){mask}).to(tl.float32)",
                      f"{i.local}_rot = tl.where({first}, -{i.local}_rot, {i.local}_rot)"]
        lines.append(f"tl.store(out_ptr + offs, {self.body_call()}.to(out_ptr.dtype.element_ty){mask})")
        return lines

    def _launcher(self) -> str:
        first = self.inputs[0].local
        text = self._signature_and_prologue()
        checks = [f'_require_full("{i.name}", {i.local}.shape, shape)' for i in self.inputs if i not in self.broadcast]
        text += body_text(shape_lines([i.local for i in self.inputs], checks, always=bool(self.broadcast)))
        args = [i.local for i in self.inputs] + ["out", "n_elements"] + [f"{i.local}.shape[-1] // 2" for i in self.rotated]
        if self.broadcast:
            strides = ", ".join(f"{i.local}_strides" for i in self.broadcast)
            text += (f"    dims, ({strides},) = _broadcast_layout(shape, [{', '.join(f'{i.local}.shape' for i in self.broadcast)}], "
                     f"rank={self.rank})\n")
            args += ["*dims[1:]"] + [f"*{i.local}_strides" for i in self.broadcast]
            args += [f"{i.local}_full={i.local}.numel() == n_elements" for i in self.broadcast]
            args.append("INT32_INDEX=n_elements < 2**31")
        text += body_text([empty_line(first, self.out_dtype(first), "shape")])
        text += "    n_elements = out.numel()\n"
        text += self._config_line("_pointwise_config(n_elements)")
        text += '    BLOCK, num_warps = config["BLOCK"], config["num_warps"]\n'
        text += "    grid = (_cdiv(n_elements, BLOCK),)\n"
        text += launch(f"{self.name}_kernel", "grid", args + ["BLOCK=BLOCK", "num_warps=num_warps"], "    ") + "\n"
        return text + "    return out\n"


def reference_property(node: Node) -> tuple[str, bool]:
    """The generated reference test's check_property body for this op, and whether it calls
    body(): none here."""
    return "", False


ENTRIES = (
    Entry("add", "add two matrices on {shapes}, each in {dtypes}", "x + y"),
    Entry("swiglu", "silu(x) * y on {shapes}, each in {dtypes}", "silu(x) * y"),
)
