"""Text primitives the families' words and the request reader share."""
from __future__ import annotations

import re

FLAGS = re.I | re.A        # ASCII \b and \w, so a Chinese character next to "relu" still ends the word
NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?"
# small counts in words: "two tensors", "the last three dims", "两个张量"
COUNT_WORDS = {"two": 2, "three": 3, "four": 4, "两": 2, "二": 2, "三": 3, "四": 4}
END = r"(?![\w.]|\s*[x×*]\s*\d|\s+by\s+\d)"     # a number that is not the start of a shape
DIM = r"-?\d+k?"


def blank(m: re.Match) -> str:
    # Same length keeps later match positions meaningful; ';' ends any expression around it.
    return ";" + " " * (len(m.group(0)) - 1)


def blank_range(text: str, start: int, end: int) -> str:
    """text with text[start:end] blanked: a ';' (which ends an expression) and spaces."""
    return text[:start] + ";" + " " * (end - start - 1) + text[end:]


def blank_span(text: str, m: re.Match) -> str:
    """text with the match m blanked (blank)."""
    return blank_range(text, m.start(), m.end())


def size(word: str) -> int:
    """'4096' -> 4096, '4k' -> 4096."""
    return int(word[:-1]) * 1024 if word[-1] in "kK" else int(word)


def fmt_shape(shape: list[int]) -> str:
    return "x".join(map(str, shape))


def sizes_text(problem: list[int]) -> str:
    """[4096, 4096, 4096] -> 'M=4096 N=4096 K=4096' (with B= when batched)."""
    return " ".join(f"{k}={v}" for k, v in zip("BMNK"[4 - len(problem):], problem))


# Sizes said as one number or several ("3", "3x3", "2x2x2") and a parameter said by name ("stride 2",
# "步长 2", "padding of 1"): pooling's and convolution's words.
SIZES = (r"(?:\((\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?\s*,?\s*\)|"       # as torch takes a tuple: "(3, 3)"
         r"(\d+)(?:\s*[x×]\s*(\d+))?(?:\s*[x×]\s*(\d+))?)")


def param(en: str, zh: str) -> re.Pattern:
    """The pattern of a size parameter said in English (a regex of its name) or Chinese."""
    return re.compile(rf"\b{en}\s*(?:of|=|:|is)?\s*{SIZES}(?!\w)|{zh}\s*(?:为|是|=|:)?\s*{SIZES}", FLAGS)


def window_sizes(before: str, noun: str, zh: str, after: str = "") -> re.Pattern:
    """A window's or kernel's sizes: said just before the operation's words (`before`: "2x2 max
    pooling"), by its noun ("kernel size 3", "3x3 kernel"), in Chinese (`zh`: "卷积核 3"), or in a
    pattern of the caller's (`after`)."""
    return re.compile(rf"(?<![\w.]){SIZES}(?=[\s-]*(?:{before}))|\b{noun}(?:[\s_-]*size)?\s*(?:of|=|:|is)?\s*{SIZES}(?!\w)|"
                      rf"(?<![\w.]){SIZES}[\s-]*{noun}s?\b|{zh}(?:大小)?\s*(?:为|是|=|:)?\s*{SIZES}"
                      + (f"|{after}" if after else ""), FLAGS)


# a window's or kernel's stride, padding and dilation
WINDOW_PARAMS = {"stride": param("strides?", "步长"), "padding": param("pad(?:ding)?", "填充"),
                 "dilation": param("dilation", "(?:膨胀|空洞)")}


def taken(pattern: re.Pattern, text: str) -> tuple[tuple[int, ...] | None, str]:
    """The numbers of pattern's first match (one or several), and text with that match blanked."""
    m = pattern.search(text)
    if m is None:
        return None, text
    return tuple(int(g) for g in m.groups() if g is not None), blank_span(text, m)


def sizes_arg(sizes: tuple[int, ...]) -> str:
    """A size argument as torch takes it: 3 where every dim's is 3, else (3, 5)."""
    return str(sizes[0]) if len(set(sizes)) == 1 else str(tuple(sizes))
