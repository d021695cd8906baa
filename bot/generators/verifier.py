"""A kernel check on a runner, waited for: what the LLM generator's repair loop calls.

It enqueues a "verify" job (the runner's trusted harness, correctness only: spec, reference,
kernel) on the queue of the session's backend and polls for its result. The job is not a
stage's job and is not in the store's ledger: a runner that dies mid-check costs this round
a timeout, reported as "could not be checked", not a re-queue.
"""
from __future__ import annotations

import secrets
import time
from typing import Callable, Protocol


class RunnerQueue(Protocol):
    def enqueue(self, job: dict) -> None: ...

    def pop_result(self, job_id: str) -> dict | None: ...

    def clear_heartbeat(self, job_id: str) -> None: ...

    def runner_alive(self, max_age_s: float) -> dict | None: ...


class QueueVerifier:
    def __init__(self, queue_for: Callable[[str], RunnerQueue], timeout_s: float, alive_s: float = 15.0,
                 poll_s: float = 0.25) -> None:
        self.queue_for, self.timeout_s, self.alive_s, self.poll_s = queue_for, timeout_s, alive_s, poll_s

    def __call__(self, files: dict[str, str], backend: str) -> dict:
        """The runner's result for the files (docs/CONTRACTS.md), or an "error" result saying why none came."""
        queue = self.queue_for(backend)
        if not queue.runner_alive(self.alive_s):
            return _error(f"no {backend} runner is alive to check it (start `kernelbot runner --backend {backend}`)")
        job_id = f"verify-{secrets.token_hex(8)}"
        queue.enqueue({"job_id": job_id, "session_id": "", "kind": "verify", "backend": backend, "attempt": 1,
                       "timeout_s": self.timeout_s, "files": files})
        deadline = time.monotonic() + self.timeout_s + 60      # the job's own limit, plus time in the queue
        while time.monotonic() < deadline:
            result = queue.pop_result(job_id)
            if result is not None:
                queue.clear_heartbeat(job_id)
                return result
            time.sleep(self.poll_s)
        return _error(f"no result from the {backend} runner within {self.timeout_s + 60:.0f} s")


def _error(summary: str) -> dict:
    return {"status": "error", "summary": summary}
