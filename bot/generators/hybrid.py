"""Which generator answers a request: offline, the LLM, or offline first (hybrid).

A session's choice (GenRequest.generator, else this generator's default) decides:
- "offline" and "llm" use that one for every stage;
- "hybrid" asks the offline generator first and makes no call to the LLM when it answers.
  A spec with an `expression` is one the offline generator lowers; a spec without one came
  from the LLM, so the later stages go to the LLM too. Where the offline generator refuses
  (an operator outside its catalog, a free-text correction it cannot apply), the LLM answers.
"""
from __future__ import annotations

import dataclasses
import json

from bot.generators.interface import Artifact, GenerationError, Generator, GenRequest
from bot import spec as specmod
from bot.request import pasted_class

MODES = ("offline", "llm", "hybrid")


class HybridGenerator:
    def __init__(self, offline: Generator, llm: Generator, default: str = "hybrid") -> None:
        if default not in MODES:
            raise ValueError(f"generator {default!r} is not one of {', '.join(MODES)}")
        self.offline, self.llm, self.name = offline, llm, default

    def generate(self, req: GenRequest) -> Artifact:
        mode = req.generator if req.generator in MODES else self.name
        if mode == "hybrid" and _offline_can(req):
            try:
                return _by(self.offline, req)
            except GenerationError as e:
                if req.progress:
                    req.progress(f"the offline generator cannot do this ({_first_sentence(e)}); asking the LLM")
                req = dataclasses.replace(req, unplaced=e.unplaced)
        if mode != "offline" and req.stage == "reference" and _spec(req).get("reference_class"):
            return _by(self.offline, req)         # the pasted module, verbatim, whoever wrote the spec
        art = _by(self.offline if mode == "offline" else self.llm, req)
        return _with_pasted_class(art, req.request) if req.stage == "spec" and mode != "offline" else art


def _spec(req: GenRequest) -> dict:
    try:
        spec = json.loads(req.approved.get("spec") or "{}")
    except ValueError:
        return {}
    return spec if isinstance(spec, dict) else {}


def _with_pasted_class(art: Artifact, request: str) -> Artifact:
    """An LLM's spec for a pasted module takes the module as its reference, as the offline one does,
    when its inputs are forward's tensors in order."""
    try:
        spec = json.loads(art.content)
        names = [i["name"] for i in spec["inputs"]]
    except (ValueError, KeyError, TypeError):
        return art
    cls = pasted_class(request, names)
    if not cls or spec.get("reference_class") == cls:
        return art
    spec["reference_class"] = cls
    note = f"the reference is the pasted {cls}, verbatim, built as {cls}(*get_init_inputs())"
    return dataclasses.replace(art, content=specmod.dumps(spec), notes=[*art.notes, note])


def _by(gen: Generator, req: GenRequest) -> Artifact:
    art = gen.generate(req)
    art.generator = art.generator or gen.name
    return art


def _offline_can(req: GenRequest) -> bool:
    """At the spec stage always worth a try; later, only for a spec in the offline IR."""
    if req.stage == "spec":
        return True
    try:
        return bool(json.loads(req.approved.get("spec") or "{}").get("expression"))
    except (ValueError, AttributeError):
        return True                          # let the offline generator say what is wrong with it


def _first_sentence(e: Exception) -> str:
    text = str(e)
    return text.split(". ")[0][:200]
