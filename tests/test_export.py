"""The exported kernel carries the benchmark's winning config per case (bot.workflow.export), and the
session export (bot.workflow.report) writes it with the best configs listed. Kernels run on Triton's
interpreter here (tests/conftest.py)."""
from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from bot import integrity
from bot.codegen import autotune_cache
from bot.ops import pointwise
from bot.spec import parse_expression, validate
from bot.workflow import engine, report
from bot.workflow.events import Cancel
from bot.workflow.export import tuned_kernel
from bot.workflow.model import Approval, Job, Revision, Session, sha256
from runner import protocol

SPEC = validate({"name": "op", "expression": "relu(x + y)", "inputs": [
    {"name": n, "dtypes": ["float32", "float16"], "shapes": [[3, 5], [17, 33]]} for n in ("x", "y")]})
SOURCE = pointwise.kernel_source(SPEC, parse_expression(SPEC), {})
BIG = {"BLOCK": 2048, "num_warps": 8}


def tuning_entry(shape: list[int], dtype: str, best: dict | None) -> dict:
    tensors = [torch.empty(shape, dtype=getattr(torch, dtype))] * 2
    configs = [{"config": c, "label": protocol.config_label(c), "time_ms": 1.0, "ok": True, "error": ""}
               for c in pointwise.POINTWISE_CONFIGS]
    return {"case": "x".join(map(str, shape)), "dtype": dtype, "key": protocol.tuning_key(tensors),
            "configs": configs, "best": best}


TUNING = [tuning_entry([3, 5], "float32", BIG), tuning_entry([17, 33], "float32", {"BLOCK": 4096, "num_warps": 4}),
          tuning_entry([3, 5], "float16", None)]


class LaunchSpy:
    """Stands in for a @triton.jit kernel in its module: records each launch's meta-parameters."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **meta):
            self.launches.append(meta)
            return self.kernel[grid](*args, **meta)
        return launch


def load(tmp_path, source: str):
    path = tmp_path / "kernel.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"{tmp_path.name}_tuned", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tuned_kernel_fills_tuned_and_the_launcher_uses_it(tmp_path):
    source = tuned_kernel(SOURCE, TUNING, "NVIDIA H200")
    assert "# Tuned on NVIDIA H200 by kernelbot's benchmark stage" in source
    assert '    "3x5:float32|3x5:float32": {"BLOCK": 2048, "num_warps": 8},\n' in source
    assert "3x5:float16" not in source.split("TUNED = {")[1].split("}\n\n")[0]     # no best: not carried
    assert not integrity.check(source, "op")
    module = load(tmp_path, source)
    assert module.TUNED == {TUNING[0]["key"]: BIG, TUNING[1]["key"]: {"BLOCK": 4096, "num_warps": 4}}
    spy = module.op_kernel = LaunchSpy(module.op_kernel)
    for shape, dtype, block in (([3, 5], torch.float32, 2048), ([17, 33], torch.float32, 4096),
                                ([3, 5], torch.float16, 1024)):        # untuned: the default
        x, y = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
        torch.testing.assert_close(module.op(x, y), torch.relu(x + y))
        assert spy.launches[-1]["BLOCK"] == block
    module.op(x, y, config={"BLOCK": 16, "num_warps": 1})
    assert spy.launches[-1] == {"BLOCK": 16, "num_warps": 1}


def test_tuned_kernel_leaves_the_source_alone_without_winners_or_an_empty_tuned():
    assert tuned_kernel(SOURCE, [TUNING[2]]) == SOURCE
    assert tuned_kernel(SOURCE, []) == SOURCE
    edited = SOURCE.replace("TUNED = {}", "TUNED = {'3x5:float32|3x5:float32': {'BLOCK': 16, 'num_warps': 1}}")
    assert tuned_kernel(edited, TUNING) == edited


def session(bench_status: str, backend: str = "cuda-h200", spec: str = "{}") -> Session:
    s = Session("s1", "relu(x + y)", "ana", "console", "c", "t", "cpu", "offline", created_at=1.0, status="done")
    for stage, content in (("spec", spec), ("kernel", SOURCE)):
        s.revisions.append(Revision(stage, 1, content, "generator:offline", "generated", 1.0))
        s.approvals.append(Approval(stage, 1, sha256(content), "ana", 1.0))
    rows = [{"case": t["case"], "dtype": t["dtype"], "kernel_ms": 1.0,
             "config": protocol.config_label(t["best"]) if t["best"] else None} for t in TUNING]
    result = {"status": bench_status, "summary": "", "device": "NVIDIA H200", "report_rows": rows, "tuning": TUNING,
              "warnings": [], "timing_note": "GPU time"}
    s.jobs.append(Job("j1", "benchmark", 1, "benchmark", backend, 1.0, status=bench_status, result=result))
    return s


def test_export_writes_the_tuned_kernel_and_lists_the_best_configs(tmp_path):
    report.export(session("pass"), tmp_path)
    assert '"17x33:float32|17x33:float32": {"BLOCK": 4096, "num_warps": 4}' in (tmp_path / "kernel.py").read_text()
    text = (tmp_path / "REPORT.md").read_text()
    assert "best config" in text and "BLOCK=2048 w8" in text and "BLOCK=4096 w4" in text
    assert "kernel.py carries the best config per case above (`TUNED`, tuned on NVIDIA H200)" in text


@pytest.mark.parametrize("status, backend", [("fail", "cuda"), ("pass", "cpu")])
def test_a_failed_or_interpreter_benchmark_exports_the_kernel_as_approved(tmp_path, status, backend):
    report.export(session(status, backend), tmp_path)
    assert (tmp_path / "kernel.py").read_text() == SOURCE
    text = (tmp_path / "REPORT.md").read_text()
    assert "carries the best config" not in text
    assert ("keeps `TUNED` empty: its configs were timed on the Triton interpreter" in text) == (backend == "cpu")


def test_a_cancelled_benchmark_says_who_stopped_it_and_where(tmp_path):
    # A job cancelled mid-run has no result: report.json still says why (kernelbot bench's table
    # shows it), and the kernel is exported as approved.
    s = session("pass")
    s.status = "active"
    job = s.jobs[-1]
    job.status, job.result, job.detail = "running", None, "tuning 14/44 17x33 float16"
    engine.handle(s, Cancel("you (timeout)"), 2.0)
    stage = next(st for st in report.report(s)["stages"] if st["stage"] == "benchmark")
    assert stage["status"] == "cancelled"
    assert stage["job"] == {"status": "cancelled", "summary": "by you (timeout) during tuning 14/44 17x33 float16"}
    report.export(s, tmp_path)
    assert (tmp_path / "kernel.py").read_text() == SOURCE


# ---------------------------------------------------------------- the export's opt-in autotune cache

def counting_timer(calls: list):
    """Each timed config faster than the one before: the last config that ran wins."""
    def timer(fn):
        fn()
        calls.append(1)
        return 1.0 / len(calls)
    return timer


def test_autotune_tunes_an_untuned_key_once_stores_it_and_later_processes_reuse_it(tmp_path):
    module = load(tmp_path, tuned_kernel(SOURCE, TUNING, "NVIDIA H200"))
    spy = module.op_kernel = LaunchSpy(module.op_kernel)
    calls = []
    op = autotune_cache.autotuned(module, tmp_path / "cache", timer=counting_timer(calls))
    x, y = torch.randn(7, 9), torch.randn(7, 9)
    torch.testing.assert_close(op(x, y), torch.relu(x + y))
    assert len(calls) == len(module.CONFIGS)                      # every config timed once
    files = list((tmp_path / "cache").glob("op-*.json"))
    assert len(files) == 1
    stored = json.loads(files[0].read_text())
    assert stored == {module.tuning_key((x, y)): module.CONFIGS[-1]}
    assert spy.launches[-1] == module.CONFIGS[-1]
    op(x, y)
    assert len(calls) == len(module.CONFIGS)                      # the same key: no second sweep

    def refuse(fn):
        raise AssertionError("timed again: the cache was not read")
    again = autotune_cache.autotuned(load(tmp_path, module.__loader__.get_data(module.__file__).decode()),
                                     tmp_path / "cache", timer=refuse)
    torch.testing.assert_close(again(x, y), torch.relu(x + y))


def test_autotune_leaves_tuned_keys_to_tuned_and_ignores_a_corrupt_cache(tmp_path):
    module = load(tmp_path, tuned_kernel(SOURCE, TUNING, "NVIDIA H200"))
    spy = module.op_kernel = LaunchSpy(module.op_kernel)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f"op-{autotune_cache._digest(module)}.json").write_text("{not json")
    calls = []
    with pytest.warns(UserWarning, match="unreadable"):
        op = autotune_cache.autotuned(module, cache, timer=counting_timer(calls))
    x, y = torch.randn(3, 5), torch.randn(3, 5)
    op(x, y)                                                       # TUNED holds 3x5 float32
    assert not calls and spy.launches[-1] == BIG
    op(torch.randn(2, 2), torch.randn(2, 2))
    assert calls and json.loads((cache / f"op-{autotune_cache._digest(module)}.json").read_text())


def test_export_ships_autotune_beside_the_kernel(tmp_path):
    report.export(session("pass", spec=json.dumps(SPEC)), tmp_path)
    assert (tmp_path / "autotune.py").read_text() == report.AUTOTUNE.read_text()
    assert "op = autotune.autotuned(kernel)\nout = op(x, y)" in (tmp_path / "REPORT.md").read_text()
