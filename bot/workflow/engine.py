"""The workflow engine: event + session state in, new state + effects out.

Pure: no I/O, no clock, no generator, no chat platform. The service loads the
session, calls :func:`handle`, stores the session and the effects together, then
carries the effects out. Every decision of the six-stage workflow lives here.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass

from bot import integrity
from bot import spec as specmod
from bot.generators.interface import VERIFICATION, failed_verification, result_text
from bot.workflow import stages
from bot.workflow.events import (Approve, Cancel, Correct, Edit, Effect, Event, Generated, GenerationFailed,
                                 JobFinished, JobLost, JobProgress, Regenerate, Start, enqueue, generate, notice,
                                 post_result, post_revision, post_summary, update_revision)
from bot.workflow.model import ACTIVE, CANCELLED, DONE, ENDINGS, Approval, Job, Revision, Session

# Stages the requester may not approve on their own session under four-eyes review.
FOUR_EYES_STAGES = frozenset({"kernel", "benchmark"})


@dataclass(frozen=True)
class Policy:
    approvers: frozenset[str] = frozenset()   # empty: anyone may approve
    four_eyes: bool = False
    max_attempts: int = 3                     # runner deaths tolerated per job


def handle(s: Session, ev: Event, now: float, policy: Policy = Policy()) -> list[Effect]:
    """Apply ev to s (in place) and return the effects to carry out."""
    s.updated_at = now
    if isinstance(ev, Start):
        return [_request_generation(s)]
    if isinstance(ev, (JobProgress, JobFinished, JobLost)):
        return _JOB_HANDLERS[type(ev)](s, ev, now, policy)
    if isinstance(ev, (Generated, GenerationFailed)):
        return _on_generated(s, ev, now) if isinstance(ev, Generated) else _on_generation_failed(s, ev)
    if not s.active:
        return [notice(f"Session {s.id} is {s.status}; start a new one with a new request.", ev.user)]
    if isinstance(ev, Cancel):
        return _cancel(s, ev, now)
    stale = _stale(s, ev)
    if stale:
        return [stale]
    return _ACTION_HANDLERS[type(ev)](s, ev, now, policy)


# ------------------------------------------------------------------ card actions

def _stale(s: Session, ev: Approve | Correct | Edit | Regenerate) -> Effect | None:
    """Actions on an older stage or revision say so instead of acting on the current one."""
    latest = s.latest(s.stage)
    if ev.stage == s.stage and ev.rev == (latest.rev if latest else 0):
        return None
    current = f"{stages.label(s.stage)} r{latest.rev}" if latest else f"{stages.label(s.stage)} (being generated)"
    return notice(f"That card is {stages.label(ev.stage)} r{ev.rev}, which is no longer current; "
                  f"the session is at {current}. Use the latest card.", ev.user)


def _approve(s: Session, ev: Approve, now: float, policy: Policy) -> list[Effect]:
    refusal = _approval_refusal(s, ev, policy)
    if refusal:
        return [notice(refusal, ev.user)]
    rev = s.latest(ev.stage)
    s.approvals.append(Approval(ev.stage, rev.rev, rev.sha, ev.user, now))
    effects = [update_revision(ev.stage, rev.rev)]
    if ev.stage in stages.EXECUTION:
        job = Job(id=f"{s.id}-{ev.stage}-{len(s.jobs) + 1}", stage=ev.stage, rev=rev.rev, kind=ev.stage,
                  backend=s.backend, created_at=now, updated_at=now, max_attempts=policy.max_attempts)
        s.jobs.append(job)
        return effects + [enqueue(job.id)]
    return effects + _advance(s, now)


def _approval_refusal(s: Session, ev: Approve, policy: Policy) -> str | None:
    if not s.latest(ev.stage):
        return f"There is nothing to approve yet at {stages.label(ev.stage)}."
    if s.generating:
        return "A new revision is being generated; approve that one when it is posted."
    if policy.approvers and ev.user not in policy.approvers:
        return "You are not on this team's approver list (KERNELBOT_APPROVERS), so your approval was not recorded."
    if policy.four_eyes and ev.stage in FOUR_EYES_STAGES and ev.user == s.requester:
        return (f"Four-eyes review is on: the requester cannot approve the {stages.TITLES[ev.stage].lower()} "
                "of their own session. Ask a teammate.")
    if s.approval(ev.stage, ev.rev):
        return f"{stages.label(ev.stage)} r{ev.rev} is already approved by {s.approval(ev.stage, ev.rev).approver}."
    if failed_verification(s.latest(ev.stage).summary):
        return (f"{stages.label(ev.stage)} r{ev.rev} failed verification before review, so it is not run as it "
                "stands: correct it (say what to fix), edit it (paste the code), or regenerate it.")
    return None


def _correct(s: Session, ev: Correct, now: float, policy: Policy) -> list[Effect]:
    text = ev.text.strip()
    if not text:
        return [notice("A correction needs some text saying what to change.", ev.user)]
    effects = _void_stage(s, ev.stage, now, f"correction by {ev.user}")
    s.feedback.setdefault(ev.stage, []).append(text)
    s.failure = None
    return effects + [notice(f"{ev.user} asked for changes to {stages.label(ev.stage)}: regenerating."),
                      _request_generation(s, text)]


def _edit(s: Session, ev: Edit, now: float, policy: Policy) -> list[Effect]:
    problem = validate_artifact(ev.stage, ev.content, _spec_name(s))
    if problem:
        latest = s.latest(ev.stage)
        return [notice(f"Edit not applied to {stages.label(ev.stage)}: {problem}. "
                       f"Revision r{latest.rev} stays current.", ev.user)]
    effects = _void_stage(s, ev.stage, now, f"edit by {ev.user}")
    s.generating = False
    s.gen_token += 1                      # a generation still in flight is now stale
    return effects + _add_revision(s, ev.stage, ev.content.rstrip() + "\n", ev.user, "edit", now,
                                   summary=_edit_summary(ev.stage, ev.content), feedback=None)


def _regenerate(s: Session, ev: Regenerate, now: float, policy: Policy) -> list[Effect]:
    effects = _void_stage(s, ev.stage, now, f"regenerate by {ev.user}")
    s.attempt += 1
    return effects + [_request_generation(s)]


def _cancel(s: Session, ev: Cancel, now: float) -> list[Effect]:
    for job in s.jobs:
        if job.open:
            # Who stopped it and where it was, for the report (a cancelled job has no result).
            job.detail = f"by {ev.user}" + (f" during {job.detail}" if job.detail else "")
            job.status, job.updated_at = "cancelled", now
    s.status = ev.ending if ev.ending in ENDINGS else CANCELLED
    s.generating = False
    told = (f"Session {s.id} cancelled by {ev.user}." if s.status == CANCELLED and not ev.why else
            f"Session {s.id} ended as {s.status} by {ev.user}" + (f": {ev.why}" if ev.why else "."))
    return [notice(told), post_summary()]


_ACTION_HANDLERS = {Approve: _approve, Correct: _correct, Edit: _edit, Regenerate: _regenerate}


# ------------------------------------------------------------------ generation

def _request_generation(s: Session, correction: str | None = None) -> Effect:
    s.gen_token += 1
    s.generating = True
    return generate(s.stage, s.gen_token, correction)


def _on_generated(s: Session, ev: Generated, now: float) -> list[Effect]:
    if not _current_generation(s, ev):
        return []
    s.generating = False
    s.refusal = None
    _add_usage(s, ev.usage)
    latest = s.latest(ev.stage)
    if ev.correction and latest and latest.content == ev.content:
        _forget(s, ev.stage, ev.correction)
        return [notice(f"The correction {_quoted(ev.correction)} changes nothing: {stages.label(ev.stage)} "
                       f"r{latest.rev} already says that, so it stays current{_approve_again(s, ev.stage)}.")]
    answered = s.failure or (s.feedback.get(ev.stage) or [None])[-1]
    for a in ev.attempts:                 # kept for inspection, not posted: the conversation had a line each
        _append_revision(s, ev.stage, a["content"], ev.author, "attempt", now, {VERIFICATION: a["verdict"]},
                         answered)
    return _add_revision(s, ev.stage, ev.content, ev.author, "generated", now, ev.summary, answered, ev.notes)


def _add_usage(s: Session, usage: dict[str, int]) -> None:
    for key, value in usage.items():
        s.usage[key] = s.usage.get(key, 0) + value


def _on_generation_failed(s: Session, ev: GenerationFailed) -> list[Effect]:
    if not _current_generation(s, ev):
        return []
    s.generating = False
    s.refusal = f"{stages.label(ev.stage)}: {ev.error}"
    _add_usage(s, ev.usage)
    latest = s.latest(ev.stage)
    if ev.correction:                     # refused: forgotten, so the next correction starts from latest
        _forget(s, ev.stage, ev.correction)
    if latest:
        keep = (f" The correction {_quoted(ev.correction)} is not applied (later ones do not carry it);"
                if ev.correction else "") + f" Revision r{latest.rev} stays current{_approve_again(s, ev.stage)}."
    else:
        keep = " Reply with a correction that fills in what is missing, or cancel."
    return [notice(f"{stages.label(ev.stage)}: {ev.error}{keep}")]


def _forget(s: Session, stage: str, correction: str) -> None:
    """Drop a correction that was refused or changed nothing (its last mention) from the stage's feedback."""
    said = s.feedback.get(stage, [])
    if correction in said:
        del said[len(said) - 1 - said[::-1].index(correction)]


def _approve_again(s: Session, stage: str) -> str:
    """For an execution stage whose approval the correction withdrew: how to run it after all."""
    latest = s.latest(stage)
    if stage in stages.EXECUTION and latest and not s.approval(stage, latest.rev) and not s.open_job(stage):
        return f"; approve r{latest.rev} to run it"
    return ""


def _quoted(text: str) -> str:
    return repr(text.strip()[:80])


def _current_generation(s: Session, ev: Generated | GenerationFailed) -> bool:
    return s.active and s.generating and ev.token == s.gen_token and ev.stage == s.stage


def _add_revision(s: Session, stage: str, content: str, author: str, origin: str, now: float,
                  summary: dict | None = None, feedback: str | None = None,
                  notes: list[str] | None = None) -> list[Effect]:
    posted = [r for r in s.revisions_of(stage) if r.origin != "attempt"]
    rev = _append_revision(s, stage, content, author, origin, now, summary, feedback, notes)
    effects = [post_revision(stage, rev.rev)]
    if posted:
        effects.insert(0, update_revision(stage, posted[-1].rev))   # show it as superseded
    return effects


def _append_revision(s: Session, stage: str, content: str, author: str, origin: str, now: float,
                     summary: dict | None = None, feedback: str | None = None,
                     notes: list[str] | None = None) -> Revision:
    previous = s.latest(stage)
    rev = Revision(stage, (previous.rev + 1) if previous else 1, content, author, origin, now,
                   summary or {}, notes or [], feedback)
    s.revisions.append(rev)
    return rev


def _advance(s: Session, now: float) -> list[Effect]:
    nxt = stages.next_stage(s.stage)
    s.failure = None
    s.attempt = 0
    if nxt is None:
        s.status = DONE
        return [post_summary()]
    s.stage = nxt
    return [_request_generation(s)]


def _void_stage(s: Session, stage: str, now: float, why: str) -> list[Effect]:
    """A new revision of a stage voids its approvals and abandons its open job."""
    effects = []
    for a in s.approvals:
        if a.stage == stage and a.valid:
            a.voided_at, a.voided_why = now, why
            effects.append(update_revision(stage, a.rev))
    for job in s.jobs:
        if job.stage == stage and job.open:
            job.status, job.updated_at = "cancelled", now
    return effects


# ------------------------------------------------------------------ runner results

def _job_progress(s: Session, ev: JobProgress, now: float, policy: Policy) -> list[Effect]:
    job = s.job(ev.job_id)
    if not job or not job.open:
        return []
    changed = (ev.state, ev.detail, ev.host) != (job.status, job.detail, job.host)
    if ev.hb_value is not None and ev.hb_value != job.hb_value:
        job.hb_value, job.hb_seen_at = ev.hb_value, now
    job.status, job.detail, job.host, job.device, job.updated_at = ev.state, ev.detail, ev.host, ev.device, now
    return [update_revision(job.stage, job.rev)] if changed else []


def _job_finished(s: Session, ev: JobFinished, now: float, policy: Policy) -> list[Effect]:
    job = s.job(ev.job_id)
    if not job or not job.open:
        return []                                   # a late duplicate, or an abandoned job
    job.result, job.updated_at = ev.result, now
    job.status = ev.result.get("status") if ev.result.get("status") in ("pass", "fail") else "error"
    job.host = ev.result.get("host", job.host)
    job.device = ev.result.get("device", job.device)
    effects = [update_revision(job.stage, job.rev), post_result(job.id)]
    if s.status != ACTIVE or s.stage != job.stage:
        return effects
    if job.status == "pass":
        return effects + _advance(s, now)
    return effects + _on_job_failure(s, job, now)


def _on_job_failure(s: Session, job: Job, now: float) -> list[Effect]:
    effects = _void_stage(s, job.stage, now, f"job {job.id} {job.status}")
    back = stages.ON_FAILURE.get(job.stage)
    if back and job.status == "fail":
        s.stage, s.attempt = back, 0
        s.failure = failure_text(job)
        return effects + [notice(f"{stages.TITLES[job.stage]} failed: back to {stages.label(back)} "
                                 "with the failure attached."), _request_generation(s)]
    return effects + [notice(f"{stages.TITLES[job.stage]} did not pass ({job.status}). Approve again to re-run, "
                             "or correct, edit or regenerate the stage.")]


def _job_lost(s: Session, ev: JobLost, now: float, policy: Policy) -> list[Effect]:
    job = s.job(ev.job_id)
    if not job or not job.open:
        return []
    if job.attempt < job.max_attempts:
        job.attempt += 1
        job.status, job.detail, job.hb_value, job.hb_seen_at, job.updated_at = "queued", "", None, None, now
        return [notice(f"Runner lost ({ev.why}); re-queued {stages.TITLES[job.stage].lower()} job "
                       f"(attempt {job.attempt}/{job.max_attempts})."), enqueue(job.id),
                update_revision(job.stage, job.rev)]
    result = {"status": "error", "summary": f"runner lost {job.attempt} times ({ev.why}); giving up",
              "job_id": job.id, "kind": job.kind}
    return _job_finished(s, JobFinished(job.id, result), now, policy)


_JOB_HANDLERS = {JobProgress: _job_progress, JobFinished: _job_finished, JobLost: _job_lost}


def failure_text(job: Job) -> str:
    """What a failing test tells the next generation: summary, failing cases, pytest log."""
    return result_text(stages.TITLES[job.stage], {"summary": job.status, **(job.result or {})})


# ------------------------------------------------------------------ edits

def validate_artifact(stage: str, content: str, entry: str | None = None) -> str | None:
    """Why an edited artifact cannot be used, or None if it can. entry: the spec's name, which
    a kernel's launcher and a reference's function must have (None: the kernel's last plain
    function; a reference's name unchecked). Kernels, references and tests are held to the
    integrity rules (runner.integrity) that the runner applies before it imports them."""
    if not content.strip():
        return "the edit is empty"
    if stage == "spec":
        try:
            specmod.loads(content)
        except specmod.SpecError as e:
            return str(e)
        return None
    if stage == "benchmark":
        try:
            plan = json.loads(content)
        except json.JSONDecodeError as e:
            return f"the bench plan is not valid JSON: {e.msg} at line {e.lineno}"
        return None if isinstance(plan, dict) else "the bench plan must be a JSON object"
    try:
        ast.parse(content)
    except SyntaxError as e:
        return f"not valid Python: {e.msg} at line {e.lineno}"
    if violations := integrity.check_stage(stage, content, entry):
        return integrity.report(violations, stages.FILENAMES[stage])
    return None


def _spec_name(s: Session) -> str | None:
    rev = s.approved("spec")
    try:
        return json.loads(rev.content).get("name") if rev else None
    except (ValueError, AttributeError):
        return None


def _edit_summary(stage: str, content: str) -> dict[str, str]:
    if stage == "spec":
        return specmod.summary(specmod.loads(content))
    return {"lines": str(content.count("\n") + 1)}
