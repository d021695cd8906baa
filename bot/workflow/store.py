"""Persistent state in SQLite through sqlite-utils: sessions, revisions, approvals,
jobs with their results, the inbox of platform events, the effect outbox, platform
message ids.

Every platform event is written to the inbox before it is acknowledged
(:meth:`Store.receive`); a session, the effects its transition produced and the
inbox event that caused it are written in one transaction (:meth:`Store.save`).
So a bot killed at any moment restarts with every event it acknowledged, applies
each exactly once, and finishes the effects it had not carried out.
"""
from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Iterator

import sqlite_utils

from bot.workflow.events import Effect
from bot.workflow.model import Approval, Job, Revision, Session

_SESSION_JSON = ("feedback", "usage")
WRITE_WAIT_S = 30.0      # how long a write waits for another process's lock
RECEIVE_WAIT_S = 2.0     # ... and an inbox write, which must be done before the platform's 3 s run out


class StoreBusy(sqlite3.OperationalError):
    """The store's write lock was not to be had in time."""


class Store:
    def __init__(self, path: str | Path, write_wait_s: float = WRITE_WAIT_S) -> None:
        """write_wait_s: how long a write waits for another process's lock before it fails."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = str(path)
        self.write_wait_s = write_wait_s
        conn = sqlite3.connect(self.path, check_same_thread=False, timeout=write_wait_s)
        self.db = sqlite_utils.Database(conn)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.lock = threading.RLock()          # the write connection, shared by the bot's threads
        self._readers = threading.local()      # reads on a connection per thread: in WAL mode they
        self._create_tables()                  # never wait for a writer, here or in another process

    @contextmanager
    def _write(self, wait_s: float | None = None) -> Iterator[None]:
        """One write transaction. BEGIN IMMEDIATE takes the write lock up front, waiting for other
        connections (the busy timeout) instead of failing at once, as a deferred transaction that
        read first and then tries to write can; sqlite-utils nests its own writes as savepoints."""
        wait_s = self.write_wait_s if wait_s is None else wait_s
        if not self.lock.acquire(timeout=wait_s):
            raise StoreBusy("database is locked (another write in this bot is waiting for it)")
        try:
            self.db.conn.execute(f"PRAGMA busy_timeout = {int(wait_s * 1000)}")
            self.db.conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self.db.conn.execute("ROLLBACK")
                raise
            self.db.conn.execute("COMMIT")
        finally:
            self.lock.release()

    def _reads(self) -> sqlite_utils.Database:
        db = getattr(self._readers, "db", None)
        if db is None:
            db = self._readers.db = sqlite_utils.Database(sqlite3.connect(self.path, timeout=WRITE_WAIT_S))
        return db

    def _create_tables(self) -> None:
        t = self.db.table
        t("sessions").create({"id": str, "request": str, "requester": str, "platform": str, "channel": str,
                              "thread": str, "backend": str, "generator": str, "created_at": float,
                              "status": str, "stage": str, "gen_token": int, "generating": int,
                              "failure": str, "attempt": int, "feedback": str, "usage": str,
                              "updated_at": float, "refusal": str}, pk="id", if_not_exists=True)
        if "refusal" not in t("sessions").columns_dict:       # a store from before refusals were kept
            t("sessions").add_column("refusal", str)
        t("revisions").create({"session_id": str, "stage": str, "rev": int, "content": str, "sha256": str,
                               "author": str, "origin": str, "created_at": float, "summary": str,
                               "notes": str, "feedback": str},
                              pk=("session_id", "stage", "rev"), if_not_exists=True)
        t("approvals").create({"session_id": str, "stage": str, "rev": int, "sha": str, "approver": str,
                               "at": float, "voided_at": float, "voided_why": str},
                              pk=("session_id", "stage", "rev", "at"), if_not_exists=True)
        t("jobs").create({"id": str, "session_id": str, "stage": str, "rev": int, "kind": str, "backend": str,
                          "created_at": float, "status": str, "attempt": int, "max_attempts": int,
                          "detail": str, "host": str, "device": str, "hb_value": float, "hb_seen_at": float,
                          "updated_at": float, "result": str}, pk="id", if_not_exists=True)
        t("outbox").create({"id": int, "session_id": str, "effect": str, "created_at": float, "tries": int,
                            "key": str}, pk="id", if_not_exists=True)
        for column in ("tries", "key"):                    # a store from before posts had keys
            if column not in t("outbox").columns_dict:
                t("outbox").add_column(column, int if column == "tries" else str)
        t("messages").create({"platform": str, "message_id": str, "session_id": str, "kind": str,
                              "stage": str, "rev": int, "job_id": str},
                             pk=("platform", "message_id"), if_not_exists=True)
        t("inbox").create({"id": int, "platform": str, "key": str, "item": str, "received_at": float,
                           "done_at": float, "outcome": str, "tries": int, "error": str}, pk="id", if_not_exists=True)
        t("inbox").create_index(["platform", "key"], unique=True, if_not_exists=True)
        t("inbox").create_index(["done_at"], if_not_exists=True)
        t("drivers").create({"session_id": str, "pid": int, "host": str, "out_dir": str, "seen_at": float},
                            pk="session_id", if_not_exists=True)
        t("jobs").create_index(["status"], if_not_exists=True)
        t("messages").create_index(["session_id", "kind", "stage", "rev"], if_not_exists=True)

    # ------------------------------------------------------------------ sessions

    def save(self, s: Session, effects: list[Effect] = (), inbox_id: int | None = None,
             root: str | None = None) -> list[int]:
        """Write the session and queue its effects, atomically. inbox_id: the inbox event this
        transition applied, marked done (with the session's id) in the same transaction; root:
        the platform message id of the thread a new session opens in. Returns outbox ids."""
        with self._write():
            if inbox_id is not None:
                self._inbox_done(inbox_id, s.id)
            if root:
                self.db["messages"].upsert({"platform": s.platform, "message_id": root, "session_id": s.id,
                                            "kind": "root"}, pk=("platform", "message_id"))
            row = {k: v for k, v in asdict(s).items() if k not in ("revisions", "approvals", "jobs")}
            for key in _SESSION_JSON:
                row[key] = json.dumps(row[key])
            row["generating"] = int(row["generating"])
            self.db["sessions"].upsert(row, pk="id")
            self.db["revisions"].upsert_all(
                [{**_revision_row(r), "session_id": s.id} for r in s.revisions],
                pk=("session_id", "stage", "rev"))
            self.db["approvals"].upsert_all([{**asdict(a), "session_id": s.id} for a in s.approvals],
                                            pk=("session_id", "stage", "rev", "at"))
            self.db["jobs"].upsert_all([_job_row(s.id, j) for j in s.jobs], pk="id")
            ids = []
            for e in effects:
                ids.append(self.db["outbox"].insert({"session_id": s.id, "effect": json.dumps(e.to_dict()),
                                                     "created_at": time.time(), "tries": 0,
                                                     "key": secrets.token_hex(8)}).last_pk)
            return ids

    def load(self, session_id: str) -> Session | None:
        db = self._reads()
        db.conn.execute("BEGIN")                   # one snapshot for the session and its rows
        try:
            return _session(db, session_id)
        finally:
            db.conn.execute("COMMIT")

    def platform_of(self, session_id: str) -> str | None:
        row = self._reads().execute("select platform from sessions where id = ?", [session_id]).fetchone()
        return row[0] if row else None

    def session_ids(self, status: str | None = None, channel: str | None = None,
                    platform: str | None = None) -> list[str]:
        where, args = [], []
        for col, val in (("status", status), ("channel", channel), ("platform", platform)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        db = self._reads()
        return [r["id"] for r in db["sessions"].rows_where(
            " and ".join(where) or None, args, order_by="created_at", select="id")]

    def open_jobs(self) -> list[tuple[str, str]]:
        """(session_id, job_id) of every job still waiting for a result."""
        db = self._reads()
        return [(r["session_id"], r["id"]) for r in db["jobs"].rows_where(
            "status in ('queued', 'running')", order_by="created_at", select="session_id, id")]

    # ------------------------------------------------------------------ outbox

    def pending_effects(self, session_id: str | None = None) -> list[tuple[int, str, Effect]]:
        where, args = ("session_id = ?", [session_id]) if session_id else (None, [])
        db = self._reads()
        return [(r["id"], r["session_id"], Effect.from_dict(json.loads(r["effect"])))
                for r in db["outbox"].rows_where(where, args, order_by="id")]

    def effect_attempt(self, effect_id: int) -> tuple[str, int]:
        """Record one more try at carrying out an effect: (its key, unique to it and the same on every
        try; how many tries came before: a post tried before may have reached the platform without
        its message id being recorded)."""
        with self._write():
            row = self.db.execute("select key, coalesce(tries, 0) from outbox where id = ?", [effect_id]).fetchone()
            self.db.execute("update outbox set tries = coalesce(tries, 0) + 1 where id = ?", [effect_id])
        key, tries = row if row else (None, 0)
        return key or f"kb{effect_id}", tries

    def effect_done(self, effect_id: int) -> None:
        with self._write():
            self.db.execute("delete from outbox where id = ?", [effect_id])

    # ------------------------------------------------------------------ platform bookkeeping

    def map_message(self, platform: str, message_id: str, session_id: str, kind: str,
                    stage: str | None = None, rev: int | None = None, job_id: str | None = None) -> None:
        with self._write():
            self.db["messages"].upsert({"platform": platform, "message_id": message_id, "session_id": session_id,
                                        "kind": kind, "stage": stage, "rev": rev, "job_id": job_id},
                                       pk=("platform", "message_id"))

    def message_id(self, platform: str, session_id: str, kind: str, stage: str | None = None,
                   rev: int | None = None, job_id: str | None = None) -> str | None:
        clauses = ["platform = ?", "session_id = ?", "kind = ?"]
        args: list = [platform, session_id, kind]
        for col, val in (("stage", stage), ("rev", rev), ("job_id", job_id)):
            if val is not None:
                clauses.append(f"{col} = ?")
                args.append(val)
        db = self._reads()
        rows = list(db["messages"].rows_where(" and ".join(clauses), args, select="message_id"))
        return rows[-1]["message_id"] if rows else None

    def message(self, platform: str, message_id: str) -> dict | None:
        db = self._reads()
        rows = list(db["messages"].rows_where("platform = ? and message_id = ?", [platform, message_id]))
        return rows[0] if rows else None

    # ------------------------------------------------------------------ inbox

    def receive(self, platform: str, key: str, item: dict) -> int | None:
        """Write a platform event to the inbox before it is acknowledged. Returns its inbox id,
        or None when this key was received before (platforms redeliver). Waits RECEIVE_WAIT_S at
        most for the write lock: a platform that gets no answer redelivers, a person is told."""
        with self._write(min(RECEIVE_WAIT_S, self.write_wait_s)):
            cur = self.db.execute("insert or ignore into inbox (platform, key, item, received_at, tries, error) "
                                  "values (?, ?, ?, ?, 0, '')", [platform, key, json.dumps(item), time.time()])
            return cur.lastrowid if cur.rowcount == 1 else None

    def inbox_item(self, inbox_id: int) -> tuple[dict, str | None] | None:
        """(the event as received, None while it waits, else its outcome: the id of the session it
        changed, or why it changed none), or None for an unknown id."""
        db = self._reads()
        rows = list(db["inbox"].rows_where("id = ?", [inbox_id], select="item, done_at, outcome"))
        if not rows:
            return None
        return json.loads(rows[0]["item"]), (rows[0]["outcome"] if rows[0]["done_at"] is not None else None)

    def pending_inbox(self, platform: str | None = None) -> list[int]:
        """Inbox ids received (from platform, or any) but not yet applied, oldest first."""
        where, args = ("done_at is null and platform = ?", [platform]) if platform else ("done_at is null", [])
        db = self._reads()
        return [r["id"] for r in db["inbox"].rows_where(where, args, order_by="id", select="id")]

    def update_inbox_item(self, inbox_id: int, item: dict) -> None:
        """Record what processing learnt on the way (a thread it opened) before it goes on."""
        with self._write():
            self.db.execute("update inbox set item = ? where id = ?", [json.dumps(item), inbox_id])

    def inbox_done(self, inbox_id: int, outcome: str = "") -> None:
        """An inbox event that changed no session (its session is gone, say): done, and why."""
        with self._write():
            self._inbox_done(inbox_id, outcome)

    def inbox_failed(self, inbox_id: int, error: str) -> None:
        """Record one more failed try at an inbox event, and its error (for whoever reads the store)."""
        with self._write():
            self.db.execute("update inbox set tries = tries + 1, error = ? where id = ?", [error[:500], inbox_id])

    def _inbox_done(self, inbox_id: int, outcome: str) -> None:
        self.db.execute("update inbox set done_at = ?, outcome = ? where id = ?", [time.time(), outcome, inbox_id])

    # ------------------------------------------------------------------ drivers (terminal commands)

    def drive(self, session_id: str, pid: int, host: str, out_dir: str) -> None:
        """Record (or refresh) the process that drives a session from a terminal, and where it exports."""
        with self._write():
            self.db["drivers"].upsert({"session_id": session_id, "pid": pid, "host": host, "out_dir": out_dir,
                                       "seen_at": time.time()}, pk="session_id")

    def claim(self, session_id: str, pid: int, host: str, out_dir: str, taken: Callable[[dict], bool]) -> bool:
        """Record this process as the session's driver unless its record says another live process
        drives it (taken(record)), in one transaction, so two processes never both take a session
        over. An existing record's out_dir is kept when out_dir is ''."""
        with self._write():
            rows = list(self.db["drivers"].rows_where("session_id = ?", [session_id]))
            old = rows[0] if rows else None
            if old and taken(old):
                return False
            self.db["drivers"].upsert({"session_id": session_id, "pid": pid, "host": host,
                                       "out_dir": out_dir or (old or {}).get("out_dir") or "",
                                       "seen_at": time.time()}, pk="session_id")
            return True

    def driver(self, session_id: str) -> dict | None:
        rows = list(self._reads()["drivers"].rows_where("session_id = ?", [session_id]))
        return rows[0] if rows else None

    def driven_into(self, out_dir: str) -> list[dict]:
        """The driver records of sessions exported into out_dir, newest first."""
        return list(self._reads()["drivers"].rows_where("out_dir = ?", [out_dir], order_by="seen_at desc"))

    def sessions(self, ids: list[str]) -> Iterator[Session]:
        for sid in ids:
            s = self.load(sid)
            if s:
                yield s


def _session(db: sqlite_utils.Database, session_id: str) -> Session | None:
    rows = list(db["sessions"].rows_where("id = ?", [session_id]))
    if not rows:
        return None
    row = rows[0]
    for key in _SESSION_JSON:
        row[key] = json.loads(row[key] or "{}")
    row["generating"] = bool(row["generating"])
    s = Session(**row)
    s.revisions = [_revision(r) for r in db["revisions"].rows_where(
        "session_id = ?", [session_id], order_by="created_at, rev")]
    s.approvals = [Approval(**{k: v for k, v in r.items() if k != "session_id"})
                   for r in db["approvals"].rows_where("session_id = ?", [session_id], order_by="at")]
    s.jobs = [_job(r) for r in db["jobs"].rows_where("session_id = ?", [session_id], order_by="created_at, id")]
    return s


def _revision_row(r: Revision) -> dict:
    row = asdict(r)
    row["sha256"] = r.sha
    row["summary"] = json.dumps(r.summary)
    row["notes"] = json.dumps(r.notes)
    return row


def _revision(row: dict) -> Revision:
    row = {k: v for k, v in row.items() if k not in ("session_id", "sha256")}
    row["summary"] = json.loads(row["summary"] or "{}")
    row["notes"] = json.loads(row["notes"] or "[]")
    return Revision(**row)


def _job_row(session_id: str, j: Job) -> dict:
    row = asdict(j)
    row["session_id"] = session_id
    row["result"] = json.dumps(j.result) if j.result is not None else None
    return row


def _job(row: dict) -> Job:
    row = {k: v for k, v in row.items() if k != "session_id"}
    row["result"] = json.loads(row["result"]) if row["result"] else None
    return Job(**row)
