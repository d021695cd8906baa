"""The trusted harness through runner.worker.execute_job: good and bad kernels, benchmarks,
inputs, and the comparison itself. Runs on Triton's CPU interpreter; @gpu tests on a GPU."""
from __future__ import annotations

import base64
import io
import json
import math
from pathlib import Path

import pytest
import torch

from runner import harness, inputs, protocol, sandbox, untrusted, worker
from runner.protocol import Case
from runner.verify import format_result, verify

FIXTURES = Path(__file__).parent / "fixtures" / "runner"
ADD = FIXTURES / "add"
BAD = FIXTURES / "bad"


def add_files(*names: str) -> dict[str, str]:
    return {n: (ADD / n).read_text() for n in ("spec.json", "reference.py", *names)}


def run(kind: str, files: dict[str, str], backend: str = "cpu", timeout_s: float = 120, static_check: bool = True,
        **extra) -> dict:
    job = {"job_id": f"t-{kind}", "kind": kind, "backend": backend, "attempt": 1, "timeout_s": timeout_s,
           "files": files, **extra}
    return worker.execute_job(job, lambda line: None, static_check=static_check)


# --- correctness ------------------------------------------------------------------------------

def test_good_kernel_passes_and_bf16_is_skipped_with_the_reason():
    result = run("kernel_test", add_files("kernel.py", "test_kernel.py"))
    assert result["status"] == "pass", result["summary"]
    assert result["summary"].startswith("6/6 cases pass; worst rel err")
    assert "ghost replay: the answer comes from its Triton code" in result["summary"]
    assert [g["outcome"] for g in result["ghost"]] == ["differs", "differs"]     # float32, float16
    rows = result["correctness"]
    assert [r["case"] for r in rows[::3]] == ["3x5", "17x33", "37x97"]   # spec cases + the odd one
    skipped = [r for r in rows if r["skipped"]]
    assert [r["dtype"] for r in skipped] == ["bfloat16"] * 3
    assert all("interpreter" in r["reason"] and "NaN" in r["reason"] for r in skipped)
    assert all(r["ok"] and r["seeds"] == [0, 1, 2] for r in rows if not r["skipped"])
    assert result["pytest"]["passed"] == 4 and result["pytest"]["skipped"] == 2 and result["pytest"]["exit_code"] == 0
    assert result["device"] == "cpu (Triton interpreter)" and result["backend"] == "cpu"
    assert result["finished_at"] >= result["started_at"]


BAD_KERNELS = {
    "wrong_math": "elements outside tolerance",
    "half_written": "NaN where the reference is finite",
    "returns_nan": "NaN where the reference is finite",
    "mutates_input": "modified its input x",
    "raises": "raised RuntimeError: launcher bug",
    "raises_at_import": "kernel.py does not import: ModuleNotFoundError",
    "syntax_error": "kernel.py does not import: SyntaxError",
    "wrong_shape": "output shape [15] but the reference gives [3, 5]",
    "hangs": "timed out after",
    "segfaults": "3x5 float32: the kernel worker process died with SIGSEGV",
    "memory_hog": "out of memory",
}


@pytest.mark.parametrize("name", sorted(BAD_KERNELS))
def test_bad_kernel_fails_with_a_summary_naming_the_problem(name, monkeypatch):
    monkeypatch.setenv("KERNELBOT_SANDBOX_MEMORY_GB", "3")
    files = {**add_files(), "kernel.py": (BAD / f"{name}.py").read_text()}
    # Off, so these reach the worker: what is tried is how the judge survives them at run time.
    result = run("verify", files, timeout_s=8 if name == "hangs" else 120, static_check=False)
    assert result["status"] == "fail"
    assert BAD_KERNELS[name] in result["summary"], result["summary"]


def test_a_kernel_reading_outside_the_sandbox_fails_with_what_the_sandbox_allows():
    files = {**add_files(), "kernel.py": (BAD / "reads_repository.py").read_text()}
    assert "imports os" in run("verify", files)["summary"]           # refused unrun, first
    result = run("verify", files, static_check=False)
    assert result["status"] == "fail" and "FileNotFoundError" in result["summary"], result["summary"]
    assert "a sandboxed job may write only in /tmp" in result["summary"], result["summary"]


@pytest.mark.parametrize("name, patch, found", [
    ("kernel.py", "torch.cuda.Event.elapsed_time = lambda self, end: 1e-6", "uses torch.cuda.Event"),
    ("reference.py", "torch.cuda.synchronize = lambda *a: None", "uses torch.cuda"),
    ("reference.py", "setattr(torch.cuda, 'synchronize', lambda *a: None)", "an expression statement at module level"),
    ("reference.py", "from runner import timers", "imports runner"),
])
def test_a_file_that_patches_what_measures_it_is_refused_unrun(name, patch, found):
    # Correct code, but every version timed beside it would look faster (or be timed unsynchronized).
    files = add_files("kernel.py")
    files[name] += f"\n\n{patch}\n"
    result = run("verify", files)
    assert result["status"] == "fail", result["summary"]
    line = files[name].count("\n")
    assert f"{name} is refused before import: line {line}: {found}" in result["summary"], result["summary"]


def test_a_failing_generated_test_fails_the_job_even_when_the_harness_passes():
    files = add_files("kernel.py")
    files["test_kernel.py"] = "def test_always_fails():\n    assert 1 == 2\n"
    result = run("kernel_test", files)
    assert result["status"] == "fail"
    assert "generated tests: 1 failed" in result["summary"]
    assert "FAILED test_kernel.py::test_always_fails" in result["summary"]
    assert result["correctness"] and all(r["ok"] for r in result["correctness"])


def test_reference_test_checks_the_reference_in_every_dtype():
    result = run("reference_test", add_files("test_reference.py"))
    assert result["status"] == "pass", result["summary"]
    assert not any(r["skipped"] for r in result["correctness"])   # plain torch: bf16 runs on CPU
    assert result["pytest"]["passed"] == 2


@pytest.mark.parametrize("job, reason", [
    ("not json", "job is not valid JSON"),
    ({"kind": "verify"}, "job has no job_id"),
    ({"job_id": "x", "kind": "compile", "files": {}}, "job kind 'compile'"),
    ({"job_id": "x", "kind": "kernel_test", "files": {"spec.json": "{}"}}, "needs reference.py, kernel.py"),
    ({"job_id": "x", "kind": "verify", "files": {"spec.json": "{", "reference.py": "", "kernel.py": ""}},
     "Expecting property name"),
    ({"job_id": "x", "kind": "verify", "files": {"../evil.py": "", "spec.json": "", "reference.py": "",
                                                  "kernel.py": ""}}, "not allowed"),
    ({"job_id": "x", "kind": "verify", "timeout_s": -1, "files": {"spec.json": "", "reference.py": "",
                                                                  "kernel.py": ""}}, "timeout_s"),
])
def test_malformed_job_is_an_error_with_the_reason(job, reason):
    result = worker.execute_job(job, lambda line: None, backend="cpu")
    assert result["status"] == "error"
    assert reason in result["summary"], result["summary"]


def test_verify_and_its_terminal_table():
    result = verify(ADD / "spec.json", ADD / "reference.py", ADD / "kernel.py", backend="cpu", timeout_s=120)
    text = format_result(result)
    assert text.startswith("PASS: 6/6 cases pass")
    assert "max rel err" in text and "37x97  float16" in text


# --- benchmark --------------------------------------------------------------------------------

def test_benchmark_on_cpu_reports_rows_a_chart_and_the_interpreter_disclaimer():
    files = add_files("kernel.py", "bench_plan.json")
    kernels = {"r1": (ADD / "kernel.py").read_text(), "r2": (BAD / "wrong_math.py").read_text()}
    plan = json.loads(files["bench_plan.json"])
    plan["versions"].append("kernel@r2")
    files["bench_plan.json"] = json.dumps(plan)
    result = run("benchmark", files, kernels=kernels)
    assert result["status"] == "pass", result["summary"]
    assert "say nothing about GPU speed" in result["timing_note"] and "say nothing about GPU speed" in result["summary"]

    rows = result["report_rows"]
    assert [(r["case"], r["dtype"]) for r in rows] == [("3x5", "float32"), ("3x5", "float16"),
                                                        ("17x33", "float32"), ("17x33", "float16")]
    keys = {"case", "dtype", "torch_ms", "compile_ms", "kernel_ms", "speedup", "speedup_vs_compile", "gbps",
            "pct_of_copy"}
    for r in rows:
        assert keys <= set(r)
        assert r["speedup"] == pytest.approx(r["torch_ms"] / r["kernel_ms"])
        assert r["compile_ms"] is None and "say nothing about GPU speed" in r["note"]
        assert r["basis"] == "wall-clock" and r["speedup_per_call"] == pytest.approx(r["speedup"])
    assert any("torch.compile skipped" in w for w in result["warnings"])
    assert any("bfloat16" in w for w in result["warnings"])
    assert result["tuning"] == [] and "Tuned" not in result["timing_note"]      # no CONFIGS: not tuned
    assert all(r["config"] is None for r in rows)

    by_version = {(b["case"], b["dtype"], b["version"]): b for b in result["bench"]}
    assert by_version[("17x33", "float32", "kernel@r1")]["ms"] > 0
    wrong = by_version[("17x33", "float32", "kernel@r2")]
    assert not wrong["ok"] and wrong["ms"] is None and "wrong result" in wrong["error"]
    assert result["copy_gbps"] > 0

    png = base64.b64decode(result["chart_png_b64"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image
    image = matplotlib.image.imread(io.BytesIO(png))
    assert image.shape[0] > 400 and image.shape[1] > 800
    assert len(set(map(tuple, image.reshape(-1, image.shape[2])[::97].round(2).tolist()))) > 8   # not blank


# --- tuning -----------------------------------------------------------------------------------

# The add kernel with a config space; the config with SUB=1 adds x to itself: wrong, so never chosen.
TUNED_ADD = (ADD / "kernel.py").read_text().replace("""def add(x, y):
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = out.numel()
    _add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out""", """CONFIGS = [{"BLOCK": 16, "num_warps": 1}, {"BLOCK": 64, "num_warps": 2}, {"BLOCK": 32, "SUB": 1}]
TUNED = {}


def add(x, y, *, config=None):
    config = config or {"BLOCK": 1024}
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = out.numel()
    y_or_x = x if config.get("SUB") else y
    _add_kernel[(triton.cdiv(n, config["BLOCK"]),)](x, y_or_x, out, n, BLOCK=config["BLOCK"])
    return out""")


def bench_files(kernel: str, **plan) -> dict[str, str]:
    files = add_files("bench_plan.json")
    files["bench_plan.json"] = json.dumps({**json.loads(files["bench_plan.json"]), **plan})
    return {**files, "kernel.py": kernel}


def test_benchmark_tunes_a_kernel_with_configs_and_never_picks_a_wrong_one():
    files = bench_files(TUNED_ADD, versions=["torch", "kernel", "kernel@r1"])
    lines = []
    job = {"job_id": "t-tune", "kind": "benchmark", "backend": "cpu", "attempt": 1, "timeout_s": 120,
           "files": files, "kernels": {"r1": TUNED_ADD}}
    result = worker.execute_job(job, lines.append)
    assert result["status"] == "pass", result["summary"]
    # numbered over every case x dtype of the plan (bfloat16's are skipped on the interpreter)
    assert "tuning 1/18 3x5 float32 BLOCK=16 w1" in lines and "tuning 15/18 17x33 float16 BLOCK=32 SUB=1" in lines

    tuning = result["tuning"]
    assert [(t["case"], t["dtype"]) for t in tuning] == [(r["case"], r["dtype"]) for r in result["report_rows"]]
    for t in tuning:
        shape = t["case"].replace(" ", "")
        assert t["key"] == f"{shape}:{t['dtype']}|{shape}:{t['dtype']}"
        assert [e["label"] for e in t["configs"]] == ["BLOCK=16 w1", "BLOCK=64 w2", "BLOCK=32 SUB=1"]
        good, wrong = t["configs"][:2], t["configs"][2]
        assert all(e["ok"] and e["time_ms"] > 0 and not e["error"] for e in good)
        assert not wrong["ok"] and wrong["time_ms"] is None and wrong["error"].startswith("wrong result")
        assert t["best"] == min(good, key=lambda e: e["time_ms"])["config"]
    for row, t in zip(result["report_rows"], tuning):
        assert row["config"] == protocol.config_label(t["best"])
    by_version = {(b["case"], b["dtype"], b["version"]): b for b in result["bench"]}
    assert by_version[("3x5", "float32", "kernel")]["config"] == result["report_rows"][0]["config"]
    assert by_version[("3x5", "float32", "kernel@r1")]["config"] is None      # older revisions: default path
    assert any(w.startswith("config BLOCK=32 SUB=1 never chosen: at 3x5 float32 and 3 more case(s): wrong result")
               for w in result["warnings"]), result["warnings"]
    assert "Tuned: each of the kernel's 3 configs" in result["timing_note"]
    assert base64.b64decode(result["chart_png_b64"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_config_that_raises_failed_and_is_not_called_wrong():
    # BLOCK=48 is no power of two: tl.arange raises, as a config out of shared memory does on a GPU.
    kernel = TUNED_ADD.replace('{"BLOCK": 32, "SUB": 1}]', '{"BLOCK": 32, "SUB": 1}, {"BLOCK": 48}]')
    job = {"job_id": "t-raise", "kind": "benchmark", "backend": "cpu", "attempt": 1, "timeout_s": 120,
           "files": bench_files(kernel, versions=["torch", "kernel"])}
    result = worker.execute_job(job, lambda line: None)
    assert result["status"] == "pass", result["summary"]
    for t in result["tuning"]:
        wrong, raised = t["configs"][2:]
        assert wrong["error"].startswith("wrong result: ") and "outside tolerance" in wrong["error"]
        assert raised["error"].startswith("failed: raised ") and not raised["ok"], raised["error"]
    assert any(w.startswith("config BLOCK=48 never chosen") and ": failed: raised " in w for w in result["warnings"])


def test_bad_configs_are_a_warning_and_the_kernel_is_timed_untuned():
    kernel = TUNED_ADD.replace('CONFIGS = [{"BLOCK": 16', 'CONFIGS = [{"BLOCK": 1.5}, {"BLOCK": 16')
    result = run("benchmark", bench_files(kernel, versions=["kernel"], cases=[0], dtypes=["float32"]))
    assert result["status"] == "pass", result["summary"]
    assert result["tuning"] == [] and result["report_rows"][0]["kernel_ms"] > 0
    assert "the kernel is not tuned: CONFIGS holds {'BLOCK': 1.5}, not a flat dict of ints" in result["warnings"]


@pytest.mark.parametrize("configs, problem", [
    ({"BLOCK": 16}, "must be a list of 1 to 32"),
    ([], "must be a list of 1 to 32"),
    ([{"BLOCK": 16}] * 33, "must be a list of 1 to 32"),
    ([{}], "not a flat dict of ints"),
    ([{"BLOCK": True}], "not a flat dict of ints"),
    ([{"BLOCK": [16]}], "not a flat dict of ints"),
    ([{"BLOCK": 16, "num_warps": 4}], ""),
])
def test_config_problem(configs, problem):
    assert problem in harness.config_problem(configs) and bool(problem) == bool(harness.config_problem(configs))


# --- the pieces -------------------------------------------------------------------------------

SPEC = json.loads((ADD / "spec.json").read_text())


def test_odd_case_keeps_broadcast_relations():
    first = Case(0, {"x": [64, 128], "b": [128], "s": [1, 128]})
    assert inputs.odd_case(first, 1).shapes == {"x": [37, 97], "b": [97], "s": [1, 97]}


def test_odd_and_shrunk_cases_keep_fixed_sizes_and_the_least_size():
    first = Case(0, {"x": [16, 64, 256, 256], "w": [128, 64, 3, 3]})
    assert inputs.odd_case(first, 1, [128, 64, 3], 11).shapes == {"x": [37, 64, 97, 97], "w": [128, 64, 3, 3]}
    shrunk = inputs.shrink(first, 65536, [128, 64, 3], 5)
    assert shrunk.shapes["w"] == [128, 64, 3, 3] and shrunk.shapes["x"][1] == 64
    assert 16 * 64 * 256 * 256 > math.prod(shrunk.shapes["x"]) and min(shrunk.shapes["x"]) >= 5
    # Fixed sizes alone over the limit: shrinking stops rather than loop.
    assert inputs.shrink(Case(0, {"w": [512, 512, 3, 3]}), 1000, [512, 3]).shapes == {"w": [512, 512, 3, 3]}


def test_the_runner_writes_its_own_module_call_over_any_a_job_brings():
    files = worker.job_files({"files": {"module_call.py": "def module_call(*a):\n    return lambda *x: 0\n"},
                              "kernels": {}})
    assert files["module_call.py"] == (Path(worker.__file__).with_name("module_call.py")).read_text()


def test_cpu_shrinks_big_cases_and_says_so():
    spec = {"inputs": [{"name": "x", "dtypes": ["float16"], "shapes": [[4096, 4096]]},
                       {"name": "b", "dtypes": ["float16"], "shapes": [[4096]]}]}
    cases, notes = inputs.bench_cases(spec, "cpu")
    assert cases[0].shapes == {"x": [256, 256], "b": [256]}
    assert notes == ["cpu backend: case 4096x4096 (b:4096) shrunk to 256x256 (b:256) for the interpreter"]
    assert inputs.bench_cases(spec, "cuda")[0][0].shapes == {"x": [4096, 4096], "b": [4096]}


def test_inputs_follow_domain_dtype_and_seed():
    spec = {"inputs": [{"name": "p", "dtypes": ["float16"], "shapes": [[64, 64]], "domain": "positive"},
                       {"name": "z", "dtypes": ["float32"], "shapes": [[64, 64]], "domain": "nonzero"}]}
    case, variant = protocol.cases(spec)[0], protocol.dtype_variants(spec)[0]
    p, z = inputs.make_inputs(spec, case, variant, 0, "cpu")
    assert p.dtype == torch.float16 and z.dtype == torch.float32
    assert p.min() >= 0.5 and p.max() <= 2   # [0.5, 2), rounded to float16
    assert z.abs().min() >= 0.5 and (z < 0).any() and (z > 0).any()
    again = inputs.make_inputs(spec, case, variant, 0, "cpu")
    other = inputs.make_inputs(spec, case, variant, 1, "cpu")
    assert torch.equal(p, again[0]) and not torch.equal(p, other[0])


def test_a_tensor_compared_with_zero_is_drawn_half_zeros_and_the_rest_normal():
    spec = {"inputs": [{"name": "m", "dtypes": ["float32"], "shapes": [[64, 128]], "domain": "zeros"}]}
    case, variant = protocol.cases(spec)[0], protocol.dtype_variants(spec)[0]
    m, = inputs.make_inputs(spec, case, variant, 0, "cpu")
    assert 0.4 < float((m == 0).float().mean()) < 0.6 and (m < -1).any() and (m > 1).any()


def test_a_mask_is_drawn_as_bools_stays_bool_for_the_ground_truth_and_keeps_its_broadcast():
    spec = {"inputs": [{"name": "x", "dtypes": ["float16"], "shapes": [[64, 128]]},
                       {"name": "m", "dtypes": ["bool"], "shapes": [[128]], "domain": "mask"}]}
    case, variant = protocol.cases(spec)[0], protocol.dtype_variants(spec)[0]
    x, m = inputs.make_inputs(spec, case, variant, 0, "cpu")
    assert m.dtype == torch.bool and list(m.shape) == [128] and 0.3 < m.float().mean() < 0.7
    assert harness.upcast([x, m])[1] is m and protocol.variant_label(variant) == "float16"
    assert inputs.odd_case(case, 1).shapes == {"x": [37, 97], "m": [97]}
    assert inputs.shrink(Case(0, {"x": [4096, 4096], "m": [4096]}), 65536).shapes == {"x": [256, 256], "m": [256]}


def test_poisoned_memory_makes_fresh_tensors_nan_and_is_undone_after():
    with untrusted.poisoned_memory(torch.Size([7, 9]), torch.float16, "cpu"):
        assert torch.empty(7, 9, dtype=torch.float16).isnan().all()
        assert torch.empty_like(torch.zeros(1000)).isnan().all()
    assert not torch.are_deterministic_algorithms_enabled()


def test_compare_handles_nan_inf_and_reports_the_worst_element():
    want = torch.tensor([[1.0, float("inf")], [float("nan"), 2.0]], dtype=torch.float64)
    same = harness.compare(want.float(), want, torch.float32, 1)
    assert not same.problem
    got = torch.tensor([[1.0, float("inf")], [float("nan"), 2.5]])
    check = harness.compare(got, want, torch.float32, 1)
    assert check.tolerance_only and "1 of 4 elements outside tolerance" in check.problem
    assert check.worst == "at (1, 1): got 2.5, want 2"
    unwritten = torch.tensor([[1.0, float("nan")], [float("nan"), 2.0]])
    assert "1 of 4 output elements are NaN" in harness.compare(unwritten, want, torch.float32, 1).problem


def test_a_chain_of_products_keeps_rounded_intermediates_and_is_judged_at_their_scale():
    # (x @ w1) @ w2 in float16 keeps x @ w1 in float16, as torch does: that rounding reaches the
    # output at the scale of the terms the second product sums, where its result may cancel.
    def judged(out: torch.Tensor, stages: int) -> str:
        spec = {"name": "c", "expression": "matmul(matmul(x, w1), w2)", "chain": stages, "matmul": True,
                "reduce": {"lengths": [256]}, "inputs": []}
        ctx = harness.Context(jobdir=Path("."), spec=spec, backend="cpu", device="cpu")
        return harness.compare_to_reference(ctx, [x, w1, w2], out, want, want.half()).problem

    gen = torch.Generator().manual_seed(0)
    x, w1, w2 = (torch.randn(s, generator=gen).half() for s in ((64, 128), (128, 256), (256, 32)))
    want = (x.double() @ w1.double()) @ w2.double()
    honest = ((x.float() @ w1.float()).half().float() @ w2.float()).half()
    assert judged(honest, 2) == "" and judged(honest, 1) != ""      # one kernel's own rounding is not a chain's
    wrong = honest.clone()
    wrong[3, 5] += 0.01 * float(want.abs().max())          # off by 1% of the output's scale: still caught
    assert "1 of 2048 elements outside tolerance" in judged(wrong, 2)


def test_compare_takes_the_infinity_a_float16_result_rounds_to_but_no_other():
    want = torch.tensor([1.6e6, 6.0e4, 1.0e6, 3.0], dtype=torch.float64)
    inf = float("inf")
    assert not harness.compare(torch.tensor([inf, 6.0e4, inf, 3.0]).half(), want, torch.float16, 10**6).problem
    assert "1 of 4" in harness.compare(torch.tensor([inf, inf, inf, 3.0]).half(), want, torch.float16, 10**6).problem
    assert "1 of 4" in harness.compare(torch.tensor([inf, 6.0e4, -inf, 3.0]).half(), want, torch.float16, 10**6).problem
    assert "2 of 4" in harness.compare(torch.tensor([inf, 6.0e4, inf, 3.0]), want, torch.float32, 10**6).problem


def test_compare_holds_a_bool_output_exactly():
    want = torch.tensor([[True, False], [False, True]])
    assert not harness.compare(want.clone(), want, torch.bool, 1000).problem
    check = harness.compare(~want, want, torch.bool, 1000)
    assert "4 of 4 elements outside tolerance (rtol 0.0e+00, atol 0.0e+00)" in check.problem


def test_reduction_tolerance_uses_the_reduced_length():
    args = [torch.zeros(8, 1000)]
    assert harness.reduce_len({}, args, 8) == 1000
    assert harness.reduce_len({}, args, 8000) == 1
    # The spec's "reduce" names the inputs and dim: a sum over dim 0, a matmul's K.
    spec = {"inputs": [{"name": "x"}], "reduce": {"inputs": ["x"], "dim": 0}}
    assert harness.reduce_len(spec, args, 1000) == 8
    mm = {"inputs": [{"name": "a"}, {"name": "b"}], "reduce": {"inputs": ["a"], "dim": -1}}
    assert harness.reduce_len(mm, [torch.zeros(4, 96), torch.zeros(96, 7)], 28) == 96


# --- on a GPU ---------------------------------------------------------------------------------

def big_spec() -> str:
    spec = json.loads((ADD / "spec.json").read_text())
    for inp in spec["inputs"]:
        inp["shapes"] = [[3, 5], [8192, 8192]]
    spec.pop("outputs")
    return json.dumps(spec)


@pytest.mark.gpu
@pytest.mark.timing
def test_benchmark_on_cuda_measures_copy_bandwidth_and_checked_timings():
    files = {**add_files("kernel.py", "bench_plan.json"), "spec.json": big_spec()}
    plan = json.loads(files["bench_plan.json"])
    plan["compile_mode"] = "default"    # max-autotune compiles take minutes; the mode is the plan's choice
    files["bench_plan.json"] = json.dumps(plan)
    result = run("benchmark", files, backend="cuda", timeout_s=600, kernels={"r1": files["kernel.py"]})
    assert result["status"] == "pass", result["summary"]
    assert result["copy_gbps"] > 1000 and "judge's wall clock" in result["timing_note"]
    assert "GPU time" in result["timing_note"]
    assert "H" in result["device"] or "NVIDIA" in result["device"]
    big = [b for b in result["bench"] if b["case"] == "8192x8192"]
    assert {b["dtype"] for b in big} == {"float32", "float16", "bfloat16"}
    for b in big:
        assert b["ok"] and b["ms"] > 0 and b["judge_gpu_ms"] > 0, b
        assert b["basis"] == "GPU" and b["time_ms"] == b["gpu_ms"] > 0
        assert not b["implausible"] and 0 < b["pct_of_copy"] <= 105
    kernel = [b for b in big if b["version"] == "kernel"]
    assert all(b["gbps"] > 0.3 * result["copy_gbps"] for b in kernel), kernel
    assert all(r["speedup"] and r["compile_ms"] and r["speedup_per_call"] for r in result["report_rows"])


@pytest.mark.gpu
def test_cuda_correctness_runs_bf16_and_catches_unwritten_output():
    good = run("kernel_test", add_files("kernel.py", "test_kernel.py"), backend="cuda")
    assert good["status"] == "pass", good["summary"]
    assert not any(r["skipped"] for r in good["correctness"])
    assert good["launches_counted"] and "launched its Triton kernels (counted in the CUDA driver)" in good["summary"]
    bad = run("verify", {**add_files(), "kernel.py": (BAD / "half_written.py").read_text()}, backend="cuda")
    assert bad["status"] == "fail" and "NaN where the reference is finite" in bad["summary"]


def bf16_only_spec() -> str:
    spec = json.loads((ADD / "spec.json").read_text())
    for inp in spec["inputs"]:
        inp["dtypes"] = ["bfloat16"]
    spec.pop("outputs", None)
    return json.dumps(spec)


def test_bf16_only_spec_is_checked_as_float32_on_the_interpreter():
    good = run("verify", {**add_files("kernel.py"), "spec.json": bf16_only_spec()})
    assert good["status"] == "pass", good["summary"]
    assert all(not r["skipped"] and "checked as float32" in r["reason"] for r in good["correctness"])
    bad = run("verify", {**add_files(), "spec.json": bf16_only_spec(),
                         "kernel.py": (BAD / "wrong_math.py").read_text()})
    assert bad["status"] == "fail"


def test_a_runner_without_bubblewrap_refuses_generated_code_and_says_how_to_get_it(monkeypatch):
    monkeypatch.setenv("KERNELBOT_BWRAP", "/nonexistent/bwrap")
    sandbox.isolation.cache_clear()
    try:
        result = run("verify", add_files("kernel.py"))
    finally:
        monkeypatch.undo()
        sandbox.isolation.cache_clear()
    assert result["status"] == "error" and result["correctness"] == []
    assert result["summary"].startswith("this runner cannot run generated code: ")
    assert "apt-get install bubblewrap" in result["summary"], result["summary"]


def bench_result(**kernel_row) -> dict:
    rows = [{"case": "4096", "dtype": "float32", "version": v, "ok": True, "error": "", "implausible": False,
             "gbps": 3000.0} for v in ("torch", "kernel")]
    rows[1].update(kernel_row)
    report = [{"case": "4096", "dtype": "float32", "speedup": 2.0, "speedup_vs_compile": None}]
    return {"bench": rows, "report_rows": report, "warnings": [], "backend": "cuda", "copy_gbps": 4000.0}


def test_a_timing_above_the_copy_bandwidth_fails_until_a_person_accepts_it():
    status, summary = worker.bench_verdict(bench_result(implausible=True, gbps=9000.0))
    assert status == "fail" and "9000 GB/s is above the copy bandwidth" in summary
    assert '"accept_implausible": true' in summary
    accepted = {**bench_result(implausible=True, gbps=9000.0), "accept_implausible": True}
    status, summary = worker.bench_verdict(accepted)
    assert status == "pass" and "accepted by the bench plan" in summary


def test_a_baseline_whose_timing_the_judge_rejects_fails_the_benchmark():
    result = bench_result()
    result["bench"][0].update(ok=False, rejected=True, error="timing rejected: the worker's GPU time ...")
    status, summary = worker.bench_verdict(result)
    assert status == "fail" and summary.startswith("torch at 4096 float32: timing rejected")


# --- several outputs: torch.max(x, dim)'s values and indices -----------------------------------

def values_and_indices_files(wrap: str = "") -> dict[str, str]:
    """spec.json, reference.py and kernel.py of torch.max(x, dim=1) whole, the kernel's entry
    rewrapped by wrap (a replacement of it in terms of the right one, _right)."""
    from bot import ir, lower_torch
    from bot.request import parse_request
    from bot.spec import parse_expression
    spec, _ = parse_request("max and argmax over dim 1 of 5x37 and 3x4x9, fp32")
    node = parse_expression(spec)
    kernel = ir.kernel_source(spec, node, {})
    if wrap:
        kernel += f"\n\n_right = {spec['name']}\n\n\ndef {spec['name']}(x, *, config=None):\n{wrap}\n"
    return {"spec.json": json.dumps(spec), "reference.py": lower_torch.reference_source(spec, node), "kernel.py": kernel}


def test_values_and_indices_pass_when_both_are_right():
    result = run("verify", values_and_indices_files())
    assert result["status"] == "pass", result["summary"]


@pytest.mark.parametrize("wrap, says", [
    ("    return _right(x, config=config)[0]", "returned one tensor but the reference gives a tuple of 2 tensors"),
    ("    v, i = _right(x, config=config)\n    return i, v", "output 1's dtype torch.int64 but the reference gives torch.float32"),
    ("    v, i = _right(x, config=config)\n    return v, (i + 1) % x.shape[1]", "output 2 (indices): "),
    ("    v, i = _right(x, config=config)\n    return v, torch.empty_like(i)", "output 2 (indices): "),
    ("    v, i = _right(x, config=config)\n    return v, i, i", "returned a tuple of 3 tensors"),
    ("    v, i = _right(x, config=config)\n    return v, i.tolist()", "returned a tuple holding list, not a plain tensor"),
])
def test_values_and_indices_fail_when_either_is_wrong_or_missing(wrap, says):
    result = run("verify", values_and_indices_files(wrap), static_check=False)
    assert result["status"] == "fail" and says in result["summary"], result["summary"]
