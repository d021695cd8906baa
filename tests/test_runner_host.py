"""The runner's own host: work directories a killed runner left are swept, a host that lacks a
package says so as an environment error, and a store that refuses the alive record does not end
the runner."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from runner import workdirs, worker

ADD = Path(__file__).parent / "fixtures" / "runner" / "add"


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_sweep_removes_what_dead_runners_left_and_keeps_live_ones(tmp_path):
    gone = tmp_path / f"{workdirs.JOB_PREFIX}{dead_pid()}-job1-abc"
    (gone / "harness" / "workers").mkdir(parents=True)
    (gone / "harness" / "result.json").write_text("{}")
    staging = tmp_path / f"{workdirs.STAGING_PREFIX}{dead_pid()}-xyz"
    (staging / "0").mkdir(parents=True)
    mine = tmp_path / f"{workdirs.JOB_PREFIX}{os.getpid()}-job2-def"
    mine.mkdir()
    other = tmp_path / "kernelbot-something-else"
    other.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:   # a live process of any kind (a `kernelbot verify` runs its job in its own process)
        verifying = tmp_path / f"{workdirs.JOB_PREFIX}{sleeper.pid}-job3-ghi"
        verifying.mkdir()
        assert sorted(workdirs.sweep((str(tmp_path),))) == sorted([str(gone), str(staging)])
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not gone.exists() and not staging.exists() and mine.exists() and other.exists() and verifying.exists()


def test_a_job_directory_is_named_for_its_runner_and_removed_after_the_job():
    with workdirs.job_dir("k1/../j 2") as tmp:
        name = Path(tmp).name
        assert name.startswith(f"{workdirs.JOB_PREFIX}{os.getpid()}-k1_.._j_2-") and Path(tmp).parent == Path(tempfile.gettempdir())
    assert not Path(tmp).exists()


def test_a_host_without_pytest_reports_an_environment_error_naming_it(tmp_path, monkeypatch):
    (tmp_path / "pytest.py").write_text("raise ImportError('No module named pytest')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    worker.environment_problem.cache_clear()
    try:
        files = {n: (ADD / n).read_text() for n in ("spec.json", "reference.py", "kernel.py", "test_kernel.py")}
        job = {"job_id": "env-1", "kind": "kernel_test", "backend": "cpu", "attempt": 1, "timeout_s": 60,
               "files": files}
        result = worker.execute_job(job, lambda line: None)
    finally:
        worker.environment_problem.cache_clear()
    assert result["status"] == "error" and result["environment"]
    assert "pytest" in result["summary"] and "kernelbot[runner]" in result["summary"]


class RefusingQueue:
    backend = "cpu"

    def put_runner_alive(self, data: dict) -> None:
        raise OSError(28, "No space left on device")


def test_a_refused_alive_record_is_logged_not_fatal(capsys):
    worker.Runner(RefusingQueue()).report_alive()
    assert "could not write the alive record (retrying)" in capsys.readouterr().out
