"""Issue 27, item 2: N concurrent sessions on a fleet of every GPU against the same N on one GPU.

    python tests/fleet_speedup.py --backend cuda --gpus 0,1,2,3 --sessions 20

For each fleet (the GPUs given, then the first alone) in a fresh KERNELBOT_HOME: `kernelbot runner
--gpus LIST` is started, N `kernelbot run REQUEST --yes` commands start at once (each its own
session, all six stages), and the wall time until the last one ends is taken. Every run must pass;
the runners' logs are read for the GPU each job ran on and any GPU that held two jobs at once.
Prints both times and their ratio (ideal: the number of GPUs).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REQUEST = "relu(x) * {k}.0 + y for {size} in {dtypes}"      # one distinct session each


def start_fleet(home: Path, backend: str, gpus: str) -> subprocess.Popen:
    env = {**os.environ, "KERNELBOT_HOME": str(home), "PYTHONPATH": str(REPO)}
    log = open(home / "fleet.log", "wb")
    fleet = subprocess.Popen([sys.executable, "-m", "bot.cli", "runner", "--backend", backend, "--gpus", gpus],
                             cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 180
    while (home / "fleet.log").read_text().count("serving queue") < len(gpus.split(",")):
        if fleet.poll() is not None or time.time() > deadline:
            raise SystemExit(f"the fleet did not start; see {home / 'fleet.log'}")
        time.sleep(0.5)
    return fleet


def run_sessions(home: Path, backend: str, n: int, size: str, dtypes: str) -> float:
    env = {**os.environ, "KERNELBOT_HOME": str(home), "PYTHONPATH": str(REPO)}
    start = time.monotonic()
    runs = [subprocess.Popen([sys.executable, "-m", "bot.cli", "run",
                              REQUEST.format(k=k + 2, size=size, dtypes=dtypes), "--yes", "--backend", backend,
                              "--out", str(home / f"out{k}")], cwd=REPO, env=env,
                             stdout=open(home / f"run{k}.log", "wb"), stderr=subprocess.STDOUT) for k in range(n)]
    failed = [k for k, r in enumerate(runs) if r.wait() != 0]
    took = time.monotonic() - start
    if failed:
        raise SystemExit(f"runs {failed} failed; see {home}/run{failed[0]}.log")
    return took


def jobs_by_gpu(home: Path, n: int) -> dict:
    """(host, gpu) -> the (start, end) of every job the sessions ran there, from their reports."""
    spans: dict = {}
    for k in range(n):
        for stage in json.loads((home / f"out{k}" / "report.json").read_text())["stages"]:
            job = stage.get("job") or {}
            if job.get("started_at") and job.get("finished_at"):
                spans.setdefault((job.get("host"), job.get("gpu")), []).append((job["started_at"], job["finished_at"]))
    return spans


def overlapping(spans: dict) -> list:
    """The GPUs that ran two jobs at once (each runner takes one at a time: none should)."""
    return [gpu for gpu, times in spans.items()
            if any(later[0] < earlier[1] for earlier, later in zip(sorted(times), sorted(times)[1:]))]


def measure(backend: str, gpus: str, n: int, size: str, dtypes: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        fleet = start_fleet(home, backend, gpus)
        try:
            took = run_sessions(home, backend, n, size, dtypes)
        finally:
            fleet.send_signal(signal.SIGTERM)
            fleet.wait(120)
        spans = jobs_by_gpu(home, n)
        per_gpu = ", ".join(f"GPU {g}: {len(t)}" for (_, g), t in sorted(spans.items(), key=str))
        print(f"  GPUs {gpus}: {n} sessions in {took:.1f} s; jobs per GPU {per_gpu}", flush=True)
        if overlapping(spans):
            raise SystemExit(f"two jobs ran at once on {overlapping(spans)}")
        return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--gpus", required=True, help="the fleet's GPUs, e.g. 0,1,2,3 (the first alone is the baseline)")
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--size", default="4096x4096")
    ap.add_argument("--dtypes", default="fp16")
    a = ap.parse_args()
    many = measure(a.backend, a.gpus, a.sessions, a.size, a.dtypes)
    one = measure(a.backend, a.gpus.split(",")[0], a.sessions, a.size, a.dtypes)
    print(f"{a.sessions} sessions: {len(a.gpus.split(','))} GPUs {many:.1f} s, one GPU {one:.1f} s: "
          f"{one / many:.2f}x faster")


if __name__ == "__main__":
    main()
