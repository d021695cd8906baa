"""Liger-Kernel as a benchmark baseline (issue 26): bot.liger names Liger's function for exactly the
operators it computes, the bench plan carries it, runner.liger_ops builds only the functions it
knows, and the harness times it beside torch on a GPU (on the CPU it is skipped, saying why)."""
from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from bot import ir, liger, lower_torch, testgen, training
from bot.spec import parse_expression, validate
from bot.workflow import cards
from runner import liger_ops, worker


def spec_of(expression: str, shapes: dict[str, list[int]], training_: bool = False, dtype: str = "float32") -> dict:
    return validate({"name": "op", "expression": expression, "training": training_, "inputs": [
        {"name": n, "dtypes": ["int64" if n == "t" else dtype], "shapes": [shapes[n]]}
        for n in ir.input_names(ir.parse(expression))]})


@pytest.mark.parametrize("expression, shapes, want", [
    ("rmsnorm(x, w, eps=1e-06)", {"x": [8, 64], "w": [64]}, {"fn": "rms_norm", "inputs": ["x", "w"], "eps": 1e-06}),
    ("layernorm(x, w, b, eps=1e-05)", {"x": [8, 64], "w": [64], "b": [64]},
     {"fn": "layer_norm", "inputs": ["x", "w", "b"], "eps": 1e-05}),
    ("silu(g) * u", {"g": [8, 64], "u": [8, 64]}, {"fn": "swiglu", "inputs": ["g", "u"]}),
    ("cross_entropy(x, t)", {"x": [8, 100], "t": [8]}, {"fn": "cross_entropy", "inputs": ["x", "t"], "reduction": "mean"}),
    # what Liger computes differently, or not at all: no counterpart
    ("rmsnorm(x + r, w, eps=1e-06)", {"x": [8, 64], "r": [8, 64], "w": [64]}, None),
    ("rmsnorm(x, eps=1e-06)", {"x": [8, 64]}, None),
    ("silu(g) * u", {"g": [8, 64], "u": [64]}, None),                   # broadcast: not Liger's elementwise op
    ("g * u", {"g": [8, 64], "u": [8, 64]}, None),
    ("cross_entropy(x * 2.0, t)", {"x": [8, 100], "t": [8]}, None),
    ("softmax(x)", {"x": [8, 64]}, None),
])
def test_liger_is_named_only_for_the_operators_it_computes(expression, shapes, want):
    spec = spec_of(expression, shapes)
    assert liger.counterpart(spec) == want
    plan = testgen.bench_plan(spec)
    assert ("liger" in plan["versions"]) == (want is not None) and plan.get("liger") == want


@pytest.mark.parametrize("entry, says", [
    ({"fn": "os.system", "inputs": ["x"]}, "no Liger-Kernel function 'os.system'"),
    ({"fn": "rms_norm", "inputs": ["x", "weight"]}, "are not the operator's"),
    ({"fn": "rms_norm"}, "are not the operator's"),
])
def test_the_runner_builds_only_the_functions_it_knows(entry, says):
    with pytest.raises(liger_ops.LigerUnavailable, match=says):
        liger_ops.build(entry, ["x", "w"])


def test_without_liger_installed_the_runner_says_how_to_get_it():
    if importlib.util.find_spec("liger_kernel"):
        pytest.skip("Liger-Kernel is installed here")
    with pytest.raises(liger_ops.LigerUnavailable, match="pip install liger-kernel"):
        liger_ops.build({"fn": "rms_norm", "inputs": ["x", "w"], "eps": 1e-6}, ["x", "w"])


def benchmark(spec: dict, backend: str) -> dict:
    node = parse_expression(spec)
    kernel = training.kernel_source(spec, node) if spec.get("training") else ir.kernel_source(spec, node, {})
    files = {"spec.json": json.dumps(spec), "reference.py": lower_torch.reference_source(spec, node), "kernel.py": kernel,
             "bench_plan.json": json.dumps(testgen.bench_plan(spec))}
    job = {"job_id": "t-liger", "kind": "benchmark", "backend": backend, "attempt": 1, "timeout_s": 600, "files": files}
    return worker.execute_job(job, lambda line: None)


def test_on_the_cpu_liger_is_skipped_saying_why_and_the_rest_is_timed():
    result = benchmark(spec_of("rmsnorm(x, w, eps=1e-06)", {"x": [4, 64], "w": [64]}, training_=True), "cpu")
    assert result["status"] == "pass", result["summary"]
    assert any("Liger-Kernel skipped on the cpu backend" in w for w in result["warnings"])
    assert {r["version"] for r in result["bench"]} == {"torch", "kernel"}
    assert "vs Liger" not in cards.bench_table(result)[0]


def test_the_table_shows_liger_and_the_ratio_where_it_was_timed():
    row = {"case": "4x64", "dtype": "float16", "torch_ms": 0.04, "compile_ms": 0.03, "liger_ms": 0.02, "kernel_ms": 0.01,
           "speedup": 4.0, "speedup_vs_compile": 3.0, "speedup_vs_liger": 2.0, "speedup_per_call": 1.5}
    header, line = cards.bench_table({"report_rows": [row]})
    assert header[header.index("liger ms") + 1] == "kernel ms" and "vs Liger" in header
    assert line[header.index("vs Liger")].startswith("2.0")


@pytest.mark.gpu
@pytest.mark.timing
@pytest.mark.parametrize("expression, shapes", [
    ("rmsnorm(x, w, eps=1e-06)", {"x": [4096, 2048], "w": [2048]}),
    ("cross_entropy(x, t)", {"x": [1024, 32000], "t": [1024]}),
])
def test_on_the_gpu_liger_is_timed_beside_torch_for_training(expression, shapes):
    pytest.importorskip("liger_kernel")
    result = benchmark(spec_of(expression, shapes, training_=True, dtype="bfloat16"), "cuda")
    assert result["status"] == "pass", result["summary"]
    rows = [r for r in result["bench"] if r["version"] == "liger"]
    assert rows and all(r["ok"] and r["time_ms"] > 0 for r in rows), rows
    assert all(r["speedup_vs_liger"] for r in result["report_rows"]) and "vs Liger-Kernel" in result["summary"]


@pytest.mark.gpu
def test_on_the_gpu_each_liger_function_computes_the_operator():
    pytest.importorskip("liger_kernel")
    x, w, b = torch.randn(64, 256, device="cuda"), torch.randn(256, device="cuda"), torch.randn(256, device="cuda")
    t = torch.randint(0, 256, (64,), device="cuda")
    cases = [({"fn": "rms_norm", "inputs": ["x", "w"], "eps": 1e-6}, ["x", "w"], [x, w],
              torch.nn.functional.rms_norm(x, (256,), w, 1e-6)),
             ({"fn": "layer_norm", "inputs": ["x", "w", "b"], "eps": 1e-5}, ["b", "x", "w"], [b, x, w],
              torch.nn.functional.layer_norm(x, (256,), w, b, 1e-5)),
             ({"fn": "swiglu", "inputs": ["x", "y"]}, ["x", "y"], [x, x * 2], torch.nn.functional.silu(x) * x * 2),
             ({"fn": "cross_entropy", "inputs": ["x", "t"], "reduction": "sum"}, ["t", "x"], [t, x],
              torch.nn.functional.cross_entropy(x, t, reduction="sum"))]
    for entry, names, args, want in cases:
        got = liger_ops.build(entry, names)(*args)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
