"""End to end with the LLM generator: `kernelbot run` for an operator outside the offline
catalog, answered by a loopback OpenAI-compatible endpoint, through the real queue and local
runner (the kernel's verify round included), to exit 0 and the files written."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes.openai_server import code, fake_openai  # noqa: F401
from test_e2e import kernelbot

HS = Path(__file__).parent / "fixtures" / "llm" / "hardswish"     # llm_test_*.py: the tests the model writes
pytestmark = pytest.mark.slow


def test_run_with_the_llm_for_an_operator_outside_the_catalog(fake_openai, tmp_path):
    fake_openai.script(*(code(lang, (HS / name).read_text()) for lang, name in [
        ("json", "spec.json"), ("python", "reference.py"), ("python", "llm_test_reference.py"),
        ("python", "kernel.py"), ("python", "llm_test_kernel.py"), ("json", "bench_plan.json")]))
    out = tmp_path / "out"
    proc = kernelbot(["run", "mobilenet-style hardswish of x for fp32 64x48 and 33x17", "--yes", "--out", str(out)],
                     tmp_path / "home", KERNELBOT_LLM_BASE_URL=fake_openai.url, KERNELBOT_LLM_MODEL="fake-model",
                     KERNELBOT_LLM_API_KEY="sk-test")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert fake_openai.remaining == 0 and len(fake_openai.requests) == 6
    assert "round 1/5: passed" in proc.stdout and "all six stages passed" in proc.stdout
    assert (out / "kernel.py").read_text() == (HS / "kernel.py").read_text()
    spec = json.loads((out / "spec.json").read_text())
    assert spec["name"] == "hardswish" and "expression" not in spec
    report = json.loads((out / "report.json").read_text())
    assert report["generator"] == "hybrid" and report["usage"]["requests"] == 6
    assert {s["status"] for s in report["stages"]} <= {"approved", "passed"}
    for name in ("reference.py", "test_reference.py", "test_kernel.py", "bench_plan.json", "REPORT.md"):
        assert (out / name).is_file(), name
