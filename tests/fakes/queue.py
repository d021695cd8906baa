"""The service's queue protocol in memory: jobs are recorded; tests post heartbeats and
results. The real Huey queue and runner are exercised in test_e2e.py and test_runner_queue.py."""
from __future__ import annotations

import time


class MemoryQueue:
    def __init__(self) -> None:
        self.jobs: list[dict] = []
        self.beats: dict[str, dict] = {}
        self.results: dict[str, dict] = {}
        self.taken: set[str] = set()
        self.presences: list[dict] = []         # runners' presence records, as tests post them

    def enqueue(self, job: dict) -> None:
        self.jobs.append(job)
        self.taken.discard(job["job_id"])

    def heartbeat(self, job_id: str) -> dict | None:
        return self.beats.get(job_id)

    def peek_result(self, job_id: str) -> dict | None:
        return self.results.get(job_id)

    def pop_result(self, job_id: str) -> dict | None:
        return self.results.pop(job_id, None)

    def clear_heartbeat(self, job_id: str) -> None:
        self.beats.pop(job_id, None)

    def is_pending(self, job_id: str) -> bool:
        """Jobs stay pending until a test takes them (take) or gives a heartbeat or result."""
        return job_id not in self.taken and job_id not in self.beats and job_id not in self.results

    def runners(self, max_age_s: float) -> list[dict]:
        return [r for r in self.presences if time.time() - r["ts"] <= max_age_s and not r.get("stopped")]

    def take(self, job_id: str) -> None:
        """A runner takes the job off the queue."""
        self.taken.add(job_id)
