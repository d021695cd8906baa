"""Worked examples for LLM prompts: the offline catalog's artifacts closest to a request.

The catalog is a handful of operators the offline generator lowers, one per family
(pointwise activations, gating, clamping, row softmax, row reductions, norms), each with
words that suggest it. A request is matched by shared words (a word containing a keyword
counts, so "hardswish" suggests both the swish and the clamp families); the examples are
the offline generator's own artifacts for the best matches, small fp32 cases.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from bot.generators.interface import GenRequest
from bot.generators.offline import OfflineGenerator


@dataclass(frozen=True)
class Entry:
    request: str
    keywords: frozenset[str]


def _entry(request: str, words: str) -> Entry:
    return Entry(request, frozenset(words.split()))


CATALOG: tuple[Entry, ...] = (
    _entry("relu(x + y) for fp32 1024x1024",
           "relu add pointwise elementwise activation prelu elu selu celu threshold bias"),
    _entry("softmax(x) over the last dim for fp32 1024x1024",
           "softmax logsumexp log_softmax attention probability temperature exp row cross entropy"),
    _entry("where(x > 0, x, 0.01 * x) for fp32 1024x1024",
           "where leaky slope negative select mask conditional piecewise threshold elu"),
    _entry("silu(x) * y for fp32 1024x1024", "silu swish sigmoid gate gated glu swiglu geglu mul product"),
    _entry("clamp(x, -1.0, 1.0) for fp32 1024x1024", "clamp clip hard relu6 hardtanh saturate range bound"),
    _entry("gelu(x) for fp32 1024x1024", "gelu erf tanh mish softplus smooth activation"),
    _entry("sum(x) over the last dim for fp32 1024x1024",
           "sum reduce reduction mean prod max min argmax norm l1 l2 variance var std total"),
    _entry("rmsnorm(x, weight) for fp32 1024x1024", "rmsnorm rms norm normalize normalization l2 scale"),
    _entry("layernorm(x, weight, bias) for fp32 1024x1024",
           "layernorm layer norm normalization groupnorm batchnorm instancenorm mean variance var std"),
)


def closest(text: str, k: int = 2) -> list[Entry]:
    """The k catalog entries sharing the most words with text (catalog order breaks ties)."""
    words = set(re.findall(r"[a-z][a-z0-9_]+", text.lower()))

    def score(entry: Entry) -> int:
        return sum(1 for kw in entry.keywords if any(kw == w or (len(kw) >= 4 and kw in w) for w in words))

    return sorted(CATALOG, key=score, reverse=True)[:k]


@functools.lru_cache(maxsize=64)
def artifact(entry: Entry, stage: str) -> str:
    """The offline generator's artifact of that stage for a catalog entry."""
    gen = OfflineGenerator()
    spec = gen.generate(GenRequest("spec", entry.request)).content
    if stage == "spec":
        return spec
    return gen.generate(GenRequest(stage, entry.request, approved={"spec": spec})).content
