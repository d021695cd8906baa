"""Session state as the engine sees it. Plain dataclasses; the store persists them."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from bot.workflow import stages

ACTIVE, DONE, FAILED, CANCELLED, REFUSED = "active", "done", "failed", "cancelled", "refused"
# How a session can end other than done: Cancel.ending
ENDINGS = (CANCELLED, FAILED, REFUSED)
JOB_OPEN = ("queued", "running")          # still waiting for a result
JOB_PASSED = "pass"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Revision:
    stage: str
    rev: int
    content: str
    author: str                      # "generator:offline" or the person who edited
    origin: str                      # "generated" | "edit"
    created_at: float
    summary: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    feedback: str | None = None      # the correction or failure this revision answers

    @property
    def sha(self) -> str:
        return sha256(self.content)


@dataclass
class Approval:
    stage: str
    rev: int
    sha: str
    approver: str
    at: float
    voided_at: float | None = None
    voided_why: str | None = None

    @property
    def valid(self) -> bool:
        return self.voided_at is None


@dataclass
class Job:
    id: str
    stage: str
    rev: int                         # revision of the execution stage that was approved
    kind: str
    backend: str
    created_at: float
    status: str = "queued"           # queued | running | pass | fail | error | lost | cancelled
    attempt: int = 1
    max_attempts: int = 3
    detail: str = ""
    host: str = ""
    device: str = ""
    hb_value: float | None = None    # the runner's last heartbeat timestamp (its clock)
    hb_seen_at: float | None = None  # when the bot saw that value change (our clock)
    updated_at: float = 0.0
    result: dict[str, Any] | None = None

    @property
    def open(self) -> bool:
        return self.status in JOB_OPEN


@dataclass
class Session:
    id: str
    request: str
    requester: str
    platform: str
    channel: str
    thread: str
    backend: str
    generator: str
    created_at: float
    status: str = ACTIVE
    stage: str = stages.STAGES[0]
    gen_token: int = 0               # bumped per generation request; stale results are dropped
    generating: bool = False
    failure: str | None = None       # failure log that sent the session back, for the next generation
    refusal: str | None = None       # why the last generation gave nothing (the exported report says it)
    attempt: int = 0                 # regenerate counter for the current stage
    feedback: dict[str, list[str]] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    revisions: list[Revision] = field(default_factory=list)
    approvals: list[Approval] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    updated_at: float = 0.0

    # ---- queries

    def revisions_of(self, stage: str) -> list[Revision]:
        return [r for r in self.revisions if r.stage == stage]

    def latest(self, stage: str) -> Revision | None:
        revs = self.revisions_of(stage)
        return revs[-1] if revs else None

    def revision(self, stage: str, rev: int) -> Revision | None:
        return next((r for r in self.revisions if r.stage == stage and r.rev == rev), None)

    def approval(self, stage: str, rev: int) -> Approval | None:
        return next((a for a in self.approvals if a.stage == stage and a.rev == rev and a.valid), None)

    def approved(self, stage: str) -> Revision | None:
        """The latest revision of stage with a valid approval whose sha still matches."""
        for r in reversed(self.revisions_of(stage)):
            a = self.approval(stage, r.rev)
            if a and a.sha == r.sha:
                return r
        return None

    def job(self, job_id: str) -> Job | None:
        return next((j for j in self.jobs if j.id == job_id), None)

    def open_job(self, stage: str) -> Job | None:
        return next((j for j in self.jobs if j.stage == stage and j.open), None)

    def last_job(self, stage: str) -> Job | None:
        jobs = [j for j in self.jobs if j.stage == stage]
        return jobs[-1] if jobs else None

    @property
    def active(self) -> bool:
        return self.status == ACTIVE
