"""`kernelbot bench --grid llm`: catalog entries over shapes LLMs run and no catalog table holds
(hidden 2048-8192, vocabularies 32K-152K, 1 to 16K tokens, decode and prefill matmuls), in bf16,
with issue 25's targets: the geomean and the worst case against torch.compile on GPU time, the
per-call time against torch eager on small tensors, and matmul against cuBLAS in every case.

Each entry keeps its words and expression (bot.catalog) and takes the grid's shapes instead of its
own, so the run is the whole pipeline for each, as `kernelbot bench` runs the catalog.
"""
from __future__ import annotations

import dataclasses
import math
import re

from bot.catalog import Entry, by_name
from bot.catalog_bench import geomean, judged

# entry -> its cases: tokens x hidden (norms, pointwise), rows x vocabulary (softmax, cross entropy),
# decode (M 1-64) and prefill matmuls of Llama-shaped projections.
LLM = {
    "add": "16x4096, 4096x4096, 16384x8192",
    "swiglu": "16x11008, 4096x11008, 8192x14336",
    "rmsnorm": "1x4096, 16x4096, 16384x4096, 4096x2048, 2048x8192",
    "add_rmsnorm": "16x4096, 16384x4096, 4096x8192",
    "layernorm": "16x2048, 16384x4096",
    "softmax": "16384x1024, 4096x32000, 512x128256, 64x151936",
    "sum": "1x4096, 16384x4096, 4096x1024, 1024x16384",
    "cross_entropy": "4096x32000, 1024x128256, 512x151936",
    "matmul": "1x4096 by 4096x4096, 16x4096 by 4096x4096, 64x4096 by 4096x11008, 4096x4096 by 4096x11008, "
              "2048x8192 by 8192x8192",
}
GRIDS = {"llm": LLM}
DTYPES = "bf16"

COMPILE_GEOMEAN = 1.1       # GPU time, over the grid
COMPILE_FLOOR = 0.9         # no case under this against torch.compile
PER_CALL_CEILING = 1.5      # the kernel's per-call time within this many times torch eager's ...
PER_CALL_ELEMENTS = 1 << 20     # ... where the case has fewer elements than this
CUBLAS_FLOOR = 0.9          # every matmul case against cuBLAS (torch eager)


def entries(grid: str, names: list[str] | None = None) -> list[Entry]:
    """The grid's entries (those named, when names), each with the grid's shapes in bf16."""
    if grid not in GRIDS:
        raise ValueError(f"unknown grid {grid!r}; known: {', '.join(GRIDS)}")
    shapes = GRIDS[grid]
    chosen = by_name(names or list(shapes))
    missing = [e.name for e in chosen if e.name not in shapes]
    if missing:
        raise ValueError(f"grid {grid!r} has no shapes for {', '.join(missing)}; it has {', '.join(shapes)}")
    return [dataclasses.replace(e, big=shapes[e.name], dtypes=DTYPES) for e in chosen]


def _elements(case: str) -> int:
    """Elements of a case's first tensor: '16x4096 (b:4096x4096)' -> 65536."""
    return math.prod(int(d) for d in re.match(r"[\dx]+", case).group(0).split("x"))


def targets(rows: list[dict]) -> list[tuple[str, bool | None, str]]:
    """(target, met, what was measured) for issue 25's grid targets; None where no row bears on it."""
    ok = [r for r in rows if not r.get("error")]
    memory = [r for r in ok if r["kind"] != "matmul"]
    g = geomean([r.get("speedup_vs_compile") for r in memory])
    low = [f"{r['op']} {r['case']} {r.get('speedup_vs_compile') or 0:.2f}" for r in memory
           if (r.get("speedup_vs_compile") or 0) < COMPILE_FLOOR]
    small = [r for r in ok if _elements(r["case"]) < PER_CALL_ELEMENTS and r.get("speedup_per_call")]
    slow_calls = [f"{r['op']} {r['case']} {1 / r['speedup_per_call']:.2f}x eager" for r in small
                  if 1 / r["speedup_per_call"] > PER_CALL_CEILING]
    mm = [r for r in ok if r["kind"] == "matmul"]
    mm_low = [f"{r['case']} {r.get('speedup') or 0:.0%}" for r in mm if (r.get("speedup") or 0) < CUBLAS_FLOOR]
    missing = sorted({r["op"] for r in rows if r.get("error")})
    return [
        ("every grid entry ran", not missing, ", ".join(missing) or f"{len({r['op'] for r in ok})} entries"),
        judged(f"geomean vs torch.compile >= {COMPILE_GEOMEAN} (GPU time)", memory,
                [g] if (g or 0) < COMPILE_GEOMEAN else [], f"{g or 0:.3f}"),
        judged(f"no case under {COMPILE_FLOOR}x torch.compile", memory, low, "; ".join(low) or "none"),
        judged(f"per call within {PER_CALL_CEILING}x torch eager under {PER_CALL_ELEMENTS:,} elements", small,
                slow_calls, "; ".join(slow_calls) or f"{len(small)} rows"),
        judged(f"matmul >= {CUBLAS_FLOOR:.0%} of cuBLAS in every case", mm, mm_low,
                "below: " + "; ".join(mm_low) if mm_low else f"{len(mm)} rows"),
    ]
