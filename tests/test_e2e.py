"""End to end on the embedded defaults: real processes, the real Huey queue, the real
runner with its sandbox (Triton's interpreter here), the offline generator."""
from __future__ import annotations

import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes.real_runner import drive, start_runner

from bot.app import make_service
from bot.chat.console.chat import ConsoleChat
from bot.config import Config
from bot.workflow.events import Edit

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "runner"
pytestmark = pytest.mark.slow


def kernelbot(args: list[str], home: Path, timeout: float = 600, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "KERNELBOT_HOME": str(home), "KERNELBOT_BACKEND": "cpu",
                "KERNELBOT_HEARTBEAT_S": "1", **env}
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=ROOT, env=full_env, text=True,
                          capture_output=True, timeout=timeout)


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(path.stem + "_e2e", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def test_run_writes_every_artifact_and_passes(tmp_path):
    out = tmp_path / "out"
    proc = kernelbot(["run", "relu(x + y) for fp16 and fp32, shapes 64x48 and 33x17", "--yes", "--out", str(out)],
                     tmp_path / "home")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("spec.json", "reference.py", "test_reference.py", "kernel.py", "test_kernel.py",
                 "bench_plan.json", "report.json", "chart.png", "REPORT.md"):
        assert (out / name).is_file(), name

    spec = json.loads((out / "spec.json").read_text())
    assert [i["name"] for i in spec["inputs"]] == ["x", "y"]
    assert spec["inputs"][0]["dtypes"] == ["float16", "float32"]
    assert spec["inputs"][0]["shapes"] == [[64, 48], [33, 17]]

    import torch
    reference, kernel = load(out / "reference.py", spec["name"]), load(out / "kernel.py", spec["name"])
    x, y = torch.randn(33, 17), torch.randn(33, 17)
    torch.testing.assert_close(kernel(x, y), reference(x.double(), y.double()).float())

    report = json.loads((out / "report.json").read_text())
    assert [s["stage"] for s in report["stages"]] == ["spec", "reference", "reference_test", "kernel",
                                                     "kernel_test", "benchmark"]
    assert {s["status"] for s in report["stages"]} <= {"approved", "passed"}
    assert report["bench"] and {"case", "dtype", "torch_ms", "kernel_ms", "speedup"} <= set(report["bench"][0])
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "interpreter" in (out / "REPORT.md").read_text()
    assert "all six stages passed" in proc.stdout


def test_run_outside_scope_explains_and_exits_nonzero(tmp_path):
    proc = kernelbot(["run", "rotary embedding of a 64x64 tensor", "--yes", "--out", str(tmp_path / "o")],
                     tmp_path / "home")
    assert proc.returncode == 1
    assert "supported" in proc.stdout.lower() and "could not be generated" in proc.stderr


def test_verify_passes_good_kernel_and_fails_bad_one(tmp_path):
    add = FIXTURES / "add"
    good = kernelbot(["verify", "--spec", str(add / "spec.json"), "--reference", str(add / "reference.py"),
                      "--kernel", str(add / "kernel.py")], tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "s] correctness 1/" in good.stderr and "ghost replay" in good.stderr, "verify shows no progress"
    bad = kernelbot(["verify", "--spec", str(add / "spec.json"), "--reference", str(add / "reference.py"),
                     "--kernel", str(FIXTURES / "bad" / "wrong_math.py")], tmp_path)
    assert bad.returncode == 1 and "FAIL" in bad.stdout.upper()
    missing = kernelbot(["verify", "--spec", str(tmp_path / "nope.json"), "--reference", str(add / "reference.py"),
                         "--kernel", str(add / "kernel.py")], tmp_path)
    assert missing.returncode == 2 and "is not a file" in missing.stderr


class ChatProcess:
    """`kernelbot chat` as a person uses it: lines typed on stdin, the terminal read back."""

    def __init__(self, home: Path, log: Path) -> None:
        self.log = log
        env = {**os.environ, "KERNELBOT_HOME": str(home), "KERNELBOT_BACKEND": "cpu",
               "KERNELBOT_HEARTBEAT_S": "0.5", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "chat"], cwd=ROOT, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=open(log, "w"), stderr=subprocess.STDOUT)

    def type(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait_for(self, text: str, timeout: float = 120.0) -> None:
        end = time.time() + timeout
        while time.time() < end:
            if text in self.log.read_text():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never appeared:\n{self.log.read_text()[-3000:]}")


def test_chat_killed_mid_session_resumes_after_restart(tmp_path):
    from bot.workflow.store import Store
    from runner.queue import JobQueue
    home = tmp_path / "home"
    first = ChatProcess(home, tmp_path / "first.log")
    try:
        first.type("relu(x) for fp32 64x48")
        for card in ("Spec · r1", "PyTorch reference · r1", "Reference test · r1"):
            first.wait_for(card)
            first.type("a")
        first.wait_for("queued for a cpu runner")
        first.proc.kill()                                  # SIGKILL: no chance to clean up
        first.proc.wait(10)

        s = next(Store(home / "kernelbot.db").sessions(Store(home / "kernelbot.db").session_ids()))
        assert [a.stage for a in s.approvals] == ["spec", "reference", "reference_test"]

        second = ChatProcess(home, tmp_path / "second.log")
        second.type(f"switch {s.id}")
        second.wait_for("Reference test result · PASS")   # the job finished while the bot was down
        second.wait_for("Triton kernel · r1")
        second.type("quit")
        assert second.proc.wait(30) == 0
    finally:
        presence = JobQueue(f"sqlite:///{home / 'queue.db'}", "cpu").runner_alive(60)
        if presence:                                       # the runner the first chat started outlives it
            os.kill(presence["pid"], signal.SIGTERM)
        for chat in (first, locals().get("second")):
            if chat and chat.proc.poll() is None:
                chat.proc.kill()


def test_runner_killed_mid_job_is_requeued_and_finishes(tmp_path):
    home = tmp_path / "home"
    cfg = Config.from_env(backend="cpu")
    cfg.home, cfg.db_path, cfg.queue_url = home, home / "kb.db", f"sqlite:///{home / 'queue.db'}"
    cfg.stale_s, cfg.heartbeat_s = 4.0, 0.5
    out = io.StringIO()
    svc = make_service(cfg, ConsoleChat(out))
    first = start_runner(home, cfg.queue_url)
    second = None
    try:
        s = svc.start("add two fp32 matrices of shape 8x8", "alice")
        s = drive(svc, s.id, lambda s: s.stage == "kernel" and s.latest("kernel"))
        # A person's edit: the same kernel, but slow to import, so the job is caught mid-run.
        slow = "import time\ntime.sleep(6)\n" + s.latest("kernel").content
        svc.dispatch(s.id, Edit("kernel", s.latest("kernel").rev, "dave", slow))
        s = drive(svc, s.id, lambda s: any(j.stage == "kernel_test" and j.status == "running" for j in s.jobs))
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
        second = start_runner(home, cfg.queue_url)
        s = drive(svc, s.id, lambda s: s.stage == "benchmark", approve=lambda s: False, timeout=240)
        job = next(j for j in s.jobs if j.stage == "kernel_test")
        assert (job.status, job.attempt) == ("pass", 2)
        assert "re-queued kernel test job (attempt 2/3)" in out.getvalue()
    finally:
        svc.shutdown()
        for proc in (first, second):
            if proc and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(30)


def test_run_killed_and_run_again_resumes_its_session(tmp_path):
    """`kernelbot run` SIGKILLed mid-session: status says its run died, the same command continues
    that session (no second one), the runner the killed run started is gone with it."""
    from bot.workflow.store import Store
    home, out, log = tmp_path / "home", tmp_path / "out", tmp_path / "first.log"
    request = "relu(x) for fp32 64x48"
    env = {**os.environ, "KERNELBOT_HOME": str(home), "KERNELBOT_BACKEND": "cpu", "KERNELBOT_HEARTBEAT_S": "1",
           "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen([sys.executable, "-m", "bot.cli", "run", request, "--yes", "--out", str(out)],
                             cwd=ROOT, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        end = time.time() + 300
        while "queued for a cpu runner" not in log.read_text() and time.time() < end and first.poll() is None:
            time.sleep(0.2)
        assert "queued for a cpu runner" in log.read_text(), log.read_text()[-3000:]
    finally:
        first.kill()
        first.wait(10)
    end = time.time() + 60                                  # the runner gets SIGTERM when its parent dies
    while time.time() < end and subprocess.run(["pgrep", "-f", f"runner.worker.*{home}"]).returncode == 0:
        time.sleep(0.5)
    assert subprocess.run(["pgrep", "-f", f"runner.worker.*{home}"]).returncode == 1, "the killed run's runner lives"

    status = kernelbot(["status"], home)
    assert "its run died" in status.stdout and f"--out {out}" in status.stdout, status.stdout

    again = kernelbot(["run", request, "--yes", "--out", str(out)], home)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "resuming session" in again.stdout and "all six stages passed" in again.stdout
    store = Store(home / "kernelbot.db")
    assert len(store.session_ids()) == 1
    assert (out / "kernel.py").is_file() and (out / "REPORT.md").is_file()


def test_two_runs_sharing_a_home_keep_apart_and_share_one_runner(tmp_path):
    """Two `kernelbot run` on one KERNELBOT_HOME at once: each prints only its own session's cards,
    neither stops the runner the other uses (no job lost), no revision appears that nobody asked for."""
    home = tmp_path / "home"
    env = {**os.environ, "KERNELBOT_HOME": str(home), "KERNELBOT_BACKEND": "cpu", "KERNELBOT_HEARTBEAT_S": "1"}
    requests = {"first": "relu(x) for fp32 64x48", "second": "sigmoid(x) for fp32 32x16"}
    procs = {}
    for name, request in requests.items():
        procs[name] = subprocess.Popen([sys.executable, "-m", "bot.cli", "run", request, "--yes", "--out",
                                        str(tmp_path / name)], cwd=ROOT, env=env, text=True,
                                       stdout=open(tmp_path / f"{name}.log", "w"), stderr=subprocess.STDOUT)
        time.sleep(3 if name == "first" else 0)        # the first has started its runner when the second comes
    for proc in procs.values():
        proc.wait(600)
    from bot.workflow.store import Store
    store = Store(home / "kernelbot.db")
    sessions = {s.request: s for s in store.sessions(store.session_ids())}
    for name, request in requests.items():
        log = (tmp_path / f"{name}.log").read_text()
        other = sessions[requests["second" if name == "first" else "first"]]
        assert procs[name].returncode == 0, log[-3000:]
        assert "all six stages passed" in log and "Runner lost" not in log, log[-3000:]
        assert other.id not in log, f"the {name} run printed the other session's cards"
        s = sessions[request]
        assert all(r.rev == 1 for r in s.revisions if r.origin != "attempt"), [(r.stage, r.rev) for r in s.revisions]
    end = time.time() + 30
    while time.time() < end and subprocess.run(["pgrep", "-f", f"runner.worker.*{home}"]).returncode == 0:
        time.sleep(0.5)
    assert subprocess.run(["pgrep", "-f", f"runner.worker.*{home}"]).returncode == 1, "the shared runner outlived both"
