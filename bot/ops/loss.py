"""The loss family: cross_entropy(logits body, int64 target) over the last dim and nll_loss(log-probability
body, int64 target) over dim 1 of a 2-D input, with torch's default ignore_index (-100) and reduction
'mean', 'sum' or 'none'. Cross entropy: one kernel per BLOCK_R rows, an online logsumexp over BLOCK_V
chunks less the target's logit read directly; persistent programs for rows that fit one tile, an
aligned kernel for odd vocabularies. NLL: each row's target element alone is read. 'mean' and 'sum'
add the per-row losses in one program, in a fixed order. The other losses are PyTorch's formulas in
the IR's own ops (FORMULAS), which the pointwise, reduce and fused families lower. Owns its words,
IR rules, shape check, reference, kernels with their config spaces and default rules, and catalog
entry.
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass

from bot.codegen.code import indented, jit_source, launch, wrap
from bot.codegen.dim_kernel import ALIGNED_COMMENT, ALIGNED_LAUNCH, MAX_CONFIGS, ReducedBodyFile, _fit, _fit_stages
from bot.codegen.kernel_file import NEG_INF, KernelFile, _expanded, _expanded_strides, _require_full
from bot.codegen.row_kernel import (EDGE_LINES, _row_config, _row_tile, align_elements, aligned_chunk, aligned_span,
                                    sm_count_line)
from bot.generators.interface import GenerationError
from bot.ops import gather, pointwise, view
from bot.ops.entry import SMALL_LONG_ODD, Entry
from bot.ops.node import (ALL, Call, IRError, Node, arguments, broadcast_shapes, call, flag, fmt_num, input_names, is_none,
                          number, prints, to_text)
from bot.ops.text import END, NUM, FLAGS as _F, blank as _blank
from runner.protocol import IGNORE_INDEX

NAME = "loss"
CE_OP, NLL, CE_GRAD = "cross_entropy", "nll_loss", "cross_entropy_grad"
OPS = {CE_OP, NLL, CE_GRAD}
_PAIR, _TRIPLE = ("input", "target"), ("input1", "input2", "target")
_LEGACY = ("size_average", "reduce", "reduction")      # torch's deprecated size_average and reduce, then reduction
# cosine_embedding_loss's cosine as torch computes it over the last dim (its dim 1 of 2-D inputs, 0 of
# 1-D ones): the squared norms plus 1e-12 under one sqrt, not cosine_similarity's clamped norms.
_COS = ("(sum(x1 * x2, dim=-1, keepdim=True) / sqrt((sum(x1 * x1, dim=-1, keepdim=True) + 1e-12) * "
        "(sum(x2 * x2, dim=-1, keepdim=True) + 1e-12)))")
# Losses as PyTorch defines them, written in the IR's own ops: (torch's positional order, the parameters
# read, with torch's defaults; the formula over x and y (input, target), x1, x2 and y (input1, input2,
# target), or a, pos and neg (anchor, positive, negative)). Targets are compared with 1 and -1 as
# torch compares them, so any other value gives what torch gives. reduction 'mean' and 'sum' reduce
# every element of the formula (the reduce family lowers those), 'none' keeps them.
FORMULAS: dict[str, tuple[tuple[str, ...], dict[str, float], str]] = {
    "mse_loss": ((*_PAIR, *_LEGACY), {}, "(x - y) ** 2"),
    "l1_loss": ((*_PAIR, *_LEGACY), {}, "abs(x - y)"),
    "smooth_l1_loss": ((*_PAIR, *_LEGACY, "beta"), {"beta": 1.0},
                       "where(abs(x - y) < beta, 0.5 * (x - y) ** 2 / beta, abs(x - y) - 0.5 * beta)"),
    "huber_loss": ((*_PAIR, "reduction", "delta"), {"delta": 1.0},
                   "where(abs(x - y) < delta, 0.5 * (x - y) ** 2, delta * (abs(x - y) - 0.5 * delta))"),
    "binary_cross_entropy_with_logits": ((*_PAIR, "weight", *_LEGACY, "pos_weight"), {},
                                         "maximum(x, 0.0) - x * y + log(1.0 + exp(-abs(x)))"),
    # torch clamps each log at -100, so a probability of 0 or 1 costs 100, not infinity
    "binary_cross_entropy": ((*_PAIR, "weight", *_LEGACY), {},
                             "-(y * maximum(log(x), -100.0) + (1.0 - y) * maximum(log(1.0 - x), -100.0))"),
    "soft_margin_loss": ((*_PAIR, *_LEGACY), {}, "log(1.0 + exp(-y * x))"),
    # -(y log sigmoid(x) + (1 - y) log sigmoid(-x)), averaged over the classes (the last dim) of each row
    "multilabel_soft_margin_loss": ((*_PAIR, "weight", *_LEGACY), {},
                                    "mean(y * (relu(-x) + log(1.0 + exp(-abs(x)))) + (1.0 - y) * (relu(x) + "
                                    "log(1.0 + exp(-abs(x)))), dim=-1)"),
    # log_input=True (torch's default): x is the rate's log; False: the rate itself (log(x + eps))
    "poisson_nll_loss": ((*_PAIR, "log_input", "full", "size_average", "eps", "reduce", "reduction"),
                         {"eps": 1e-8}, "exp(x) - y * x"),
    "kl_div": ((*_PAIR, *_LEGACY, "log_target"), {}, "where(y > 0.0, y * (log(y) - x), 0.0)"),
    "hinge_embedding_loss": ((*_PAIR, "margin", *_LEGACY), {"margin": 1.0},
                             "where(y != 1.0, relu(margin - x), 0.0) + where(y != -1.0, x, 0.0)"),
    "margin_ranking_loss": ((*_TRIPLE, "margin", *_LEGACY), {"margin": 0.0}, "relu(-y * (x1 - x2) + margin)"),
    "cosine_embedding_loss": ((*_TRIPLE, "margin", *_LEGACY), {"margin": 0.0},
                              f"(where(y.unsqueeze(-1) == 1.0, 1.0 - {_COS}, 0.0) + "
                              f"where(y.unsqueeze(-1) == -1.0, relu({_COS} - margin), 0.0)).squeeze(-1)"),
    # max(d(a, p) - d(a, n) + margin, 0) a row, d(u, v) the p-norm of u - v + eps over the last dim
    # (torch's pairwise_distance)
    "triplet_margin_loss": (("anchor", "positive", "negative", "margin", "p", "eps", "swap", *_LEGACY),
                            {"margin": 1.0, "p": 2.0, "eps": 1e-6},
                            "relu(norm(a - pos + eps, p=p, dim=-1) - norm(a - neg + eps, p=p, dim=-1) + margin)"),
}
_FORMULA_NAMES = {"input": "x", "target": "y", "input1": "x1", "input2": "x2", "anchor": "a", "positive": "pos",
                  "negative": "neg"}
# The optional tensors of the binary losses, as torch applies them: weight (w) scales each element's loss
# (inside the mean over the classes of multilabel_soft_margin_loss); pos_weight (pw) the positive
# term of binary_cross_entropy_with_logits, (1 - y) x + (1 + (pw - 1) y) log(1 + exp(-x)) written stably.
_OPTIONAL = {"weight": "w", "pos_weight": "pw"}
_WEIGHTED = {
    "binary_cross_entropy_with_logits": {
        "pw": "(1.0 - y) * x + (1.0 + (pw - 1.0) * y) * (log(1.0 + exp(-abs(x))) + maximum(-x, 0.0))",
        "w": "({f}) * w"},
    "binary_cross_entropy": {"w": "({f}) * w"},
    "multilabel_soft_margin_loss": {"w": "mean((y * (relu(-x) + log(1.0 + exp(-abs(x)))) + (1.0 - y) * (relu(x) + "
                                         "log(1.0 + exp(-abs(x))))) * w, dim=-1)"},
}
# The arguments beside tensors, parameters and reduction: read only at these values (else None).
_OFF = {"swap": False, "log_target": False}
_REDUCED = {"mean": "mean", "sum": "sum"}
ROOT = True
SUPPORTED = ("over the last dim", "cross_entropy(logits, target), nll_loss(log_probs, target) (2-D); the losses "
             f"{', '.join(FORMULAS)} (reduction 'mean', 'sum' or 'none'; kl_div also 'batchmean')")
ALIASES = {"crossentropy": CE_OP}
TRIPLET = "triplet_margin_loss"
HINGE, COSINE_LOSS, COSINE = "hinge loss", "cosine similarity loss", "cosine similarity"
# torch's positional order of cross_entropy's and nll_loss's arguments
_CLASS_ORDER = ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing")
KEYWORDS = {CE_OP: set(_CLASS_ORDER), NLL: set(_CLASS_ORDER[:-1]),
            CE_GRAD: {"reduction", "label_smoothing", "ignore_index", "weight"},
            **{name: set(order) for name, (order, _, _) in FORMULAS.items()}}
OUTPUT_DTYPES: dict[str, str] = {}
WORDS: list = []                    # read apart, before the generic reader: CLASS_LOSS, cross_entropy_words

# cross entropy: persistent programs (PER_SM per SM) for rows that fit one tile; one row per one-warp
# program in pipelined 512-wide chunks (8192x8192 fp16 on an H200: 41.5 us, against 43.5 for one
# 8192-wide tile on 4 warps), then one row per program in 1K to 8K chunks (vocabularies of
# 32K-128K loop), with and without pipelined loads; short rows stacked.
CROSS_ENTROPY_CONFIGS = [
    {"BLOCK_R": 1, "BLOCK_V": 8192, "num_warps": 4, "num_stages": 1, "PER_SM": 4},
    {"BLOCK_R": 1, "BLOCK_V": 512, "num_warps": 1, "num_stages": 3},
    {"BLOCK_R": 1, "BLOCK_V": 512, "num_warps": 1, "num_stages": 4},
    {"BLOCK_R": 1, "BLOCK_V": 8192, "num_warps": 8, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_V": 2048, "num_warps": 4, "num_stages": 3},
    {"BLOCK_R": 1, "BLOCK_V": 4096, "num_warps": 8, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_V": 1024, "num_warps": 4, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_V": 8192, "num_warps": 4, "num_stages": 1},
    {"BLOCK_R": 16, "BLOCK_V": 256, "num_warps": 4, "num_stages": 1},
]


# ---------------------------------------------------------------- words

CROSS_ENTROPY = re.compile(r"\b(?:softmax[\s_-]+)?cross[\s_-]?entropy(?:[\s_-]+loss)?\b|\bce[\s_-]loss\b|"
                           r"交叉熵(?:损失)?", _F)
# nll_loss in words: over log-probabilities, as torch names its input
NLL_WORD = re.compile(r"\bnll(?:[\s_-]?loss)?\b|\bnegative[\s_-]+log[\s_-]+likelihood(?:[\s_-]+loss)?\b|负对数似然(?:损失)?", _F)
CLASS_LOSS = re.compile(f"{CROSS_ENTROPY.pattern}|{NLL_WORD.pattern}", _F)


_INDEX_DTYPE = re.compile(r"\b(?:torch\.)?(?:int64|long)\b|\bi64\b", _F)


_PER_ROW = re.compile(r"\bper[\s-](?:row|sample|example|token)\b|\breduction\s*[=:]?\s*['\"]?none\b['\"]?|"
                      r"\b(?:no|without)\s+reduction\b|\bunreduced\b|逐行|每行|不(?:做)?归约|无归约", _F)


_MEAN = re.compile(r"\breduction\s*[=:]?\s*['\"]?mean\b['\"]?|\b(?:mean|average[ds]?)(?:\s+reduction)?\b|平均", _F)


_SUM_REDUCTION = re.compile(r"\breduction\s*[=:]?\s*['\"]?sum\b|\bsummed\b|\bsum\b|求和", _F)


_CE_NAMES = re.compile(r"\b(?:targets?|labels?|probabilit(?:y|ies)|probs|predictions?|preds|"
                       r"class(?:es)?(?:\s+ind(?:ices|ex))?|loss|"
                       r"log[\s_-]?prob(?:abilitie)?s)\b|对数概率|目标|标签|类别|损失", _F)


_SMOOTHING = re.compile(rf"\b(?:with\s+)?label[\s_-]?smoothing\s*(?:of|=|:|is)?\s*({NUM}){END}|标签平滑\s*(?:为|=|:)?\s*({NUM}){END}",
                        _F)
# "ignore_index=0", "ignore index -1", "ignoring class 3", "忽略索引 0": the target whose rows add nothing
_IGNORE = re.compile(r"\bignor(?:e|ing)(?:[\s_-]+(?:the\s+)?)?(?:index|class|label|target)\s*(?:of|=|:|is)?\s*(-?\d+)\b|"
                     r"忽略(?:索引|类别|标签)?\s*(?:为|=|:)?\s*(-?\d+)", _F)
# "with class weights", "per-class weights", "weighted by class", "类别权重": a weight input [V]
_CLASS_WEIGHTS = re.compile(r"\b(?:with\s+)?(?:per[\s_-]class|class)[\s_-]weights?\b|\bweighted\s+by\s+class\b|"
                            r"\bclass[\s_-]weighted\b|类别权重", _F)
_CE_EXTRAS = re.compile(r"\blabel[\s_-]?smoothing\b|\bignore[\s_-]?index\b|\b(?:class[\s_-])?weights?\b|"
                        r"标签平滑|权重", _F)


def take_index_dtype(text: str) -> str:
    """'int64 targets' in a cross-entropy or NLL request: the target is int64 anyway; other dtype
    words are about the logits."""
    return _INDEX_DTYPE.sub(lambda m: " " * len(m.group(0)), text) if CLASS_LOSS.search(text) else text


def cross_entropy_words(text: str) -> tuple[str, str, list[str]]:
    """(expression, text without the words read, notes) for 'cross entropy over 4096x32000 logits' and
    'nll loss of 512x1000 log-probabilities'."""
    fn, x = (NLL, "log_probs") if NLL_WORD.search(text) else (CE_OP, "logits")
    if NLL_WORD.search(text) and CROSS_ENTROPY.search(text):
        raise GenerationError("I found cross entropy and nll loss: which one? cross entropy takes logits, nll loss "
                              "log-probabilities")
    smoothing = ""
    if fn == CE_OP and (m := _SMOOTHING.search(text)):
        smoothing = f", label_smoothing={float(next(g for g in m.groups() if g))!r}"
        text = _SMOOTHING.sub(_blank, text)
    if m := _CLASS_WEIGHTS.search(text):
        if smoothing:
            raise GenerationError(f"{fn} with both class weights and label smoothing is not supported; either alone is")
        smoothing += ", weight=weight"
        text = _CLASS_WEIGHTS.sub(_blank, text)
    if m := _IGNORE.search(text):
        smoothing += f", ignore_index={int(next(g for g in m.groups() if g))}"
        text = _IGNORE.sub(_blank, text)
    if m := _CE_EXTRAS.search(text):
        smoothing = " label smoothing with its value, e.g. 'label smoothing 0.1'," * (fn == CE_OP)
        raise GenerationError(f"{fn} with {m.group(0)!r} is not supported: {fn}({x}, target) takes class indices, "
                              f"with reduction mean (the default), sum or none (per row),{smoothing} 'class "
                              "weights' (an input of one per class) and the index whose rows add nothing, e.g. "
                              "'ignore_index 0' (torch's default: -100)")
    reduction = "none" if _PER_ROW.search(text) else "sum" if _SUM_REDUCTION.search(text) else "mean"
    notes = [] if reduction != "mean" or _MEAN.search(text) else [
        f"no reduction named: averaging the loss over rows (reduction='mean', like F.{fn})"]
    for pattern in (CLASS_LOSS, _PER_ROW, _SUM_REDUCTION, _MEAN, _CE_NAMES):
        text = pattern.sub(_blank, text)
    return f"{fn}({x}, target{f', reduction={reduction!r}' * (reduction != 'mean')}{smoothing})", text, notes


# The elementwise losses (and triplet margin) by name: pattern -> function. Binary cross entropy is
# looked for before cross entropy: its words hold those.
LOSS_WORDS = [(re.compile(p, _F), fn) for p, fn in [
    (r"\b(?:mse|mean[\s_-]squared[\s_-]error)(?:[\s_-]+loss)?\b|\bmse_loss\b|均方误差", "mse_loss"),
    (r"\bsmooth[\s_-]?l1(?:[\s_-]+loss)?\b|平滑\s*l1", "smooth_l1_loss"),
    (r"(?<!smooth[\s_-])\bl1[\s_-]?loss\b|\bmean[\s_-]absolute[\s_-]error\b|\bmae\b|平均绝对误差", "l1_loss"),
    (r"\bhuber(?:[\s_-]+loss)?\b|huber\s*损失", "huber_loss"),
    (r"\b(?:binary[\s_-]+cross[\s_-]?entropy|bce)(?:[\s_-]+loss)?[\s_-]+with[\s_-]+logits\b|"
     r"\bbce[\s_-]?with[\s_-]?logits(?:[\s_-]?loss)?\b|带\s*logits\s*的二元交叉熵", "binary_cross_entropy_with_logits"),
    (r"\b(?:binary[\s_-]+cross[\s_-]?entropy|bce)(?:[\s_-]+loss)?\b(?![\s_-]+(?:loss[\s_-]+)?with[\s_-]+logits)|"
     r"(?<!的)二元交叉熵", "binary_cross_entropy"),
    (r"\bmulti[\s_-]?label[\s_-]+soft[\s_-]?margin(?:[\s_-]+loss)?\b", "multilabel_soft_margin_loss"),
    (r"(?<!label\s)(?<!label_)(?<!label-)\bsoft[\s_-]?margin(?:[\s_-]+loss)?\b", "soft_margin_loss"),
    (r"\bpoisson(?:[\s_-]+(?:nll|negative[\s_-]+log[\s_-]+likelihood))?(?:[\s_-]+loss)?\b|泊松", "poisson_nll_loss"),
    (r"\bkl[\s_-]?div(?:ergence)?(?:[\s_-]+loss)?\b|\bkullback[\s_-]+leibler(?:[\s_-]+divergence)?\b|kl\s*散度", "kl_div"),
    (r"\btriplet(?:[\s_-]+margin)?(?:[\s_-]+loss)?\b|三元组损失", TRIPLET),
    (r"\bhinge[\s_-]+embedding(?:[\s_-]+loss)?\b", "hinge_embedding_loss"),
    (r"\bmargin[\s_-]+ranking(?:[\s_-]+loss)?\b", "margin_ranking_loss"),
    (r"\bcosine[\s_-]+embedding(?:[\s_-]+loss)?\b", "cosine_embedding_loss"),
    # not torch functions, as people name them: max(0, 1 - x * y); 1 - cos(x, y); cos(x, y) itself
    (r"\bhinge[\s_-]+loss\b", HINGE),
    (r"\bcosine[\s_-]+similarity[\s_-]+loss\b|余弦相似度损失", COSINE_LOSS),
    (r"\bcosine[\s_-]+similarity\b(?![\s_-]+loss)|余弦相似度(?!损失)", COSINE),
]]
# The words' losses that are no torch function: their expressions over x and y, before a reduction
# (the cosine over `dim`, torch's cosine_similarity's default 1 unless the words name one).
_WORD_FORMULAS = {HINGE: "relu(1.0 - {a} * {b})", COSINE_LOSS: "1.0 - cosine_similarity({a}, {b}, dim={dim})",
                  COSINE: "cosine_similarity({a}, {b}, dim={dim})"}
_SUM_WORD = re.compile(r"\breduction\s*[=:]?\s*['\"]?sum\b['\"]?|\bsummed\b|\b(?:sum|total)\s+reduction\b|求和", _F)
_NONE_WORD = re.compile(r"\breduction\s*[=:]?\s*['\"]?none\b['\"]?|\bper[\s-]element\b|\belementwise\b|"
                        r"\b(?:no|without)\s+reduction\b|\bunreduced\b|逐元素|不(?:做)?归约", _F)
_BATCHMEAN_WORD = re.compile(r"\bbatch[\s_-]?mean(?:\s+reduction)?\b|\breduction\s*[=:]?\s*['\"]?batchmean\b['\"]?", _F)
_LOSS_PARAMS = {key: re.compile(rf"\b{key}\s*(?:of|=|:|is)?\s*({NUM}){END}", _F) for key in ("beta", "delta", "margin")}
_OPERANDS = {TRIPLET: ("anchor", "positive", "negative"), "binary_cross_entropy_with_logits": ("logits", "target"),
             **dict.fromkeys(("margin_ranking_loss", "cosine_embedding_loss"), ("x1", "x2", "y"))}
# The operands, named or not: "between x and y", "of a and b", "between 4096x1024 predictions and
# targets", "on pred 4096 and labels 4096", "of two 1024x512 tensors". Only the lead word and "two"
# are read here; the names stay for the shape reader, which labels shapes with them.
_SIZES = r"\d+(?:\s*[x×*]\s*\d+)*"
# an operand's name, after the noun that says what it holds where one does ("probabilities p")
_NOUN = r"(?:(?:probabilit(?:y|ies)|probs|predictions?|preds|targets?|labels?|logits|scores|outputs?)\s+)"
_OPERAND = rf"{_NOUN}?(?!(?:the|two|tensors?|inputs?|dims?|and)\b)([A-Za-z_]\w*)"
_BETWEEN = re.compile(rf"\b(?:between|of|on|for)\s+(?:the\s+)?(?:(?:(?:{_SIZES}|;)\s+)?{_OPERAND}(?:\s+(?:{_SIZES}|;))?\s*,?\s+"
                      rf"and\s+(?:the\s+)?{_OPERAND}\b|two\b)|\bbetween\b(?=[;\s]*(?:tensors|inputs|matrices|arrays)\b)|"
                      r"([A-Za-z_]\w*)\s*(?:和|与)\s*([A-Za-z_]\w*)\s*之间", _F)
_PAIR_WORDS = re.compile(rf"\bbetween\b|(?<=of\s)two\b|\btwo\b(?=[;\s]*(?:{_SIZES}\s+)?(?:tensors|inputs|matrices|arrays|vectors)\b)|"
                         r"之间", _F)


def loss_words(text: str, dims: list[int]) -> tuple[str, str, list[str]]:
    """(expression, text without the words read, notes) for 'mse loss between x and y',
    'huber loss with delta 2, summed', 'kl divergence, batchmean', 'triplet margin loss margin 0.5',
    'cosine similarity along dim 1' (dims: the dims the words name)."""
    found = {fn for pattern, fn in LOSS_WORDS if pattern.search(text)}
    if len(found) > 1:
        raise GenerationError(f"I found {' and '.join(sorted(found))}: which loss? Or write it as PyTorch does, e.g. "
                              "'F.mse_loss(x, y)'.")
    fn = found.pop()
    notes = []
    reduction = ("batchmean" if _BATCHMEAN_WORD.search(text) else "sum" if _SUM_WORD.search(text)
                 else "none" if _NONE_WORD.search(text) else None)
    if fn == COSINE and reduction is not None:
        raise GenerationError("cosine similarity is one value a row, not a loss to reduce: say 'cosine similarity "
                              "loss' for the mean of 1 - cos, or write it, e.g. 'sum(F.cosine_similarity(x, y))'")
    if reduction is None and fn != COSINE:
        notes.append(f"no reduction named: averaging over every element (reduction='mean'"
                     f"{'' if fn in _WORD_FORMULAS else f', like F.{fn}'})")
    elif reduction == "batchmean" and fn != "kl_div":
        raise GenerationError(f"reduction 'batchmean' is kl_div's; {fn} takes mean, sum or none")
    args = list(_OPERANDS.get(fn, ("x", "y")))
    if m := _BETWEEN.search(text):
        named = [g for g in m.groups() if g]
        if named and fn != TRIPLET:
            args = named
    text = _PAIR_WORDS.sub(_blank, text)      # a loss compares its operands: "between" says no more
    for key, pattern in _LOSS_PARAMS.items():
        if m := pattern.search(text):
            if fn in _WORD_FORMULAS or key not in FORMULAS[fn][1]:
                raise GenerationError(f"{fn} takes no {key}; its parameters: "
                                      f"{', '.join(FORMULAS[fn][1]) if fn in FORMULAS else 'none'}")
            args.append(f"{key}={float(m.group(1))!r}")
            text = pattern.sub(_blank, text)
    for pattern in [p for p, _ in LOSS_WORDS] + [_SUM_WORD, _NONE_WORD, _BATCHMEAN_WORD, _MEAN, _CE_NAMES]:
        text = pattern.sub(_blank, text)
    if fn in _WORD_FORMULAS:
        return _word_formula(fn, args, reduction, dims, notes), text, notes
    if reduction and reduction != "mean":
        args.append(f"reduction='{reduction}'")
    return f"{fn}({', '.join(args)})", text, notes


def row_target_shapes(text: str, shapes: list[tuple[str | None, list[int]]]) -> list[tuple[str | None, list[int]]]:
    """The shapes the words give, where a target has one value a row (cosine embedding's y: [N] of
    [N, D] inputs) and the words name none for it: each case's shape as x1's and x2's, [N] y's."""
    operands = _OPERANDS["cosine_embedding_loss"]
    named = any(fn == "cosine_embedding_loss" and pattern.search(text) for pattern, fn in LOSS_WORDS)
    if not named or any(label in operands for label, _ in shapes):
        return shapes
    return [(n, s if n != "y" else s[:-1]) for _, s in shapes for n in operands]


def _word_formula(fn: str, args: list[str], reduction: str | None, dims: list[int], notes: list[str]) -> str:
    """A loss the words name that is no torch function, over its operands, reduced as said: a
    cosine over the dim the words name (else dim 1), a hinge loss over every element or the dim named."""
    if len(dims) > 1:
        raise GenerationError(f"{fn} over dims {dims}: name one dim")
    if fn != HINGE and not dims:
        notes.append("no dim named: the cosine over dim 1, as F.cosine_similarity's default")
    body = _WORD_FORMULAS[fn].format(a=args[0], b=args[1], dim=dims[0] if dims else 1)
    if reduction == "none" or fn == COSINE:
        return body
    return f"{reduction or 'mean'}({body}, dim={dims[0] if dims and fn == HINGE else None})"


# ---------------------------------------------------------------- IR rule

def convert(c: Call) -> Node | None:
    if c.fname in FORMULAS:
        return _formula(c)
    if c.fname not in OPS:
        return None
    if c.fname == CE_GRAD:
        return _gradient(c)
    # cross_entropy(logits, target) and nll_loss(log_probs, target): class weights, any ignore_index,
    # label smoothing for cross entropy (not with weights).
    given = arguments(c, _CLASS_ORDER if c.fname == CE_OP else _CLASS_ORDER[:-1])
    if "input" not in given or "target" not in given:
        raise IRError(f"{c.fname} takes input and target, e.g. F.{c.fname}(x, target)")
    _defaults_only(c.fname, given, ("size_average", "reduce"), {})
    reduction = _read_reduction(c.fname, given.get("reduction"))
    weight = [] if is_none(given.get("weight")) else [c.expr(given["weight"])]
    smoothing = _smoothing(given.get("label_smoothing"))
    if weight and smoothing:
        raise IRError(f"{c.fname} with both class weights and label smoothing is not supported; either alone is")
    return call(c.fname, c.expr(given["input"]), gather.index_operand(c, given["target"]), *weight, reduction=reduction,
                **smoothing, **_ignored(c.fname, given.get("ignore_index")))


def _gradient(c: Call) -> Node:
    """cross_entropy_grad(logits, target, upstream, reduction=..., weight=w): cross entropy's gradient
    with respect to its logits (the training kernels' backward, bot.autodiff), upstream the loss's own
    gradient."""
    if len(c.args) != 3:
        raise IRError("cross_entropy_grad takes logits, target and the loss's upstream gradient")
    reduction = _read_reduction(c.fname, c.kw.get("reduction"))
    weight = [c.expr(c.kw["weight"])] if "weight" in c.kw else []
    return call(CE_GRAD, *(c.expr(a) for a in c.args), *weight, reduction=reduction,
                **_smoothing(c.kw.get("label_smoothing")), **_ignored(c.fname, c.kw.get("ignore_index")))


def class_weight(node: Node) -> Node | None:
    """The class weights a class loss (or its gradient) scales each row by, at its target: an input [V]."""
    extra = node.args[3 if node.op == CE_GRAD else 2:]
    return extra[0] if extra else None


def _targets(node: Node, inputs: list) -> _Targets:
    """The node's targets as its kernels read them, by the inputs' local names."""
    local = {i.name: i.local for i in inputs}
    weight = class_weight(node)
    return _Targets(local[node.args[1].name], ignored(node), None if weight is None else local[weight.name])


def _ignored(fname: str, written: ast.expr | None) -> dict:
    """ignore_index= as the node's attribute: none for torch's default, -100."""
    value = IGNORE_INDEX if written is None else _literal(written)
    if type(value) is not int:
        raise IRError(f"{fname}'s ignore_index must be a whole number written out (torch's default is "
                      f"{IGNORE_INDEX}), got {ast.unparse(written)}")
    return {} if value == IGNORE_INDEX else {"ignore_index": value}


def ignored(node: Node) -> int:
    """The class index whose rows add no loss (and no count to 'mean'): torch's -100 unless given."""
    return node.attr("ignore_index", IGNORE_INDEX)


def _smoothing(written: ast.expr | None) -> dict:
    """Cross entropy's (and its gradient's) label_smoothing= as the node's attribute: none for 0."""
    smoothing = 0.0 if written is None else number(written)
    if not 0.0 <= smoothing <= 1.0:
        raise IRError(f"cross_entropy's label_smoothing must be in [0, 1] (as torch's), got {fmt_num(smoothing)}")
    return {"smoothing": smoothing} if smoothing else {}


def _defaults_only(fname: str, given: dict, keys: tuple[str, ...], defaults: dict) -> None:
    """Refuse any of keys given other than as its default (None where defaults has none)."""
    for key in keys:
        written, default = given.get(key), defaults.get(key)
        if written is None or (is_none(written) if default is None else _literal(written) == default):
            continue
        hint = "; give reduction= instead" if key in ("size_average", "reduce") else ""
        raise IRError(f"{fname} with {key}={ast.unparse(written)} is not supported (the default is {default}){hint}")


def _literal(written: ast.expr) -> object:
    """A constant as written (-100, False), or None where it is not one."""
    try:
        return ast.literal_eval(written)
    except ValueError:
        return None


def _read_reduction(fname: str, written: ast.expr | None) -> str:
    """A loss's reduction=: 'mean' (torch's default) when not given, 'sum' or 'none'; kl_div's 'batchmean'."""
    reduction = "mean" if written is None else written.value if isinstance(written, ast.Constant) else None
    if reduction not in ("mean", "sum", "none") and (fname, reduction) != ("kl_div", "batchmean"):
        raise IRError(f"{fname} reduction must be 'mean', 'sum' or 'none'{' or batchmean' * (fname == 'kl_div')}, "
                      f"got {ast.unparse(written) if written is not None else None!r}")
    return reduction


def _with_flags(fname: str, formula: str, given: dict) -> tuple[str, tuple[str, ...]]:
    """The formula as a loss's boolean arguments change it, and the arguments read: kl_div's
    log_target, poisson_nll_loss's log_input and full (Stirling's term where the target passes 1)."""
    if fname == "kl_div":
        return ("exp(y) * (y - x)" if flag(given.get("log_target")) else formula), ("log_target",)
    if fname != "poisson_nll_loss":
        return formula, ()
    if "log_input" in given and not flag(given["log_input"]):
        formula = "x - y * log(x + eps)"
    if flag(given.get("full")):
        formula = f"{formula} + where(y > 1.0, y * log(y) - y + 0.5 * log({2 * math.pi!r} * y), 0.0)"
    return formula, ("log_input", "full")


def _formula(c: Call) -> Node:
    """A loss of FORMULAS: its formula over its tensors and parameters (by position in torch's order,
    or by keyword), then every element reduced (mean, sum) or kept (none)."""
    order, params, formula = FORMULAS[c.fname]
    given = arguments(c, order)
    tensors = [k for k in order if k in _FORMULA_NAMES]
    if missing := [k for k in tensors if k not in given]:
        raise IRError(f"{c.fname} takes {', '.join(tensors[:-1])} and {tensors[-1]}; {', '.join(missing)} missing")
    formula, flags = _with_flags(c.fname, formula, given)
    weighted = {_OPTIONAL[k]: given[k] for k in _OPTIONAL if k in order and not is_none(given.get(k))}
    _defaults_only(c.fname, given, tuple(k for k in order if k not in (*tensors, *params, *flags, *_OPTIONAL,
                                                                       "reduction")), _OFF)
    for name in sorted(weighted):             # "pw" < "w": pos_weight's formula first, then the weight on it
        formula = _WEIGHTED[c.fname][name].format(f=formula)
    values = {_FORMULA_NAMES[k]: given[k] for k in tensors} | weighted
    values |= {p: ast.Constant(number(given.get(p, ast.Constant(default)))) for p, default in params.items()}
    if c.fname == "smooth_l1_loss" and values["beta"].value == 0:
        formula = FORMULAS["l1_loss"][2]             # PyTorch: beta 0 is the L1 loss
    reduction = _read_reduction(c.fname, given.get("reduction"))
    body = c.expr(pointwise.Bind(values).visit(ast.parse(formula, mode="eval").body))
    if reduction == "batchmean":            # the sum over every element / the batch (dim 0): each row's sum, averaged
        return call("mean", call("sum", call(view.FLATTEN, body, start=1, end=-1), dim=1), dim=ALL)
    return body if reduction == "none" else call(_REDUCED[reduction], body, dim=ALL)


@prints(*OPS)
def _print(node: Node, text) -> str:
    reduction = node.attr("reduction")
    smoothing = f", label_smoothing={fmt_num(node.attr('smoothing'))}" if node.attr("smoothing") else ""
    weight = class_weight(node)
    core = node.args[:len(node.args) - (weight is not None)]      # the weights printed by keyword
    return f"{node.op}({', '.join(text(a) for a in core)}" + ("" if weight is None else f", weight={text(weight)}") + (
        "" if reduction == "mean" else f", reduction={reduction!r}") + f"{smoothing}{ignore_keyword(node)})"


def ignore_keyword(node: Node) -> str:
    """', ignore_index=N' where the node ignores other than torch's default."""
    return f", ignore_index={ignored(node)}" if ignored(node) != IGNORE_INDEX else ""


def check(node: Node) -> None:
    """The target (and a gradient's upstream, the class weights) are inputs of their own, not part of the logits."""
    for extra in node.args[1:]:
        if extra.op != "input":
            raise IRError(f"{node.op} target, upstream and class weights must be inputs, got {to_text(extra)!r}")
        if extra.name in input_names(node.args[0]):
            raise IRError(f"{node.op}'s target (class indices) cannot also be part of its input")


def index_inputs(node: Node) -> dict[str, dict]:
    """Integer inputs: class-index input name -> its spec fields: "index_of" (the input whose last dim
    it indexes) and, where the loss ignores other than torch's -100, "padding": that index."""
    padding = {"padding": ignored(node)} if ignored(node) != IGNORE_INDEX else {}
    return {node.args[1].name: {"index_of": input_names(node.args[0])[0], **padding}}


def domains(node: Node, mark) -> None:
    """Class weights are drawn positive: 'mean' divides by the weights of the rows' targets."""
    if node.op in OPS and class_weight(node) is not None:
        mark(class_weight(node), "positive")


def reduced(node: Node) -> tuple[list[str], int] | None:
    """(inputs, dim) the op accumulates over: cross entropy (and its gradient) each row's classes;
    nll_loss nothing in a row, its 'mean' and 'sum' the rows (dim 0)."""
    if node.op in (CE_OP, CE_GRAD):
        return input_names(node.args[0]), -1
    return None if node.attr("reduction") == "none" else (input_names(node.args[0]), 0)


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    logits = broadcast_shapes([shapes[n] for n in input_names(node.args[0])])
    target = list(shapes[node.args[1].name])
    weight = class_weight(node)
    if weight is not None and list(shapes[weight.name]) != logits[-1:]:
        raise IRError(f"{node.op}: the class weights {weight.name} must be one per class, [{logits[-1]}], got "
                      f"{list(shapes[weight.name])}")
    if node.op == CE_GRAD:
        up = list(shapes[node.args[2].name])
        if target != logits[:-1] or up != (target if node.attr("reduction") == "none" else []):
            raise IRError(f"cross_entropy_grad: target {target} must be the logits' {logits} without the class dim, "
                          "and the upstream gradient the loss's shape")
        return logits
    if node.op == NLL and len(logits) != 2:
        raise IRError(f"nll_loss takes a 2-D input [rows, classes] (classes in dim 1) and a 1-D target; got a "
                      f"{len(logits)}-D input {logits}")
    if target != logits[:-1]:
        raise IRError(f"{node.op}: target must have the input's shape without the class dim, "
                      f"{logits[:-1]}, got {target}")
    return logits[:-1] if node.attr("reduction") == "none" else []


# ---------------------------------------------------------------- reference

def torch_result(node: Node, names: dict[str, str], body: str, lines: list[str]) -> str:
    if not body.isidentifier():
        lines.append(f"h = {body}")
        body = "h"
    target = names[node.args[1].name]
    reduction = node.attr("reduction")
    if node.op == CE_GRAD:
        weight = None if class_weight(node) is None else names[class_weight(node).name]
        return _gradient_result(body, target, names[node.args[2].name], weight, node, lines)
    weight = "" if class_weight(node) is None else f", weight={names[class_weight(node).name]}"
    if node.op == NLL:
        return f"torch.nn.functional.nll_loss({body}, {target}{weight}, reduction={reduction!r}{ignore_keyword(node)})"
    # Classes are the last dim (torch's own cross_entropy takes them at dim 1): rows flattened.
    smoothing = f", label_smoothing={node.attr('smoothing')!r}" if node.attr("smoothing") else ""
    loss = (f"torch.nn.functional.cross_entropy({body}.flatten(0, -2), {target}.flatten(){weight}, "
            f"reduction={reduction!r}{smoothing}{ignore_keyword(node)})")
    return f"{loss}.reshape({target}.shape)" if reduction == "none" else loss


def _gradient_result(body: str, target: str, up: str, weight: str | None, node: Node, lines: list[str]) -> str:
    """(softmax(logits) - the smoothed one_hot(target)) * the upstream gradient (per row for 'none'; over
    the rows not ignored for 'mean'), each row times its target's class weight, 0 on ignored rows."""
    reduction, smoothing = node.attr("reduction"), node.attr("smoothing") or 0.0
    smoothed = f" * {1 - smoothing!r} + {smoothing!r} / {body}.shape[-1]" if smoothing else ""
    lines += [f"kept = ({target} != {ignored(node)}).unsqueeze(-1)",
              f"picked = torch.where(kept.squeeze(-1), {target}, 0)",
              f"onehot = torch.nn.functional.one_hot(picked, {body}.shape[-1]).to({body}.dtype){smoothed}",
              "row_weight = " + ("kept.to(onehot.dtype)" if weight is None else
                                 f"torch.where(kept, {weight}[picked].unsqueeze(-1), 0.0)"),
              {"none": f"scale = {up}.unsqueeze(-1)", "sum": f"scale = {up}",
               "mean": f"scale = {up} / row_weight.sum()"}[reduction]]
    return f"torch.where(kept, (torch.softmax({body}, dim=-1) - onehot) * scale * row_weight, 0.0).to({body}.dtype)"


# ---------------------------------------------------------------- kernel.py

def _cross_entropy_config(R, V):
    # The default config for R rows of V classes: row tiles as the row kernels choose them (a
    # vocabulary longer than 8192 is read in 8192-wide chunks), on at most 4 warps (more were
    # slower on 8192 classes). Few rows of a long vocabulary (too few programs to keep the SMs'
    # loads in flight) take 2048-wide chunks, 3 in flight: 1024x128256 on an H100.
    if V > 8192 and R <= 2048:
        return {"BLOCK_R": 1, "BLOCK_V": 2048, "num_warps": 4, "num_stages": 3}
    block_r, block_v, warps = _row_tile(R, V, _row_config(R, V))
    return {"BLOCK_R": block_r, "BLOCK_V": block_v, "num_warps": min(warps, 4), "num_stages": 1}


def _cross_entropy_tiles(config, R, V, elem_bytes):
    # The config fitted to this case: (BLOCK_R, BLOCK_V, num_warps, num_stages).
    block_r, block_v = _fit(config["BLOCK_R"], R), _fit(config["BLOCK_V"], V)
    return block_r, block_v, config["num_warps"], _fit_stages(config["num_stages"], block_r * block_v * elem_bytes)



def kernel_source(spec: dict, node: Node, options: dict) -> str:
    kernel = {NLL: _NllKernel, CE_GRAD: _CrossEntropyGradKernel}.get(node.op, _CrossEntropyKernel)
    return kernel.render(spec, node, options, pointwise.triton_body)


@dataclass(frozen=True)
class _Targets:
    """A class loss's targets as its kernels read them: the target input's local name, the index whose
    rows add nothing, and the class weights' local name (None: every class weighs 1)."""
    target: str
    ignore: int
    weight: str | None

    def args(self) -> list[str]:
        """The target and the weights, as the kernels take them after the logits."""
        return [self.target] + [self.weight] * (self.weight is not None)

    def params(self) -> list[str]:
        return [f"{a}_ptr" for a in self.args()]

    def weighted(self, value: str, picks: str) -> str:
        """value times the weight of each row's target (`picks`: where the target reads one)."""
        return value if self.weight is None else (
            f"{value} * tl.load({self.weight}_ptr + {self.target}, mask={picks}, other=0.0).to(tl.float32)")

    def counted(self) -> list[str]:
        """Lines giving `counted`, what each of the rows at offs adds to 'mean''s divisor: 1, or its
        target's weight, where the target is not ignored (torch's own divisor)."""
        t, kept = self.target, f"({self.target} != {self.ignore})"
        return [f"{t} = tl.load({t}_ptr + offs, mask=offs < R, other={self.ignore})",
                "counted = " + (f"{kept}.to(tl.float32)" if self.weight is None else
                                self.weighted("1.0", f"{kept} & ({t} >= 0) & ({t} < V)"))]


def _total_kernel(name: str, targets: _Targets, mean: bool) -> str:
    """The kernel adding R float32 per-row losses; for 'mean', over the weight of the rows not ignored."""
    lines = ["acc = tl.zeros([BLOCK], tl.float32)",
             *["count = tl.zeros([BLOCK], tl.float32)"] * mean,
             "for start in range(0, R, BLOCK):",
             "    offs = start + tl.arange(0, BLOCK)",
             "    acc += tl.load(losses_ptr + offs, mask=offs < R, other=0.0)",
             *indented(targets.counted() + ["count += counted"]) * mean,
             f"total = tl.sum(acc, axis=0){' / tl.sum(count, axis=0)' * mean}",
             "tl.store(dst_ptr, total.to(dst_ptr.dtype.element_ty))"]
    comment = ("    # One program adds the per-row losses in a fixed order (deterministic, no atomics)"
               + (";\n    # 'mean' divides by the rows not ignored, each by its class weight (none: 0 / 0, NaN, as\n"
                  "    # in torch).\n" if mean else ".\n"))
    return jit_source(f"{name}_total_kernel", ["losses_ptr", *targets.params(), "dst_ptr", "R", "V",
                                               "BLOCK: tl.constexpr"], lines, comment)


def _out_lines(reduction: str, per_row: str, dtype: str, device: str) -> str:
    """The launcher's output, and for 'mean' and 'sum' the float32 per-row losses its kernels write first."""
    text = f"    out = torch.empty({per_row if reduction == 'none' else '()'}, dtype={dtype}, device={device})\n"
    if reduction != "none":
        text += f"    losses = torch.empty(R, dtype=torch.float32, device={device})  # added up below\n"
    return text


def _rows_out(reduction: str) -> str:
    """Where the row kernels write: the output itself, or the per-row losses added up after them."""
    return "out" if reduction == "none" else "losses"


def _total_launch(name: str, targets: _Targets, reduction: str) -> str:
    """The launcher's lines adding the per-row `losses` into `out` (one value), for 'mean' and 'sum'."""
    if reduction == "none":
        return ""
    return ("    # One program, 8192 rows a step: each step waits out a load's latency, and one step\n"
            "    # covers the usual batch of rows.\n"
            + launch(f"{name}_total_kernel", "(1,)", ["losses", *targets.args(), "out", "R", "V", "BLOCK=8192",
                                                      "num_warps=16"], "    ") + "\n")


# What both kernel.py files say of their targets and reductions.
_TARGETS_TEXT = ("A target of {ignore} (the ignore_index, padding) adds no loss and no count to\n"
                 "'mean'; any other target outside [0, V) {outside} (torch would raise). 'mean' and 'sum' write\n"
                 "float32 per-row losses that one program adds in a fixed order (deterministic); 'mean'\n"
                 "divides by the rows not ignored.")


class _ClassRowsFile(ReducedBodyFile):
    """What cross entropy's file and its gradient's share: R rows of V class logits, one target index a
    row, tiled as the row kernels tile them."""
    block_key = "BLOCK_V"
    HELPERS = [_row_config, _row_tile, _fit, _fit_stages, _cross_entropy_config, _cross_entropy_tiles, _expanded,
               _require_full]

    def __init__(self, spec, node, inputs, options, body):
        super().__init__(spec, node, inputs, options, body)
        self.reduction, self.smoothing = node.attr("reduction"), node.attr("smoothing") or 0.0
        self.target = next(i for i in inputs if i.name == node.args[1].name)
        self.targets = _targets(node, inputs)
        self.description = self.description.replace("{ignore}", str(self.targets.ignore))
        self.rows_of = [(math.prod(full[:-1]), full[-1]) for full in self.fulls]     # (R, V) per case

    def _rows_head(self) -> str:
        """The launcher's head: the body's shape, R and V, the target checked against the rows."""
        t = self.target
        return self._head() + ("    # R rows of V classes, one class index per row.\n"
                               "    V = shape[-1]\n    R = shape[:-1].numel()\n"
                               f'    _require_full("{t.name}", {t.local}.shape, shape[:-1])\n')

    def _total(self, mask: str) -> list[str]:
        """With label smoothing, the row's total of logits (`mask`: the tile's lanes in the row)."""
        return [f"row_tot += tl.sum(tl.where({mask}, val, 0.0), axis=1)"] if self.smoothing else []

    def _online_update(self, total: bool = True) -> list[str]:
        """Fold the tile `val` into row_max and row_sum (online logsumexp), and (total) row_tot."""
        return [*self._total("mask") * total, "new_max = tl.maximum(row_max, tl.max(val, axis=1))",
                "# exp(v - m) as exp2(v * log2(e) - m * log2(e)): one fused multiply-add before each exp2.",
                "scaled_max = new_max * LOG2E",
                "row_sum = (row_sum * tl.exp2(row_max * LOG2E - scaled_max)",
                "           + tl.sum(tl.exp2(val * LOG2E - scaled_max[:, None]), axis=1))",
                "row_max = new_max"]

    def _tiles(self) -> str:
        """The launcher's config and its tiles fitted to R and V."""
        return self._config_line("_cross_entropy_config(R, V)") + wrap(
            "BLOCK_R, BLOCK_V, num_warps, num_stages = _cross_entropy_tiles",
            ["config", "R", "V", self._elem_bytes()], "    ") + "\n"


class _CrossEntropyKernel(_ClassRowsFile):
    description = ("BLOCK_R rows of V class logits per program, read in BLOCK_V chunks: an online logsumexp less\n"
                   "the target's logit (read directly) gives loss = logsumexp(row) - row[target].\n"
                   + _TARGETS_TEXT.replace("{outside}", "picks 0"))

    def __init__(self, spec, node, inputs, options, body):
        super().__init__(spec, node, inputs, options, body)
        if self.target in self.body_inputs:
            raise ValueError("cross_entropy's target (class indices) cannot also be part of the logits")
        for case, (full, (rows, _)) in enumerate(zip(self.fulls, self.rows_of)):
            if math.prod(self.target.shapes[case]) != rows:
                raise ValueError(f"cross_entropy's target {self.target.name} has shape {self.target.shapes[case]} in "
                                 f"case {case + 1}; it needs one class index per row of the logits: {full[:-1]}")

    def configs(self) -> list[dict]:
        defaults = [_cross_entropy_config(*rows) for rows in self.rows_of]
        return self._space(defaults + CROSS_ENTROPY_CONFIGS, lambda config: [
            (*_cross_entropy_tiles(config, *rows, self.max_elem_bytes), config.get("PER_SM", 0))
            for rows in self.rows_of])[:MAX_CONFIGS]

    def source(self) -> str:
        kernels = [self._kernel(), self._persistent_kernel(), self._aligned_kernel()]
        kernels += [_total_kernel(self.name, self.targets, self.reduction == "mean")] * (self.reduction != "none")
        return self._file(kernels, self.HELPERS, self._launcher())

    def _params(self) -> list[str]:
        return [f"{i.local}_ptr" for i in self.body_inputs] + [*self.targets.params(), "dst_ptr", "R", "V",
                                                               "BLOCK_R: tl.constexpr", "BLOCK_V: tl.constexpr"]

    def _target(self) -> str:
        return f"{self.target.local} = tl.load({self.target.local}_ptr + rows, mask=rows < R, other=0)"

    def _loss(self) -> list[str]:
        """From row_max and row_sum of `rows` and their targets: the target's logit, read directly
        (a target outside [0, V) picks 0 and reads nothing), the loss (0 for an ignored row), and
        its store. With label smoothing e: logsumexp - (1 - e) * row[target] - e * mean(row)."""
        t, e = self.target.local, self.smoothing
        picked = f"{1 - e!r} * picked + {e!r} / V * row_tot" if e else "picked"
        return [f"pick = (rows < R) & ({t} >= 0) & ({t} < V)",
                *(f"{i.local} = tl.load({i.local}_ptr + rows * V + {t}, mask=pick, other=0.0).to(tl.float32)"
                  for i in self.body_inputs),
                f"picked = tl.sum(tl.where(pick, {self.body_call()}, 0.0), axis=1)",
                f"loss = tl.where({t} == {self.targets.ignore}, 0.0, "
                f"{self.targets.weighted(f'(row_max + tl.log(row_sum) - ({picked}))[:, None]', 'pick')})",
                "tl.store(dst_ptr + rows, loss.to(dst_ptr.dtype.element_ty), mask=rows < R)"]

    def _looped(self, head: list[str], loop: str, tile: list[str], after: list[str]) -> list[str]:
        """A looped kernel's lines: `head` (locating its rows), the targets, the online logsumexp
        over `loop` of `tile` (the lines loading val), what comes `after` the loop, the loss."""
        return [*head, f"LOG2E: tl.constexpr = {math.log2(math.e)!r}",
                "# The targets first: their load is under way while the logits stream.",
                self._target(),
                f"row_max = tl.full([BLOCK_R], {NEG_INF}, tl.float32)",
                "row_sum = tl.zeros([BLOCK_R], tl.float32)",
                *["row_tot = tl.zeros([BLOCK_R], tl.float32)"] * bool(self.smoothing),
                "# Online logsumexp: the running sum is rescaled to each new running max. NUM_STAGES > 1",
                "# pipelines the loads through shared memory (cp.async).",
                loop, *indented(tile + self._online_update()), *after, *self._loss()]

    def _kernel(self) -> str:
        tile = ["cols = start + tl.arange(0, BLOCK_V)[None, :]", "mask = (rows < R) & (cols < V)",
                *self.body_values("rows * V + cols", NEG_INF)]
        lines = self._looped(["rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]"],
                             "for start in tl.range(0, V, BLOCK_V, num_stages=NUM_STAGES):", tile, [])
        return jit_source(f"{self.name}_kernel", self._params() + ["NUM_STAGES: tl.constexpr"], lines,
                          "    # BLOCK_R rows per program in BLOCK_V-wide chunks.\n")

    def _aligned_kernel(self) -> str:
        offs, mask = aligned_chunk("BLOCK_V")
        tile = [f"offs = {offs}", f"mask = {mask}", *self.body_values("offs", NEG_INF)]
        edge = [*EDGE_LINES, *self.body_values("offs", NEG_INF), *self._online_update()]
        lines = self._looped(aligned_span("BLOCK_R", "V"),
                             "for i in tl.range(0, tl.cdiv(hi - lo, BLOCK_V), num_stages=NUM_STAGES):", tile, edge)
        return jit_source(f"{self.name}_aligned_kernel",
                          self._params() + ["NUM_STAGES: tl.constexpr", "ALIGN: tl.constexpr"], lines, ALIGNED_COMMENT)

    def _persistent_kernel(self) -> str:
        # The prefetched raw tiles are named <input>_next, unless an input already has such a name.
        suffix, names = "_next", {i.local for i in self.inputs}
        while any(f"{i.local}{suffix}" in names for i in self.body_inputs):
            suffix += "_"
        fill = NEG_INF if self.is_bare_input else "0.0"
        prefetch = [f"{i.local}{suffix} = tl.load({i.local}_ptr + next_rows * V + cols, mask=(next_rows < R) & "
                    f"(cols < V), other={fill})" for i in self.body_inputs]
        values = [f"{i.local} = {i.local}{suffix}.to(tl.float32)" for i in self.body_inputs]
        values.append(f"val = {self.body_call()}" if self.is_bare_input
                      else f"val = tl.where((rows < R) & (cols < V), {self.body_call()}, {NEG_INF})")
        lines = [f"LOG2E: tl.constexpr = {math.log2(math.e)!r}",
                 "cols = tl.arange(0, BLOCK_V)[None, :]",
                 "first = tl.program_id(0) * BLOCK_R",
                 "step = tl.num_programs(0) * BLOCK_R",
                 "next_rows = first + tl.arange(0, BLOCK_R)[:, None].to(tl.int64)",
                 *prefetch,
                 "for r0 in range(first, R, step):",
                 "    rows = next_rows",
                 *indented(values),
                 "    # The next rows' loads go out before these rows are reduced: they stay in flight",
                 "    # through the reductions (a register double buffer).",
                 "    next_rows = rows + step",
                 *indented([*prefetch,
                            "row_max = tl.max(val, axis=1)",
                            "row_sum = tl.sum(tl.exp2(val * LOG2E - (row_max * LOG2E)[:, None]), axis=1)",
                            *["row_tot = tl.zeros([BLOCK_R], tl.float32)"] * bool(self.smoothing),
                            *self._total("(rows < R) & (cols < V)"),
                            self._target(), *self._loss()])]
        comment = ("    # Persistent: this program takes rows pid, pid + G, ... (G programs), each in one\n"
                   "    # BLOCK_V-wide tile (BLOCK_V >= V).\n")
        return jit_source(f"{self.name}_persistent_kernel", self._params(), lines, comment)

    def _launcher(self) -> str:
        first = self.body_inputs[0].local
        text = self._rows_head() + _out_lines(self.reduction, "shape[:-1]", self.out_dtype(first), f"{first}.device")
        text += self._tiles()
        tensors = [i.local for i in self.body_inputs] + [*self.targets.args(), _rows_out(self.reduction), "R", "V"]
        args = tensors + ["BLOCK_R=BLOCK_R", "BLOCK_V=BLOCK_V", "num_warps=num_warps"]
        text += align_elements(self.body_inputs) + ALIGNED_LAUNCH.format(also="", n="V")
        text += self._launch(f"{self.name}_aligned_kernel", "(R,)", tensors + [
            "BLOCK_R=1", "BLOCK_V=BLOCK_V", "num_warps=num_warps", "NUM_STAGES=num_stages", "ALIGN=ALIGN"], "        ")
        text += ("    # PER_SM > 0: that many persistent programs per SM (4 on the CPU interpreter), if a row\n"
                 "    # fits one tile (the sweep picks it where it wins); else one program per BLOCK_R rows.\n"
                 '    elif config.get("PER_SM", 0) and BLOCK_V >= V:\n' + sm_count_line("sms", "out", "        "))
        text += self._launch(f"{self.name}_persistent_kernel", '(min(_cdiv(R, BLOCK_R), config["PER_SM"] * sms),)',
                             args, "        ")
        text += "    else:\n"
        text += self._launch(f"{self.name}_kernel", "(_cdiv(R, BLOCK_R),)", args + ["NUM_STAGES=num_stages"],
                             "        ")
        return text + _total_launch(self.name, self.targets, self.reduction) + "    return out\n"


def _count_kernel(name: str, targets: _Targets) -> str:
    """The kernel adding up 'mean''s divisor, as float32: the rows not ignored, each by its class weight."""
    lines = ["count = tl.zeros([BLOCK], tl.float32)",
             "for start in range(0, R, BLOCK):",
             "    offs = start + tl.arange(0, BLOCK)",
             *indented(targets.counted() + ["count += counted"]),
             "tl.store(dst_ptr, tl.sum(count, axis=0))"]
    return jit_source(f"{name}_count_kernel", [*targets.params(), "dst_ptr", "R", "V", "BLOCK: tl.constexpr"], lines)


class _CrossEntropyGradKernel(_ClassRowsFile):
    description = ("The gradient of cross entropy with respect to its logits: BLOCK_R rows a program, read twice\n"
                   "in BLOCK_V chunks: an online logsumexp, then (softmax - one_hot(target)) times the loss's\n"
                   "upstream gradient (per row for 'none'; divided by the rows not ignored for 'mean', which a\n"
                   "kernel of one program counts first). A row whose target is {ignore} gets zeros.")

    def __init__(self, spec, node, inputs, options, body):
        super().__init__(spec, node, inputs, options, body)
        self.up = next(i for i in inputs if i.name == node.args[2].name)

    def configs(self) -> list[dict]:
        defaults = [_cross_entropy_config(*rows) for rows in self.rows_of]
        return self._space(defaults + CROSS_ENTROPY_CONFIGS, lambda config: [
            _cross_entropy_tiles(config, *rows, self.max_elem_bytes) for rows in self.rows_of])[:MAX_CONFIGS]

    def source(self) -> str:
        kernels = [self._kernel()] + [_count_kernel(self.name, self.targets)] * (self.reduction == "mean")
        return self._file(kernels, self.HELPERS, self._launcher())

    def _kernel(self) -> str:
        t, up = self.target.local, self.up.local
        scale = {"none": f"tl.load({up}_ptr + rows, mask=rows < R, other=0.0).to(tl.float32)",
                 "sum": f"tl.load({up}_ptr).to(tl.float32)",
                 "mean": f"tl.load({up}_ptr).to(tl.float32) / tl.load(count_ptr)"}[self.reduction]
        chunk = ["cols = start + tl.arange(0, BLOCK_V)[None, :]", "mask = (rows < R) & (cols < V)",
                 *self.body_values("rows * V + cols", NEG_INF)]
        lines = ["rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]",
                 f"LOG2E: tl.constexpr = {math.log2(math.e)!r}",
                 f"{t} = tl.load({t}_ptr + rows, mask=rows < R, other={self.targets.ignore})",
                 f"row_max = tl.full([BLOCK_R], {NEG_INF}, tl.float32)",
                 "row_sum = tl.zeros([BLOCK_R], tl.float32)",
                 "for start in range(0, V, BLOCK_V):", *indented(chunk + self._online_update(total=False)),
                 "lse = (row_max + tl.log(row_sum))[:, None]",
                 f"scale = tl.where({t} == {self.targets.ignore}, 0.0, "
                 f"{self.targets.weighted(scale, f'(rows < R) & ({t} >= 0) & ({t} < V)')})",
                 "for start in range(0, V, BLOCK_V):",
                 *indented(chunk + [f"grad = (tl.exp(val - lse) - {self._target_share(t)}) * scale",
                                    "tl.store(dst_ptr + rows * V + cols, grad.to(dst_ptr.dtype.element_ty), "
                                    "mask=mask)"])]
        params = ([f"{i.local}_ptr" for i in self.body_inputs] + [*self.targets.params(), f"{up}_ptr", "count_ptr",
                                                                  "dst_ptr", "R", "V", "BLOCK_R: tl.constexpr",
                                                                  "BLOCK_V: tl.constexpr"])
        return jit_source(f"{self.name}_kernel", params, lines, "    # BLOCK_R rows per program in BLOCK_V-wide chunks.\n")

    def _target_share(self, t: str) -> str:
        """What each class's probability is less: the one-hot target, smoothed by e toward 1 / V."""
        onehot = f"(cols == {t}).to(tl.float32)"
        return f"({1 - self.smoothing!r} * {onehot} + {self.smoothing!r} / V)" if self.smoothing else onehot

    def _launcher(self) -> str:
        first = self.body_inputs[0].local
        text = self._rows_head()
        text += (f"    out = torch.empty(shape, dtype={self.out_dtype(first)}, device={first}.device)\n"
                 "    if out.numel() == 0:\n        return out\n")
        if self.reduction == "mean":
            text += (f"    count = torch.empty((), dtype=torch.float32, device={first}.device)\n"
                     + launch(f"{self.name}_count_kernel", "(1,)", [*self.targets.args(), "count", "R", "V", "BLOCK=8192",
                                                                     "num_warps=16"], "    ") + "\n")
        text += self._tiles()
        args = [i.local for i in self.body_inputs] + [*self.targets.args(), self.up.local,
                                                      "count" if self.reduction == "mean" else "out", "out", "R", "V",
                                                      "BLOCK_R=BLOCK_R", "BLOCK_V=BLOCK_V", "num_warps=num_warps"]
        return text + self._launch(f"{self.name}_kernel", "(_cdiv(R, BLOCK_R),)", args) + "    return out\n"


# nll_loss: BLOCK rows a program. A row is one class index and one element read, so the kernel waits on
# latency: many rows in flight a program; fewer, smaller programs where rows are few.
NLL_CONFIGS = [{"BLOCK": b, "num_warps": w} for b, w in ((1024, 4), (256, 2), (4096, 8), (128, 1))]


class _NllKernel(KernelFile):
    description = ("BLOCK rows of a 2-D input [R, V] a program: each row's class index, then the one element it\n"
                   "picks, loss = -input[row, target]; the row's other elements are never read, and an input\n"
                   "broadcast over [R, V] is read through its strides, never copied.\n"
                   + _TARGETS_TEXT.replace("{outside}", "adds 0"))
    block_key = "BLOCK"

    def __init__(self, spec, node, inputs, options, body):
        names = input_names(node.args[0])
        body_inputs = [i for i in inputs if i.name in names]
        super().__init__(spec, body(node.args[0], body_inputs), inputs, body_inputs, options)
        self.reduction = node.attr("reduction")
        self.target = next(i for i in inputs if i.name == node.args[1].name)
        self.targets = _targets(node, inputs)
        self.description = self.description.replace("{ignore}", str(self.targets.ignore))

    def configs(self) -> list[dict]:
        return self._space(NLL_CONFIGS)

    def source(self) -> str:
        kernels = [self._kernel()]
        kernels += [_total_kernel(self.name, self.targets, self.reduction == "mean")] * (self.reduction != "none")
        return self._file(kernels, [_expanded_strides, _require_full], self._launcher())

    def _kernel(self) -> str:
        t = self.target.local
        params = [p for i in self.body_inputs for p in (f"{i.local}_ptr", f"{i.local}_sr", f"{i.local}_sv")]
        lines = ["rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
                 f"{t} = tl.load({t}_ptr + rows, mask=rows < R, other={self.targets.ignore})",
                 f"# The ignored target ({self.targets.ignore}) and any other outside [0, V) read nothing and add 0.",
                 f"pick = (rows < R) & ({t} >= 0) & ({t} < V) & ({t} != {self.targets.ignore})",
                 *(f"{i.local} = tl.load({i.local}_ptr + rows * {i.local}_sr + {t} * {i.local}_sv, mask=pick, "
                   "other=0.0).to(tl.float32)" for i in self.body_inputs),
                 f"loss = tl.where(pick, {self.targets.weighted(f'-({self.body_call()})', 'pick')}, 0.0)",
                 "tl.store(dst_ptr + rows, loss.to(dst_ptr.dtype.element_ty), mask=rows < R)"]
        return jit_source(f"{self.name}_kernel", params + [*self.targets.params(), "dst_ptr", "R", "V",
                                                           "BLOCK: tl.constexpr"], lines)

    def _launcher(self) -> str:
        first, t = self.body_inputs[0].local, self.target
        text = self._signature_and_prologue()
        text += (f"    shape = list(_broadcast_shape({', '.join(f'{i.local}.shape' for i in self.body_inputs)}))\n"
                 "    # R rows of V classes (dim 1), one class index per row.\n"
                 "    R, V = shape\n"
                 f'    _require_full("{t.name}", {t.local}.shape, [R])\n')
        text += _out_lines(self.reduction, "R", self.out_dtype(first), f"{first}.device")
        text += self._config_line(repr(NLL_CONFIGS[0]).replace("'", '"'))
        text += '    BLOCK = min(config["BLOCK"], triton.next_power_of_2(R))\n'
        args = [a for i in self.body_inputs for a in (i.local, f"*_expanded_strides(list({i.local}.shape), shape)")]
        args += [*self.targets.args(), _rows_out(self.reduction), "R", "V", "BLOCK=BLOCK", 'num_warps=config["num_warps"]']
        text += "    grid = (_cdiv(R, BLOCK),)\n" + launch(f"{self.name}_kernel", "grid", args, "    ") + "\n"
        return text + _total_launch(self.name, self.targets, self.reduction) + "    return out\n"


def reference_property(node: Node) -> tuple[str, bool]:
    """The generated reference test's check_property body for this op, and whether it calls
    body(): none here."""
    return "", False


ENTRIES = (
    Entry("cross_entropy", "cross entropy over the last dim of logits on {shapes}, each in {dtypes}",
          "cross_entropy(logits, target)", small=SMALL_LONG_ODD),
)
