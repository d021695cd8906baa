"""Events into the engine and effects out of it. All plain, JSON-able data:
effects are stored in the outbox before they are carried out, so a restart can
finish them."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

# ------------------------------------------------------------------ events

@dataclass
class Start:
    request: str
    user: str


@dataclass
class Approve:
    stage: str
    rev: int
    user: str


@dataclass
class Correct:
    stage: str
    rev: int
    user: str
    text: str


@dataclass
class Edit:
    stage: str
    rev: int
    user: str
    content: str


@dataclass
class Regenerate:
    stage: str
    rev: int
    user: str


@dataclass
class Cancel:
    user: str
    ending: str = "cancelled"       # or "failed" / "refused": a run that stops for good (bot.workflow.model.ENDINGS)
    why: str = ""


@dataclass
class Generated:
    stage: str
    token: int
    content: str
    author: str
    summary: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    attempts: list[dict[str, str]] = field(default_factory=list)   # {"content", "verdict"}, oldest first
    correction: str | None = None       # the correction this generation tried to apply, if one did


@dataclass
class GenerationFailed:
    stage: str
    token: int
    error: str
    usage: dict[str, int] = field(default_factory=dict)
    correction: str | None = None


@dataclass
class JobProgress:
    job_id: str
    state: str
    detail: str
    host: str
    device: str
    hb_value: float | None


@dataclass
class JobFinished:
    job_id: str
    result: dict[str, Any]


@dataclass
class JobLost:
    job_id: str
    why: str


Event = (Start | Approve | Correct | Edit | Regenerate | Cancel | Generated | GenerationFailed
         | JobProgress | JobFinished | JobLost)

# Events a person causes by acting on a stage card.
CARD_ACTIONS = (Approve, Correct, Edit, Regenerate)
# Events a person causes: each goes through the inbox (written before the platform is answered).
PERSON_EVENTS = {cls.__name__: cls for cls in (Start, Approve, Correct, Edit, Regenerate, Cancel)}


def person_event_to_dict(ev: Event) -> dict[str, Any]:
    return {"type": type(ev).__name__, **asdict(ev)}


def person_event_from_dict(data: dict[str, Any]) -> Event:
    """The event an inbox item holds; ValueError for one that is not a person's event."""
    cls = PERSON_EVENTS.get(data.get("type", ""))
    if cls is None:
        raise ValueError(f"not a person's event: {data.get('type')!r}")
    return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


# ------------------------------------------------------------------ effects

@dataclass
class Effect:
    """type: generate | post_revision | update_revision | enqueue | post_result | notice |
    post_summary."""
    type: str
    stage: str | None = None
    rev: int | None = None
    token: int | None = None
    job_id: str | None = None
    text: str | None = None
    user: str | None = None          # notice: shown only to this person when set (ephemeral)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Effect":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def generate(stage: str, token: int, correction: str | None = None) -> Effect:
    """correction: the one this generation is to apply (text), so its outcome can answer it."""
    return Effect("generate", stage=stage, token=token, text=correction)


def post_revision(stage: str, rev: int) -> Effect:
    return Effect("post_revision", stage=stage, rev=rev)


def update_revision(stage: str, rev: int) -> Effect:
    return Effect("update_revision", stage=stage, rev=rev)


def enqueue(job_id: str) -> Effect:
    return Effect("enqueue", job_id=job_id)


def post_result(job_id: str) -> Effect:
    return Effect("post_result", job_id=job_id)


def notice(text: str, user: str | None = None) -> Effect:
    return Effect("notice", text=text, user=user)


def post_summary() -> Effect:
    return Effect("post_summary")
