"""The service with the real store and console adapter: persistence, the outbox,
restart safety, redelivered events, job polling and re-queueing."""
from __future__ import annotations

import io
import json
import sqlite3
import time

import pytest
from fakes.queue import MemoryQueue

from bot.chat.console.chat import ConsoleChat
from bot.config import Config
from bot.generators.interface import Artifact, GenerationError, GenRequest
from bot.workflow.events import Approve, Effect, JobFinished
from bot.workflow.model import Approval, Job, Revision
from bot.workflow.service import INBOX_TELL_AFTER, MAX_EFFECT_TRIES, Service, event_item, job_payload
from bot.workflow.store import Store

SPEC = json.dumps({"name": "add", "expression": "x + y",
                   "inputs": [{"name": "x", "dtypes": ["float32"], "shapes": [[4, 8]]},
                              {"name": "y", "dtypes": ["float32"], "shapes": [[4, 8]]}]})


class ScriptedGenerator:
    """Implements the Generator interface with fixed artifacts; can be told to fail."""
    name = "scripted"

    def __init__(self) -> None:
        self.calls: list[GenRequest] = []
        self.fail_with: str | None = None

    def generate(self, req: GenRequest) -> Artifact:
        self.calls.append(req)
        if self.fail_with:
            raise GenerationError(self.fail_with)
        return Artifact(SPEC if req.stage == "spec" else f"# {req.stage}\nx = {len(self.calls)}\n", {"n": "1"})


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def env(tmp_path):
    cfg = Config(home=tmp_path, db_path=tmp_path / "kb.db", queue_url="", backend="cpu", stale_s=30.0)
    out, queue, gen, clock = io.StringIO(), MemoryQueue(), ScriptedGenerator(), Clock()

    def make() -> Service:
        return Service(cfg, Store(cfg.db_path), gen, ConsoleChat(out), lambda backend: queue, clock)
    return make, out, queue, gen, clock


def wait_for(pred, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached")


def latest_rev(svc: Service, sid: str, stage: str) -> int:
    s = svc.store.load(sid)
    return s.latest(stage).rev if s.latest(stage) else 0


def test_session_survives_a_new_service_instance(env):
    make, out, queue, gen, clock = env
    svc = make()
    s = svc.start("add two tensors", "alice")
    wait_for(lambda: latest_rev(svc, s.id, "spec") == 1)
    svc.dispatch(s.id, Approve("spec", 1, "bob"))
    # The revision is stored before its card is posted: wait for the card itself.
    wait_for(lambda: "PyTorch reference · r1" in out.getvalue())
    svc.shutdown()

    again = make().store.load(s.id)          # "restart": a fresh store connection
    assert again.stage == "reference"
    assert again.approval("spec", 1).approver == "bob"
    assert "Spec · r1" in out.getvalue() and "PyTorch reference · r1" in out.getvalue()


def test_effects_left_in_outbox_are_finished_after_restart(env):
    make, out, queue, gen, clock = env
    svc = make()
    s = svc.start("add", "alice")
    wait_for(lambda: latest_rev(svc, s.id, "spec") == 1)
    svc.shutdown()
    # Simulate a crash right after the transition was stored, before its effects ran.
    store = Store(svc.cfg.db_path)
    from bot.workflow import engine
    sess = store.load(s.id)
    effects = engine.handle(sess, Approve("spec", 1, "bob"), clock())
    store.save(sess, effects)
    assert store.pending_effects(s.id)

    svc2 = make()
    svc2.recover()
    wait_for(lambda: latest_rev(svc2, s.id, "reference") == 1)
    wait_for(lambda: not svc2.store.pending_effects(s.id))


def test_redelivered_event_is_handled_once(env):
    make, out, queue, gen, clock = env
    svc = make()
    s = svc.start("add", "alice")
    wait_for(lambda: latest_rev(svc, s.id, "spec") == 1)
    svc.dispatch(s.id, Approve("spec", 1, "bob"), event_key="evt-1")
    wait_for(lambda: latest_rev(svc, s.id, "reference") == 1)
    svc.dispatch(s.id, Approve("reference", 1, "bob"), event_key="evt-1")     # same id: ignored
    assert svc.store.load(s.id).stage == "reference"
    assert make().store.receive("console", "evt-1", {}) is None          # remembered across restarts


def test_an_event_the_store_cannot_apply_yet_is_kept_retried_and_said_once(env, tmp_path):
    make, out, queue, gen, clock = env
    svc = make()
    sid = svc.start("add", "alice").id
    wait_for(lambda: latest_rev(svc, sid, "spec") == 1)
    svc.store.write_wait_s = 0.2                         # the default 30 s, shortened for the test
    inbox = svc.receive("evt-locked", event_item(sid, Approve("spec", 1, "bob")))
    holder = sqlite3.connect(svc.store.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")                    # another process holds the write lock
    try:
        for _ in range(INBOX_TELL_AFTER + 1):           # the recovery passes while it holds it
            svc.recover()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    told = "could not save your last action yet (cannot save: the bot's store is locked by another process)"
    assert out.getvalue().count(told) == 1 and svc.store.inbox_item(inbox)[1] is None
    svc.recover()                                        # the lock is gone: applied, once
    wait_for(lambda: latest_rev(svc, sid, "reference") == 1)
    svc.recover()
    assert [a.stage for a in svc.store.load(sid).approvals] == ["spec"]


def test_an_effect_the_store_cannot_mark_done_stays_pending_and_no_pass_raises(env):
    # The store locked by another process while an effect is carried out: its done mark cannot be
    # written. Never dropped after MAX_EFFECT_TRIES (nothing failed but the store), never raised out of
    # recovery; done once the lock is gone.
    make, out, queue, gen, clock = env
    svc = make()
    sid = svc.start("add", "alice").id
    wait_for(lambda: latest_rev(svc, sid, "spec") == 1 and not svc.store.pending_effects(sid))
    svc.store.write_wait_s = 0.2
    svc.store.save(svc.store.load(sid), [Effect("update_revision", stage="spec", rev=1)])
    holder = sqlite3.connect(svc.store.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        for _ in range(MAX_EFFECT_TRIES + 2):
            svc.recover()
        assert [e.type for _, _, e in svc.store.pending_effects(sid)] == ["update_revision"]
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    svc.recover()
    assert svc.store.pending_effects(sid) == []


def test_generation_error_is_shown_and_session_stays(env):
    make, out, queue, gen, clock = env
    gen.fail_with = "Which operation do you want? e.g. 'relu(x + y) for fp16 4096x4096'"
    svc = make()
    s = svc.start("hello", "alice")
    wait_for(lambda: "Which operation" in out.getvalue())
    assert svc.store.load(s.id).active


def reference_test_job(make) -> tuple[Service, str, str]:
    """A new session walked to its first job: (service, session id, job id)."""
    svc = make()
    sid = svc.start("add", "alice").id
    for stage in ("spec", "reference"):
        wait_for(lambda: latest_rev(svc, sid, stage) == 1)
        svc.dispatch(sid, Approve(stage, 1, "bob"))
    wait_for(lambda: latest_rev(svc, sid, "reference_test") == 1)
    svc.dispatch(sid, Approve("reference_test", 1, "bob"))
    return svc, sid, f"{sid}-reference_test-1"


def test_job_payload_carries_approved_files(env):
    make, out, queue, gen, clock = env
    reference_test_job(make)
    job = queue.jobs[-1]
    assert job["kind"] == "reference_test" and job["attempt"] == 1
    assert set(job["files"]) == {"spec.json", "reference.py", "test_reference.py"}
    assert json.loads(job["files"]["spec.json"])["name"] == "add"


def test_a_status_reply_lists_the_backends_runners_and_their_load(env):
    make, out, queue, gen, clock = env
    svc, sid, job_id = reference_test_job(make)
    s = svc.session(sid)
    assert dict(svc.status_card(s).fields)["runners"].startswith("none alive for cpu")
    now = time.time()
    queue.presences = [{"ts": now, "runner": "h1/gpu0", "host": "h1", "gpu": 0, "device": "NVIDIA H200", "busy": job_id},
                       {"ts": now, "runner": "h1/gpu1", "host": "h1", "gpu": 1, "device": "NVIDIA H200", "busy": None},
                       {"ts": now - 600, "runner": "h2/gpu0", "host": "h2", "gpu": 0, "device": "NVIDIA H200"}]
    text = dict(svc.status_card(s).fields)["runners"]
    assert text.startswith("2 for cpu, 1 busy: ") and f"h1 GPU 0 (NVIDIA H200): running {job_id}" in text
    assert "h1 GPU 1 (NVIDIA H200): idle" in text and "h2" not in text


def test_result_from_queue_advances_the_session(env):
    make, out, queue, gen, clock = env
    svc, sid, job_id = reference_test_job(make)
    queue.results[job_id] = {"status": "pass", "summary": "3/3 cases pass", "host": "h1", "device": "cpu"}
    svc.poll_jobs()
    assert svc.store.load(sid).stage == "kernel"
    assert "Reference test result · PASS" in out.getvalue()
    assert job_id not in queue.results                    # consumed only after it was stored


def test_stale_heartbeat_requeues_with_next_attempt(env):
    make, out, queue, gen, clock = env
    svc, sid, job_id = reference_test_job(make)
    queue.beats[job_id] = {"ts": 1.0, "state": "running", "detail": "pytest", "host": "h1", "attempt": 1}
    svc.poll_jobs()
    assert svc.store.load(sid).job(job_id).status == "running"
    clock.t += 31                                           # heartbeat value never changes again
    svc.poll_jobs()
    assert queue.jobs[-1]["job_id"] == job_id and queue.jobs[-1]["attempt"] == 2
    assert "re-queued" in out.getvalue()
    # the dead attempt's heartbeat is ignored for attempt 2
    svc.poll_jobs()
    assert svc.store.load(sid).job(job_id).status == "queued"


def test_a_runner_that_stops_mid_job_has_it_requeued_at_once(env):
    make, out, queue, gen, clock = env
    svc, sid, job_id = reference_test_job(make)
    queue.beats[job_id] = {"ts": 1.0, "state": "abandoned", "detail": "pytest", "host": "h1", "attempt": 1}
    svc.poll_jobs()                                         # no waiting for the heartbeat to go stale
    assert queue.jobs[-1]["job_id"] == job_id and queue.jobs[-1]["attempt"] == 2
    assert "the runner on h1 stopped mid-job" in out.getvalue() and job_id not in queue.beats


def test_late_duplicate_result_changes_nothing(env):
    make, out, queue, gen, clock = env
    svc, sid, job_id = reference_test_job(make)
    svc.dispatch(sid, JobFinished(job_id, {"status": "pass", "summary": "ok"}))
    svc.dispatch(sid, JobFinished(job_id, {"status": "fail", "summary": "late"}))
    assert svc.store.load(sid).job(job_id).status == "pass"


def test_job_payload_for_benchmark_lists_every_kernel_revision(env):
    make, out, queue, gen, clock = env
    svc = make()
    sess = svc.store.load(svc.start("add", "alice").id)
    for rev, content in ((1, "k1"), (2, "k2"), (3, "k3")):
        sess.revisions.append(Revision("kernel", rev, content, "gen", "generated", 1.0))
    sess.approvals.append(Approval("kernel", 3, sess.latest("kernel").sha, "bob", 2.0))
    sess.revisions.append(Revision("benchmark", 1, "{}", "gen", "generated", 1.0))
    payload = job_payload(sess, Job("j", "benchmark", 1, "benchmark", "cpu", 1.0), 60)
    assert payload["files"]["kernel.py"] == "k3"
    assert payload["kernels"] == {"r1": "k1", "r2": "k2"}


def test_job_taken_but_never_reported_is_requeued(env):
    make, out, queue, gen, clock = env
    svc, sid, job_id = reference_test_job(make)
    svc.poll_jobs()
    assert len(queue.jobs) == 1                      # still pending: nothing to do
    queue.take(job_id)                               # a runner takes it and dies before its first beat
    svc.poll_jobs()
    clock.t += 31
    svc.poll_jobs()
    assert queue.jobs[-1]["job_id"] == job_id and queue.jobs[-1]["attempt"] == 2
    assert "never reported" in out.getvalue()


def test_corrections_accumulate_and_a_refused_or_empty_one_is_forgotten(tmp_path):
    from bot.generators.offline import OfflineGenerator
    from bot.workflow.events import Correct
    cfg = Config(home=tmp_path, db_path=tmp_path / "kb.db", queue_url="", backend="cpu")
    out = io.StringIO()
    svc = Service(cfg, Store(cfg.db_path), OfflineGenerator(), ConsoleChat(out), lambda backend: MemoryQueue())

    def correct(text: str) -> None:
        svc.dispatch(sid, Correct("spec", latest_rev(svc, sid, "spec"), "alice", text))
        wait_for(lambda: not svc.store.load(sid).generating)

    def spec() -> dict:
        return json.loads(svc.store.load(sid).latest("spec").content)

    try:
        sid = svc.start("softmax over the last dim of a 64x128 fp32 tensor", "alice").id
        wait_for(lambda: latest_rev(svc, sid, "spec") == 1)
        correct("please be careful")                            # refused: answered, then forgotten
        assert "is not applied" in out.getvalue() and latest_rev(svc, sid, "spec") == 1
        correct("make it fp16")
        correct("shape 32x100")                                 # the next one keeps fp16
        assert latest_rev(svc, sid, "spec") == 3
        assert spec()["inputs"][0]["dtypes"] == ["float16"] and spec()["inputs"][0]["shapes"] == [[32, 100]]
        correct("fp16")                                         # says what r3 already says
        wait_for(lambda: "changes nothing" in out.getvalue())   # answered once the regeneration ends
        assert latest_rev(svc, sid, "spec") == 3
        assert svc.store.load(sid).feedback["spec"] == ["make it fp16", "shape 32x100"]
    finally:
        svc.shutdown()
