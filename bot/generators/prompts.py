"""Prompts for the LLM generator: the templates in prompts/ filled in for one stage.

Every stage prompt carries the request, the approved artifacts of the earlier stages, the
reviewers' corrections, the previous revision, the failure that sent the session back (if
any) and, as examples, the offline catalog's artifacts closest to the request. Templates use
string.Template placeholders ($name), so the braces of code and JSON need no escaping.
"""
from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from string import Template

from bot.generators import examples
from bot.generators.interface import GenRequest
from bot.workflow import stages

# The top-level prompts package: the repository's prompts/, or the copy an installed kernelbot carries.
_PROMPTS = importlib.util.find_spec("prompts")
if _PROMPTS is None or _PROMPTS.origin is None:
    raise ImportError("kernelbot's prompts package is not importable: install kernelbot (pip install -e .) or run "
                      "from the repository root")
PROMPTS_DIR = Path(_PROMPTS.origin).parent
EXAMPLES_PER_STAGE = {"reference": 1, "reference_test": 1, "kernel": 2, "kernel_test": 1, "benchmark": 1}


@functools.lru_cache(maxsize=None)
def _template(name: str) -> Template:
    return Template((PROMPTS_DIR / f"{name}.md").read_text())


def render(template: str, **values: object) -> str:
    """prompts/TEMPLATE.md with its $placeholders filled; a missing value is a KeyError naming it."""
    return _template(template).substitute({k: str(v) for k, v in values.items()})


def system() -> str:
    return render("system")


def stage_prompt(req: GenRequest, name: str) -> str:
    """The user message asking for req.stage; name: the operator (entry function) name, '' before a spec."""
    return render(req.stage, request=req.request, name=name, approved=_approved(req.approved),
                  feedback=_numbered(req.feedback), previous=_previous(req), failure=req.failure or "(none)",
                  examples=_examples(req), unplaced=_unplaced(req.unplaced))


def repair_prompt(failure: str, round_: int, rounds: int, name: str) -> str:
    return render("repair", failure=failure.strip(), round=round_, rounds=rounds, name=name)


def fenced(stage: str, text: str, title: str | None = None) -> str:
    """text as a fenced block under a heading naming its file."""
    lang = "json" if stage in stages.JSON_STAGES else "python"
    return f"### {title or stages.FILENAMES[stage]}\n```{lang}\n{text.rstrip()}\n```"


def _approved(approved: dict[str, str]) -> str:
    blocks = [fenced(stage, approved[stage]) for stage in stages.STAGES if stage in approved]
    return "\n\n".join(blocks) or "(none yet)"


def _unplaced(words: list[str]) -> str:
    if not words:
        return ""
    quoted = ", ".join(f"'{w}'" for w in words)
    return (f"\nThe offline generator could not place these words of the request: {quoted}. Each of them names or "
            "qualifies what is computed: the spec must account for every one of them (in the formula, the shapes or "
            "the params), or ask with a question.\n")


def _numbered(items: list[str]) -> str:
    return "\n".join(f"{i}. {text}" for i, text in enumerate(items, 1)) or "(none)"


def _previous(req: GenRequest) -> str:
    return fenced(req.stage, req.previous) if req.previous else "(none: this is the first revision)"


def _examples(req: GenRequest) -> str:
    k = EXAMPLES_PER_STAGE.get(req.stage, 0)
    if not k:
        return "(none)"
    picked = examples.closest(" ".join([req.request, *req.feedback, _spec_words(req.approved)]), k)
    return "\n\n".join(fenced(req.stage, examples.artifact(e, req.stage), f"example for `{e.request}`")
                       for e in picked)


def _spec_words(approved: dict[str, str]) -> str:
    try:
        spec = json.loads(approved.get("spec") or "{}")
    except ValueError:
        return ""
    return " ".join(str(spec.get(k, "")) for k in ("name", "description", "formula")) if isinstance(spec, dict) else ""
