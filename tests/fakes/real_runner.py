"""Not a fake: helpers for the tests that drive the real runner process on a real queue (a SQLite
file, or a redis-server of the test's own), and a bot service polling it."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from bot.chat.console.autorun import awaiting_review
from bot.workflow.events import Approve

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    """A redis-server on a free loopback port, for one test; yields its queue URL."""
    if not shutil.which("redis-server"):
        pytest.skip("redis-server is not installed (.ci/run installs Debian's redis-server)")
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(workdir)], stdout=subprocess.DEVNULL)
    try:
        end = time.time() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.time() > end:
                    raise
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(10)
