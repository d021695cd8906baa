"""Runners SIGKILLed at random points of a job: the real runner process on the real queue (SQLite, Redis),
the bot's service polling it. Each trial's job must finish exactly once on a runner started after
the kill (or before it, if the kill came late), its result posted once, nothing left queued. One
trial per queue kind runs in the regular suite (a fleet's runner killed mid-job is tests/test_fleet.py);
`python3 dev.py test -m soak` runs KERNELBOT_FAULT_TRIALS (default 20)."""
from __future__ import annotations

import io
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from fakes.real_runner import drive, start_runner

from bot.app import make_service
from bot.chat.console.chat import ConsoleChat
from bot.config import Config


def before_the_kernel(s) -> bool:
    return s.stage in ("spec", "reference", "reference_test")


def kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


def run_trials(tmp_path: Path, trials: int, queue_url: str) -> list[str]:
    home = tmp_path / "home"
    home.mkdir()
    cfg = Config.from_env(backend="cpu")
    cfg.home, cfg.db_path, cfg.queue_url = home, home / "kb.db", queue_url
    cfg.stale_s, cfg.heartbeat_s = 3.0, 0.3
    out = io.StringIO()
    svc = make_service(cfg, ConsoleChat(out))
    runner = start_runner(home, cfg.queue_url, 0.3)
    problems = []
    try:
        for n in range(trials):
            s = svc.start(f"relu(x) for fp32 {n + 3}x5", "alice")
            s = drive(svc, s.id, lambda s: any(j.stage == "reference_test" and j.status == "running" for j in s.jobs),
                      approve=before_the_kernel)
            delay = random.uniform(0, 4.0)
            time.sleep(delay)
            kill(runner)
            runner = start_runner(home, cfg.queue_url, 0.3)
            s = drive(svc, s.id, lambda s: s.stage == "kernel" or not s.active, approve=before_the_kernel)
            job = next(j for j in s.jobs if j.stage == "reference_test")
            cards = out.getvalue().count(f"[{s.id}] Reference test result")
            if s.stage != "kernel" or job.status != "pass":
                problems.append(f"trial {n} (kill after {delay:.1f} s): {job.status} at {s.stage}: {job.result}")
            if cards != 1:
                problems.append(f"trial {n} (kill after {delay:.1f} s): the result was posted {cards} times")
        if svc.store.open_jobs():
            problems.append(f"jobs left open: {svc.store.open_jobs()}")
    finally:
        svc.shutdown()
        kill(runner)
    return problems


def test_a_runner_killed_mid_job_has_its_job_finished_once(tmp_path, queue_url):
    assert run_trials(tmp_path, 1, queue_url) == []


@pytest.mark.soak
def test_many_runner_kills_lose_nothing_and_repeat_nothing(tmp_path, queue_url):
    assert run_trials(tmp_path, int(os.environ.get("KERNELBOT_FAULT_TRIALS", 20)), queue_url) == []
