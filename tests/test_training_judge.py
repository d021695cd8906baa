"""The judge's gradient check (runner.harness.check_gradients): a training kernel's backward, run in
its worker from an upstream gradient the judge draws, against the reference's autograd on float64
copies; a wrong, missing or absent backward fails the job naming the input."""
from __future__ import annotations

import json

import pytest

from bot import lower_torch, training
from bot.spec import parse_expression, validate
from runner import worker

SPEC = {"name": "op", "expression": "relu(x) * y + z", "training": True, "inputs": [
    {"name": n, "dtypes": ["float32"], "shapes": [[5, 9]]} for n in "xyz"]}


def files(kernel_edit=lambda text: text) -> dict[str, str]:
    spec = validate(SPEC)
    node = parse_expression(spec)
    return {"spec.json": json.dumps(spec), "reference.py": lower_torch.reference_source(spec, node),
            "kernel.py": kernel_edit(training.kernel_source(spec, node))}


def verify(job_files: dict[str, str]) -> dict:
    job = {"job_id": "t-grad", "kind": "verify", "backend": "cpu", "attempt": 1, "timeout_s": 120, "files": job_files}
    return worker.execute_job(job, lambda line: None)


def test_a_correct_backward_passes_with_its_gradients_checked():
    result = verify(files())
    assert result["status"] == "pass", result["summary"]
    assert all(r.get("gradients") == "ok" for r in result["correctness"] if not r["skipped"])


@pytest.mark.parametrize("edit, says", [
    (lambda t: t.replace("return d_x if", "return d_y if"), "the gradient of x: "),
    (lambda t: t.replace("return d_x if ctx.needs_input_grad[0] else None", "return None"), "the gradient of x is missing"),
    (lambda t: t[:t.index("class op_function")] + "def op(x, y, z):\n    return op_forward(x, y, z)\n",
     "backward: raised RuntimeError"),           # a forward kernel alone: autograd has nothing to run
])
def test_a_wrong_or_missing_backward_fails_naming_the_input(edit, says):
    assert files(edit)["kernel.py"] != files()["kernel.py"], "the edit no longer applies to the generated file"
    result = verify(files(edit))
    assert result["status"] == "fail" and says in result["summary"], result["summary"]


def test_a_training_benchmark_times_forward_and_backward_for_every_version():
    from bot import testgen
    job_files = {**files(), "bench_plan.json": json.dumps(testgen.bench_plan(validate(SPEC)))}
    job = {"job_id": "t-grad-bench", "kind": "benchmark", "backend": "cpu", "attempt": 1, "timeout_s": 300,
           "files": job_files}
    result = worker.execute_job(job, lambda line: None)
    assert result["status"] == "pass", result["summary"]
    assert "Training: each timed call is the forward and the backward" in result["timing_note"]
    assert all(r["kernel_ms"] and r["torch_ms"] for r in result["report_rows"])
