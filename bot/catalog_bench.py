"""`kernelbot bench`: the whole pipeline (`kernelbot run REQUEST --yes`) for every catalog entry
on a GPU runner, then one table of what the runs measured side by side, and the issue 6 targets.

Entries run one per GPU at a time (each in its own KERNELBOT_HOME with its own local runner,
pinned through CUDA_VISIBLE_DEVICES), so timings on one GPU never overlap.
"""
from __future__ import annotations

import json
import math
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from bot.catalog import Entry
from bot.workflow.cards import format_table

COPY_TARGET = 90.0          # % of the measured copy bandwidth, memory-bound ops at 8192x8192
COMPILE_GEOMEAN_TARGET = 1.0
EAGER_FLOOR = 0.95
SOFTMAX_VS_COMPILE = 1.5
CUBLAS_TARGET = 0.90        # matmul at 4096^3 in fp16 and bf16
PLAIN_MATMUL = {"matmul", "bmm", "matmul_tf32"}     # torch eager is cuBLAS alone: its speedup is % of cuBLAS


MIN_ENTRY_S = 60            # with less of the budget left, an entry is not started


def run_all(entries: list[Entry], out: Path, backend: str, gpus: list[str], timeout_s: float,
            budget_s: float | None = None) -> dict[str, dict]:
    """Run every entry, one per GPU at a time; returns entry name -> report.json (or an error).
    With budget_s, no entry starts once less than MIN_ENTRY_S of it is left, and each entry's
    own timeout ends with the budget (kernelbot run then cancels and exports what it has)."""
    deadline = time.time() + budget_s if budget_s else float("inf")
    todo: queue.Queue[Entry] = queue.Queue()
    for e in entries:
        todo.put(e)
    reports: dict[str, dict] = {}

    def worker(gpu: str) -> None:
        while True:
            left = deadline - time.time()
            try:
                entry = todo.get_nowait()
            except queue.Empty:
                return
            if left < MIN_ENTRY_S:
                print(f"[gpu {gpu}] {entry.name}: not started, the budget is spent", flush=True)
                continue
            reports[entry.name] = run_one(entry, out, backend, gpu, min(timeout_s, left))

    threads = [threading.Thread(target=worker, args=(gpu,)) for gpu in gpus]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return reports


def run_one(entry: Entry, out: Path, backend: str, gpu: str, timeout_s: float) -> dict:
    """`kernelbot run` for one entry in a subprocess; its log goes to OUT/NAME.log."""
    env = {**os.environ, "KERNELBOT_HOME": str(out / f".home-gpu{gpu}"), "CUDA_VISIBLE_DEVICES": gpu}
    cmd = [sys.executable, "-m", "bot.cli", "run", entry.request(), "--yes", "--out", str(out / entry.name),
           "--backend", backend, "--timeout", str(timeout_s)]
    start = time.time()
    print(f"[gpu {gpu}] {entry.name}: {entry.request()}", flush=True)
    with open(out / f"{entry.name}.log", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    print(f"[gpu {gpu}] {entry.name}: exit {rc} after {time.time() - start:.0f} s", flush=True)
    return {**read_report(out, entry), "exit_code": rc}


def read_report(out: Path, entry: Entry) -> dict:
    path = out / entry.name / "report.json"
    return json.loads(path.read_text()) if path.exists() else {}


def rows(entries: list[Entry], reports: dict[str, dict]) -> list[dict]:
    """One row per entry x case x dtype from the reports' bench tables."""
    out = []
    for entry in entries:
        report = reports.get(entry.name, {})
        for r in report.get("bench", []):
            out.append({"op": entry.name, "kind": entry.kind, **r})
        stopped = [s for s in report.get("stages", []) if s["status"] in ("failed", "cancelled")]
        if stopped or not report.get("bench"):
            why = "; ".join(f"{s['stage']} {s['status']}: {s.get('job', {}).get('summary', '')}"[:90] for s in stopped)
            out.append({"op": entry.name, "kind": entry.kind, "case": "-", "dtype": "-",
                        "error": why or ("no benchmark" if report else "not run")})
    return out


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _speedup(r: dict, key: str) -> str:
    """A speedup with its interval from the two times' interquartile ranges; a tie where that holds 1.0."""
    interval = r.get(f"{key}_range")
    text = _fmt(r.get(key), ".2f")
    if interval:
        text += f" ({interval[0]:.2f}-{interval[1]:.2f}{', tie' if r.get(f'{key}_tie') else ''})"
    return text


def table(rows_: list[dict]) -> str:
    """Times are medians; a speedup's parenthesis is its interval over the two times' interquartile ranges."""
    head = ["op", "case", "dtype", "kernel us", "eager us", "compile us", "vs eager", "vs compile",
            "% copy / TFLOP/s", "config"]
    body = []
    for r in rows_:
        if r.get("error"):
            body.append([r["op"], "-", "-", "-", "-", "-", "-", "-", r["error"], ""])
            continue
        us = lambda v: _fmt(v and v * 1e3, ".1f")  # noqa: E731
        share = (f"{_fmt(r.get('tflops'), '.0f')} ({_fmt(r.get('speedup'), '.0%')} of cuBLAS)" if r["op"] in PLAIN_MATMUL
                 else _fmt(r.get("tflops"), ".0f") if r["kind"] == "matmul"
                 else "-" if r["kind"] == "compute"          # attention: neither bandwidth- nor cuBLAS-bound
                 else _fmt(r.get("pct_of_copy"), ".1f"))
        body.append([r["op"], r["case"], r["dtype"], us(r.get("kernel_ms")), us(r.get("torch_ms")),
                     us(r.get("compile_ms")), _speedup(r, "speedup"), _speedup(r, "speedup_vs_compile"),
                     share, r.get("config") or ""])
    return "\n".join(format_table([head, *body]))


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def targets(rows_: list[dict]) -> list[tuple[str, bool | None, str]]:
    """(target, met, what was measured) for each of issue 6's targets; met is None where no row of
    this run bears on it (an --only run without softmax says nothing about softmax)."""
    ok = [r for r in rows_ if not r.get("error")]
    missing = [r["op"] for r in rows_ if r.get("error")]
    big_memory = [r for r in ok if r["kind"] == "memory" and r["case"].startswith("8192x8192")]
    low_copy = [f"{r['op']} {r['dtype']} {r.get('pct_of_copy') or 0:.0f}%" for r in big_memory
                if (r.get("pct_of_copy") or 0) < COPY_TARGET]
    g = geomean([r.get("speedup_vs_compile") for r in ok])
    slow = [f"{r['op']} {r['case']} {r['dtype']} {r.get('speedup') or 0:.2f}" for r in ok
            if (r.get("speedup") or 0) < EAGER_FLOOR]
    soft = [r for r in ok if r["op"] == "softmax"]
    soft_low = [f"{r['case']} {r['dtype']} {r.get('speedup_vs_compile') or 0:.2f}" for r in soft
                if (r.get("speedup_vs_compile") or 0) < SOFTMAX_VS_COMPILE]
    mm = [r for r in ok if r["op"] == "matmul" and r["case"].startswith("4096x4096") and r["dtype"] != "float32"]
    mm_low = [f"{r['dtype']} {r.get('speedup') or 0:.0%}" for r in mm if (r.get("speedup") or 0) < CUBLAS_TARGET]
    return [
        ("every catalog entry ran", not missing, ", ".join(missing) or f"{len({r['op'] for r in ok})} entries"),
        judged(f"memory-bound at 8192x8192 >= {COPY_TARGET:.0f}% of copy bandwidth", big_memory, low_copy,
                "below: " + ", ".join(low_copy) if low_copy else f"{len(big_memory)} rows"),
        judged(f"geomean vs torch.compile >= {COMPILE_GEOMEAN_TARGET}", ok,
                [g] if (g or 0) < COMPILE_GEOMEAN_TARGET else [], _fmt(g, ".3f")),
        judged(f"no case under {EAGER_FLOOR} vs torch eager", ok, slow, "; ".join(slow) or "none"),
        judged(f"softmax >= {SOFTMAX_VS_COMPILE}x torch.compile", soft, soft_low,
                "below: " + "; ".join(soft_low) if soft_low else f"{len(soft)} rows"),
        judged(f"matmul 4096^3 fp16/bf16 >= {CUBLAS_TARGET:.0%} of cuBLAS", mm, mm_low,
                "below: " + "; ".join(mm_low) if mm_low else ", ".join(f"{r['dtype']} {r['speedup']:.0%}" for r in mm)),
    ]


def judged(name: str, measured: list, misses: list, what: str) -> tuple[str, bool | None, str]:
    """A target met when rows bear on it and none misses it; None (not measured) without such rows."""
    if not measured:
        return name, None, "no row of this run bears on it"
    return name, not misses, what


RATIOS = (("speedup", "vs torch eager, GPU time"), ("speedup_vs_compile", "vs torch.compile, GPU time"),
          ("speedup_per_call", "vs torch eager, per call"))


def ratio_lines(rows_: list[dict]) -> list[str]:
    """Each ratio's geomean over the rows and its worst case, with how many rows are ties."""
    lines = []
    for key, what in RATIOS:
        measured = [r for r in rows_ if r.get(key)]
        if measured:
            worst = min(measured, key=lambda r: r[key])
            ties = sum(bool(r.get(f"{key}_tie")) for r in measured)
            lines.append(f"  {what}: geomean {geomean([r[key] for r in measured]):.3f}, worst {worst[key]:.2f} "
                         f"({worst['op']} {worst['case']} {worst['dtype']}), {ties} of {len(measured)} ties")
    return lines


def summary(rows_: list[dict], device: str, targets_of=targets) -> str:
    lines = [f"device: {device}", table(rows_), "", "ratios:", *ratio_lines(rows_), "", "targets:"]
    label = {True: "met", False: "MISSED", None: "not measured"}
    lines += [f"  [{label[met]}] {name}: {what}" for name, met, what in targets_of(rows_)]
    return "\n".join(lines)


def main(entries: list[Entry], out: Path, backend: str, gpus: list[str], timeout_s: float,
         table_only: bool = False, budget_s: float | None = None, targets_of=targets, stem: str = "catalog") -> int:
    """Run the entries (or, table_only, read the reports an earlier run left in OUT) and print
    the table and the targets (targets_of: the catalog's, or a grid's) into OUT/<stem>.txt and
    .json; exit 0 only if no target this run measured is missed."""
    out.mkdir(parents=True, exist_ok=True)
    if table_only:
        reports = {e.name: read_report(out, e) for e in entries}
    else:
        reports = run_all(entries, out, backend, gpus, timeout_s, budget_s)
    all_rows = rows(entries, reports)
    device = next((r.get("device") for r in reports.values() if r.get("device")), "unknown")
    text = summary(all_rows, device, targets_of)
    (out / f"{stem}.json").write_text(json.dumps({"device": device, "rows": all_rows}, indent=1))
    (out / f"{stem}.txt").write_text(text + "\n")
    print(text)
    return 1 if any(met is False for _, met, _ in targets_of(all_rows)) else 0
