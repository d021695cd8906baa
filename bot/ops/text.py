"""Text primitives the families' words and the request reader share."""
from __future__ import annotations

import re

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


def fmt_shape(shape: list[int]) -> str:
    return "x".join(map(str, shape))


def sizes_text(problem: list[int]) -> str:
    """[4096, 4096, 4096] -> 'M=4096 N=4096 K=4096' (with B= when batched)."""
    return " ".join(f"{k}={v}" for k, v in zip("BMNK"[4 - len(problem):], problem))
