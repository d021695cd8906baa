"""Terminal commands sharing a store: each carries on its own console sessions, takes over one
whose command died, and never one another live command drives; a shared runner's users."""
from __future__ import annotations

import os
import subprocess
import sys

from bot.workflow.drivers import Drivers
from bot.workflow.model import Session
from bot.workflow.store import Store
from runner import users


def session(store: Store, sid: str, platform: str = "console") -> str:
    store.save(Session(id=sid, request="relu", requester="a", platform=platform, channel="c", thread="",
                       backend="cpu", generator="offline", created_at=1.0))
    return sid


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_session_is_carried_on_by_one_live_command_and_taken_over_when_it_dies(tmp_path):
    store = Store(tmp_path / "kb.db")
    mine, theirs = Drivers(store), Drivers(store)
    theirs.pid = 1                                       # a second command, alive (pid 1 always is)
    try:
        sid = session(store, "k1")
        assert theirs.owns(sid) and not mine.owns(sid)
        assert not mine.owns(session(store, "s1", platform="slack")), "a Slack session is the Slack bot's"
        store.drive(sid, dead_pid(), store.driver(sid)["host"], "/out")   # that command died
        assert mine.owns(sid) and store.driver(sid)["out_dir"] == "/out"
        theirs.mine.clear()
        assert not theirs.owns(sid)
        theirs.mine.add(sid)                             # it believed it still drove the session
        theirs.refresh()
        assert sid not in theirs.mine, "a command that stood still must let go of a session taken over"
    finally:
        mine.stop()
        theirs.stop()


def test_a_shared_runners_users_are_the_live_commands(tmp_path):
    group = tmp_path / "runner-cpu.users"
    users.join(group)
    (group / str(dead_pid())).touch()
    assert users.alive(group) == [os.getpid()] and len(list(group.iterdir())) == 1
    users.leave(group)
    assert users.alive(group) == []


def test_the_out_dir_is_recorded_absolute_for_the_resume_hint(tmp_path, monkeypatch):
    # `kernelbot status`, run from any folder, names it in `kernelbot run --resume ID --out DIR`
    store = Store(tmp_path / "kb.db")
    monkeypatch.chdir(tmp_path)
    drivers = Drivers(store, "out/demo")
    try:
        drivers.take(session(store, "k1"))
        assert store.driver("k1")["out_dir"] == str(tmp_path / "out" / "demo")
    finally:
        drivers.stop()
