"""The job queue between bot and runners: Huey, on a SQLite file or on Redis, chosen by URL.

Both sides use this class: the bot enqueues jobs and reads results and heartbeats, a runner
consumes its backend's queue and writes them. Jobs travel as Huey task arguments; results,
heartbeats and runner presence live in Huey's key-value store as JSON text (never pickle, so
a runner host that ran generated code cannot hand the bot an object to unpickle).

Lifecycle of a job's keys: the runner writes hb:JOB_ID as soon as it picks the job up and every
few seconds while it runs; once its heartbeats have stopped it writes result:JOB_ID. The bot pops
the result and clears the heartbeat, which nothing writes again.

Imports only huey and the standard library: a bot host has no torch.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from huey import RedisHuey, SqliteHuey
from huey.constants import EmptyData

from runner import protocol

STALE_RUNNER_S = 3600.0   # a runner id not refreshed for this long leaves the backend's list

TASK_NAME = "kernelbot.run_job"


CHECK_FILE_S = 1.0      # how often a SQLite queue's file is checked for having been replaced


def sqlite_path(url: str) -> str | None:
    """The file of a SQLite queue URL (sqlite:///abs/path.db or a bare path); None for Redis."""
    if url.startswith(("redis://", "rediss://", "unix://")):
        return None
    if url.startswith("sqlite://"):
        return "/" + url.removeprefix("sqlite://").lstrip("/")
    if "://" in url:
        raise ValueError(f"unsupported queue URL {url!r}; use sqlite:///path/to/queue.db or redis://host:6379/0")
    return str(Path(url).expanduser())


def make_huey(url: str, name: str):
    """sqlite:///abs/path.db (or a bare path) -> SqliteHuey; redis://host:port/db -> RedisHuey."""
    path = sqlite_path(url)
    if path is None:
        return RedisHuey(name, url=url, results=False)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return SqliteHuey(name, filename=path, results=False)


class JobQueue:
    def __init__(self, url: str, backend: str) -> None:
        self.url = url
        self.backend = backend
        self.path = sqlite_path(url)
        # Set by runner.worker.serve: the queue never imports the runner that consumes it.
        self.handler: Callable[[dict], None] | None = None
        self.opened = 0         # how many times the file was opened: a consumer serves the one it started on
        self._open()

    def _open(self) -> None:
        self.opened += 1
        self._huey = make_huey(self.url, protocol.queue_name(self.backend))
        self._task = self._huey.task(name=TASK_NAME)(self._run_job)
        self._file = self._identity()
        self._checked = time.monotonic()

    def _identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except (OSError, TypeError):
            return None
        return st.st_dev, st.st_ino

    def reopened(self) -> bool:
        """Whether the SQLite file was deleted or replaced since it was opened, in which case the
        queue is opened again on the file now at its path (Huey's connections would go on using
        the old one, where nobody else looks)."""
        if self.path is None:
            return False
        self._checked = time.monotonic()
        now = self._identity()
        if now is not None and now == self._file:
            return False
        self._open()
        return True

    @property
    def huey(self):
        """The Huey instance on the queue's current file (checked at most every CHECK_FILE_S)."""
        if self.path is not None and time.monotonic() - self._checked > CHECK_FILE_S:
            self.reopened()
        return self._huey

    def _current_task(self):
        self.huey      # noqa: B018 - the file check, so the task is the current file's
        return self._task

    def _run_job(self, job: dict) -> None:
        if self.handler is None:
            raise RuntimeError("this queue has no job handler: a runner sets one (runner.worker.serve) before consuming")
        self.handler(job)

    # --- bot side -------------------------------------------------------------------
    def enqueue(self, job: dict) -> None:
        self._current_task()(job)

    def pending_count(self) -> int:
        return self.huey.pending_count()

    def is_pending(self, job_id: str) -> bool:
        """Whether the job still waits in the queue, i.e. no runner has taken it yet."""
        return any(t.args and t.args[0].get("job_id") == job_id for t in self.huey.pending())

    def heartbeat(self, job_id: str) -> dict | None:
        return self._read(protocol.heartbeat_key(job_id))

    def pop_result(self, job_id: str) -> dict | None:
        return self._read(protocol.result_key(job_id), pop=True)

    def peek_result(self, job_id: str) -> dict | None:
        return self._read(protocol.result_key(job_id))

    def clear_heartbeat(self, job_id: str) -> None:
        self.huey.storage.delete_data(protocol.heartbeat_key(job_id))

    def runner_alive(self, max_age_s: float) -> dict | None:
        """The latest presence of a runner of this backend, if one was refreshed within max_age_s."""
        return max(self.runners(max_age_s), key=lambda r: r["ts"], default=None)

    def runners(self, max_age_s: float) -> list[dict]:
        """The presence of each runner of this backend refreshed within max_age_s (not stopped)."""
        found = []
        for runner in (self._read(protocol.RUNNERS_KEY) or {}).get("runners", []):
            data = self._read(protocol.runner_key(self.backend, runner))
            if data and not data.get("stopped") and time.time() - float(data.get("ts", 0)) <= max_age_s:
                found.append(data)
        return found

    # --- runner side ----------------------------------------------------------------
    def put_heartbeat(self, job_id: str, data: dict) -> None:
        self._write(protocol.heartbeat_key(job_id), data)

    def put_result(self, job_id: str, result: dict) -> None:
        self._write(protocol.result_key(job_id), result)

    def put_runner_alive(self, data: dict) -> None:
        """A runner's presence (data["runner"] its id), and its id in the backend's list. Runners
        starting together may each write the list without the other; every tick adds the id again
        where it is missing, so the list is whole within a tick. Ids not seen for an hour leave it."""
        runner = data["runner"]
        self._write(protocol.runner_key(self.backend, runner), data)
        listed = (self._read(protocol.RUNNERS_KEY) or {}).get("runners", [])
        if runner not in listed:
            kept = [r for r in listed if time.time() - float((self._read(protocol.runner_key(self.backend, r))
                                                              or {}).get("ts", 0)) < STALE_RUNNER_S]
            self._write(protocol.RUNNERS_KEY, {"runners": [*kept, runner]})

    def consumer(self):
        """A Huey consumer with one worker thread: one job at a time on this runner's GPU. It stays
        on the file it started on: a runner checks reopened() and starts a new one."""
        return self.huey.create_consumer(workers=1, worker_type="thread", periodic=False,
                                         max_delay=1.0)

    # --- storage ----------------------------------------------------------------------
    def _write(self, key: str, data: dict[str, Any]) -> None:
        self.huey.storage.put_data(key, json.dumps(data).encode())

    def _read(self, key: str, pop: bool = False) -> dict | None:
        storage = self.huey.storage
        raw = storage.pop_data(key) if pop else storage.peek_data(key)
        return None if raw is EmptyData else json.loads(raw)
