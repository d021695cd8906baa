"""The LLM generator against a loopback OpenAI-compatible endpoint (the real openai client on
the wire): stages, the verify-and-repair loop with the runner's real harness, the integrity
check, faults of the service, hybrid routing, and the session it all lands in."""
from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from fakes.openai_server import code, error, fake_openai, garbage, reply  # noqa: F401
from fakes.queue import MemoryQueue
from test_service import wait_for

from bot import cli
from bot.chat.console.chat import ConsoleChat
from bot.config import Config
from bot.generators.hybrid import HybridGenerator
from bot.generators.interface import VERIFICATION, GenerationError, GenRequest, failed_verification
from bot.generators.llm import LLMGenerator
from bot.generators.llm_client import LLMClient, LLMSettings
from bot.generators.offline import OfflineGenerator
from bot.generators.verifier import QueueVerifier
from bot.workflow import cards, engine
from bot.workflow.events import Approve, Generated, Start
from bot.workflow.model import Session
from bot.workflow.service import Service, kernel_versions
from bot.workflow.store import Store
from runner.worker import execute_job

HS = Path(__file__).parent / "fixtures" / "llm" / "hardswish"
REQUEST = "mobilenet-style hardswish of x for fp32 64x48 and 33x17"


def text(name: str) -> str:
    """A fixture file; kernel_wrong.py is kernel.py dividing by 3 where hardswish divides by 6."""
    if name == "kernel_wrong.py":
        return text("kernel.py").replace("/ 6.0", "/ 3.0")
    return (HS / name).read_text()


def approved(*stages: str) -> dict[str, str]:
    files = {"spec": "spec.json", "reference": "reference.py", "kernel": "kernel.py"}
    return {st: text(files[st]) for st in stages}


def runner_verify(files: dict[str, str], backend: str) -> dict:
    """The runner's real trusted harness, in its sandbox, without the queue."""
    job = {"job_id": "verify-test", "kind": "verify", "backend": backend, "files": files, "timeout_s": 120}
    return execute_job(job, lambda _: None, backend="cpu")


class ScriptedVerify:
    """Verdicts in order; records the kernels it was asked to check."""

    def __init__(self, *statuses: str) -> None:
        self.statuses, self.kernels = list(statuses), []

    def __call__(self, files: dict[str, str], backend: str) -> dict:
        self.kernels.append(files["kernel.py"])
        status = self.statuses.pop(0)
        return {"status": status, "summary": f"1/1 cases {status}", "correctness": [], "log_tail": ""}


def llm(server, verify=None, rounds: int = 3, retries: int = 2) -> LLMGenerator:
    settings = LLMSettings(base_url=server.url, model="fake-model", timeout_s=10.0, retries=retries)
    return LLMGenerator(LLMClient(settings, sleep=lambda _: None), verify, rounds)


def kernel_request(lines: list[str] | None = None, **extra) -> GenRequest:
    progress = lines.append if lines is not None else None
    return GenRequest("kernel", REQUEST, approved=approved("spec", "reference"), backend="cpu",
                      progress=progress, **extra)


# ------------------------------------------------------------------ the verify-and-repair loop

def test_correct_kernel_passes_the_runner_in_round_one(fake_openai):
    fake_openai.script(code("python", text("kernel.py")))
    lines: list[str] = []
    art = llm(fake_openai, runner_verify).generate(kernel_request(lines))
    assert art.content == text("kernel.py") and art.attempts == []
    assert art.summary[VERIFICATION].startswith("passed in round 1/3: 3/3 cases pass")
    assert len(lines) == 1 and "round 1/3: passed" in lines[0]
    assert art.usage == {"requests": 1, "prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}
    assert art.generator == "llm"


def test_wrong_kernel_is_repaired_with_the_runners_failure(fake_openai):
    fake_openai.script(code("python", text("kernel_wrong.py")), code("python", text("kernel.py")))
    lines: list[str] = []
    art = llm(fake_openai, runner_verify).generate(kernel_request(lines))
    assert art.content == text("kernel.py")
    repair = fake_openai.requests[1]["messages"][-1]["content"]
    assert "Round 1 of 3" in repair and "3/3 cases fail" in repair and "outside tolerance" in repair
    assert [a.content for a in art.attempts] == [text("kernel_wrong.py")]
    assert art.attempts[0].verdict.startswith("round 1/3: failed: 3/3 cases fail")
    assert len(lines) == 2 and "sending the failure back to the model" in lines[0] and "passed" in lines[1]
    assert art.usage["requests"] == 2


def test_kernel_computing_with_torch_add_is_refused_before_it_runs(fake_openai):
    fake_openai.script(code("python", text("kernel_torch_add.py")), code("python", text("kernel.py")))
    verify = ScriptedVerify("pass")
    art = llm(fake_openai, verify).generate(kernel_request())
    assert verify.kernels == [text("kernel.py")]                 # the cheating kernel never reached a runner
    repair = fake_openai.requests[1]["messages"][-1]["content"]
    assert "integrity rules" in repair and "torch.add" in repair
    assert art.attempts[0].verdict.startswith("round 1/3: failed: integrity check: line 15: uses torch.add")


def test_no_passing_round_posts_the_last_attempt_as_failing(fake_openai):
    fake_openai.script(code("python", text("kernel_wrong.py")), code("python", text("kernel_wrong.py") + "\n"))
    art = llm(fake_openai, ScriptedVerify("fail", "fail"), rounds=2).generate(kernel_request())
    assert failed_verification(art.summary) and art.summary[VERIFICATION].startswith("FAIL after 2 rounds")
    assert "Correct it" in art.notes[0] and "1/1 cases fail" in art.notes[0]
    assert len(art.attempts) == 1 and len(fake_openai.requests) == 2


def test_a_runner_that_cannot_check_ends_the_loop_unverified(fake_openai):
    fake_openai.script(code("python", text("kernel.py")))
    art = llm(fake_openai, ScriptedVerify("error")).generate(kernel_request())
    assert art.summary[VERIFICATION].startswith("not verified") and not failed_verification(art.summary)
    assert len(fake_openai.requests) == 1


class RunnerQueue(MemoryQueue):
    """A queue whose runner answers every job at once with a pass, or that no runner serves."""

    def __init__(self, alive: bool) -> None:
        super().__init__()
        self.alive = alive

    def runner_alive(self, max_age_s: float) -> dict | None:
        return {"ts": time.time()} if self.alive else None

    def enqueue(self, job: dict) -> None:
        super().enqueue(job)
        self.beats[job["job_id"]] = {"state": "running"}
        self.results[job["job_id"]] = {"status": "pass", "summary": "3/3 cases pass"}


def test_queue_verifier_runs_a_verify_job_on_the_sessions_backend():
    queue = RunnerQueue(alive=True)
    backends: list[str] = []
    result = QueueVerifier(lambda b: backends.append(b) or queue, timeout_s=5, poll_s=0.01)({"kernel.py": "k"},
                                                                                             "cuda-h200")
    assert result["summary"] == "3/3 cases pass" and backends == ["cuda-h200"]
    job = queue.jobs[0]
    assert job["kind"] == "verify" and job["job_id"].startswith("verify-") and job["files"] == {"kernel.py": "k"}
    assert not queue.beats and not queue.results                       # consumed and cleaned up
    idle = QueueVerifier(lambda b: RunnerQueue(alive=False), timeout_s=5)({}, "cpu")
    assert idle["status"] == "error" and "no cpu runner is alive" in idle["summary"]


# ------------------------------------------------------------------ prompts

def test_kernel_prompt_carries_approved_stages_corrections_previous_and_catalog_examples(fake_openai):
    fake_openai.script(code("python", text("kernel.py")))
    req = kernel_request(feedback=["use BLOCK 512"], previous=text("kernel_wrong.py"), failure="Kernel test failed: x")
    llm(fake_openai, ScriptedVerify("pass")).generate(req)
    system, user = fake_openai.requests[0]["messages"]
    assert system["role"] == "system" and "six stages" in system["content"]
    prompt = user["content"]
    assert "### spec.json" in prompt and "### reference.py" in prompt and "def hardswish(x):" in prompt
    assert "1. use BLOCK 512" in prompt and "/ 3.0" in prompt and "Kernel test failed: x" in prompt
    assert "example for `clamp(x, -1.0, 1.0)" in prompt and prompt.count("example for `") == 2
    assert "@triton.jit" in prompt.split("example for", 1)[1]


# ------------------------------------------------------------------ answers that cannot be used

def test_spec_invalid_json_is_asked_for_once_more(fake_openai):
    fake_openai.script(code("json", '{"name": "hardswish", "inputs": [}'), code("json", text("spec.json")))
    art = llm(fake_openai).generate(GenRequest("spec", REQUEST, backend="cpu"))
    spec = json.loads(art.content)
    assert spec["name"] == "hardswish" and spec["backend"] == "cpu" and "expression" not in spec
    assert spec["formula"] == "x * torch.clamp(x + 3, 0, 6) / 6" and spec["request"] == REQUEST
    assert art.summary["expression"] == spec["formula"]
    assert "the JSON is not valid" in fake_openai.requests[1]["messages"][-1]["content"]


def test_spec_invalid_twice_is_reported_clearly(fake_openai):
    bad = json.loads(text("spec.json"))
    bad["inputs"][0]["dtypes"] = ["float64"]
    fake_openai.script(code("json", json.dumps(bad)), code("json", json.dumps(bad)))
    with pytest.raises(GenerationError) as e:
        llm(fake_openai).generate(GenRequest("spec", REQUEST))
    assert "could not be used, 2 times" in str(e.value) and "unsupported dtype 'float64'" in str(e.value)
    assert e.value.usage["requests"] == 2                        # spent tokens still count


def test_spec_question_comes_back_as_the_message(fake_openai):
    fake_openai.script(code("json", '{"question": "Which tensor shapes do you need?"}'))
    with pytest.raises(GenerationError, match="Which tensor shapes do you need"):
        llm(fake_openai).generate(GenRequest("spec", "make it fast"))


def test_answer_without_code_block_then_cut_off_answer_is_reported(fake_openai):
    fake_openai.script(reply("I would write a Triton kernel that loads x and applies hardswish."),
                       reply("```python\nimport torch\n", finish_reason="length"))
    with pytest.raises(GenerationError) as e:
        llm(fake_openai, ScriptedVerify()).generate(kernel_request())
    assert "cut off at the token limit" in str(e.value)
    assert "no ```python code block" in fake_openai.requests[1]["messages"][-1]["content"]


def test_garbage_from_the_endpoint_is_retried_then_reported(fake_openai):
    fake_openai.script(garbage(), garbage(), garbage())
    with pytest.raises(GenerationError) as e:
        llm(fake_openai, retries=2).generate(GenRequest("reference", REQUEST, approved=approved("spec")))
    assert "failed 3 times" in str(e.value) and "not a chat completion" in str(e.value)
    assert "regenerate to try again" in str(e.value)


def test_429_then_success(fake_openai):
    fake_openai.script(error(429, "slow down", **{"Retry-After": "0"}), code("python", text("reference.py")))
    art = llm(fake_openai).generate(GenRequest("reference", REQUEST, approved=approved("spec")))
    assert art.content == text("reference.py") and art.summary["function"] == "hardswish(...)"
    assert len(fake_openai.requests) == 2


def test_tests_and_bench_plan_stages(fake_openai):
    fake_openai.script(code("python", text("llm_test_kernel.py")), code("json", text("bench_plan.json")))
    gen = llm(fake_openai)
    art = gen.generate(GenRequest("kernel_test", REQUEST, approved=approved("spec", "reference", "kernel")))
    assert art.summary == {"tests": "test_kernel_matches_reference"}
    plan = gen.generate(GenRequest("benchmark", REQUEST, approved=approved("spec", "reference", "kernel")))
    assert json.loads(plan.content)["versions"] == ["torch", "torch.compile", "kernel"]


# ------------------------------------------------------------------ hybrid

def hybrid(server, default: str = "hybrid") -> HybridGenerator:
    return HybridGenerator(OfflineGenerator(), llm(server, ScriptedVerify("pass")), default)


def test_hybrid_keeps_what_the_offline_generator_understands_off_the_endpoint(fake_openai):
    gen = hybrid(fake_openai)
    spec = gen.generate(GenRequest("spec", "relu(x + y) for fp32 64x48"))
    kernel = gen.generate(GenRequest("kernel", "relu(x + y)", approved={"spec": spec.content}))
    assert (spec.generator, kernel.generator) == ("offline", "offline")
    assert fake_openai.requests == []


def test_hybrid_sends_an_operator_outside_the_catalog_to_the_llm_for_the_whole_session(fake_openai):
    fake_openai.script(code("json", text("spec.json")), code("python", text("reference.py")))
    lines: list[str] = []
    gen = hybrid(fake_openai)
    spec = gen.generate(GenRequest("spec", REQUEST, progress=lines.append))
    assert spec.generator == "llm" and "asking the LLM" in lines[0]
    ref = gen.generate(GenRequest("reference", REQUEST, approved={"spec": spec.content}))
    assert ref.generator == "llm" and len(fake_openai.requests) == 2


@pytest.mark.parametrize("request_text, words", [
    ("running average over the last dim of 64x1024", ["'running'"]),
    ("sum of squares over the last dim of 64x512", ["'squares'"]),
    ("relu with a 3x3 kernel on 64x64", ["'3x3'"]),
])
def test_hybrid_calls_out_to_the_llm_the_words_the_offline_generator_could_not_place(fake_openai, request_text,
                                                                                     words):
    fake_openai.script(code("json", text("spec.json")))
    spec = hybrid(fake_openai).generate(GenRequest("spec", request_text))
    prompt = fake_openai.user_text(0)
    assert spec.generator == "llm" and "could not place these words of the request" in prompt
    assert all(w in prompt.split("could not place these words")[1][:200] for w in words), prompt[:600]


def test_a_session_can_force_either_generator(fake_openai):
    fake_openai.script(code("json", text("spec.json")))
    gen = hybrid(fake_openai)
    assert gen.generate(GenRequest("spec", "relu(x + y)", generator="llm")).generator == "llm"
    with pytest.raises(GenerationError, match="could not place .mobilenet"):
        gen.generate(GenRequest("spec", REQUEST, generator="offline"))
    assert len(fake_openai.requests) == 1


# ------------------------------------------------------------------ in a session

def test_session_keeps_attempts_posts_one_card_and_counts_tokens(fake_openai, tmp_path, monkeypatch, capsys):
    cfg = Config(home=tmp_path, db_path=tmp_path / "kb.db", queue_url="", backend="cpu", generator="hybrid")
    out, queue = io.StringIO(), MemoryQueue()
    gen = HybridGenerator(OfflineGenerator(), llm(fake_openai, ScriptedVerify("fail", "pass")), "hybrid")
    svc = Service(cfg, Store(cfg.db_path), gen, ConsoleChat(out), lambda backend: queue)
    fake_openai.script(*(code(lang, text(name)) for lang, name in [
        ("json", "spec.json"), ("python", "reference.py"), ("python", "llm_test_reference.py"),
        ("python", "kernel_wrong.py"), ("python", "kernel.py")]))
    s = svc.start(REQUEST, "alice")

    def latest(stage: str):
        return svc.store.load(s.id).latest(stage)

    for stage in ("spec", "reference", "reference_test"):
        wait_for(lambda st=stage: latest(st) is not None)
        svc.dispatch(s.id, Approve(stage, latest(stage).rev, "bob"))
    queue.results[queue.jobs[-1]["job_id"]] = {"status": "pass", "summary": "ok"}
    svc.poll_jobs()
    # The revision is stored before its card is posted: wait for the card itself.
    wait_for(lambda: latest("kernel") is not None and "Triton kernel · r2" in out.getvalue())
    svc.shutdown()

    sess = svc.store.load(s.id)
    kernels = sess.revisions_of("kernel")
    assert [(r.rev, r.origin) for r in kernels] == [(1, "attempt"), (2, "generated")]
    assert kernels[0].content == text("kernel_wrong.py") and kernels[1].author == "generator:llm"
    shown = out.getvalue()
    assert "round 1/3: failed" in shown and "round 2/3: passed" in shown
    assert "Triton kernel · r2" in shown and "Triton kernel · r1" not in shown
    assert sess.usage["requests"] == 5 and sess.usage["total_tokens"] == 750

    monkeypatch.setenv("KERNELBOT_HOME", str(tmp_path))
    monkeypatch.setenv("KERNELBOT_DB", str(cfg.db_path))
    monkeypatch.delenv("KERNELBOT_LLM_BASE_URL", raising=False)
    assert cli.main(["status", s.id]) == 0
    status = capsys.readouterr().out
    assert "LLM tokens" in status and "total_tokens 750" in status and "attempt" in status
    assert cli.main(["status", s.id, "--show", "kernel:1"]) == 0
    assert "/ 3.0" in capsys.readouterr().out


def test_a_kernel_posted_failing_cannot_be_approved_or_benchmarked():
    s = Session(id="s1", request=REQUEST, requester="alice", platform="t", channel="c", thread="t",
                backend="cpu", generator="llm", created_at=0.0)
    engine.handle(s, Start(REQUEST, "alice"), 1.0)
    s.stage, s.gen_token = "kernel", s.gen_token + 1
    engine.handle(s, Generated("kernel", s.gen_token, text("kernel_wrong.py"), "generator:llm",
                               {VERIFICATION: "FAIL after 3 rounds: 3/3 cases fail"}), 2.0)
    effects = engine.handle(s, Approve("kernel", 1, "bob"), 3.0)
    assert s.approval("kernel", 1) is None and "failed verification before review" in effects[0].text
    assert cards.revision_card(s, s.latest("kernel")).status.startswith("FAILED verification")
    assert kernel_versions(s) == {}


def test_a_generated_bench_plan_may_not_accept_implausible_timings():
    from bot.generators.llm import Unusable, _read_plan
    from bot.generators.llm_client import Reply
    plan = '```json\n{"versions": ["torch", "kernel"], "accept_implausible": true}\n```'
    with pytest.raises(Unusable, match="only a person who has checked a timing"):
        _read_plan(Reply(plan, "stop", {}))
    assert _read_plan(Reply(plan.replace(', "accept_implausible": true', ""), "stop", {}))["versions"]


def test_a_pasted_module_the_offline_generator_refuses_keeps_itself_as_the_reference(fake_openai):
    # An lgamma: offline refuses it by line, the LLM writes the spec; the reference stage is
    # the pasted file, verbatim, without asking the model.
    pasted = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self, dim):\n"
              "        super().__init__()\n        self.dim = dim\n\n    def forward(self, x):\n"
              "        return torch.lgamma(x + self.dim)\n\ndef get_inputs():\n    return [torch.rand(64, 48)]\n\n"
              "def get_init_inputs():\n    return [1]\n")
    request = f"```python\n{pasted}```"
    spec = json.loads(text("spec.json")) | {"name": "lgamma", "formula": "torch.lgamma(x + 1)"}
    fake_openai.script(code("json", json.dumps(spec)))
    gen = HybridGenerator(OfflineGenerator(), llm(fake_openai), "hybrid")
    art = gen.generate(GenRequest("spec", request, backend="cpu"))
    made = json.loads(art.content)
    assert made["reference_class"] == "Model" and any("the pasted Model, verbatim" in n for n in art.notes)
    assert "torch.lgamma(x + self.dim)" in fake_openai.user_text(0)        # the model sees the paste
    ref = gen.generate(GenRequest("reference", request, approved={"spec": art.content}, backend="cpu"))
    assert ref.content == pasted and ref.generator == "offline" and fake_openai.remaining == 0
    assert len(fake_openai.requests) == 1
