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
import time
from pathlib import Path
from typing import Any, Callable

from huey import RedisHuey, SqliteHuey
from huey.constants import EmptyData

from runner import protocol

TASK_NAME = "kernelbot.run_job"


def make_huey(url: str, name: str):
    """sqlite:///abs/path.db (or a bare path) -> SqliteHuey; redis://host:port/db -> RedisHuey."""
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisHuey(name, url=url, results=False)
    if url.startswith("sqlite://"):
        path = "/" + url.removeprefix("sqlite://").lstrip("/")
    elif "://" in url:
        raise ValueError(f"unsupported queue URL {url!r}; use sqlite:///path/to/queue.db or redis://host:6379/0")
    else:
        path = str(Path(url).expanduser())
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return SqliteHuey(name, filename=path, results=False)


class JobQueue:
    def __init__(self, url: str, backend: str) -> None:
        self.url = url
        self.backend = backend
        self.huey = make_huey(url, protocol.queue_name(backend))
        # Set by runner.worker.serve; without it the task builds a default runner (huey immediate mode).
        self.handler: Callable[[dict], None] | None = None
        self._task = self.huey.task(name=TASK_NAME)(self._run_job)

    def _run_job(self, job: dict) -> None:
        handler = self.handler
        if handler is None:
            from runner import worker   # lazily: a bot host never loads the runner's side
            handler = worker.Runner(self).handle
        handler(job)

    # --- bot side -------------------------------------------------------------------
    def enqueue(self, job: dict) -> None:
        self._task(job)

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
        """The latest presence of a runner of this backend, if refreshed within max_age_s."""
        data = self._read(protocol.runner_key(self.backend))
        if data is None or time.time() - float(data.get("ts", 0)) > max_age_s:
            return None
        return data

    # --- runner side ----------------------------------------------------------------
    def put_heartbeat(self, job_id: str, data: dict) -> None:
        self._write(protocol.heartbeat_key(job_id), data)

    def put_result(self, job_id: str, result: dict) -> None:
        self._write(protocol.result_key(job_id), result)

    def put_runner_alive(self, data: dict) -> None:
        self._write(protocol.runner_key(self.backend), data)

    def consumer(self):
        """A Huey consumer with one worker thread: one job at a time on this runner's GPU."""
        return self.huey.create_consumer(workers=1, worker_type="thread", periodic=False,
                                         max_delay=1.0)

    # --- storage ----------------------------------------------------------------------
    def _write(self, key: str, data: dict[str, Any]) -> None:
        self.huey.storage.put_data(key, json.dumps(data).encode())

    def _read(self, key: str, pop: bool = False) -> dict | None:
        storage = self.huey.storage
        raw = storage.pop_data(key) if pop else storage.peek_data(key)
        return None if raw is EmptyData else json.loads(raw)
