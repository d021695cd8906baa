"""The words of a request that no reading pass placed.

The request parser blanks out what each pass understands. Whatever is left must carry no
meaning: a filler word from the allow-list below, punctuation, or a name of one of the
operator's inputs. Anything else (a word, a number, an operator symbol, Chinese text) may
qualify the operation ("cumulative", "2x2 pooling", "backward", "squares"), so the parser
refuses and names it instead of guessing. An allow-list of harmless words, not a list of
known-bad ones, so a word nobody foresaw is refused rather than dropped.
"""
from __future__ import annotations

import re

# Words that say nothing about what is computed. Negations, comparisons and quantities
# ("not", "without", "only if", "every other", "half") are deliberately absent, and so is
# "precision": "high precision" names no dtype the parser read.
FILLER_WORDS = frozenset("""
a an the of for on in to with and or as at by from into onto that this these those it its is are be
being been was were has have having i me my we us our you your he she they them their please pls
can could would should will shall may might must need needs want wants wanted like give gives get
gets make makes made write writes wrote generate generates create creates build builds implement
implements implementing implementation compute computes computing computed calculate calculates
calculating do does doing apply applies applied applying perform performs return returns
returning take takes taking use uses using via so then followed also just simple plain here there which
what how some find finds finding order
fast faster fastest efficient efficiently optimized optimised optimal high
performance performant speed speedy accelerated accelerate custom fused fuse fusing kernel kernels
triton gpu gpus cuda nvidia h100 h200 op ops operator operators operation operations function
functions routine layer
tensor tensors matrix matrices array arrays input inputs output outputs value values data result
results element elements entries shape shapes shaped size sizes sized dtype dtypes type types
case cases variant variants both each every together given same
logits scores activation activations features hidden states vector vectors
over along across per
hey hi thanks thank ok okay now allow allowed allowing natural else otherwise
actually change set switch try let lets going go
accumulate accumulates accumulated accumulating accumulation accumulator vectorized vectorised coalesced
tuned autotuned autotune autotuning tune tuning benchmark benchmarked benchmarking
""".split())

# Chinese filler, longest first so "帮我生成" goes before "生成".
FILLER_CJK = tuple(sorted("""
帮我 帮忙 带有 带 先 然后 之后 后 再 激活 沿 按 求 取 允许 残差 权重 偏置 请你 请 给我 我要 我想 我需要 需要 想要 生成 写一个 写 实现 做一个 做 计算 进行 一下 一个 个 的 了 吧 呢 啊
算子 内核 核函数 函数 操作 运算 张量 矩阵 数组 输入 输出 数据 结果 元素 形状 大小 尺寸 类型 精度 数据类型
和 与 及 以及 并 在 上 中 对 用 使用 为 是 把 将 其 每个 所有 融合 快速 高效 优化 一些 基于 针对 支持
""".split(), key=len, reverse=True))

_TOKEN = re.compile(r"(?P<rank>\b[1-4]-?[dD]\b|\be\.g\.|\bi\.e\.)|(?P<num>\d+(?:\s*[x×*]\s*\d+)+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|(?P<word>[A-Za-z][A-Za-z0-9_]*)"
                    r"|(?P<cjk>[\u3400-\u9fff]+)|(?P<sym>\*\*|[@*^=<>%~|!$#]|\[\s*\]|\(\s*\))")


def unplaced(text: str, names: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The phrases of text that are neither filler, punctuation nor an input name, in order; a
    run of such tokens with only spaces between them is one phrase."""
    spans: list[tuple[int, int]] = []
    for m in _TOKEN.finditer(text):
        for start, end in _meaningful(m, names):
            if spans and not text[spans[-1][1]:start].strip():
                spans[-1] = (spans[-1][0], end)
            else:
                spans.append((start, end))
    return [text[s:e] for s, e in spans]


def _meaningful(m: re.Match, names: set[str] | frozenset[str]) -> list[tuple[int, int]]:
    kind, token = m.lastgroup, m.group(0)
    if kind == "word":
        lower = token.lower()
        return [] if lower in FILLER_WORDS or token in names else [m.span()]
    if kind == "cjk":
        return _cjk_left(token, m.start())
    if kind == "rank":
        return []                          # "a 3-D tensor", "3D": the shapes say it
    return [m.span()]


def _cjk_left(run: str, offset: int) -> list[tuple[int, int]]:
    """The stretches of a Chinese run that no filler covers."""
    covered = [False] * len(run)
    i = 0
    while i < len(run):
        word = next((w for w in FILLER_CJK if run.startswith(w, i)), None)
        if word:
            covered[i:i + len(word)] = [True] * len(word)
            i += len(word)
        else:
            i += 1
    spans, start = [], None
    for i, c in enumerate([*covered, True]):
        if not c and start is None:
            start = i
        elif c and start is not None:
            spans.append((offset + start, offset + i))
            start = None
    return spans
