"""The offline generator's catalog: every operator family's entries (bot.ops.<family>.ENTRIES), each
a request as a person would type it, at the sizes issue 6 benchmarks and at small sizes for the
CPU interpreter. `expression` is what the request must parse to, so the catalog also pins the
request parser."""
from __future__ import annotations

from bot.ops.entry import Entry
from bot.ops.registry import ENTRIES

__all__ = ["ENTRIES", "Entry", "by_name"]


def by_name(names: list[str] | None) -> list[Entry]:
    """The entries named (all when None); unknown names are an error that lists the known ones."""
    if not names:
        return list(ENTRIES)
    known = {e.name: e for e in ENTRIES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown catalog entries {unknown}; known: {', '.join(known)}")
    return [known[n] for n in names]
