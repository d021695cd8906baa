"""The store on its own: round trips, and two connections writing the same file at once
(the Slack adapter and the service each hold one)."""
from __future__ import annotations

import threading

from bot.workflow.events import notice
from bot.workflow.model import Approval, Job, Revision, Session
from bot.workflow.store import Store


def session(sid: str) -> Session:
    return Session(id=sid, request="add", requester="alice", platform="t", channel="c", thread="",
                   backend="cpu", generator="offline", created_at=1.0)


def test_session_round_trip_keeps_everything(tmp_path):
    store = Store(tmp_path / "kb.db")
    s = session("s1")
    s.feedback = {"spec": ["use bf16"]}
    s.usage = {"prompt_tokens": 10}
    s.refusal = "1/6 Spec: which operation?"
    s.revisions.append(Revision("spec", 1, "{}", "gen", "generated", 2.0, {"k": "v"}, ["note"], "why"))
    s.approvals.append(Approval("spec", 1, s.revisions[0].sha, "bob", 3.0))
    s.jobs.append(Job("j1", "reference_test", 1, "reference_test", "cpu", 4.0, result={"status": "pass"}))
    ids = store.save(s, [notice("hello", "bob")])
    again = Store(tmp_path / "kb.db").load("s1")
    assert again == s
    assert [(i, e.text) for i, _, e in store.pending_effects("s1")] == [(ids[0], "hello")]


def test_a_store_from_before_refusals_were_kept_opens_and_keeps_them(tmp_path):
    import sqlite3
    path = tmp_path / "kb.db"
    Store(path)
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE sessions DROP COLUMN refusal")
    store = Store(path)
    s = session("s1")
    s.refusal = "why not"
    store.save(s)
    assert Store(path).load("s1").refusal == "why not"


def test_two_connections_write_concurrently_without_lock_errors(tmp_path):
    a, b = Store(tmp_path / "kb.db"), Store(tmp_path / "kb.db")
    errors: list[Exception] = []

    def hammer(store: Store, prefix: str) -> None:
        try:
            for i in range(60):
                s = session(f"{prefix}{i}")
                store.save(s)
                store.load(s.id)                       # a read before the next write, as listeners do
                store.map_message("slack", f"{prefix}-m{i}", s.id, "root")
                store.receive("slack", f"{prefix}-e{i}", {"op": "event"})
        except Exception as e:                          # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=hammer, args=(st, p)) for st, p in ((a, "a"), (b, "b"), (a, "c"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(a.session_ids()) == 180 and b.message("slack", "c-m59")["session_id"] == "c59"
