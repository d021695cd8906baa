"""The LLM generator: every stage from an OpenAI-compatible model, with the templates in
prompts/, and a kernel verified and repaired before any person looks at it.

Each answer must hold the file in one fenced block; an answer that cannot be used (empty,
cut off, no block, invalid JSON or spec, missing function, a reference or a test that breaks
the integrity rules of runner.integrity) is asked for once more with the reason, then reported. A kernel goes through up to `rounds` rounds: the integrity check
(bot.integrity), then the runner's trusted harness through the injected `verify`; a failure
goes back to the model as the next round's prompt. The first passing version is the answer;
the versions before it are kept as attempts. When no round passes, the last version is the
answer, marked failing, for a person to correct or edit.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from typing import Callable, TypeVar

from bot import integrity
from bot import spec as specmod
from bot.generators import prompts
from bot.generators.interface import VERIFICATION, Artifact, Attempt, GenerationError, GenRequest, result_text
from bot.generators.llm_client import LLMClient, LLMError, Reply, add_usage, code_block
from bot.workflow import stages

# (files by name, backend) -> the runner's result for a "verify" job (docs/CONTRACTS.md)
Verify = Callable[[dict[str, str], str], dict]
REASKS = 1                  # an unusable answer is asked for once more, then reported
T = TypeVar("T")


class Unusable(Exception):
    """An answer that cannot become the artifact; the message tells the model why."""


class _Conversation:
    """One stage's exchange with the model; token usage accumulates into `usage`."""

    def __init__(self, client: LLMClient, usage: dict[str, int]) -> None:
        self.client, self.usage = client, usage
        self.messages = [{"role": "system", "content": prompts.system()}]

    def ask(self, text: str, read: Callable[[Reply], T]) -> T:
        self.messages.append({"role": "user", "content": text})
        for tries in range(REASKS + 1):
            try:
                reply = self.client.complete(self.messages)
            except LLMError as e:
                raise GenerationError(f"{e}. Nothing was changed: regenerate to try again, "
                                      "or edit the stage.") from None
            add_usage(self.usage, reply.usage)
            self.messages.append({"role": "assistant", "content": reply.text})
            try:
                return read(reply)
            except Unusable as e:
                problem = str(e)
            if tries < REASKS:
                self.messages.append({"role": "user", "content": f"That answer cannot be used: {problem}. "
                                      "Answer again with the complete file in one fenced code block."})
        raise GenerationError(f"the model's answer could not be used, {REASKS + 1} times: {problem}. "
                              "Regenerate to ask again, or edit the stage (paste the file as a code block).")

    def keep_last(self) -> None:
        """Drop earlier rounds: the stage prompt and the latest answer are what the next round needs."""
        self.messages = self.messages[:2] + self.messages[-1:]


@dataclass
class Verdict:
    status: str              # pass | fail | error (could not be checked)
    summary: str             # one line
    log: str = ""            # what the model is told on failure


class LLMGenerator:
    name = "llm"

    def __init__(self, client: LLMClient, verify: Verify | None = None, rounds: int = 5) -> None:
        self.client, self.verify, self.rounds = client, verify, max(1, rounds)

    def generate(self, req: GenRequest) -> Artifact:
        usage: dict[str, int] = {}
        conv = _Conversation(self.client, usage)
        try:
            art = getattr(self, f"_{req.stage}")(req, conv)
        except GenerationError as e:
            raise GenerationError(str(e), usage) from None
        art.usage, art.generator = usage, self.name
        return art

    # ---------------------------------------------------------------- stages

    def _spec(self, req: GenRequest, conv: _Conversation) -> Artifact:
        spec = conv.ask(prompts.stage_prompt(req, ""), lambda reply: _read_spec(reply, req))
        summary = specmod.summary(spec)
        summary["expression"] = _formula(spec)
        return Artifact(specmod.dumps(spec), summary, [str(n) for n in spec.get("defaults_used") or []])

    def _reference(self, req: GenRequest, conv: _Conversation) -> Artifact:
        spec = _approved_spec(req)
        code = conv.ask(prompts.stage_prompt(req, spec["name"]),
                        _python(defines=spec["name"], check=lambda c: integrity.check_reference(c, spec["name"]),
                                file="reference.py"))
        return Artifact(code, {"function": f"{spec['name']}(...)", "computes": _formula(spec)})

    def _tests(self, req: GenRequest, conv: _Conversation) -> Artifact:
        spec = _approved_spec(req)
        code = conv.ask(prompts.stage_prompt(req, spec["name"]),
                        _python(tests=True, check=integrity.check_test, file=stages.FILENAMES[req.stage]))
        tests = [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
        return Artifact(code, {"tests": ", ".join(tests)})

    _reference_test = _kernel_test = _tests

    def _benchmark(self, req: GenRequest, conv: _Conversation) -> Artifact:
        _approved_spec(req)
        plan = conv.ask(prompts.stage_prompt(req, ""), _read_plan)
        return Artifact(json.dumps(plan, indent=2) + "\n", {"versions": ", ".join(plan["versions"])})

    def _kernel(self, req: GenRequest, conv: _Conversation) -> Artifact:
        spec = _approved_spec(req)
        name = spec["name"]
        if "reference" not in req.approved:
            raise GenerationError("no approved reference yet; approve stage 2 first")
        files = {"spec.json": req.approved["spec"], "reference.py": req.approved["reference"]}
        text, attempts = prompts.stage_prompt(req, name), []
        for round_ in range(1, self.rounds + 1):
            code = conv.ask(text, _python(defines=name))
            verdict = self._check(code, name, files, req.backend or "cpu")
            last = verdict.status != "fail" or round_ == self.rounds
            _say(req, f"{stages.label('kernel')} · round {round_}/{self.rounds}: {_verdict_line(verdict)}"
                      + ("" if last else "; sending the failure back to the model"))
            if last:
                break
            attempts.append(Attempt(code, f"round {round_}/{self.rounds}: {_verdict_line(verdict)}"))
            conv.keep_last()
            text = prompts.repair_prompt(verdict.log, round_, self.rounds, name)
        summary, notes = _kernel_outcome(verdict, round_, self.rounds)
        return Artifact(code, {"entry": f"{name}(...)", "computes": _formula(spec), **summary}, notes,
                        attempts=attempts)

    def _check(self, code: str, name: str, files: dict[str, str], backend: str) -> Verdict:
        """Integrity first (nothing that breaks it runs), then the runner's trusted harness."""
        violations = integrity.check(code, name)
        if violations:
            more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
            return Verdict("fail", f"integrity check: {violations[0]}{more}", integrity.report(violations))
        if self.verify is None:
            return Verdict("error", "no runner is configured to check it")
        result = self.verify({**files, "kernel.py": code}, backend)
        status, summary = result.get("status"), str(result.get("summary") or result.get("status"))
        if status == "fail":
            log = result_text("Verification", result)
            output = "\n".join(ln for ln in str(result.get("log_tail") or "").splitlines()
                               if not ln.startswith("PROGRESS "))      # the harness's progress lines say nothing
            if output.strip():
                log += "\nharness output (tail):\n" + output[-2000:]
            return Verdict("fail", summary, log)
        return Verdict("pass" if status == "pass" else "error", summary)


# -------------------------------------------------------------------- reading answers

def _block(reply: Reply, langs: tuple[str, ...], bare_json: bool = False) -> str:
    text = reply.text.strip()
    if not text:
        raise Unusable("the answer was empty")
    code = code_block(reply.text, langs)
    if code is None and bare_json and text.startswith("{"):
        code = text
    if code is None and reply.finish_reason == "length":
        raise Unusable("the answer was cut off at the token limit before its code block closed; "
                       "answer with the file only, no explanations")
    if code is None:
        raise Unusable(f"the answer has no ```{langs[0]} code block")
    return code


def _json_object(reply: Reply) -> dict:
    text = _block(reply, ("json",), bare_json=True)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise Unusable(f"the JSON is not valid: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(data, dict):
        raise Unusable("the JSON must be one object")
    return data


def _read_spec(reply: Reply, req: GenRequest) -> dict:
    data = _json_object(reply)
    if "question" in data and "inputs" not in data:
        raise GenerationError(f"the model needs more to write a spec: {data['question']} "
                              "Reply with a correction that answers it.")
    # An LLM's formula is free text, not bot.ir's language: kept apart from `expression`,
    # which would make spec validation parse it (and send later stages to the offline generator).
    if "expression" in data:
        data.setdefault("formula", data.pop("expression"))
    data["request"] = req.request
    if req.backend:
        data["backend"] = req.backend
    try:
        spec = specmod.validate(data)
    except specmod.SpecError as e:
        raise Unusable(f"the spec is not valid: {e}") from None
    except (KeyError, IndexError, TypeError) as e:
        raise Unusable(f"the spec's outputs do not match its inputs ({type(e).__name__}: {e})") from None
    n_cases = len(spec["inputs"][0]["shapes"])
    outputs = spec.get("outputs")
    if not isinstance(outputs, list) or not outputs or any(
            not isinstance(o, dict) or len(o.get("shapes") or []) != n_cases for o in outputs):
        raise Unusable(f"the spec needs 'outputs': [{{\"name\": \"out\", \"dtypes\": [...], \"shapes\": [...]}}] "
                       f"with one shape per case ({n_cases})")
    return spec


def _read_plan(reply: Reply) -> dict:
    plan = _json_object(reply)
    versions = plan.get("versions")
    if not isinstance(versions, list) or not versions or not all(isinstance(v, str) for v in versions):
        raise Unusable('the bench plan needs "versions": a list like ["torch", "torch.compile", "kernel"]')
    if "accept_implausible" in plan:    # a person's override after checking a timing, never the model's
        raise Unusable('leave "accept_implausible" out of the bench plan: only a person who has checked a '
                       'timing above the copy bandwidth may set it, by editing the plan')
    return plan


def _python(defines: str | None = None, tests: bool = False,
            check: Callable[[str], list[integrity.Violation]] | None = None,
            file: str = "") -> Callable[[Reply], str]:
    """A reader of a ```python answer that must parse, define `defines`, or define tests, and
    pass `check` (a reference's or a test's integrity rules: what breaks them is asked for again
    with the violations, then reported)."""
    def read(reply: Reply) -> str:
        code = _block(reply, ("python", "py"))
        try:
            tree = ast.parse(code)
        except SyntaxError as e:
            raise Unusable(f"the code is not valid Python: {e.msg} at line {e.lineno}") from None
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        if defines and defines not in names:
            raise Unusable(f"the file defines no module-level function `{defines}` (the spec's name)")
        if tests and not any(n.startswith("test_") for n in names):
            raise Unusable("the file defines no pytest test function (def test_...)")
        if check is not None and (violations := check(code)):
            raise Unusable(integrity.report(violations, file))
        return code
    return read


# -------------------------------------------------------------------- helpers

def _approved_spec(req: GenRequest) -> dict:
    try:
        return specmod.loads(req.approved["spec"])
    except KeyError:
        raise GenerationError("no approved spec yet; approve stage 1 first") from None
    except specmod.SpecError as e:
        raise GenerationError(f"the approved spec is not usable: {e}") from None


def _formula(spec: dict) -> str:
    return str(spec.get("formula") or spec.get("expression") or spec.get("description", ""))


def _say(req: GenRequest, line: str) -> None:
    if req.progress:
        req.progress(line)


def _verdict_line(v: Verdict) -> str:
    word = {"pass": "passed", "fail": "failed", "error": "could not be checked"}[v.status]
    return f"{word}: {v.summary[:300]}"


def _kernel_outcome(v: Verdict, round_: int, rounds: int) -> tuple[dict[str, str], list[str]]:
    """The card's verification field and notes for the kernel the loop settled on."""
    if v.status == "pass":
        return {VERIFICATION: f"passed in round {round_}/{rounds}: {v.summary}"}, []
    if v.status == "error":
        return ({VERIFICATION: f"not verified: {v.summary}"},
                ["The runner could not check this kernel before review; the kernel test (stage 5) will."])
    return ({VERIFICATION: f"FAIL after {rounds} rounds: {v.summary}"},
            [f"No round passed verification; this is the last attempt. Correct it (say what to fix) or edit it "
             f"(paste a ```python block).\n{v.log[:2000]}"])
