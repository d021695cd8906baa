"""Every documented install works from the wheel, in a fresh virtual environment: a runner-only
host (`kernelbot[runner]`) runs a kernel test job, generated tests included; a bot-only host
(`kernelbot[bot,slack,discord,llm,redis]`, no torch) opens a session with the offline generator and
loads every chat adapter. `kernelbot[all]` is in the soak suite (a second torch install)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ADD = REPO / "tests" / "fixtures" / "runner" / "add"
TORCH = os.environ.get("KERNELBOT_TORCH", "torch==2.13.0")     # the pin dev.py installs
pytestmark = pytest.mark.slow

KERNEL_TEST_JOB = """
import json, sys
from pathlib import Path
from runner.worker import execute_job
add = Path(sys.argv[1])
files = {n: (add / n).read_text() for n in ("spec.json", "reference.py", "kernel.py", "test_kernel.py")}
job = {"job_id": "install-1", "kind": "kernel_test", "backend": "cpu", "attempt": 1, "timeout_s": 300, "files": files}
result = execute_job(job, lambda line: None)
print(json.dumps({"status": result["status"], "summary": result["summary"], "pytest": result["pytest"]}))
"""

BOT_SESSION = """
import io, time
from bot.app import make_service
from bot.config import Config
from bot.chat.console.chat import ConsoleChat
out = io.StringIO()
cfg = Config.from_env(backend="cpu")
svc = make_service(cfg, ConsoleChat(out))
s = svc.start("relu(x + y) for fp32 64x48", "alice")
end = time.time() + 60
while "Spec · r1" not in out.getvalue() and time.time() < end:
    time.sleep(0.1)
svc.shutdown()
import bot.chat.slack.app, bot.chat.discord.app, bot.generators.llm_client, redis, importlib.util
assert importlib.util.find_spec("torch") is None, "a bot-only host got torch"
print("SPEC CARD" if "Spec · r1" in out.getvalue() else out.getvalue())
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("wheel")
    src = build / "src"
    for name in ("bot", "runner", "prompts"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(build),
                    str(src)], check=True, cwd=build)
    return next(build.glob("kernelbot-*.whl"))


def fresh_venv(where: Path, *requirements: str) -> Path:
    """A new virtual environment with the requirements installed, in order; its python."""
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    for req in requirements:
        proc = subprocess.run([str(python), "-m", "pip", "install", "-q", req], capture_output=True, text=True,
                              timeout=1200)
        assert proc.returncode == 0, f"pip install {req}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return python


def run_in(python: Path, code: str, *args: str, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(KERNELBOT_HOME=str(home), TRITON_INTERPRET="1")
    return subprocess.run([str(python), "-c", code, *args], capture_output=True, text=True, timeout=600,
                          cwd=home, env=env)


def test_a_runner_installed_as_documented_runs_a_kernel_test_with_its_generated_tests(wheel, tmp_path):
    python = fresh_venv(tmp_path / "venv", TORCH, f"{wheel}[runner]")
    (tmp_path / "home").mkdir()
    proc = run_in(python, KERNEL_TEST_JOB, str(ADD), home=tmp_path / "home")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["status"] == "pass", result
    assert result["pytest"]["passed"] > 0 and result["pytest"]["failed"] == 0


def test_a_bot_only_host_opens_a_session_and_loads_every_adapter(wheel, tmp_path):
    python = fresh_venv(tmp_path / "venv", f"{wheel}[bot,slack,discord,llm,redis]")
    (tmp_path / "home").mkdir()
    proc = run_in(python, BOT_SESSION, home=tmp_path / "home")
    assert proc.returncode == 0 and "SPEC CARD" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]
    status = subprocess.run([str(python.parent / "kernelbot"), "status"], capture_output=True, text=True,
                            env={**os.environ, "KERNELBOT_HOME": str(tmp_path / "home")}, timeout=120)
    assert status.returncode == 0 and "relu" in status.stdout, status.stdout + status.stderr


@pytest.mark.soak
def test_everything_installed_as_documented_runs_a_kernel_test(wheel, tmp_path):
    python = fresh_venv(tmp_path / "venv", TORCH, f"{wheel}[all]")
    (tmp_path / "home").mkdir()
    proc = run_in(python, KERNEL_TEST_JOB, str(ADD), home=tmp_path / "home")
    assert proc.returncode == 0 and json.loads(proc.stdout.strip().splitlines()[-1])["status"] == "pass", \
        proc.stdout[-2000:] + proc.stderr[-3000:]
