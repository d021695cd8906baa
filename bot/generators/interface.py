"""The interface every generator implements; the engine knows only this."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

VERIFICATION = "verification"   # Artifact.summary field where a generator says how it verified the artifact


def failed_verification(summary: dict[str, str]) -> bool:
    """Whether the artifact was posted as failing its generator's own verification: it is there for
    a person to correct or edit, and is not approved or run as it stands."""
    return summary.get(VERIFICATION, "").startswith("FAIL")


def result_text(title: str, r: dict) -> str:
    """A failing runner result as text for a generator: summary, failing cases, pytest log."""
    lines = [f"{title} failed: {r.get('summary')}"]
    for c in r.get("correctness", []):
        if not c.get("ok") and not c.get("skipped"):
            lines.append(f"- {c.get('case')} {c.get('dtype')}: {c.get('reason') or ''} "
                         f"max abs err {c.get('max_abs_err')}, max rel err {c.get('max_rel_err')} {c.get('worst', '')}")
    log = (r.get("pytest") or {}).get("log_tail")
    if log:
        lines.append("pytest output (tail):\n" + log[-3000:])
    return "\n".join(lines)


class GenerationError(Exception):
    """A request or correction the generator cannot act on. The message is shown
    to people as is, so it must say what is wrong and what would work. usage: LLM
    tokens spent before it gave up, still counted for the session. unplaced: words of the request
    the offline generator could not account for (a hybrid generator calls them out to the LLM)."""

    def __init__(self, message: str, usage: dict[str, int] | None = None, unplaced: list[str] | None = None) -> None:
        super().__init__(message)
        self.usage = usage or {}
        self.unplaced = unplaced or []


@dataclass
class GenRequest:
    stage: str                                   # one of bot.workflow.stages.STAGES
    request: str                                 # the person's original words
    approved: dict[str, str] = field(default_factory=dict)  # earlier stage -> approved artifact text
    feedback: list[str] = field(default_factory=list)       # corrections for this stage, oldest first
    previous: str | None = None                  # latest revision of this stage, if any
    failure: str | None = None                   # failure log that sent the session back here
    attempt: int = 0                             # bumped by "regenerate"
    backend: str | None = None                   # the session's target backend
    generator: str | None = None                 # the session's choice: offline | llm | hybrid
    progress: Callable[[str], None] | None = None  # one line to the conversation while generating
    unplaced: list[str] = field(default_factory=list)  # words the offline generator could not place


@dataclass
class Attempt:
    """A version the generator verified and discarded before settling on its answer."""
    content: str
    verdict: str                                 # one line: how its verification ended


@dataclass
class Artifact:
    content: str                                 # the file's text (JSON for spec and benchmark)
    summary: dict[str, str] = field(default_factory=dict)   # key fields for the card
    notes: list[str] = field(default_factory=list)          # e.g. defaults that were assumed
    usage: dict[str, int] = field(default_factory=dict)     # LLM token counts, if any
    attempts: list[Attempt] = field(default_factory=list)   # earlier versions, oldest first
    generator: str = ""                          # which implementation made it, when one delegates


class Generator(Protocol):
    name: str

    def generate(self, req: GenRequest) -> Artifact:
        """Produce the artifact for req.stage, or raise GenerationError."""
        ...
