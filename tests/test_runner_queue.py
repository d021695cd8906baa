"""The queue end to end: a real runner process consuming a SqliteHuey file."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.queue import CHECK_FILE_S, JobQueue

REPO = Path(__file__).resolve().parent.parent
ADD = Path(__file__).parent / "fixtures" / "runner" / "add"
BAD = Path(__file__).parent / "fixtures" / "runner" / "bad"

HEARTBEAT_S = 0.1         # the runner's heartbeat period here


def wait_for(get, timeout_s: float = 60.0, every_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = get()
        except OSError:                      # a server still starting
            value = None
        if value:
            return value
        time.sleep(every_s)
    pytest.fail(f"nothing after {timeout_s} s")


def job(job_id: str, kind: str = "kernel_test", kernel: Path = ADD / "kernel.py", attempt: int = 1) -> dict:
    names = {"kernel_test": ("spec.json", "reference.py", "test_kernel.py"), "verify": ("spec.json", "reference.py")}
    files = {n: (ADD / n).read_text() for n in names[kind]}
    return {"job_id": job_id, "session_id": "s-1", "kind": kind, "backend": "cpu", "attempt": attempt,
            "timeout_s": 120, "files": {**files, "kernel.py": kernel.read_text()}}


@pytest.fixture
def runner(tmp_path, queue_url):
    """(queue, process, log path) for a runner serving the cpu queue at queue_url."""
    url = queue_url
    log = tmp_path / "runner.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "KERNELBOT_HEARTBEAT_S": str(HEARTBEAT_S), "PYTHONUNBUFFERED": "1"}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "runner.worker", "--backend", "cpu", "--queue", url],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    queue = JobQueue(url, "cpu")
    try:
        presence = wait_for(lambda: queue.runner_alive(max_age_s=10), timeout_s=30)
        assert presence["pid"] == proc.pid and presence["device"] == "cpu (Triton interpreter)"
        yield queue, proc, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_runner_serves_jobs_with_heartbeats_and_stops_on_sigterm(runner):
    queue, proc, log = runner
    queue.enqueue(job("j-good", attempt=2))
    beat = wait_for(lambda: queue.heartbeat("j-good"), timeout_s=30, every_s=0.02)
    assert beat["state"] == "running" and beat["attempt"] == 2 and beat["pid"] == proc.pid
    assert {"ts", "detail", "host", "device"} <= set(beat)
    details = set()

    def result_or_track():
        hb = queue.heartbeat("j-good")
        details.add(hb and hb["detail"])
        return queue.pop_result("j-good")

    result = wait_for(result_or_track, timeout_s=90, every_s=0.05)
    assert result["status"] == "pass", result["summary"]
    assert result["job_id"] == "j-good" and result["attempt"] == 2 and result["pytest"]["passed"] == 4
    assert any(d and d.startswith("correctness ") for d in details), details
    # Heartbeats stop before the result is written (runner/queue.py's lifecycle): once the bot
    # clears the key, no late beat brings it back.
    queue.clear_heartbeat("j-good")
    time.sleep(5 * HEARTBEAT_S)
    assert queue.heartbeat("j-good") is None

    # A malformed job gets an error result, and the runner serves the next job.
    queue.enqueue({"job_id": "j-bad", "kind": "kernel_test", "files": {"spec.json": "{}"}})
    bad = wait_for(lambda: queue.pop_result("j-bad"))
    assert bad["status"] == "error" and "needs reference.py" in bad["summary"]
    queue.enqueue(job("j-wrong", kind="verify", kernel=BAD / "wrong_math.py"))
    wrong = wait_for(lambda: queue.pop_result("j-wrong"))
    assert wrong["status"] == "fail" and "outside tolerance" in wrong["summary"]

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert queue.runner_alive(max_age_s=60) is None      # a stopped runner is gone at once
    text = log.read_text()
    assert "job j-good: pass" in text and "stopped" in text


def test_sigterm_mid_job_stops_the_runner_and_leaves_the_job_for_requeue(runner):
    queue, proc, log = runner
    queue.enqueue(job("j-hang", kind="verify", kernel=BAD / "hangs.py"))
    wait_for(lambda: (queue.heartbeat("j-hang") or {}).get("detail", "").startswith("correctness"))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert queue.peek_result("j-hang") is None
    assert queue.heartbeat("j-hang")["state"] == "abandoned"        # the bot re-queues it at once
    assert "left for the bot to re-queue" in log.read_text()


def test_queue_urls_choose_sqlite_or_redis(tmp_path):
    from huey import RedisHuey, SqliteHuey
    assert isinstance(JobQueue(f"sqlite:///{tmp_path}/a.db", "cpu").huey, SqliteHuey)
    assert (tmp_path / "a.db").exists()
    assert isinstance(JobQueue(str(tmp_path / "b.db"), "cpu").huey, SqliteHuey)
    redis = JobQueue("redis://localhost:6379/0", "cuda-h200")    # connects lazily
    assert isinstance(redis.huey, RedisHuey) and redis.huey.name == "kernelbot-cuda-h200"
    with pytest.raises(ValueError, match="unsupported queue URL"):
        JobQueue("amqp://host/q", "cpu")


def test_results_heartbeats_and_presence_are_json_in_the_store(tmp_path):
    queue = JobQueue(f"sqlite://{tmp_path}/q.db", "cpu")
    other_backend = JobQueue(f"sqlite://{tmp_path}/q.db", "cuda")
    queue.put_result("j", {"status": "pass"})
    assert queue.peek_result("j") == {"status": "pass"} == queue.pop_result("j")
    assert queue.pop_result("j") is None
    queue.put_runner_alive({"ts": time.time() - 60, "pid": 1, "runner": "test/pid1"})
    assert queue.runner_alive(max_age_s=30) is None and queue.runner_alive(max_age_s=120)["pid"] == 1
    assert other_backend.runner_alive(max_age_s=120) is None
    queue.enqueue({"job_id": "j-waiting", "kind": "verify"})
    assert queue.is_pending("j-waiting") and not queue.is_pending("j-other")
    assert not other_backend.is_pending("j-waiting")
    raw = queue.huey.storage.peek_data("runner:cpu:test/pid1")
    assert raw.startswith(b"{")    # JSON, never pickle


def test_a_deleted_queue_file_is_noticed_by_the_bot_and_the_runner(tmp_path, monkeypatch):
    """The queue's SQLite file is deleted under a running runner and a bot that has it open: both
    move to the file made at its path, so a job queued afterwards is run, not queued into nothing."""
    url = f"sqlite://{tmp_path}/queue.db"
    log = tmp_path / "runner.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "KERNELBOT_HEARTBEAT_S": str(HEARTBEAT_S), "PYTHONUNBUFFERED": "1"}
    bot = JobQueue(url, "cpu")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "runner.worker", "--backend", "cpu", "--queue", url],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: bot.runner_alive(max_age_s=10), timeout_s=30)
        for leftover in tmp_path.glob("queue.db*"):
            leftover.unlink()
        time.sleep(CHECK_FILE_S + 0.1)
        bot.enqueue({"job_id": "j-after", "kind": "kernel_test", "files": {"spec.json": "{}"}})
        assert (tmp_path / "queue.db").exists(), "the bot queued into the deleted file"
        result = wait_for(lambda: bot.pop_result("j-after"), timeout_s=60)
        assert result["status"] == "error" and "needs reference.py" in result["summary"]
        assert "was replaced or deleted: serving the one there now" in log.read_text()
    finally:
        proc.kill()
        proc.wait()
