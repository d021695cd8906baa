"""Check files a person brings (spec, reference, kernel) with the trusted harness, no queue:
the same sandbox and correctness checks a kernel_test job gets, without generated tests."""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Callable

from runner import worker


def verify(spec_path: str | Path, reference_path: str | Path, kernel_path: str | Path, backend: str = "cpu",
           timeout_s: float = 600.0, gpu: int | None = None,
           progress: Callable[[str], None] = lambda line: None) -> dict:
    """The result dict of docs/CONTRACTS.md for a 'verify' job built from these files."""
    files = {name: Path(path).read_text() for name, path in
             (("spec.json", spec_path), ("reference.py", reference_path), ("kernel.py", kernel_path))}
    job = {"job_id": f"verify-{uuid.uuid4().hex[:12]}", "kind": "verify", "backend": backend,
           "attempt": 1, "timeout_s": timeout_s, "files": files}
    return worker.execute_job(job, progress, backend=backend, gpu=gpu)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2e}" if value and abs(value) < 1e-2 else f"{value:.4g}"
    return str(value)


def _table(headers: list[str], rows: list[list]) -> list[str]:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    return [line(headers), line(["-" * w for w in widths]), *map(line, cells)]


def format_result(result: dict) -> str:
    """The result as text for a terminal: verdict, correctness table, timings, warnings."""
    out = [f"{result['status'].upper()}: {result['summary']}",
           f"device: {result['device']} ({result['backend']}) on {result['host']}"]
    if result.get("correctness"):
        rows = [[r["case"], r["dtype"], "skip" if r["skipped"] else "ok" if r["ok"] else "FAIL",
                 *([None, None] if r["skipped"] else [r["max_abs_err"], r["max_rel_err"]]), r["reason"] or r["worst"]]
                for r in result["correctness"]]
        out += ["", *_table(["case", "dtype", "result", "max abs err", "max rel err", "detail"], rows)]
    if result.get("report_rows"):
        rows = [[r["case"], r["dtype"], r["torch_ms"], r["compile_ms"], r["kernel_ms"], r["speedup"], r["gbps"],
                 r["pct_of_copy"]] for r in result["report_rows"]]
        out += ["", *_table(["case", "dtype", "torch ms", "compile ms", "kernel ms", "speedup", "GB/s", "% of copy"],
                            rows), result.get("timing_note", "")]
    if result.get("pytest"):
        p = result["pytest"]
        out += ["", f"generated tests: {p['passed']} passed, {p['failed']} failed, {p['skipped']} skipped"]
    out += [f"warning: {w}" for w in result.get("warnings", [])]
    return "\n".join(out)
