"""The command line as a person meets it: --version, arguments checked before any work, help
for every option, and output piped into a reader that stops early."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bot import cli
from bot.workflow.model import Session
from bot.workflow.stages import STAGES
from bot.workflow.store import Store

ROOT = Path(__file__).resolve().parent.parent


def kernelbot(*args: str, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "KERNELBOT_HOME": str(home)}, timeout=120)


def test_version_and_help_describe_every_option(tmp_path):
    assert kernelbot("--version", home=tmp_path).stdout.startswith("kernelbot ")
    parser = cli._parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    for name, sub in subparsers.items():
        for action in sub._actions:
            assert action.help, f"kernelbot {name} {action.option_strings or action.dest} has no help"
    assert all(stage in subparsers["status"].format_help() for stage in STAGES)


def test_run_checks_out_before_any_work(tmp_path):
    a_file = tmp_path / "report.txt"
    a_file.write_text("")
    proc = kernelbot("run", "relu(x) for fp32 8x8", "--yes", "--out", str(a_file), home=tmp_path)
    assert proc.returncode == 2 and "is a file, not a directory" in proc.stderr
    proc = kernelbot("run", "relu(x) for fp32 8x8", "--yes", "--out", "/proc/kernelbot/out", home=tmp_path)
    assert proc.returncode == 2 and "cannot be created or written" in proc.stderr
    assert not Store(tmp_path / "kernelbot.db").session_ids(), "a session was started before --out was checked"


def test_show_without_a_session_is_an_error(tmp_path):
    proc = kernelbot("status", "--show", "kernel:1", home=tmp_path)
    assert proc.returncode == 2 and "--show needs a session" in proc.stderr


def test_status_piped_into_a_reader_that_stops_early_ends_quietly(tmp_path):
    store = Store(tmp_path / "kernelbot.db")
    for i in range(3000):
        store.save(Session(id=f"s{i}", request="relu", requester="a", platform="console", channel="c", thread="",
                           backend="cpu", generator="offline", created_at=float(i)))
    cmd = f"{sys.executable} -m bot.cli status | head -1"
    proc = subprocess.run(cmd, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KERNELBOT_HOME": str(tmp_path)})
    assert proc.stdout.startswith("s0 ") and "Traceback" not in proc.stderr, proc.stderr


def test_a_refused_run_ends_refused_says_what_to_change_and_starts_no_runner(tmp_path):
    proc = kernelbot("run", "a 2-D convolution of a 64x64 image with a 3x3 filter", "--yes", "--out",
                     str(tmp_path / "out"), home=tmp_path)
    assert proc.returncode == 1 and "change the request in the command" in proc.stderr, proc.stderr
    assert "Not generated: 1/6 Spec: " in (tmp_path / "out" / "REPORT.md").read_text()     # and why
    status = kernelbot("status", home=tmp_path)
    assert " refused " in status.stdout, status.stdout
    assert not (tmp_path / "runner-cpu.log").exists(), "a runner was started for a request that was refused"


def test_a_session_is_exported_at_any_stage(tmp_path):
    import io

    from fakes.runner import wait_until

    from bot.app import make_service
    from bot.chat.console.chat import ConsoleChat
    from bot.config import Config
    from bot.workflow.events import Approve
    cfg = Config.from_env(backend="cpu")
    cfg.home, cfg.db_path = tmp_path, tmp_path / "kernelbot.db"
    svc = make_service(cfg, ConsoleChat(io.StringIO()))
    try:
        s = svc.start("relu(x) for fp32 8x8", "alice")
        wait_until(lambda: svc.store.load(s.id).latest("spec"))
        svc.dispatch(s.id, Approve("spec", 1, "bob"))
        wait_until(lambda: svc.store.load(s.id).latest("reference"))
    finally:
        svc.shutdown()
    out = tmp_path / "export"
    proc = kernelbot("export", s.id, "--out", str(out), home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert {"spec.json", "reference.py", "report.json", "REPORT.md"} <= {p.name for p in out.iterdir()}
    assert "relu" in (out / "reference.py").read_text() and "at reference" in proc.stdout
    assert kernelbot("export", "nope", "--out", str(out), home=tmp_path).returncode == 1
    assert "is a file" in kernelbot("export", s.id, "--out", str(out / "REPORT.md"), home=tmp_path).stderr
