"""The interface every generator implements; the engine knows only this."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class GenerationError(Exception):
    """A request or correction the generator cannot act on. The message is shown
    to people as is, so it must say what is wrong and what would work."""


@dataclass
class GenRequest:
    stage: str                                   # one of bot.stages.STAGES
    request: str                                 # the person's original words
    approved: dict[str, str] = field(default_factory=dict)  # earlier stage -> approved artifact text
    feedback: list[str] = field(default_factory=list)       # corrections for this stage, oldest first
    previous: str | None = None                  # latest revision of this stage, if any
    failure: str | None = None                   # failure log that sent the session back here
    attempt: int = 0                             # bumped by "regenerate"
    backend: str | None = None                   # the session's target backend


@dataclass
class Artifact:
    content: str                                 # the file's text (JSON for spec and benchmark)
    summary: dict[str, str] = field(default_factory=dict)   # key fields for the card
    notes: list[str] = field(default_factory=list)          # e.g. defaults that were assumed
    usage: dict[str, int] = field(default_factory=dict)     # LLM token counts, if any


class Generator(Protocol):
    name: str

    def generate(self, req: GenRequest) -> Artifact:
        """Produce the artifact for req.stage, or raise GenerationError."""
        ...
