"""`kernelbot run REQUEST`: one session through all six stages in the terminal.

With --yes every stage is approved as soon as it is posted; without it the person
is asked at each stage. The run stops at the first failure (a generation error, a
failing test or benchmark) and exits non-zero; either way it exports what exists.
"""
from __future__ import annotations

import getpass
import os
import sys
import time
from pathlib import Path

from bot.app import LocalRunner, make_service
from bot.chat.console.chat import ConsoleChat
from bot.chat.console.repl import Repl
from bot.config import Config
from bot.generators.interface import VERIFICATION, failed_verification
from bot.workflow import report, stages
from bot.workflow.drivers import Drivers, driver_alive
from bot.workflow.events import Approve, Cancel
from bot.workflow.model import DONE, FAILED, REFUSED, Session
from bot.workflow.service import Service

POLL_S = 0.2
PROGRESS_EVERY_S = 15.0


def resumable(svc: Service, drivers: Drivers, request: str | None, resume: str | None) -> Session | None:
    """The session a run continues: --resume's, or the active one an earlier run of the same
    request into the same --out left when it died. SystemExit naming the problem when a session
    is still driven by a live run, or --resume names nothing to resume."""
    if resume:
        s = svc.session(resume)
        if s is None:
            raise SystemExit(f"kernelbot run: no session {resume!r} in {svc.cfg.db_path}; `kernelbot status` lists them")
        if not s.active:
            raise SystemExit(f"kernelbot run: session {s.id} is {s.status}; nothing to resume "
                             f"(`kernelbot status {s.id}` shows it)")
        _refuse_if_driven(drivers.record(s.id), s)
        return s
    for record in drivers.left_in():
        s = svc.session(record["session_id"])
        if s is None or not s.active:
            continue
        _refuse_if_driven(record, s)
        if request is None or s.request == request:
            return s
        print(f"note: session {s.id} ({s.request!r}) was left unfinished in {drivers.out_dir}: `kernelbot run --resume "
              f"{s.id} --out {drivers.out_dir}` continues it, `kernelbot cancel {s.id}` ends it", file=sys.stderr)
    return None


def _refuse_if_driven(record: dict | None, s: Session) -> None:
    if driver_alive(record) and record["pid"] != os.getpid():
        raise SystemExit(f"kernelbot run: session {s.id} is being driven by another run (pid {record['pid']} on "
                         f"{record['host']}, exporting to {record['out_dir']}); wait for it or stop it first")


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


def run(request: str | None, out_dir: Path, cfg: Config, yes: bool, timeout_s: float | None = None,
        resume: str | None = None) -> int:
    """Drive a new session for request, or continue one whose run died (resume, or the same
    request into the same out_dir); export it into out_dir."""
    chat = ConsoleChat(image_dir=cfg.home / "charts")
    svc = make_service(cfg, chat)
    out = str(out_dir.resolve())
    drivers = svc.drive(out)
    s = resumable(svc, drivers, request, resume)
    if s is None and not request:
        raise SystemExit(f"kernelbot run: no unfinished session exports to {out}; give a request to start one")
    runner = LocalRunner(cfg, cfg.backend)
    user = getpass.getuser() or "you"
    stopped = None                                  # why the session could go no further, if it could not
    try:
        svc.recover()
        if s is not None:
            print(f"resuming session {s.id} at {stages.label(s.stage)} ({s.request!r}): the run that drove it is gone")
        s = s or svc.start(request, user=user)
        sid = s.id
        drivers.take(sid)
        s = _drive(svc, runner, sid, None if yes else Repl(svc, user), timeout_s)
        stopped = failed(s)
        if yes and s.active and stopped:            # nobody is there to correct it: it ends here
            s = svc.dispatch(sid, Cancel("kernelbot run --yes", *ending(s, stopped)))
    except KeyboardInterrupt:
        s = svc.dispatch(s.id, Cancel("you (Ctrl-C)")) if "s" in locals() else None
        print("\ninterrupted", file=sys.stderr)
    except EOFError:                                # stdin closed while asking: keep the session to resume
        print(f"\ninput ended; session {s.id} is kept: `kernelbot run --resume {s.id} --out {out}` continues it",
              file=sys.stderr)
        return 1
    finally:
        drivers.stop()
        svc.shutdown()
        runner.stop()
    if s is None:
        return 130
    written = report.export(s, out_dir)
    print(f"\nwrote {len(written)} files to {out_dir}: {', '.join(p.name for p in written)}")
    why = failed(s) or stopped
    if s.status == DONE and not why:
        print(f"session {s.id}: all six stages passed")
        return 0
    print(f"session {s.id} {s.status}: {why or s.status}", file=sys.stderr)
    if s.status == REFUSED:
        print("change the request in the command (the note above says what was not understood) and run it again",
              file=sys.stderr)
    return 1


def ending(s: Session, why: str) -> tuple[str, str]:
    """(final status, why) of a session a --yes run cannot take further: refused when its spec could
    not be made from the request, failed otherwise."""
    return (REFUSED if s.stage == "spec" and s.latest("spec") is None else FAILED), why


def _drive(svc: Service, runner: LocalRunner, sid: str, repl: Repl | None, timeout_s: float | None) -> Session:
    """Poll until the session ends or fails; approve (repl None) or ask the person at each stage."""
    start = last_progress = time.time()
    doing, doing_since = None, start                # the stage and job it waits on, and since when
    while True:
        svc.poll_jobs()
        s = svc.session(sid)
        if s.open_job(s.stage) or s.stage not in ("spec", "reference"):
            runner.ensure(svc)      # only once there is work for it (or an LLM's kernel to verify); again if it went
        if not s.active or failed(s):
            return s
        if awaiting_review(s):
            latest = s.latest(s.stage)
            if repl is None:
                svc.dispatch(sid, Approve(s.stage, latest.rev, "you (--yes)"))
            else:
                repl.current = sid
                repl.handle(input(f"[{sid}] a / c TEXT / e / r / x / show > "))
            continue
        now = time.time()
        if timeout_s and now - start > timeout_s:
            print(f"timed out after {timeout_s:.0f} s", file=sys.stderr)
            return svc.dispatch(sid, Cancel("you (timeout)"))
        job = s.open_job(s.stage)
        if (s.stage, job and job.id) != doing:
            doing, doing_since = (s.stage, job and job.id), now
        if now - last_progress > PROGRESS_EVERY_S:
            print(f"  … {waiting_on(s)} ({now - doing_since:.0f} s so far; {now - start:.0f} s in all)", flush=True)
            last_progress = now
        time.sleep(POLL_S)


def waiting_on(s: Session) -> str:
    """What the session waits on now: its stage's job on a runner, or a generation."""
    job = s.open_job(s.stage)
    what = (f"{job.status} on {job.host or 'a ' + job.backend + ' runner'}"
            f"{': ' + job.detail if job.detail else ''}") if job else "generating"
    return f"{stages.label(s.stage)}: {what}"
