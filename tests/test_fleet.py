"""A fleet on one host (runner.fleet, `kernelbot runner --gpus`), on fake GPUs: an nvidia-smi on PATH
that lists them as the real one does, and runners of the cpu backend pinned to them. Each GPU gets
its own runner with its own presence; a runner killed mid-job has its job run again in the fleet, once, and is
started again itself; jobs spread over the fleet; SIGTERM stops every runner."""
from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.real_runner import drive
from test_runner_queue import REPO, wait_for
from test_runner_queue import job as job_payload

from bot.app import make_service
from bot.chat.console.chat import ConsoleChat
from bot.config import Config
from runner import fleet
from runner.queue import JobQueue

FAKE_GPUS = ["Fake GPU A", "Fake GPU B", "Fake GPU C"]


def fake_nvidia_smi(folder: Path, names: list[str]) -> Path:
    """An nvidia-smi answering --query-gpu=index,name (and name with -i N) in its CSV form."""
    folder.mkdir()
    script = folder / "nvidia-smi"
    rows = "\n".join(f"{i}, {n}" for i, n in enumerate(names))
    script.write_text("#!/bin/sh\n"
                      'case "$*" in\n'
                      f'  *index,name*) printf "%s\\n" "{rows}" ;;\n'
                      '  *-i*) eval "last=\\${$#}"; printf "Fake GPU %s\\n" "$last" ;;\n'
                      "  *) exit 9 ;;\n"
                      "esac\n")
    script.chmod(0o755)
    return folder


def test_the_gpus_named_are_checked_against_the_host(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_nvidia_smi(tmp_path / 'bin', FAKE_GPUS)}:{os.environ['PATH']}")
    have = fleet.host_gpus()
    assert have == [(0, "Fake GPU A"), (1, "Fake GPU B"), (2, "Fake GPU C")]
    assert fleet.chosen_gpus("all", have) == have and fleet.chosen_gpus("2,0", have) == [have[2], have[0]]
    for bad, says in [("3", r"this host has GPUs 0 \(Fake GPU A\)"), ("0,0", "name each once"),
                      ("one", "give 'all' or GPU indices")]:
        with pytest.raises(fleet.FleetError, match=says):
            fleet.chosen_gpus(bad, have)
    with pytest.raises(fleet.FleetError, match="lists no GPU"):
        fleet.chosen_gpus("all", [])


def test_a_fleet_reruns_a_killed_runners_job_and_spreads_jobs(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    cfg = Config.from_env(backend="cpu")
    cfg.home, cfg.db_path, cfg.queue_url = home, home / "kb.db", f"sqlite:///{home / 'queue.db'}"
    cfg.stale_s, cfg.heartbeat_s = 3.0, 0.3
    env = {**os.environ, "PATH": f"{fake_nvidia_smi(tmp_path / 'bin', FAKE_GPUS[:2])}:{os.environ['PATH']}",
           "PYTHONPATH": str(REPO), "KERNELBOT_HEARTBEAT_S": "0.3", "PYTHONUNBUFFERED": "1", "KERNELBOT_HOME": str(home)}
    log = tmp_path / "fleet.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "runner", "--backend", "cpu", "--gpus", "all",
                                 "--queue", cfg.queue_url], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    queue, chat = JobQueue(cfg.queue_url, "cpu"), io.StringIO()
    svc = make_service(cfg, ConsoleChat(chat))
    try:
        first = wait_for(lambda: len(queue.runners(5)) == 2 and queue.runners(5), timeout_s=60)
        assert sorted(r["gpu"] for r in first) == [0, 1]

        # A runner SIGKILLed mid-job: once its heartbeat is stale the job runs again on a runner of the
        # fleet, once, and the dead runner is started again on its own GPU.
        s = svc.start("relu(x) for fp32 33x5", "alice")
        drive(svc, s.id, lambda s: any(j.stage == "reference_test" and j.status == "running" for j in s.jobs),
              approve=lambda s: s.stage in ("spec", "reference", "reference_test"))
        busy = wait_for(lambda: [r for r in queue.runners(5) if r.get("busy")], timeout_s=30)[0]
        os.kill(busy["pid"], signal.SIGKILL)
        s = drive(svc, s.id, lambda s: s.stage == "kernel" or not s.active, approve=lambda s: False)
        job = next(j for j in s.jobs if j.stage == "reference_test")
        assert (s.stage, job.status, job.attempt) == ("kernel", "pass", 2), job.result
        assert job.result["gpu"] in (0, 1)       # the other GPU's runner, or this GPU's restarted one
        assert chat.getvalue().count(f"[{s.id}] Reference test result") == 1
        again = wait_for(lambda: [r for r in queue.runners(5) if r["gpu"] == busy["gpu"] and r["pid"] != busy["pid"]],
                         timeout_s=60)
        assert again[0]["runner"].endswith(f"/gpu{busy['gpu']}")

        for k in range(2):                           # two jobs at once: each GPU's runner takes one
            queue.enqueue(job_payload(f"j{k}", kind="verify"))
        results = [wait_for(lambda k=k: queue.pop_result(f"j{k}"), timeout_s=120) for k in range(2)]
        assert all(r["status"] == "pass" for r in results), [r["summary"] for r in results]
        assert sorted(r["gpu"] for r in results) == [0, 1]      # a job a runner, none waiting behind another

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert queue.runners(60) == [] and queue.runner_alive(60) is None
        text = log.read_text()
        assert "2 runners, one per GPU: 0 (Fake GPU A), 1 (Fake GPU B)" in text
        assert f"runner pid {busy['pid']} exited with -9" in text
    finally:
        svc.shutdown()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run(["pkill", "-9", "-f", f"--queue {cfg.queue_url}"], check=False)
