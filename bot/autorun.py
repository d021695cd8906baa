"""`kernelbot run REQUEST`: one session through all six stages in the terminal.

With --yes every stage is approved as soon as it is posted; without it the person
is asked at each stage. The run stops at the first failure (a generation error, a
failing test or benchmark) and exits non-zero; either way it exports what exists.
"""
from __future__ import annotations

import getpass
import sys
import time
from pathlib import Path

from bot import report, stages
from bot.app import LocalRunner, make_service
from bot.config import Config
from bot.console import ConsoleChat
from bot.events import Approve, Cancel
from bot.generator import VERIFICATION, failed_verification
from bot.model import DONE, Session
from bot.repl import Repl
from bot.service import Service

POLL_S = 0.2
PROGRESS_EVERY_S = 15.0


def awaiting_review(s: Session) -> bool:
    """The current stage has a revision nobody has approved yet and nothing is running."""
    latest = s.latest(s.stage)
    return (s.active and not s.generating and latest is not None
            and s.approval(s.stage, latest.rev) is None and s.open_job(s.stage) is None)


def failed(s: Session) -> str | None:
    """Why the run must stop: a finished job that did not pass, or a generation that produced nothing."""
    for job in s.jobs:
        if job.status in ("fail", "error", "lost"):
            return f"{stages.TITLES[job.stage]} {job.status}: {(job.result or {}).get('summary', '')}"
    if s.active and not s.generating and s.latest(s.stage) is None:
        return f"{stages.label(s.stage)} could not be generated"
    latest = s.latest(s.stage)
    if s.active and not s.generating and failed_verification(latest.summary):
        return (f"{stages.label(s.stage)} r{latest.rev}: {latest.summary[VERIFICATION]}; correct or edit it in "
                f"`kernelbot chat` (switch {s.id})")
    return None


def run(request: str, out_dir: Path, cfg: Config, yes: bool, timeout_s: float | None = None) -> int:
    chat = ConsoleChat(image_dir=cfg.home / "charts", full_code=not yes)
    svc = make_service(cfg, chat)
    runner = LocalRunner(cfg, cfg.backend)
    user = getpass.getuser() or "you"
    try:
        runner.ensure(svc)
        svc.recover()
        s = svc.start(request, user=user)
        s = _drive(svc, runner, s.id, None if yes else Repl(svc, user), timeout_s)
    except KeyboardInterrupt:
        s = svc.dispatch(s.id, Cancel("you (Ctrl-C)")) if "s" in locals() else None
        print("\ninterrupted", file=sys.stderr)
    finally:
        svc.shutdown()
        runner.stop()
    if s is None:
        return 130
    written = report.export(s, out_dir)
    print(f"\nwrote {len(written)} files to {out_dir}: {', '.join(p.name for p in written)}")
    why = failed(s)
    if s.status == DONE and not why:
        print(f"session {s.id}: all six stages passed")
        return 0
    print(f"session {s.id} stopped: {why or s.status}", file=sys.stderr)
    return 1


def _drive(svc: Service, runner: LocalRunner, sid: str, repl: Repl | None, timeout_s: float | None) -> Session:
    """Poll until the session ends or fails; approve (repl None) or ask the person at each stage."""
    start = last_progress = time.time()
    while True:
        svc.poll_jobs()
        s = svc.store.load(sid)
        if s.open_job(s.stage):
            runner.ensure(svc)                     # the runner we relied on may have gone
        if not s.active or failed(s):
            return s
        if awaiting_review(s):
            latest = s.latest(s.stage)
            if repl is None:
                svc.dispatch(sid, Approve(s.stage, latest.rev, "you (--yes)"))
            else:
                repl.current = sid
                repl.handle(input(f"[{sid}] a / c TEXT / e / r / x > "))
            continue
        now = time.time()
        if timeout_s and now - start > timeout_s:
            print(f"timed out after {timeout_s:.0f} s", file=sys.stderr)
            return svc.dispatch(sid, Cancel("you (timeout)"))
        if now - last_progress > PROGRESS_EVERY_S:
            _progress(s, now - start)
            last_progress = now
        time.sleep(POLL_S)


def _progress(s: Session, elapsed: float) -> None:
    job = s.open_job(s.stage)
    what = (f"{job.status} on {job.host or 'a ' + job.backend + ' runner'}"
            f"{': ' + job.detail if job.detail else ''}") if job else "generating"
    print(f"  … {stages.label(s.stage)}: {what} ({elapsed:.0f} s)", flush=True)
