"""The exported kernel carries what the benchmark stage tuned: the winning config per case.

Pure text in, text out: the kernel's `TUNED = {}` line (docs/CONTRACTS.md, tuning contract)
becomes a literal of the benchmark's best config per case x dtype, keyed by tuning_key, so
`NAME(*inputs)` on those shapes and dtypes launches with the config that won on the runner's GPU.
"""
from __future__ import annotations

import json
import re

EMPTY_TUNED = re.compile(r"^TUNED = \{\}[^\n]*$", re.MULTILINE)


def tuned_kernel(source: str, tuning: list[dict], device: str = "") -> str:
    """source with its `TUNED = {}` line filled from a benchmark result's tuning list (one line
    per case, a comment naming the GPU). Unchanged when no case has a best config or the
    source has no empty TUNED (an edited kernel outside the contract)."""
    winners = {t["key"]: t["best"] for t in tuning if t.get("best")}
    if not winners or not EMPTY_TUNED.search(source):
        return source
    lines = "".join(f"    {json.dumps(key)}: {json.dumps(config)},\n" for key, config in winners.items())
    where = f" on {device}" if device else ""
    literal = (f"# Tuned{where} by kernelbot's benchmark stage: the fastest correct config per case.\n"
               f"TUNED = {{\n{lines}}}")
    return EMPTY_TUNED.sub(lambda _: literal, source, count=1)

