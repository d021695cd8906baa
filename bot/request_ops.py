"""Request words for the catalog operators of issue 6 that do not fit the row/pointwise reading in
bot.request_parse: matmul (plain, batched, with an epilogue) and cross entropy; plus the text
primitives both modules use.

A matmul's shapes are read as problem sizes, one per case: [M, N, K], or [B, M, N, K] when
batched. Every input's shape follows from them (matmul_shapes), so the operands' K always match.
"""
from __future__ import annotations

import dataclasses
import re
from typing import NamedTuple

from bot import ir
from bot.generators.interface import GenerationError

# ---------------------------------------------------------------- text primitives

FLAGS = re.I | re.A        # ASCII \b and \w, so a Chinese character next to "relu" still ends the word
NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?"
END = r"(?![\w.]|\s*[x×*]\s*\d|\s+by\s+\d)"     # a number that is not the start of a shape
DIM = r"-?\d+k?"


def blank(m: re.Match) -> str:
    # Same length keeps later match positions meaningful; ';' ends any expression around it.
    return ";" + " " * (len(m.group(0)) - 1)


def size(word: str) -> int:
    """'4096' -> 4096, '4k' -> 4096."""
    return int(word[:-1]) * 1024 if word[-1] in "kK" else int(word)


def _fmt(shape: list[int]) -> str:
    return "x".join(map(str, shape))


def sizes_text(problem: list[int]) -> str:
    """[4096, 4096, 4096] -> 'M=4096 N=4096 K=4096' (with B= when batched)."""
    return " ".join(f"{k}={v}" for k, v in zip("BMNK"[4 - len(problem):], problem))


# ---------------------------------------------------------------- matmul words

MATMUL_WORD = re.compile(r"\bmat[\s_-]?mul\b|\bmatrix[\s-]+(?:multipl\w*|mult|product)\b|\bgemm\b|\bb?mm\b|"
                         r"矩阵乘法?|[\w)\]](?:@|[ \t]+@[ \t]+)[\w(]", FLAGS)     # "a @ b", not "hi @bob"
BATCHED_WORD = re.compile(r"\bbatch(?:ed|es)?\b|\bbmm\b|批(?:量|次)?", FLAGS)
MATMUL_DTYPES = ["float16", "bfloat16"]         # float32 only when asked for (fp32, tf32)
# Problem sizes [M, N, K] / [B, M, N, K]: square, and odd and non-square (no block size divides
# it, and a kernel that mixes up M, N and K fails on it).
MATMUL_DEFAULTS = [[4096, 4096, 4096], [1000, 1500, 700]]
BMM_DEFAULTS = [[32, 512, 512, 512], [3, 1000, 1500, 700]]
ACTIVATIONS = {"relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"}
_CONNECTIVES = {"add", "mul"}                  # "plus residual", "a times b": already read

_TF32 = re.compile(r"\btf32\b", FLAGS)
_TF32_FLAG = re.compile(r",?\s*\btf32\s*=\s*(True|False)\b")      # typed: matmul(a, b, tf32=True)
_NO_TF32 = re.compile(r"\b(?:no|without|disable|disallow)\s+tf32\b|(?:不用|禁用|不允许)\s*tf32", FLAGS)
_BIAS = re.compile(r"\bbias\b|偏置", FLAGS)
_NO_BIAS = re.compile(r"\b(?:without|no|w/o)\s+(?:a\s+)?bias\b|(?:无|不带|没有)偏置", FLAGS)
_RESIDUAL = re.compile(r"\bresidual\b|\bskip[\s-]connection\b|残差", FLAGS)
# Between a matmul's operands or its shapes: "a times b", "4096x4096 @ 4096x4096", "矩阵乘 A 乘 B".
_OPERAND_JOINS = re.compile(r"@|\b(?:two|pair\s+of)\b|乘(?!以)|加|两个", FLAGS)
_ACTIVATION_WORD = re.compile(r"\bactivation\b|激活", FLAGS)

_SIZE_RUN = re.compile(rf"(?:\b[bmnk]\s*[=:]?\s*{DIM}(?![\w.])[\s,;]*(?:and\s+)?){{2,4}}", FLAGS)
_SIZE = re.compile(rf"\b([bmnk])\s*[=:]?\s*({DIM})", FLAGS)
_CUBE = re.compile(rf"(?<![\w.])({DIM})\s*(?:\^\s*3|\*\*\s*3|³)(?![\w.])|(?<![\w.])({DIM})\s+cubed\b", FLAGS)
_BATCH = re.compile(r"\bbatch(?:es)?(?:\s+(?:size|count|of))?\s*[=:]?\s*(\d+)\b(?!\s*[x×*])|"
                    r"\b(\d+)\s+batch(?:es)?\b|批(?:量|次)?(?:大小)?\s*[=:为]?\s*(\d+)(?![\d\s]*[x×*])", FLAGS)
# "4096x4096 by 4096x4096" is two operands; the generic reader would take "by" as a dim separator.
_OPERAND_BY = re.compile(rf"({DIM}\s*[x×*]\s*{DIM})(\s+by\s+)(?={DIM}\s*[x×*])", FLAGS)
_NO_BATCH = "a batched matmul needs a batch count, e.g. 'batch 32 of 512x512x512' or '32x512x512 by 32x512x512'"


class Epilogue(NamedTuple):
    bias: bool
    residual: bool
    activation_named: bool     # "activation"/"激活" said, whichever function it names


def take_tf32(text: str) -> tuple[str, bool | None]:
    """'tf32' names float32 that allows TF32: read it as fp32 in place (keeping the dtypes' order);
    True/False when TF32 is asked for / refused, None when not mentioned."""
    if m := _TF32_FLAG.search(text):
        return text[:m.start()] + blank(m) + text[m.end():], m.group(1) == "True"
    if _NO_TF32.search(text):
        return _NO_TF32.sub(blank, text), False
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
        text = text[:m.start()] + blank(m) + text[m.end():]

    def problem(sizes: list[int]) -> str:
        if batched and batch is None and len(sizes) == 3:
            raise GenerationError(_NO_BATCH)
        return f" {_fmt(sizes)} "

    def named(m: re.Match) -> str:
        sizes = {k.upper(): size(v) for k, v in _SIZE.findall(m.group(0))}
        if not {"M", "N", "K"} <= sizes.keys():
            raise GenerationError(f"{m.group(0).strip()!r}: name all of M, N and K, e.g. 'M=4096 N=4096 K=4096'")
        return problem([sizes[k] for k in "BMNK" if k in sizes])

    text = _CUBE.sub(lambda m: problem([size(m.group(1) or m.group(2))] * 3), _SIZE_RUN.sub(named, text))
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
            notes.append(f"read {_fmt(s)} as the shape of both operands (M = N = K = {s[-1]})")
            out.append([*s, s[-1]])
        elif pair:
            raise GenerationError(f"a {_fmt(s)} and b {_fmt(nxt)} do not multiply: a's K is {s[-1]} but b's "
                                  f"is {nxt[-2]}{'' if s[:-2] == nxt[:-2] else ', and the batch sizes differ'}")
        elif len(s) == 4 and nxt is not None and len(nxt) == 4 and s[:2] == nxt[:2] and s[3] == nxt[2]:
            raise GenerationError(f"{_fmt(s)} by {_fmt(nxt)} reads as two 4-D operands, which the offline matmul does "
                                  "not take; give a batch of 3-D operands ('batched matmul 16x128x64 by 16x64x128').")
        elif not batched and len(s) == 3 and nxt is not None and len(nxt) == 3 and s[0] == nxt[0] and s[2] == nxt[1]:
            raise GenerationError(f"is {_fmt(s)} by {_fmt(nxt)} a batched matmul ({s[0]} of {_fmt(s[1:])} by "
                                  f"{_fmt(nxt[1:])})? Say 'batched matmul'; a single 3-number size reads as M x N x K.")
        elif len(s) in (operand_rank + 1, 4):
            if len(set(s)) > 1:
                notes.append(f"read {_fmt(s)} as {' x '.join('BMNK'[4 - len(s):])}")
            out.append(list(s))
        else:
            raise GenerationError(f"I cannot read {_fmt(s)} as a matmul shape. Give M, N and K ('4096x4096x4096', "
                                  "'M=4096 N=4096 K=4096', '4096^3') or both operands ('1024x4096 by 4096x2048'); "
                                  "batched: 'batch 32 of 512x512x512' or '32x512x512 by 32x512x512'.")
    return [[batch, *p] if batch is not None and len(p) == 3 else p for p in out]


def take_epilogue(text: str) -> tuple[str, Epilogue]:
    """The matmul, bias, residual and activation words, blanked so that what is left are the
    epilogue's functions and scale for the generic operator reader."""
    epilogue = Epilogue(bool(_BIAS.search(text)) and not _NO_BIAS.search(text), bool(_RESIDUAL.search(text)),
                        bool(_ACTIVATION_WORD.search(text)))
    for pattern in (_NO_BIAS, _BIAS, _RESIDUAL, _ACTIVATION_WORD, MATMUL_WORD, BATCHED_WORD, _OPERAND_JOINS):
        text = pattern.sub(blank, text)
    return text, epilogue


def check_epilogue_order(text: str, found: list[tuple[int, str]]) -> None:
    """The epilogue is activation(a @ b + bias) * scale + residual: words that name its parts in
    another order ('plus residual then relu', 'scaled by 0.125 then gelu') are refused."""
    parts = [(m.start(), 0, "bias") for m in _BIAS.finditer(text) if not _NO_BIAS.search(text)]
    parts += [(m.start(), 3, "residual") for m in _RESIDUAL.finditer(text)]
    parts += [(pos, 1 if op in ACTIVATIONS else 2, op) for pos, op in found if op in ACTIVATIONS or op == "scale"]
    parts.sort()
    for (_, r1, p1), (_, r2, p2) in zip(parts, parts[1:]):
        if r1 > r2 and {r1, r2} != {0, 3}:          # bias and residual are both added: either order
            raise GenerationError(f"you named {p1} before {p2}, but the epilogue applies {p2} first: it is "
                                  "activation(a @ b + bias) * scale + residual. For another order write the "
                                  "expression, e.g. 'relu(a @ b + residual)'.")


def matmul_expression(epilogue: Epilogue, words: list[tuple[str, str, float | None]],
                      operands: tuple[str, str] = ("a", "b"), tf32: bool = False) -> str:
    """activation(a @ b + bias) * scale + residual from the epilogue and the other operator words
    ((kind, op, value) as bot.request_parse finds them)."""
    acts = list(dict.fromkeys(op for _, op, _ in words if op in ACTIVATIONS))
    scales = [value for _, op, value in words if op == "scale"]
    other = [op for kind, op, _ in words
             if op not in ACTIVATIONS and op != "scale" and not (kind == "binary" and op in _CONNECTIVES)]
    if other or len(scales) > 1:
        raise GenerationError(f"a matmul's epilogue takes a bias, one activation (relu, gelu, silu, sigmoid, tanh), "
                              f"a scale and a residual, not {', '.join(other) or 'two scales'}. Write other "
                              "epilogues as an expression, e.g. 'relu(a @ b + bias) * 0.5 + residual'.")
    if len(acts) > 1:
        raise GenerationError(f"I found the activations {' and '.join(acts)}; which one do you want?")
    if epilogue.activation_named and not acts:
        raise GenerationError("which activation? relu, gelu, silu, sigmoid or tanh, e.g. 'matmul with bias and relu'")
    a, b = operands
    body = f"matmul({a}, {b}, tf32={tf32})" + " + bias" * epilogue.bias
    if acts:
        body = f"gelu({body}, approximate='tanh')" if acts[0] == "gelu_tanh" else f"{acts[0]}({body})"
    if scales:
        body = f"({body}) * {scales[0]!r}"
    return body + " + residual" * epilogue.residual


def operand_problem(a: tuple[str, list[int]], b: tuple[str, list[int]]) -> list[int]:
    """The problem [.., M, N, K] of operands (name, shape) a [.., M, K] @ b [.., K, N]; b may be one
    2-D weight shared by every matrix of a 3-D a."""
    (na, sa), (nb, sb) = a, b
    if len(sa) not in (2, 3) or len(sb) not in (2, len(sa)) or sa[-1] != sb[-2] or (len(sb) == 3 and sa[0] != sb[0]):
        raise GenerationError(f"{na} {_fmt(sa)} @ {nb} {_fmt(sb)} is not a product the offline matmul takes: "
                              "[M, K] @ [K, N], [B, M, K] @ [B, K, N] or [B, M, K] @ [K, N]")
    return [*sa[:-2], sa[-2], sb[-1], sa[-1]]


def matmul_shapes(problem: list[int], a: str, b: str, epilogue: dict[str, bool]) -> dict[str, list[int]]:
    """Each input's shape for one problem [.., M, N, K]; epilogue inputs are [N] vectors (True)
    or the output's shape."""
    *batch, m, n, k = problem
    shapes = {a: [*batch, m, k], b: [*batch, k, n]}
    return shapes | {e: [n] if vector else [*batch, m, n] for e, vector in epilogue.items()}


def with_tf32(node: ir.Node, tf32: bool) -> ir.Node:
    """The expression with its matmul's tf32 flag set."""
    if node.op == ir.MATMUL:
        return dataclasses.replace(node, attrs=tuple(sorted({**dict(node.attrs), "tf32": tf32}.items())))
    return dataclasses.replace(node, args=tuple(with_tf32(a, tf32) for a in node.args))


def matmul_name(node: ir.Node, batched: bool) -> str:
    """'matmul_bias_relu_scale_residual': the matmul, then its epilogue from the inside out."""
    mm = ir.matmul_node(node)
    operands = {a.name for a in mm.args}
    parts = ["bmm" if batched else "matmul"]
    for sub in _inside_out(node):
        if sub.op in ("input", "const", ir.MATMUL):
            continue
        leaves = [a.name for a in sub.args if a.op == "input" and a.name not in operands]
        if sub.op == "mul" and any(a.op == "const" for a in sub.args):
            label = "scale"
        elif sub.op in ir.BINARY and leaves:
            label = leaves[0]                           # "+ bias", "+ residual"
        else:
            label = sub.op
        if label not in parts:
            parts.append(label)
    return "_".join(parts[:5])


def _inside_out(node: ir.Node) -> list[ir.Node]:
    return [sub for a in node.args for sub in _inside_out(a)] + [node]


# ---------------------------------------------------------------- cross entropy words

CROSS_ENTROPY = re.compile(r"\b(?:softmax[\s_-]+)?cross[\s_-]?entropy(?:[\s_-]+loss)?\b|\bce[\s_-]loss\b|"
                           r"交叉熵(?:损失)?", FLAGS)
_INDEX_DTYPE = re.compile(r"\b(?:torch\.)?(?:int64|long)\b|\bi64\b", FLAGS)
_PER_ROW = re.compile(r"\bper[\s-](?:row|sample|example|token)\b|\breduction\s*[=:]?\s*['\"]?none\b['\"]?|"
                      r"\b(?:no|without)\s+reduction\b|\bunreduced\b|逐行|每行|不(?:做)?归约|无归约", FLAGS)
_MEAN = re.compile(r"\breduction\s*[=:]?\s*['\"]?mean\b['\"]?|\b(?:mean|average[ds]?)(?:\s+reduction)?\b|平均", FLAGS)
_SUM_REDUCTION = re.compile(r"\breduction\s*[=:]?\s*['\"]?sum\b|\bsummed\b|\bsum\b|求和", FLAGS)
_CE_NAMES = re.compile(r"\b(?:targets?|labels?|class(?:es)?(?:\s+ind(?:ices|ex))?|loss)\b|目标|标签|类别|损失", FLAGS)
_CE_EXTRAS = re.compile(r"\blabel[\s_-]?smoothing\b|\bignore[\s_-]?index\b|\b(?:class[\s_-])?weights?\b|"
                        r"标签平滑|权重", FLAGS)


def take_index_dtype(text: str) -> str:
    """'int64 targets' in a cross-entropy request: the target is int64 anyway; other dtype words
    are about the logits."""
    return _INDEX_DTYPE.sub(blank, text) if CROSS_ENTROPY.search(text) else text


def cross_entropy_words(text: str) -> tuple[str, str, list[str]]:
    """(expression, text without the words read, notes) for 'cross entropy over 4096x32000 logits'."""
    if m := _CE_EXTRAS.search(text):
        raise GenerationError(f"cross entropy with {m.group(0)!r} is not supported: cross_entropy(logits, target) "
                              "takes class indices, with reduction mean (the default) or none (per row)")
    if m := _SUM_REDUCTION.search(text):
        raise GenerationError(f"cross entropy with {m.group(0)!r} is not supported: use reduction mean (the default) "
                              "or none ('per row')")
    per_row = bool(_PER_ROW.search(text))
    notes = [] if per_row or _MEAN.search(text) else [
        "no reduction named: averaging the loss over rows (reduction='mean', like F.cross_entropy)"]
    for pattern in (CROSS_ENTROPY, _PER_ROW, _MEAN, _CE_NAMES):
        text = pattern.sub(blank, text)
    reduction = ", reduction='none'" if per_row else ""
    return f"cross_entropy(logits, target{reduction})", text, notes
