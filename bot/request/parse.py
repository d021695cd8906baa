"""parse_request, the request reader's entry point: the request read, each correction read and
merged on top of it, and the spec built from what they say together; a pasted module stays the
spec's reference while the spec computes what the module computes.
"""
from __future__ import annotations

from typing import Sequence

from bot.generators.interface import GenerationError
from bot.ops.node import IRError
from bot.request.build import build
from bot.request.merge import apply, refuse_partial_operator, says_something
from bot.request.messages import ASK_OP, CORRECTION_HELP, SUPPORTED
from bot.request.pasted_module import Pasted
from bot.request.read import read
from bot.request.state import State


def parse_request(text: str, feedback: Sequence[str] = (), backend: str | None = None) -> tuple[dict, list[str]]:
    """Return (spec, notes). notes says which defaults were assumed, in plain words.
    Raise GenerationError naming what is missing or unsupported, and what would work."""
    try:
        return _parsed(text, feedback, backend)
    except IRError as e:                 # an operator's rule met where no reader step turned it into a refusal
        raise GenerationError(str(e)) from None


def _parsed(text: str, feedback: Sequence[str], backend: str | None) -> tuple[dict, list[str]]:
    if not text or not text.strip():
        raise GenerationError(f"the request is empty. {ASK_OP}. {SUPPORTED}")
    rd = read(text, feedback=False)
    if rd.node is None:
        raise GenerationError(f"I could not find an operation in {text.strip()[:80]!r}. {ASK_OP}. {SUPPORTED}")
    st = State()
    apply(st, rd, feedback=False)
    pasted = st.pasted
    for fb in feedback:
        rd = read(fb, feedback=True, context=st)
        if not says_something(st, rd):
            raise GenerationError(f"I could not apply the correction {fb.strip()[:80]!r}. {CORRECTION_HELP}")
        refuse_partial_operator(st, rd, fb)
        apply(st, rd, feedback=True)
    spec, notes = build(st, text, backend)
    if pasted and pasted.entry:
        kept = st.pasted is pasted               # no correction replaced the pasted operation
        _pasted_reference(spec, notes, pasted, kept and (not feedback or _parsed(text, (), backend)[0]))
    return spec, notes


def _pasted_reference(spec: dict, notes: list[str], pasted: Pasted, alone: dict | bool) -> None:
    """The pasted module is the reference while the spec computes what it computes (alone: the spec
    of the request without corrections, True for the spec itself, False where a correction replaced
    the operation): a correction that changes it (an eps, a dim) leaves a generated reference."""
    alone = spec if alone is True else alone
    if alone and (alone["expression"], alone["params"]) == (spec["expression"], spec["params"]):
        spec["reference_class"] = pasted.entry
        notes.append(f"the reference is the pasted {pasted.entry}, verbatim, built as {pasted.entry}"
                     f"(*get_init_inputs())")
    else:
        notes.append(f"a correction changed what the pasted {pasted.entry} computes, so the reference is "
                     "generated from the spec")
