"""Not a fake: helpers for the tests that drive the real runner process on a real queue, and a
bot service polling it."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from bot.autorun import awaiting_review
from bot.events import Approve

ROOT = Path(__file__).resolve().parents[2]


def start_runner(home: Path, queue_url: str, heartbeat_s: float = 0.5) -> subprocess.Popen:
    """`python -m runner.worker` on the cpu queue, in a process group of its own; log in home/runners.log."""
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "KERNELBOT_HOME": str(home), "KERNELBOT_HEARTBEAT_S": str(heartbeat_s)}
    return subprocess.Popen([sys.executable, "-m", "runner.worker", "--backend", "cpu", "--queue", queue_url],
                            cwd=ROOT, env=env, stdout=open(home / "runners.log", "a"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def drive(svc, sid: str, until, timeout: float = 180.0, approve=lambda s: True):
    """Poll the runner and approve each stage approve(session) allows until `until(session)` holds."""
    end = time.time() + timeout
    while time.time() < end:
        svc.poll_jobs()
        s = svc.store.load(sid)
        if until(s):
            return s
        if awaiting_review(s) and approve(s):
            svc.dispatch(sid, Approve(s.stage, s.latest(s.stage).rev, "bob"))
        time.sleep(0.05)
    raise AssertionError(f"session stuck at {s.stage}: {[(j.id, j.status, j.attempt) for j in s.jobs]}")
