"""The trusted harness: correctness and timing of generated code, measured by the runner itself.

Runs inside the sandbox as ``python -m runner.harness JOBDIR``. Reads JOBDIR/harness_config.json
(mode, backend, kernel versions) and the job's files, prints ``PROGRESS <stage> i/n <case> <dtype>``
lines on stdout, and rewrites JOBDIR/harness_result.json after every row, so whatever finished
before a hang or a crash is still there. Never generated; generated files are imported as
separate modules and only ever called with the inputs of one check.

Modes: ``correctness`` (the kernel against the float64 reference), ``reference`` (the reference
itself: it runs, keeps its inputs, gives finite values; its own low-precision rounding is only
reported) and ``benchmark`` (timing of torch, torch.compile and every kernel version, with the
clocks of runner.timers). A kernel
with a config space (CONFIGS, docs/CONTRACTS.md) is tuned in the benchmark first: every config
checked and timed on each case, the kernel rows timed with the fastest correct one.
"""
from __future__ import annotations

import functools
import importlib.util
import inspect
import itertools
import json
import os
import sys
import traceback
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.utils.deterministic

from runner import guard, inputs, jobfiles, protocol, timers
from runner.protocol import Case

SEEDS = (0, 1, 2)
INTERPRETER = os.environ.get("TRITON_INTERPRET") == "1"
BF16_SKIP = ("bfloat16 under the Triton CPU interpreter: it computes bfloat16 wrongly (NaN); "
             "a GPU runner checks it")
BF16_AS_FP32 = ("checked as float32: Triton's CPU interpreter computes bfloat16 wrongly; "
                "a GPU runner checks bfloat16 itself")
CPU_NOTE = "Triton interpreter on CPU: timings say nothing about GPU speed"
IMPLAUSIBLE = 1.05      # achieved bandwidth above this multiple of a plain copy means skipped work
TUNE_REPS = 30          # GPU-time calls per config in the sweep: enough to rank, cheap to repeat
TUNE_CPU_RUNS = 2


class LoadError(Exception):
    """A generated file does not import or lacks its function."""


class DeviceLost(Exception):
    """A kernel broke the CUDA context; nothing more can run in this process."""


@dataclass
class Check:
    problem: str = ""               # empty when the output is right
    tolerance_only: bool = False    # the only problem is values outside tolerance
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    worst: str = ""


@dataclass
class Context:
    jobdir: Path
    spec: dict
    backend: str
    device: str                     # torch device: "cuda" or "cpu"
    reference: Callable | None = None
    result: dict = field(default_factory=dict)
    configs: list[dict] = field(default_factory=list)     # the kernel's CONFIGS, when it is tuned

    def save(self) -> None:
        jobfiles.write_json(self.jobdir / jobfiles.RESULT, self.result)

    def warn(self, text: str) -> None:
        if text not in self.result["warnings"]:
            self.result["warnings"].append(text)


def progress(stage: str, i: int, n: int, case: str, dtype: str) -> None:
    print(f"PROGRESS {stage} {i}/{n} {case} {dtype}", flush=True)


def describe(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:240]


# --- loading generated code ---------------------------------------------------------------

def load_function(path: Path, name: str) -> Callable:
    """Import a generated file as a module of its own and return its function `name`; a file that
    would patch what measures it (runner.guard) is refused unrun."""
    refused = guard.findings(path.read_text())
    if refused:
        raise LoadError(f"{path.name} is refused before import: {guard.summary(refused)}")
    module_name = f"kernelbot_job_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module     # Triton's jit and dataclasses look modules up by name
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        raise LoadError(f"{path.name} does not import: {describe(e)}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise LoadError(f"{path.name} defines no function {name}()")
    return fn


# --- one call, one comparison ---------------------------------------------------------------

@contextmanager
def poisoned_memory(shape: torch.Size, dtype: torch.dtype, device: str):
    """Make memory the kernel allocates for its output hold NaN, so unwritten elements show.

    The kernel allocates its own output, so the harness poisons allocations, in two layers:
    1. A NaN-filled block of exactly the output's size and dtype is allocated and freed right
       before the call. The next allocation of that size gets the same memory back: reliably
       under CUDA's caching allocator, usually (best effort) under glibc malloc on CPU.
    2. torch's deterministic mode with fill_uninitialized_memory makes torch.empty, empty_like
       and empty_strided fill new floating-point tensors with NaN on any device. warn_only, so
       no operation is refused; restored after the call.
    """
    if dtype.is_floating_point:
        torch.full(shape, float("nan"), dtype=dtype, device=device)   # allocated, then freed at once
    det = torch.utils.deterministic
    was_on, was_warn_only, was_filling = (torch.are_deterministic_algorithms_enabled(),
                                          torch.is_deterministic_algorithms_warn_only_enabled(),
                                          det.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=was_warn_only)
        det.fill_uninitialized_memory = was_filling


def call(fn: Callable, args: list[torch.Tensor], names: list[str], like: torch.Tensor, device: str):
    """Call generated code on poisoned memory; returns (output, problem) where problem is '' if
    the call returned and left its inputs bit for bit as they were."""
    before = [a.clone() for a in args]
    try:
        with poisoned_memory(like.shape, like.dtype, device):
            out = fn(*args)
            if device == "cuda":
                torch.cuda.synchronize()     # surface asynchronous errors here, not later
    except (Exception, SystemExit) as e:
        if isinstance(e, torch.OutOfMemoryError):
            torch.cuda.empty_cache()
        if device == "cuda" and not _device_usable():
            raise DeviceLost(f"raised {describe(e)}") from None
        return None, f"raised {describe(e)}"
    changed = [n for n, a, b in zip(names, args, before) if not torch.equal(a, b)]
    if changed:
        return out, f"modified its input {', '.join(changed)} (inputs must stay unchanged)"
    return out, ""


def _device_usable() -> bool:
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
        return True
    except Exception:
        return False


def reduce_len(spec: dict, args: list[torch.Tensor], out_numel: int) -> int:
    """How many elements each output accumulates over (the spec's "reduce": a dim of some inputs,
    a matmul's K); without it, the last dim when the output is smaller than the largest input."""
    if spec.get("reduce"):
        by_name = {i["name"]: a for i, a in zip(spec["inputs"], args)}
        reduce = spec["reduce"]
        return torch.broadcast_shapes(*(by_name[n].shape for n in reduce["inputs"]))[reduce["dim"]]
    largest = max(args, key=lambda t: t.numel())
    return largest.shape[-1] if largest.dim() and out_numel < largest.numel() else 1


def upcast(args: list[torch.Tensor]) -> list[torch.Tensor]:
    """float64 copies of the float inputs for the ground truth; class indices stay int64."""
    return [a.double() if a.is_floating_point() else a for a in args]


def checked_call(ctx: Context, fn: Callable, args: list[torch.Tensor], expected: torch.Tensor,
                 native: torch.Tensor) -> tuple[object, Check]:
    """Call generated code (see call) and compare its output with the float64 reference."""
    out, problem = call(fn, args, [i["name"] for i in ctx.spec["inputs"]], native, ctx.device)
    if problem:
        return out, Check(problem)
    rlen = reduce_len(ctx.spec, args, expected.numel())
    return out, compare(out, expected, native.dtype, rlen, bool(ctx.spec.get("tf32")), bool(ctx.spec.get("matmul")))


def _index(flat: int, shape: torch.Size) -> str:
    idx = []
    for size in reversed(shape):
        idx.append(flat % size)
        flat //= size
    return "(" + ", ".join(map(str, reversed(idx))) + ")"


def compare(out, expected: torch.Tensor, want_dtype: torch.dtype, rlen: int, tf32: bool = False,
            matmul: bool = False) -> Check:
    """The output against the float64 reference: shape, dtype, then every element within
    atol + rtol * |ref| (NaN never passes unless the reference is NaN there too)."""
    if not isinstance(out, torch.Tensor):
        return Check(f"returned {type(out).__name__}, not a tensor")
    if out.shape != expected.shape:
        return Check(f"output shape {list(out.shape)} but the reference gives {list(expected.shape)}")
    if out.dtype != want_dtype:
        return Check(f"output dtype {out.dtype} but the reference gives {want_dtype}")
    if out.device != expected.device:
        return Check(f"output on {out.device} but the inputs are on {expected.device}")
    name = inputs.dtype_name(out.dtype) or "float32"
    rtol, atol = protocol.tolerance(name, rlen, tf32, matmul) if out.is_floating_point() else (0.0, 0.0)
    got, want = out.double(), expected.double()
    err, tol = (got - want).abs(), atol + rtol * want.abs()
    ok = (err <= tol) | (got == want) | (got.isnan() & want.isnan())
    # rel err: against |ref|, but no smaller than the magnitude below which atol dominates
    rel = err / want.abs().clamp(min=atol / rtol if rtol else 1e-30)
    finite = err.isfinite()
    # The worst element is the one furthest beyond its tolerance; failing ones outrank passing ones.
    scale = err / tol.clamp(min=1e-300)
    score = torch.where(ok, scale.nan_to_num(0.0, 0.0, 0.0).clamp(max=1.0), 1.0 + scale.nan_to_num(float("inf")))
    flat = int(score.flatten().argmax())
    check = Check(max_abs_err=float(err[finite].max()) if finite.any() else 0.0,
                  max_rel_err=float(rel[finite].max()) if finite.any() else 0.0,
                  worst=f"at {_index(flat, out.shape)}: got {got.flatten()[flat].item():.8g}, "
                        f"want {want.flatten()[flat].item():.8g}")
    nan_bad = got.isnan() & ~want.isnan()
    n_bad, total = int((~ok).sum()), out.numel()
    if nan_bad.any():
        check.problem = (f"{int(nan_bad.sum())} of {total} output elements are NaN where the reference is "
                         f"finite, first at {_index(int(nan_bad.flatten().nonzero()[0]), out.shape)}: "
                         "output never written (fresh memory is NaN-poisoned) or NaN computed")
    elif n_bad:
        check.problem = (f"{n_bad} of {total} elements outside tolerance (rtol {rtol:.1e}, atol {atol:.1e}); "
                         f"worst {check.worst}")
        check.tolerance_only = True
    return check


# --- correctness ---------------------------------------------------------------------------

def new_row(case: Case, dtype: str) -> dict:
    return {"case": case.label, "dtype": dtype, "ok": True, "skipped": False, "reason": "",
            "max_abs_err": 0.0, "max_rel_err": 0.0, "worst": "", "seeds": list(SEEDS)}


def check_row(ctx: Context, fn: Callable, case: Case, variant: dict[str, str], is_reference: bool) -> dict:
    """One case x dtype variant over every seed; stops at the first seed that fails."""
    dtype = protocol.variant_label(variant)
    row = new_row(case, dtype)
    if INTERPRETER and not is_reference and "bfloat16" in variant.values():
        if any("bfloat16" not in v.values() for v in protocol.dtype_variants(ctx.spec)):
            return {**row, "skipped": True, "reason": BF16_SKIP, "seeds": []}
        # A bf16-only spec would check nothing here: run the same kernel on float32 instead.
        variant = {name: "float32" if d == "bfloat16" else d for name, d in variant.items()}
        row["reason"] = BF16_AS_FP32
    for k, seed in enumerate(SEEDS):
        row["seeds"] = list(SEEDS[:k + 1])     # the seeds actually checked
        args = inputs.make_inputs(ctx.spec, case, variant, seed, ctx.device)
        try:
            expected = ctx.reference(*upcast(args))
            native = ctx.reference(*args)
        except (Exception, SystemExit) as e:
            return {**row, "ok": False, "reason": f"the reference raised {describe(e)} (seed {seed})"}
        if not isinstance(native, torch.Tensor):
            return {**row, "ok": False, "reason": f"the reference returned {type(native).__name__}, not a tensor"}
        _, check = checked_call(ctx, fn, args, expected, native)
        if check.max_rel_err >= row["max_rel_err"]:
            row["worst"] = check.worst
        row["max_abs_err"] = max(row["max_abs_err"], check.max_abs_err)
        row["max_rel_err"] = max(row["max_rel_err"], check.max_rel_err)
        if is_reference and check.tolerance_only:
            ctx.warn(f"the reference in {dtype} differs from its float64 result at {case.label} beyond the "
                     f"kernel tolerance ({check.problem}); that is torch's own rounding, kernels are held "
                     "to the float64 result")
        elif check.problem:
            return {**row, "ok": False, "reason": f"{check.problem} (seed {seed})"}
    return row


def run_correctness(ctx: Context, fn: Callable, is_reference: bool) -> None:
    cases, notes = inputs.correctness_cases(ctx.spec, ctx.backend)
    for note in notes:
        ctx.warn(note)
    variants = protocol.dtype_variants(ctx.spec)
    todo = list(itertools.product(cases, variants))
    for i, (case, variant) in enumerate(todo, 1):
        progress("correctness", i, len(todo), case.label, protocol.variant_label(variant))
        lost = False
        try:
            row = check_row(ctx, fn, case, variant, is_reference)
        except DeviceLost as e:
            row, lost = {**new_row(case, protocol.variant_label(variant)), "ok": False, "reason": str(e)}, True
            ctx.warn("the CUDA context was lost after this error; the remaining cases were not run")
        ctx.result["correctness"].append(row)
        ctx.save()
        if lost:
            return


# --- timing --------------------------------------------------------------------------------

def select_cases(ctx: Context, wanted) -> list[Case]:
    cases, notes = inputs.bench_cases(ctx.spec, ctx.backend)
    for note in notes:
        ctx.warn(note)
    if wanted in (None, "all"):
        return cases
    labels = [c.label for c in protocol.cases(ctx.spec)]
    return [c for i, c in enumerate(cases) if i in wanted or labels[i] in wanted]


def select_variants(spec: dict, wanted) -> list[dict[str, str]]:
    variants = protocol.dtype_variants(spec)
    if wanted in (None, "all"):
        return variants
    names = {protocol.canonical_dtype(d) for d in wanted}
    return [v for v in variants if set(v.values()) & names]


def make_compiled(ctx: Context, plan: dict) -> Callable | None:
    if not protocol.benchmarks_compile(ctx.device):
        ctx.warn("torch.compile skipped on the cpu backend (a runner with KERNELBOT_CPU_COMPILE=1 includes it)")
        return None
    # A fresh compile per case x dtype (after torch.compiler.reset) so dynamo's recompile
    # limit never silently falls back to eager.
    torch.compiler.reset()
    return torch.compile(ctx.reference, mode=plan.get("compile_mode", "max-autotune-no-cudagraphs"), dynamic=False)


def bench_row(case: Case, dtype: str, version: str) -> dict:
    return {"case": case.label, "dtype": dtype, "version": version, "ms": None, "cudagraph_ms": None,
            "gpu_ms": None, "time_ms": None, "basis": None, "gbps": None, "pct_of_copy": None, "implausible": False,
            "ok": True, "error": "", "config": None}


def time_version(row: dict, fn: Callable, timer: Callable, timing: dict) -> dict:
    try:
        return {**row, **timer(fn, timing)}
    except Exception as e:
        return {**row, "ok": False, "error": f"timing failed: {describe(e)}"}


def settle_basis(rows: list[dict], nbytes: int, ceiling: float, flops: int = 0) -> None:
    """Compare a case's versions on GPU time (L2 flushed, launch overhead hidden) when each timed
    version has it, else on wall-clock time (the cpu backend). Bandwidth, its share of the copy
    ceiling and plausibility follow from the basis."""
    timed = [r for r in rows if r.get("ms")]
    gpu = bool(timed) and all(r.get("gpu_ms") for r in timed)
    for r in timed:
        t = r["gpu_ms"] if gpu else r["ms"]
        gbps = nbytes / (t * 1e-3) / 1e9
        r.update(time_ms=t, basis="GPU" if gpu else "wall-clock", gbps=gbps,
                 pct_of_copy=100 * gbps / ceiling, implausible=gbps > IMPLAUSIBLE * ceiling)
        if flops:
            r["tflops"] = flops / (t * 1e-3) / 1e12


def bench_case(ctx: Context, plan: dict, versions: dict, case: Case, variant: dict[str, str],
               timer: Callable, ceiling: float, position: tuple[int, int]) -> list[dict]:
    """Every version on the same inputs; kernel versions are checked once first (a wrong one
    is flagged and not timed). The current kernel is tuned first when it has configs (position:
    the case's place among all cases, for progress)."""
    dtype = protocol.variant_label(variant)
    args = inputs.make_inputs(ctx.spec, case, variant, 0, ctx.device)
    try:
        expected = ctx.reference(*upcast(args))
        native = ctx.reference(*args)
    except (Exception, SystemExit) as e:
        ctx.warn(f"{case.label} {dtype} not timed: the reference raised {describe(e)}")
        return []
    nbytes = sum(a.numel() * a.element_size() for a in args) + native.numel() * native.element_size()
    flops = 2 * native.numel() * reduce_len(ctx.spec, args, native.numel()) if ctx.spec.get("matmul") else 0
    timing = plan.get("timing", {})
    rows = []
    for version in plan.get("versions", ["torch", "torch.compile", "kernel"]):
        row = bench_row(case, dtype, version)
        if version == "torch":
            fn = lambda: ctx.reference(*args)  # noqa: E731
        elif version == "torch.compile":
            compiled = make_compiled(ctx, plan)
            if compiled is None:
                continue
            fn = lambda: compiled(*args)  # noqa: E731
        else:
            kernel = versions.get(version)
            if not callable(kernel):
                rows.append({**row, "ok": False, "error": str(kernel or f"the job carries no {version}")})
                continue
            if version == "kernel" and ctx.configs:
                tuning = tune(ctx, kernel, args, expected, native, (case.label, dtype), position, timing)
                ctx.result["tuning"].append(tuning)
                if tuning["best"]:
                    kernel = functools.partial(kernel, config=tuning["best"])
                    row["config"] = protocol.config_label(tuning["best"])
            _, check = checked_call(ctx, kernel, args, expected, native)
            if check.problem:
                rows.append({**row, "ok": False, "error": f"{verdict(check.problem)}, not timed: {check.problem}"})
                continue
            fn = lambda kernel=kernel: kernel(*args)  # noqa: E731
        rows.append(time_version(row, fn, timer, timing))
    settle_basis(rows, nbytes, ceiling, flops)
    return rows


def verdict(problem: str) -> str:
    """What a check's problem makes of a version: 'failed' where the call raised (out of shared
    memory, a compile error), 'wrong result' where it returned something wrong."""
    return "failed" if problem.startswith("raised ") else "wrong result"


def tune(ctx: Context, kernel: Callable, args: list[torch.Tensor], expected: torch.Tensor, native: torch.Tensor,
         where: tuple[str, str], position: tuple[int, int], timing: dict) -> dict:
    """Every config of the kernel on one case x dtype: checked against the float64 reference (a
    wrong one is flagged and never wins), then timed briefly; the fastest correct one is best."""
    entries = []
    for k, config in enumerate(ctx.configs, 1):
        entry = {"config": config, "label": protocol.config_label(config), "time_ms": None, "ok": False, "error": ""}
        progress("tuning", (position[0] - 1) * len(ctx.configs) + k, position[1] * len(ctx.configs), where[0],
                 f"{where[1]} {entry['label']}")
        fn = functools.partial(kernel, config=config)
        _, check = checked_call(ctx, fn, args, expected, native)
        if check.problem:
            entry["error"] = f"{verdict(check.problem)}: {check.problem}"
        else:
            try:
                entry.update(ok=True, time_ms=sweep_time(ctx.device, lambda: fn(*args), timing))
            except Exception as e:
                entry.update(ok=False, error=f"timing failed: {describe(e)}")
        entries.append(entry)
    best = min((e for e in entries if e["ok"]), key=lambda e: e["time_ms"], default=None)
    return {"case": where[0], "dtype": where[1], "key": protocol.tuning_key(args), "configs": entries,
            "best": best["config"] if best else None}


def sweep_time(device: str, fn: Callable, timing: dict) -> float:
    """One config's time in the sweep, in ms: GPU time over a few calls, or wall clock on cpu."""
    if device == "cuda":
        return timers.gpu_time(fn, timing.get("tune_reps", TUNE_REPS))
    return timers.time_cpu(fn, {"cpu_runs": TUNE_CPU_RUNS})["ms"]


def kernel_configs(ctx: Context, kernel: Callable) -> list[dict]:
    """The kernel's CONFIGS when it is to be tuned; [] without them, or with a warning when they
    break the contract (the kernel is then timed on its default path)."""
    configs = getattr(kernel, "__globals__", {}).get("CONFIGS")
    if configs is None:
        return []
    problem = config_problem(configs)
    if not problem and "config" not in inspect.signature(kernel).parameters:
        problem = f"{ctx.spec['name']}() takes no config argument"
    if problem:
        ctx.warn(f"the kernel is not tuned: {problem}")
        return []
    return configs


def config_problem(configs) -> str:
    """Why CONFIGS breaks the tuning contract, or ''."""
    if not isinstance(configs, list) or not 1 <= len(configs) <= protocol.MAX_CONFIGS:
        return f"CONFIGS must be a list of 1 to {protocol.MAX_CONFIGS} configs"
    for config in configs:
        if not (isinstance(config, dict) and config
                and all(isinstance(k, str) and type(v) is int for k, v in config.items())):
            return f"CONFIGS holds {str(config)[:80]}, not a flat dict of ints"
    return ""


def warn_failed_configs(ctx: Context) -> None:
    """One warning per config that was wrong (or failed) somewhere: the sweep never picks it there."""
    failed: dict[str, list[tuple[str, str]]] = {}
    for tuning in ctx.result["tuning"]:
        for entry in tuning["configs"]:
            if not entry["ok"]:
                failed.setdefault(entry["label"], []).append((f"{tuning['case']} {tuning['dtype']}", entry["error"]))
    for label, where in failed.items():
        more = f" and {len(where) - 1} more case(s)" if len(where) > 1 else ""
        ctx.warn(f"config {label} never chosen: at {where[0][0]}{more}: {where[0][1]}")


def report_row(rows: list[dict], on_cpu: bool) -> dict:
    """The table row people read: the kernel against torch eager and torch.compile, on the
    case's time basis (see settle_basis), with the per-call speedup beside it."""
    by = {r["version"]: r for r in rows}
    torch_row, compile_row, kernel = by.get("torch") or {}, by.get("torch.compile") or {}, by.get("kernel") or {}
    ranked = kernel.get("ok") and kernel.get("time_ms") and not kernel.get("implausible")
    kernel_ms = kernel.get("time_ms") if ranked else None
    notes = [CPU_NOTE] if on_cpu else []
    if kernel.get("implausible"):
        notes.append(f"implausible: {kernel['gbps']:.0f} GB/s is above the measured copy bandwidth; "
                     "the kernel may skip work, so no speedup is reported")
    if kernel.get("error"):
        notes.append(f"kernel: {kernel['error']}")
    return {"case": rows[0]["case"], "dtype": rows[0]["dtype"], "basis": kernel.get("basis") or torch_row.get("basis"),
            "torch_ms": torch_row.get("time_ms"), "compile_ms": compile_row.get("time_ms"), "kernel_ms": kernel_ms,
            "speedup": _ratio(torch_row.get("time_ms"), kernel_ms),
            "speedup_vs_compile": _ratio(compile_row.get("time_ms"), kernel_ms),
            "torch_call_ms": torch_row.get("ms"), "kernel_call_ms": kernel.get("ms") if ranked else None,
            "speedup_per_call": _ratio(torch_row.get("ms"), kernel.get("ms") if ranked else None),
            "gbps": kernel.get("gbps") if ranked else None,
            "pct_of_copy": kernel.get("pct_of_copy") if ranked else None, "config": kernel.get("config"),
            "tflops": kernel.get("tflops") if ranked else None, "torch_tflops": torch_row.get("tflops"),
            "note": "; ".join(notes)}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def run_benchmark(ctx: Context, versions: dict) -> None:
    plan = json.loads((ctx.jobdir / "bench_plan.json").read_text())
    timing = plan.get("timing", {})
    on_cpu = ctx.device == "cpu"
    timer = timers.time_cpu if on_cpu else timers.time_cuda
    ceiling = timers.copy_gbps(ctx.device, timer)
    ctx.result["copy_gbps"] = ceiling
    ctx.result["timing_note"] = (
        f"{CPU_NOTE}. Wall-clock median of {timers.CPU_RUNS} interpreter runs; copy ceiling from a 64 MiB host copy"
        if on_cpu else
        f"GPU time: median of {timing.get('gpu_reps', timers.GPU_REPS)} calls between CUDA events, L2 flushed "
        "before each by a 2 GiB read (clean lines: no write-back inside the timed call) and the host kept ahead, so launch overhead is left out for every version alike; "
        f"per call: do_bench median (warmup {timing.get('warmup_ms', 25)} ms, rep {timing.get('rep_ms', 100)} ms), "
        "which includes Python launch overhead where it outlasts do_bench's flush; CUDA-graph replay "
        "median (L2 warm) in the bench rows; copy ceiling from a 1 GiB device-to-device copy, on GPU time")
    if ctx.configs:
        ctx.result["timing_note"] += (
            f". Tuned: each of the kernel's {len(ctx.configs)} configs checked against the float64 reference, "
            "then timed by " + (f"wall clock ({TUNE_CPU_RUNS} runs)" if on_cpu else
                                f"GPU time (median of {timing.get('tune_reps', TUNE_REPS)} calls)")
            + " per case; the kernel rows use the fastest correct one")
    todo = list(itertools.product(select_cases(ctx, plan.get("cases")), select_variants(ctx.spec, plan.get("dtypes"))))
    for i, (case, variant) in enumerate(todo, 1):
        dtype = protocol.variant_label(variant)
        progress("timing", i, len(todo), case.label, dtype)
        if INTERPRETER and "bfloat16" in variant.values():
            ctx.warn(f"{dtype} not timed: {BF16_SKIP}")
            continue
        try:
            rows = bench_case(ctx, plan, versions, case, variant, timer, ceiling, (i, len(todo)))
        except DeviceLost as e:
            ctx.warn(f"timing stopped at {case.label} {dtype}: a kernel {e} and the CUDA context was lost")
            return
        if rows:
            ctx.result["bench"].extend(rows)
            ctx.result["report_rows"].append(report_row(rows, on_cpu))
            ctx.save()


# --- entry point ---------------------------------------------------------------------------

def device_label(device: str) -> str:
    return torch.cuda.get_device_name(0) if device == "cuda" else "cpu (Triton interpreter)"


def load_versions(ctx: Context, files: dict[str, str]) -> dict:
    """Version label -> function, or the LoadError text for a version that does not import."""
    versions = {}
    for label, name in files.items():
        try:
            versions[label] = load_function(ctx.jobdir / name, ctx.spec["name"])
        except LoadError as e:
            versions[label] = str(e)
    return versions


def run(ctx: Context, config: dict) -> None:
    try:
        ctx.reference = load_function(ctx.jobdir / "reference.py", ctx.spec["name"])
    except LoadError as e:
        ctx.result["load_error"] = str(e)
        return
    mode = config["mode"]
    if mode == "reference":
        run_correctness(ctx, ctx.reference, is_reference=True)
        return
    versions = load_versions(ctx, config.get("kernels", {"kernel": "kernel.py"}))
    if not callable(versions.get("kernel")):
        ctx.result["load_error"] = versions.get("kernel") or "the job has no kernel.py"
        return
    if mode == "correctness":
        run_correctness(ctx, versions["kernel"], is_reference=False)
    else:
        ctx.configs = kernel_configs(ctx, versions["kernel"])
        run_benchmark(ctx, versions)
        warn_failed_configs(ctx)


def main(argv: list[str] | None = None) -> int:
    jobdir = Path((argv if argv is not None else sys.argv[1:])[0]).resolve()
    config = jobfiles.read_json(jobdir / jobfiles.CONFIG)
    spec = json.loads((jobdir / "spec.json").read_text())
    device = protocol.device_type(config["backend"])
    ctx = Context(jobdir, spec, config["backend"], device)
    # A TF32 spec is compared with eager and compiled baselines that may use TF32 too, and a plain
    # float32 one with baselines that may not (torch's default, set here explicitly).
    torch.backends.cuda.matmul.allow_tf32 = bool(spec.get("tf32"))
    ctx.result = {"done": False, "mode": config["mode"], "device": device_label(device),
                  "backend": config["backend"], "load_error": "", "harness_error": "", "correctness": [],
                  "bench": [], "report_rows": [], "tuning": [], "copy_gbps": None, "timing_note": "", "warnings": []}
    ctx.save()
    try:
        run(ctx, config)
    except Exception as e:
        traceback.print_exc()
        ctx.result["harness_error"] = describe(e)
        ctx.save()
        return 1
    ctx.result["done"] = True
    ctx.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
