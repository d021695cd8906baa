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
from fakes.real_runner import drive, redis_server
from test_runner_queue import REPO, wait_for
from test_runner_queue import job as job_payload

from bot.app import make_service
from bot.chat.console.chat import ConsoleChat
from bot.config import Config
from bot.workflow import cards
from runner import fleet, worker
from runner.queue import JobQueue

FAKE_GPUS = ["Fake GPU A", "Fake GPU B", "Fake GPU C"]


def fake_nvidia_smi(folder: Path, names: list[str]) -> Path:
    """An nvidia-smi answering --query-gpu=index,name, and name or load with -i N, in its CSV form;
    GPU N is lost (every -i N query fails, as nvidia-smi does for a GPU off the bus) while the file
    folder/lostN exists."""
    folder.mkdir()
    script = folder / "nvidia-smi"
    rows = "\n".join(f"{i}, {n}" for i, n in enumerate(names))
    script.write_text("#!/bin/sh\n"
                      'case "$*" in *-i*) eval "last=\\${$#}"\n'
                      f'  if [ -e "{folder}/lost$last" ]; then echo "Unable to determine the device handle for GPU '
                      '$last: Unknown Error" >&2; exit 15; fi ;;\n'
                      "esac\n"
                      'case "$*" in\n'
                      f'  *index,name*) printf "%s\\n" "{rows}" ;;\n'
                      '  *utilization.gpu,memory.used,memory.total*) echo "37, 2048, 81559" ;;\n'
                      '  *-i*) printf "Fake GPU %s\\n" "$last" ;;\n'
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


def test_a_runner_reports_its_gpus_load_for_status(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_nvidia_smi(tmp_path / 'bin', FAKE_GPUS)}:{os.environ['PATH']}")
    load = worker.gpu_load("cuda", 1)
    assert load == {"util_pct": 37.0, "mem_used_mib": 2048.0, "mem_total_mib": 81559.0}
    assert worker.device_name("cuda", 1) == "Fake GPU 1" and worker.gpu_load("cpu", None) is None
    line = cards.runner_line({"host": "h", "gpu": 1, "device": "Fake GPU 1", "busy": "j7", "ts": 0, "load": load})
    assert "h GPU 1 (Fake GPU 1): running j7, GPU 37% busy, 2.0 of 80 GiB in use" in line
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))      # no nvidia-smi: no load, the name from the index
    assert worker.gpu_load("cuda", 1) is None and worker.device_name("cuda", 1) == "cuda:1"
    assert cards.runner_line({"host": "h", "gpu": 1, "device": "cuda:1", "busy": None, "ts": 0, "load": None}
                             ).startswith("h GPU 1 (cuda:1): idle, seen")


def start_supervisor(tmp_path: Path, home: Path, queue_url: str, host: str, gpus: int) -> subprocess.Popen:
    """`kernelbot runner --gpus all` as host `host` (KERNELBOT_HOST) with `gpus` fake GPUs; its log is
    tmp_path/host.log."""
    env = {**os.environ, "PATH": f"{fake_nvidia_smi(tmp_path / f'bin-{host}', FAKE_GPUS[:gpus])}:{os.environ['PATH']}",
           "PYTHONPATH": str(REPO), "KERNELBOT_HEARTBEAT_S": "0.3", "PYTHONUNBUFFERED": "1",
           "KERNELBOT_HOME": str(home), "KERNELBOT_HOST": host}
    with open(tmp_path / f"{host}.log", "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "bot.cli", "runner", "--backend", "cpu", "--gpus", "all",
                                 "--queue", queue_url], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def where(record: dict) -> tuple[str, int]:
    return record["host"], record["gpu"]


def fleet_scenario(tmp_path: Path, queue_url: str, hosts: dict[str, int], fault: str) -> None:
    """Supervisors (host -> its number of fake GPUs) on one queue: every GPU gets a runner; a job whose
    runner is SIGKILLed (fault "kill") or whose GPU is lost (fault "gpu lost") mid-job runs again in the
    fleet, once; the runner is started again, or waits for its GPU and takes jobs once it answers; as
    many jobs at once as GPUs run one per GPU; SIGTERM stops each supervisor and its runners."""
    home = tmp_path / "home"
    home.mkdir()
    cfg = Config.from_env(backend="cpu")
    cfg.home, cfg.db_path, cfg.queue_url = home, home / "kb.db", queue_url
    cfg.stale_s, cfg.heartbeat_s = 3.0, 0.3
    procs = {host: start_supervisor(tmp_path, home, queue_url, host, n) for host, n in hosts.items()}
    gpus = sorted((host, i) for host, n in hosts.items() for i in range(n))
    queue, chat = JobQueue(queue_url, "cpu"), io.StringIO()
    svc = make_service(cfg, ConsoleChat(chat))
    try:
        first = wait_for(lambda: len(queue.runners(5)) == len(gpus) and queue.runners(5), timeout_s=60)
        assert sorted(map(where, first)) == gpus
        assert sorted(r["runner"] for r in first) == [f"{h}/gpu{i}" for h, i in gpus]

        # Mid-job, the runner is killed (its heartbeat goes stale) or its GPU is lost (the runner leaves
        # the job abandoned, with no result): the job runs again on a runner of the fleet, once.
        s = svc.start("relu(x) for fp32 33x5", "alice")
        drive(svc, s.id, lambda s: any(j.stage == "reference_test" and j.status == "running" for j in s.jobs),
              approve=lambda s: s.stage in ("spec", "reference", "reference_test"))
        busy = wait_for(lambda: [r for r in queue.runners(5) if r.get("busy")], timeout_s=30)[0]
        lost = tmp_path / f"bin-{busy['host']}" / f"lost{busy['gpu']}"
        if fault == "kill":
            os.kill(busy["pid"], signal.SIGKILL)
        else:
            lost.touch()
        s = drive(svc, s.id, lambda s: s.stage == "kernel" or not s.active, approve=lambda s: False)
        job = next(j for j in s.jobs if j.stage == "reference_test")
        assert (s.stage, job.status, job.attempt) == ("kernel", "pass", 2), job.result
        assert chat.getvalue().count(f"[{s.id}] Reference test result") == 1
        log = tmp_path / f"{busy['host']}.log"
        if fault == "kill":      # another GPU's runner, or this GPU's restarted one; the dead one restarted
            assert where(job.result) in gpus
            again = wait_for(lambda: [r for r in queue.runners(5) if where(r) == where(busy)
                                      and r["pid"] != busy["pid"]], timeout_s=60)
            assert again[0]["runner"] == busy["runner"]
        else:                    # another GPU's; the runner says why it waits, and serves once the GPU answers
            assert where(job.result) != where(busy) and where(job.result) in gpus
            down = wait_for(lambda: [r for r in queue.runners(5) if where(r) == where(busy) and r.get("down")],
                            timeout_s=30)[0]
            assert down["down"].startswith(f"GPU {busy['gpu']} does not answer nvidia-smi (Unable to determine") and "down (GPU" in cards.runner_line(down)
            lost.unlink()
            wait_for(lambda: "the GPU answers again: taking jobs" in log.read_text(), timeout_s=30)
            assert "left for another runner, with no result from this one" in log.read_text()

        for k in range(len(gpus)):                   # as many jobs at once as GPUs: each runner takes one
            queue.enqueue(job_payload(f"j{k}", kind="verify"))
        results = [wait_for(lambda k=k: queue.pop_result(f"j{k}"), timeout_s=120) for k in range(len(gpus))]
        assert all(r["status"] == "pass" for r in results), [r["summary"] for r in results]
        assert sorted(map(where, results)) == gpus       # a job a GPU, none waiting behind another

        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        assert [proc.wait(timeout=60) for proc in procs.values()] == [0] * len(procs)
        assert queue.runners(60) == [] and queue.runner_alive(60) is None
        for host, n in hosts.items():
            listed = ", ".join(f"{i} ({name})" for i, name in enumerate(FAKE_GPUS[:n]))
            assert f"{n} runner{'s' * (n != 1)}, one per GPU: {listed}" in (tmp_path / f"{host}.log").read_text()
        if fault == "kill":
            assert f"runner pid {busy['pid']} exited with -9" in log.read_text()
    finally:
        svc.shutdown()
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        subprocess.run(["pkill", "-9", "-f", f"--queue {queue_url}"], check=False)


def test_a_fleet_on_one_host_reruns_a_killed_runners_job_and_spreads_jobs(tmp_path):
    fleet_scenario(tmp_path, f"sqlite:///{tmp_path / 'queue.db'}", {"host-a": 2}, fault="kill")


def test_two_hosts_share_one_redis_queue_and_take_over_a_lost_gpus_job(tmp_path):
    """Two supervisors standing for two hosts on one Redis: jobs spread over both, and the job of a
    GPU lost mid-job is taken over by the other host."""
    with redis_server(tmp_path) as url:
        fleet_scenario(tmp_path, url, {"host-a": 1, "host-b": 1}, fault="gpu lost")
