"""A fleet on one host (runner.fleet, `kernelbot runner --gpus`), on fake GPUs: an nvidia-smi on PATH
that lists them as the real one does, and runners of the cpu backend pinned to them. Each GPU gets
its own runner with its own presence; a killed runner is started again; jobs spread over the fleet;
SIGTERM stops every runner."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runner import fleet
from runner.queue import JobQueue
from test_runner_queue import REPO, job, wait_for

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


def test_a_fleet_runs_a_runner_per_gpu_restarts_a_killed_one_and_spreads_jobs(tmp_path):
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    env = {**os.environ, "PATH": f"{fake_nvidia_smi(tmp_path / 'bin', FAKE_GPUS)}:{os.environ['PATH']}",
           "PYTHONPATH": str(REPO), "KERNELBOT_HEARTBEAT_S": "0.2", "PYTHONUNBUFFERED": "1",
           "KERNELBOT_HOME": str(tmp_path / "home")}
    log = tmp_path / "fleet.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "runner", "--backend", "cpu", "--gpus", "all",
                                 "--queue", url], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    queue = JobQueue(url, "cpu")
    try:
        first = wait_for(lambda: len(queue.runners(5)) == 3 and queue.runners(5), timeout_s=60)
        assert sorted(r["gpu"] for r in first) == [0, 1, 2]
        pids = {r["gpu"]: r["pid"] for r in first}

        os.kill(pids[1], signal.SIGKILL)             # a runner dies: the fleet starts another on its GPU
        again = wait_for(lambda: [r for r in queue.runners(5) if r["gpu"] == 1 and r["pid"] != pids[1]],
                         timeout_s=60)
        assert again[0]["runner"].endswith("/gpu1")

        for k in range(3):                           # three jobs at once: each GPU's runner takes one
            queue.enqueue(job(f"j{k}"))
        results = [wait_for(lambda k=k: queue.pop_result(f"j{k}"), timeout_s=120) for k in range(3)]
        assert all(r["status"] == "pass" for r in results), [r["summary"] for r in results]
        assert sorted(r["gpu"] for r in results) == [0, 1, 2]       # a job a runner, none waiting behind another

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert queue.runners(60) == [] and queue.runner_alive(60) is None
        text = log.read_text()
        assert "3 runners, one per GPU: 0 (Fake GPU A), 1 (Fake GPU B), 2 (Fake GPU C)" in text
        assert f"runner pid {pids[1]} exited with -9" in text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run(["pkill", "-9", "-f", f"--queue {url}"], check=False)
