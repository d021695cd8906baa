"""Every engine transition, on a plain Session: no store, no chat, no runner."""
from __future__ import annotations

import json

import pytest

from bot.workflow import engine, stages
from bot.workflow.engine import Policy
from bot.workflow.events import (Approve, Cancel, Correct, Edit, Generated, GenerationFailed, JobFinished, JobLost,
                                 JobProgress, Regenerate, Start)
from bot.workflow.model import Session

SPEC = json.dumps({"name": "add", "expression": "x + y",
                   "inputs": [{"name": "x", "dtypes": ["float32"], "shapes": [[4, 8]]},
                              {"name": "y", "dtypes": ["float32"], "shapes": [[4, 8]]}]})


def new_session() -> Session:
    s = Session(id="s1", request="add", requester="alice", platform="test", channel="c", thread="t",
                backend="cpu", generator="offline", created_at=0.0)
    engine.handle(s, Start("add", "alice"), 1.0)
    return s


def types(effects) -> list[str]:
    return [e.type for e in effects]


def produce(s: Session, content: str = "x = 1\n", now: float = 2.0):
    """The generator answers the pending generation of the current stage."""
    return engine.handle(s, Generated(s.stage, s.gen_token, SPEC if s.stage == "spec" else content,
                                      "generator:test"), now)


def approve(s: Session, user: str = "bob", now: float = 3.0, policy: Policy = Policy()):
    return engine.handle(s, Approve(s.stage, s.latest(s.stage).rev, user), now, policy)


def finish(s: Session, status: str, now: float = 5.0, **extra):
    job = s.open_job(s.stage)
    return engine.handle(s, JobFinished(job.id, {"status": status, "summary": f"it {status}ed", **extra}), now)


def walk_to(s: Session, stage: str) -> None:
    """Approve and pass stages until the session sits at `stage` with a revision posted."""
    while True:
        produce(s)
        if s.stage == stage:
            return
        approve(s)
        if s.stage in stages.EXECUTION and s.open_job(s.stage):
            finish(s, "pass")


def test_start_asks_for_the_spec():
    s = Session(id="s1", request="add", requester="alice", platform="t", channel="c", thread="t",
                backend="cpu", generator="offline", created_at=0.0)
    effects = engine.handle(s, Start("add", "alice"), 1.0)
    assert types(effects) == ["generate"] and effects[0].stage == "spec"
    assert s.generating and s.stage == "spec"


def test_generated_revision_is_posted():
    s = new_session()
    effects = produce(s)
    assert types(effects) == ["post_revision"]
    assert s.latest("spec").rev == 1 and not s.generating


def test_approve_records_who_when_and_sha_then_generates_next_stage():
    s = new_session()
    produce(s)
    effects = approve(s, "bob", now=7.0)
    a = s.approval("spec", 1)
    assert (a.approver, a.at, a.sha) == ("bob", 7.0, s.latest("spec").sha)
    assert types(effects) == ["update_revision", "generate"] and s.stage == "reference"


def test_full_happy_path_ends_done_with_summary():
    s = new_session()
    for stage in stages.STAGES:
        assert s.stage == stage
        produce(s)
        effects = approve(s)
        if stage in stages.EXECUTION:
            assert "enqueue" in types(effects)
            effects = finish(s, "pass")
            assert "post_result" in types(effects)
    assert s.status == "done" and effects[-1].type == "post_summary"
    assert all(s.approved(st) for st in stages.STAGES)


def test_correction_voids_nothing_new_and_regenerates_with_feedback():
    s = new_session()
    produce(s)
    effects = engine.handle(s, Correct("spec", 1, "carol", "use bf16"), 3.0)
    assert "generate" in types(effects) and s.feedback["spec"] == ["use bf16"]
    produce(s)
    assert s.latest("spec").rev == 2 and s.latest("spec").feedback == "use bf16"


def test_edit_becomes_next_revision_authored_by_the_person_and_voids_approval():
    s = new_session()
    walk_to(s, "reference_test")
    approve(s)                                   # job queued for r1
    job = s.open_job("reference_test")
    effects = engine.handle(s, Edit("reference_test", 1, "dave", "def test_x():\n    assert True\n"), 4.0)
    r2 = s.latest("reference_test")
    assert (r2.rev, r2.author, r2.origin) == (2, "dave", "edit")
    assert s.approval("reference_test", 1) is None          # voided
    assert job.status == "cancelled" and "post_revision" in types(effects)


def test_invalid_edit_keeps_previous_revision():
    s = new_session()
    walk_to(s, "reference")
    effects = engine.handle(s, Edit("reference", 1, "dave", "def broken(:\n"), 4.0)
    assert types(effects) == ["notice"] and "not valid Python" in effects[0].text
    assert s.latest("reference").rev == 1


def test_invalid_spec_edit_names_the_problem():
    s = new_session()
    produce(s)
    bad = json.loads(SPEC)
    bad["inputs"][0]["dtypes"] = ["int8"]
    effects = engine.handle(s, Edit("spec", 1, "dave", json.dumps(bad)), 4.0)
    assert "unsupported dtype 'int8'" in effects[0].text and s.latest("spec").rev == 1


def test_regenerate_bumps_attempt_and_drops_stale_generation():
    s = new_session()
    produce(s)
    old_token = s.gen_token
    engine.handle(s, Regenerate("spec", 1, "bob"), 3.0)
    assert s.attempt == 1 and s.gen_token == old_token + 1
    assert engine.handle(s, Generated("spec", old_token, SPEC, "gen"), 4.0) == []   # stale
    assert produce(s)[-1].type == "post_revision"


def test_action_on_older_revision_says_so():
    s = new_session()
    produce(s)
    engine.handle(s, Correct("spec", 1, "bob", "fp16"), 3.0)
    produce(s)
    effects = engine.handle(s, Approve("spec", 1, "bob"), 4.0)
    assert types(effects) == ["notice"] and "no longer current" in effects[0].text
    assert effects[0].user == "bob" and s.approval("spec", 1) is None


def test_approve_while_regenerating_is_refused():
    s = new_session()
    produce(s)
    engine.handle(s, Correct("spec", 1, "bob", "fp16"), 3.0)
    effects = engine.handle(s, Approve("spec", 1, "bob"), 4.0)
    assert "being generated" in effects[0].text


def test_failing_kernel_test_returns_to_kernel_with_failure():
    s = new_session()
    walk_to(s, "kernel_test")
    approve(s)
    effects = finish(s, "fail", correctness=[{"case": "4x8", "dtype": "float32", "ok": False,
                                              "max_abs_err": 1.0, "max_rel_err": 0.5, "reason": "mismatch"}])
    assert s.stage == "kernel" and s.generating and "generate" in types(effects)
    assert "mismatch" in s.failure and "4x8" in s.failure
    produce(s, "def add(x, y): ...\n")
    assert s.latest("kernel").feedback.startswith("Kernel test failed")


def test_failed_benchmark_stays_and_can_be_approved_again():
    s = new_session()
    walk_to(s, "benchmark")
    approve(s)
    finish(s, "error")
    assert s.stage == "benchmark" and s.approval("benchmark", 1) is None
    effects = approve(s)
    assert "enqueue" in types(effects)


def test_job_progress_updates_card_only_on_change():
    s = new_session()
    walk_to(s, "reference_test")
    approve(s)
    job = s.open_job("reference_test")
    ev = JobProgress(job.id, "running", "correctness 1/3", "gpu-1", "H200", 100.0)
    assert types(engine.handle(s, ev, 6.0)) == ["update_revision"]
    assert engine.handle(s, JobProgress(job.id, "running", "correctness 1/3", "gpu-1", "H200", 101.0), 7.0) == []
    assert job.hb_seen_at == 7.0 and job.hb_value == 101.0


def test_lost_job_is_requeued_then_fails_after_max_attempts():
    s = new_session()
    walk_to(s, "reference_test")
    approve(s, policy=Policy(max_attempts=2))
    job = s.open_job("reference_test")
    effects = engine.handle(s, JobLost(job.id, "no heartbeat"), 6.0)
    assert "enqueue" in types(effects) and job.attempt == 2 and job.status == "queued"
    effects = engine.handle(s, JobLost(job.id, "no heartbeat"), 7.0)
    assert job.status == "error" and "post_result" in types(effects)
    assert "runner lost 2 times" in job.result["summary"]


def test_duplicate_result_is_ignored():
    s = new_session()
    walk_to(s, "reference_test")
    approve(s)
    job = s.open_job("reference_test")
    finish(s, "pass")
    assert engine.handle(s, JobFinished(job.id, {"status": "fail"}), 9.0) == []
    assert job.status == "pass"


def test_cancel_stops_everything():
    s = new_session()
    walk_to(s, "kernel_test")
    approve(s)
    s.jobs[-1].detail = "pytest 3/9"
    effects = engine.handle(s, Cancel("alice"), 5.0)
    assert s.status == "cancelled" and s.jobs[-1].status == "cancelled"
    assert s.jobs[-1].detail == "by alice during pytest 3/9"      # what report.json says of it
    assert types(effects) == ["notice", "post_summary"]
    later = engine.handle(s, Approve("kernel_test", 1, "bob"), 6.0)
    assert "cancelled" in later[0].text


def test_generation_failure_keeps_previous_revision():
    s = new_session()
    produce(s)
    engine.handle(s, Correct("spec", 1, "bob", "make it a matmul"), 3.0)
    effects = engine.handle(s, GenerationFailed("spec", s.gen_token, "matmul is not supported"), 4.0)
    assert "matmul is not supported" in effects[0].text and "r1 stays current" in effects[0].text
    assert not s.generating and s.latest("spec").rev == 1


def test_first_spec_failure_asks_for_more_and_a_correction_retries():
    s = new_session()
    effects = engine.handle(s, GenerationFailed("spec", s.gen_token, "Which operation do you want?"), 2.0)
    assert "Which operation" in effects[0].text and s.refusal == "1/6 Spec: Which operation do you want?"
    effects = engine.handle(s, Correct("spec", 0, "alice", "relu(x) for fp16"), 3.0)
    assert "generate" in types(effects)
    produce(s)
    assert s.refusal is None                  # the report of a session that went on says no refusal


@pytest.mark.parametrize("policy,user,allowed", [
    (Policy(approvers=frozenset({"bob"})), "mallory", False),
    (Policy(approvers=frozenset({"bob"})), "bob", True),
    (Policy(four_eyes=True), "alice", False),          # alice requested the session
    (Policy(four_eyes=True), "bob", True),
])
def test_approval_policy_on_kernel_stage(policy, user, allowed):
    s = new_session()
    walk_to(s, "kernel")
    effects = approve(s, user, policy=policy)
    assert (s.approval("kernel", 1) is not None) == allowed
    if not allowed:
        assert effects[0].type == "notice" and effects[0].user == user


def test_four_eyes_lets_requester_approve_spec():
    s = new_session()
    produce(s)
    approve(s, "alice", policy=Policy(four_eyes=True))
    assert s.approval("spec", 1).approver == "alice"


def test_sha_of_approved_artifact_matches_content():
    s = new_session()
    produce(s)
    approve(s)
    import hashlib
    assert s.approval("spec", 1).sha == hashlib.sha256(SPEC.encode()).hexdigest()
