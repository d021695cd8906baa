"""Persistent state in SQLite through sqlite-utils: sessions, revisions, approvals,
jobs with their results, the effect outbox, platform message ids, handled events.

A session and the effects its transition produced are written in one transaction
(:meth:`Store.save`), so a bot killed at any moment restarts with every approval
and result it acknowledged, and finishes the effects it had not carried out.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

import sqlite_utils

from bot.events import Effect
from bot.model import Approval, Job, Revision, Session

_SESSION_JSON = ("feedback", "usage")


class Store:
    def __init__(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
        self.db = sqlite_utils.Database(conn)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.lock = threading.RLock()          # one connection, shared by the bot's threads
        self._create_tables()

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction. BEGIN IMMEDIATE takes the write lock up front, waiting for other
        connections (the busy timeout) instead of failing at once, as a deferred transaction that
        read first and then tries to write can; sqlite-utils nests its own writes as savepoints."""
        with self.lock:
            self.db.conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self.db.conn.execute("ROLLBACK")
                raise
            self.db.conn.execute("COMMIT")

    def _create_tables(self) -> None:
        t = self.db.table
        t("sessions").create({"id": str, "request": str, "requester": str, "platform": str, "channel": str,
                              "thread": str, "backend": str, "generator": str, "created_at": float,
                              "status": str, "stage": str, "gen_token": int, "generating": int,
                              "failure": str, "attempt": int, "feedback": str, "usage": str,
                              "updated_at": float}, pk="id", if_not_exists=True)
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
        t("outbox").create({"id": int, "session_id": str, "effect": str, "created_at": float},
                           pk="id", if_not_exists=True)
        t("messages").create({"platform": str, "message_id": str, "session_id": str, "kind": str,
                              "stage": str, "rev": int, "job_id": str},
                             pk=("platform", "message_id"), if_not_exists=True)
        t("handled_events").create({"platform": str, "event_id": str, "at": float},
                                   pk=("platform", "event_id"), if_not_exists=True)
        t("jobs").create_index(["status"], if_not_exists=True)
        t("messages").create_index(["session_id", "kind", "stage", "rev"], if_not_exists=True)

    # ------------------------------------------------------------------ sessions

    def save(self, s: Session, effects: list[Effect] = ()) -> list[int]:
        """Write the session and queue its effects, atomically. Returns outbox ids."""
        with self._write():
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
                                                     "created_at": time.time()}).last_pk)
            return ids

    def load(self, session_id: str) -> Session | None:
        with self.lock:
            rows = list(self.db["sessions"].rows_where("id = ?", [session_id]))
            if not rows:
                return None
            row = rows[0]
            for key in _SESSION_JSON:
                row[key] = json.loads(row[key] or "{}")
            row["generating"] = bool(row["generating"])
            s = Session(**row)
            s.revisions = [_revision(r) for r in self.db["revisions"].rows_where(
                "session_id = ?", [session_id], order_by="created_at, rev")]
            s.approvals = [Approval(**{k: v for k, v in r.items() if k != "session_id"})
                           for r in self.db["approvals"].rows_where("session_id = ?", [session_id], order_by="at")]
            s.jobs = [_job(r) for r in self.db["jobs"].rows_where("session_id = ?", [session_id],
                                                                  order_by="created_at, id")]
            return s

    def session_ids(self, status: str | None = None, channel: str | None = None,
                    platform: str | None = None) -> list[str]:
        where, args = [], []
        for col, val in (("status", status), ("channel", channel), ("platform", platform)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        with self.lock:
            return [r["id"] for r in self.db["sessions"].rows_where(
                " and ".join(where) or None, args, order_by="created_at", select="id")]

    def open_jobs(self) -> list[tuple[str, str]]:
        """(session_id, job_id) of every job still waiting for a result."""
        with self.lock:
            return [(r["session_id"], r["id"]) for r in self.db["jobs"].rows_where(
                "status in ('queued', 'running')", order_by="created_at", select="session_id, id")]

    # ------------------------------------------------------------------ outbox

    def pending_effects(self, session_id: str | None = None) -> list[tuple[int, str, Effect]]:
        where, args = ("session_id = ?", [session_id]) if session_id else (None, [])
        with self.lock:
            return [(r["id"], r["session_id"], Effect.from_dict(json.loads(r["effect"])))
                    for r in self.db["outbox"].rows_where(where, args, order_by="id")]

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
        with self.lock:
            rows = list(self.db["messages"].rows_where(" and ".join(clauses), args, select="message_id"))
        return rows[-1]["message_id"] if rows else None

    def message(self, platform: str, message_id: str) -> dict | None:
        with self.lock:
            rows = list(self.db["messages"].rows_where("platform = ? and message_id = ?", [platform, message_id]))
        return rows[0] if rows else None

    def first_time(self, platform: str, event_id: str) -> bool:
        """Record a platform event id; False if it was handled before (platforms redeliver)."""
        with self._write():
            cur = self.db.execute("insert or ignore into handled_events (platform, event_id, at) values (?, ?, ?)",
                                  [platform, event_id, time.time()])
            return cur.rowcount == 1

    def sessions(self, ids: list[str]) -> Iterator[Session]:
        for sid in ids:
            s = self.load(sid)
            if s:
                yield s


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
