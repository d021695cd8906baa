"""A runner as the chat tests play it: results as docs/CONTRACTS.md fixes them, with a real
matplotlib chart, reported through a MemoryQueue (progress first, then the result)."""
from __future__ import annotations

import base64
import io
import time
from typing import Any, Callable

from fakes.queue import MemoryQueue

BENCH = {"report_rows": [{"case": "8x16", "dtype": "float32", "torch_ms": 0.0065, "compile_ms": 0.0063,
                          "kernel_ms": 0.0061, "speedup": 1.07, "speedup_vs_compile": 1.03, "gbps": 2580.0,
                          "pct_of_copy": 61.2}],
         "bench": [{"case": "8x16", "dtype": "float32", "version": "kernel", "ms": 0.0061,
                    "gbps": 2580.0, "pct_of_copy": 61.2, "implausible": False}],
         "copy_gbps": 4215.0, "timing_note": "do_bench median, L2 flushed; CUDA-graph median beside it"}


def wait_until(pred: Callable[[], Any], timeout: float = 10.0) -> Any:
    end = time.time() + timeout
    while time.time() < end:
        if value := pred():
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def chart_png() -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(["torch", "torch.compile", "kernel"], [1.0, 1.02, 1.07])
    ax.set_ylabel("speedup vs torch")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def result(job: dict, **extra) -> dict:
    """A runner result as docs/CONTRACTS.md fixes it."""
    return {"job_id": job["job_id"], "kind": job["kind"], "status": "pass", "host": "gpu-7", "device": "NVIDIA H200",
            "backend": "cuda", "started_at": 1700000000.0, "finished_at": 1700000012.5,
            "summary": "1/1 cases pass; worst rel err 1.2e-07 (8x16 float32)",
            "correctness": [{"case": "8x16", "dtype": "float32", "ok": True, "skipped": False, "reason": "",
                             "max_abs_err": 2.4e-07, "max_rel_err": 1.2e-07, "worst": "at (3, 5): got 1.5, want 1.5",
                             "seeds": [0, 1, 2]}],
            "pytest": {"passed": 1, "failed": 0, "skipped": 0, "errors": 0, "exit_code": 0, "log_tail": "1 passed"},
            "warnings": [], "log_tail": "", **extra}


def run_job(queue: MemoryQueue, poll: Callable[[], None], kind: str, **extra) -> dict:
    """The runner picks up the job of `kind`, reports progress, then its result; poll is the
    service's poll_jobs."""
    job = wait_until(lambda: next((j for j in queue.jobs if j["kind"] == kind), None))
    queue.beats[job["job_id"]] = {"ts": time.time(), "state": "running", "detail": "correctness 1/1",
                                  "host": "gpu-7", "device": "NVIDIA H200", "pid": 4242, "attempt": 1}
    poll()
    queue.results[job["job_id"]] = result(job, **extra)
    poll()
    return job
