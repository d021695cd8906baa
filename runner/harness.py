"""The trusted judge: correctness and timing of generated code, measured by the runner itself.

Runs as ``python -m runner.harness JOBDIR`` in a process of its own that no generated code
enters. Reads JOBDIR/harness_config.json (mode, backend, kernel versions, limits) and the job's
files, checks each generated file (runner.integrity) before anything runs it, and starts one
sandboxed worker per file (runner.workers): the reference and each kernel version (the kernel's
ghost is loaded beside the kernel). The judge makes every input, hands copies to a worker, takes the output back as raw bytes
of the dtype and shape it fixed, compares it in float64 itself, and times every version on its
own clock (runner.remote_timing). It prints ``PROGRESS <stage> i/n <case> <dtype>`` lines on
stdout and rewrites JOBDIR/harness_result.json after every row, so whatever finished before a hang
or a crash is still there; no worker can reach that directory.

Modes: ``correctness`` (the kernel against the float64 reference, then ghost replay: the kernel
with its Triton bodies emptied must no longer pass), ``reference`` (the reference itself: it runs,
keeps its inputs, gives finite values; its own low-precision rounding is only reported) and
``benchmark`` (torch, torch.compile and every kernel version). A kernel with a config space
(CONFIGS, docs/CONTRACTS.md) is tuned in the benchmark first: every config checked and timed on
each case, the kernel rows timed with the fastest correct one.
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from runner import ghost, inputs, integrity, jobfiles, launch_count, protocol, remote_timing, sandbox, spread, timers
from runner.protocol import Case
from runner.remote_timing import Loop, TimingRejected
from runner.untrusted import describe_error as describe
from runner.workers import CallFailed, Called, Output, Worker, WorkerDied, outputs

SEEDS = (0, 1, 2)
# the baselines the reference's worker times, and the function each calls there
BASELINES = {"torch": "main", "torch.compile": "compiled", "liger": "liger"}
INTERPRETER = os.environ.get("TRITON_INTERPRET") == "1"
BF16_SKIP = ("bfloat16 under the Triton CPU interpreter: it computes bfloat16 wrongly (NaN); "
             "a GPU runner checks it")
BF16_AS_FP32 = ("checked as float32: Triton's CPU interpreter computes bfloat16 wrongly; "
                "a GPU runner checks bfloat16 itself")
IMPLAUSIBLE = 1.05      # achieved bandwidth above this multiple of a plain copy means skipped work
GHOST_FILE = "kernel_ghost.py"
# A reference whose own dtype and float64 results differ by more than this (relative) computes
# something else per dtype: no rounding comes near it.
GROSS_REL_ERR = 0.25
TUNE_REPS = 30          # GPU-time calls per config in the sweep: enough to rank, cheap to repeat


class LoadError(Exception):
    """A generated file is refused, does not import or lacks its function."""


class DeviceLost(Exception):
    """A worker's CUDA context broke or its process died; nothing more can run in it."""


@dataclass
class Check:
    problem: str = ""               # empty when the output is right
    tolerance_only: bool = False    # the only problem is values outside tolerance
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    worst: str = ""
    out: Output | None = None           # the output(s) checked, when there were any


@dataclass
class Version:
    """A generated file loaded in a worker of its own: the reference, a kernel version, a ghost."""
    label: str
    worker: Worker
    configs: object = None          # its CONFIGS, as plain data, when it has them
    takes_config: bool = False
    fn: str = "main"                # its name in the worker (the ghost shares the kernel's worker)
    kernels: frozenset[str] = frozenset()   # a kernel's @triton.jit names: each checked call must launch one

    def call(self, args: list[torch.Tensor], like: torch.Tensor | None, config: dict | None = None,
             ids: list[str] | None = None, check_inputs: bool = True) -> Called:
        """One call (inputs sent back and compared unless check_inputs is off), on fresh copies of
        args or on the worker's tensors ids that hold them; DeviceLost when the worker is gone."""
        try:
            if ids is None:
                called = self.worker.call(args, like, fn=self.fn, config=config, check_inputs=check_inputs)
            else:
                called = self.worker.call_ids(ids, args, like, fn=self.fn, config=config, check_inputs=check_inputs)
        except (WorkerDied, CallFailed) as e:
            raise DeviceLost(str(e)) from None
        if called.lost:
            raise DeviceLost(f"{self.label} {called.problem}")
        return called


@dataclass
class Context:
    jobdir: Path
    spec: dict
    backend: str
    device: str                     # torch device: "cuda" or "cpu"
    config: dict = field(default_factory=dict)
    reference: Version | None = None
    result: dict = field(default_factory=dict)
    configs: list[dict] = field(default_factory=list)     # the kernel's CONFIGS, when it is tuned
    loop: Loop | None = None
    workers: list[Worker] = field(default_factory=list)
    # runner.launch_count's library, on CUDA. Every worker has it, the reference's too, so that the
    # kernel's and the baselines' timed calls run under the same (switched-off) counter.
    launch_library: Path | None = None

    def save(self) -> None:
        jobfiles.write_json(self.jobdir / jobfiles.RESULT, self.result)

    def warn(self, text: str) -> None:
        if text not in self.result["warnings"]:
            self.result["warnings"].append(text)


def progress(stage: str, i: int, n: int, case: str, dtype: str) -> None:
    print(f"PROGRESS {stage} {i}/{n} {case} {dtype}", flush=True)


# --- workers --------------------------------------------------------------------------------

def spawn(ctx: Context, role: str) -> Worker:
    """A sandboxed worker for one generated file; started at once, so their imports overlap."""
    limits = sandbox.Limits(**ctx.config.get("limits", {}))
    worker = Worker(role, ctx.jobdir / "workers", ctx.backend, ctx.config.get("gpu"), limits,
                    deadline=time.monotonic() + limits.timeout_s, launch_library=ctx.launch_library)
    ctx.workers.append(worker)
    return worker


def refusal(file: str, source: str, entry: str) -> str:
    """Why the judge will not run this generated file (runner.integrity's rules for its kind), or ''."""
    check = integrity.check_reference if file == "reference.py" else integrity.check_kernel
    found = check(source, entry)
    return f"{file} is refused before import: {integrity.summary(found)}" if found else ""


def load(ctx: Context, worker: Worker, file: str, source: str | None = None, fn: str = "main") -> Version:
    """The file's function (named after the spec) in its worker; LoadError naming what is wrong.
    The static check runs first, unless the runner's own tests turned it off to try the judge's
    runtime defences on their own (config "static_check": false; no job can set it)."""
    source = (ctx.jobdir / file).read_text() if source is None else source
    # The ghost is the judge's own transform of a kernel already checked.
    checked = ctx.config.get("static_check", True) and file != GHOST_FILE
    refused = refusal(file, source, protocol.entry(ctx.spec, file)) if checked else ""
    if refused:
        raise LoadError(refused)
    module = Path(file).stem.replace("@", "_")
    try:
        reply = worker.ok({"op": "load", "file": file, "module": module, "source": source, "as": fn,
                           "entry": protocol.entry(ctx.spec, file), "parameters": protocol.parameters(ctx.spec),
                           "device": ctx.device, "tf32": bool(ctx.spec.get("tf32"))})
    except (CallFailed, WorkerDied) as e:
        raise LoadError(str(e)) from None
    kernels = ghost.jit_names(source) if file not in ("reference.py", GHOST_FILE) else frozenset()
    return Version(worker.role, worker, reply.get("configs"), bool(reply.get("takes_config")), fn, kernels)


# --- one call, one comparison ---------------------------------------------------------------

def reduce_len(spec: dict, args: list[torch.Tensor], out_numel: int) -> int:
    """How many elements each output accumulates over (the spec's "reduce": a dim of some inputs,
    a matmul's K); without it, the last dim when the output is smaller than the largest input."""
    if spec.get("reduce"):
        return protocol.accumulated_length(spec["reduce"], {i["name"]: a.shape for i, a in zip(spec["inputs"], args)})
    largest = max(args, key=lambda t: t.numel())
    return largest.shape[-1] if largest.dim() and out_numel < largest.numel() else 1


def upcast(args: list[torch.Tensor]) -> list[torch.Tensor]:
    """float64 copies of the float inputs for the ground truth; class indices stay int64, masks bool."""
    return [a.double() if a.is_floating_point() else a for a in args]


def checked_call(ctx: Context, version: Version, args: list[torch.Tensor], expected: Output,
                 native: Output, config: dict | None = None, ids: list[str] | None = None,
                 before: Output | None = None) -> Check:
    """Call a kernel version (in its worker, on poisoned memory) and compare its output with the
    float64 reference; inputs must come back bit for bit as they went. ids: the worker's tensors
    holding args (refilled in place since the last call, whose output was before)."""
    called = version.call(args, native, config=config, ids=ids)
    if called.problem:
        return Check(called.problem)
    if version.kernels and called.launches is not None:
        if not launch_count.of_kernels(called.launches, version.kernels):
            return Check(no_launch(version, called.launches))
    if called.changed:
        return Check(modified(ctx, called.changed))
    check = compare_to_reference(ctx, args, called.out, expected, native)
    check.out = called.out
    if check.problem and before is not None and same_outputs(called.out, before):
        check.problem = ("returned the same output as for the previous values of the same input tensors (they were "
                         "refilled in place): a cached result, not one computed from its inputs")
    return check


def no_launch(version: Version, launches: dict[str, int]) -> str:
    """Why a checked call that launched none of the kernel's @triton.jit functions fails."""
    broken = version.worker.counter.problem()
    if broken:
        return f"the judge could not count this call's kernel launches: {broken}"
    seen = ", ".join(f"{name} x{n}" for name, n in sorted(launches.items())[:6]) or "no kernel at all"
    return (f"launched none of its @triton.jit kernels ({', '.join(sorted(version.kernels))}) on this call; the "
            f"CUDA driver saw {seen}. The judge counts every checked call's launches in the driver: the answer "
            "must come from the kernel's Triton code")


def reference_outputs(ctx: Context, args: list[torch.Tensor]) -> tuple[Output, Output, str]:
    """(float64 ground truth, the reference in the inputs' own dtypes, problem or '')."""
    # Inputs are checked for changes on the call in their own dtypes (the float64 copies would
    # only double what crosses the channel).
    expected = ctx.reference.call(upcast(args), None, check_inputs=False)
    native = ctx.reference.call(args, None) if not expected.problem else expected
    problem = expected.problem or native.problem
    if not problem and native.changed:
        problem = modified(ctx, native.changed)
    return expected.out, native.out, problem


def modified(ctx: Context, positions: list[int]) -> str:
    names = [ctx.spec["inputs"][i]["name"] for i in positions]
    return f"modified its input {', '.join(names)} (inputs must stay unchanged)"


def compare_to_reference(ctx: Context, args: list[torch.Tensor], out, expected: Output, native: Output) -> Check:
    """compare() with what the spec says of the op: its reduced length, TF32, matmul, scan; a chain
    (its stages keep their outputs in the dtype, and a later one sums them: (x @ w1) @ w2) scaled as
    a gradient is, its rounding following the terms summed, not the result, which may cancel.
    Several outputs (torch.max(x, dim)'s values and indices) are compared each, in order; the check
    holds the first that fails, else the first's errors."""
    if not isinstance(expected, tuple):
        return _compare_one(ctx, args, out, expected, native.dtype)
    if not isinstance(out, tuple) or len(out) != len(expected):
        return Check(f"returned {type(out).__name__}, not the reference's tuple of {len(expected)} tensors")
    names = [o["name"] for o in ctx.spec.get("outputs", [])]
    checks = [_compare_one(ctx, args, o, e, n.dtype) for o, e, n in zip(out, expected, native)]
    for k, check in enumerate(checks):
        if check.problem:
            check.problem = f"output {k + 1} ({names[k] if k < len(names) else '?'}): {check.problem}"
            return check
    return checks[0]


def _compare_one(ctx: Context, args: list[torch.Tensor], out, expected: torch.Tensor, want_dtype: torch.dtype) -> Check:
    return compare(out, expected, want_dtype, reduce_len(ctx.spec, args, expected.numel()),
                   bool(ctx.spec.get("tf32")), bool(ctx.spec.get("matmul")), bool(ctx.spec.get("scan")),
                   scaled=ctx.spec.get("chain", 1) > 1)


def same_outputs(a: Output, b: Output) -> bool:
    """Whether two calls gave the same output(s), bit for bit."""
    xs, ys = outputs(a), outputs(b)
    return len(xs) == len(ys) and all(torch.equal(x, y) for x, y in zip(xs, ys))


def _index(flat: int, shape: torch.Size) -> str:
    idx = []
    for size in reversed(shape):
        idx.append(flat % size)
        flat //= size
    return "(" + ", ".join(map(str, reversed(idx))) + ")"


def _overflows_alike(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Where the float64 truth lies beyond dtype's range and got is the infinity it rounds to
    (a float16 sum of a million terms): the correctly rounded answer, not an error."""
    if not dtype.is_floating_point:
        return torch.zeros_like(got, dtype=torch.bool)
    return got.isinf() & (got == want.to(dtype).double())


def compare(out, expected: torch.Tensor, want_dtype: torch.dtype, rlen: int, tf32: bool = False,
            matmul: bool = False, scan: bool = False, scaled: bool = False) -> Check:
    """The output against the float64 reference: shape, dtype, then every element within
    atol + rtol * |ref| (NaN never passes unless the reference is NaN there too); scaled (a
    gradient, whose rounding follows the largest values summed into it) adds rtol * max |ref|."""
    if not isinstance(out, torch.Tensor):
        return Check(f"returned {type(out).__name__}, not a tensor")
    if out.shape != expected.shape:
        return Check(f"output shape {list(out.shape)} but the reference gives {list(expected.shape)}")
    if out.dtype != want_dtype:
        return Check(f"output dtype {out.dtype} but the reference gives {want_dtype}")
    if out.device != expected.device:
        return Check(f"output on {out.device} but the inputs are on {expected.device}")
    name = inputs.dtype_name(out.dtype) or "float32"
    rtol, atol = protocol.tolerance(name, rlen, tf32, matmul, scan) if out.is_floating_point() else (0.0, 0.0)
    got, want = out.double(), expected.double()
    if scaled and want.numel():
        atol += rtol * float(want.abs().max())
    err, tol = (got - want).abs(), atol + rtol * want.abs()
    ok = (err <= tol) | (got == want) | (got.isnan() & want.isnan()) | _overflows_alike(got, want, out.dtype)
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


def check_row(ctx: Context, version: Version, case: Case, variant: dict[str, str], is_reference: bool) -> dict:
    """One case x dtype variant over every seed; stops at the first seed that fails."""
    dtype = protocol.variant_label(variant)
    row = new_row(case, dtype)
    if not is_reference and interpreter_bf16(variant):
        stand_in = interpreter_stand_in(ctx, variant)
        if stand_in is None:
            return {**row, "skipped": True, "reason": BF16_SKIP, "seeds": []}
        variant, row["reason"] = stand_in, BF16_AS_FP32
    ids, before = None, None
    try:
        for k, seed in enumerate(SEEDS):
            row["seeds"] = list(SEEDS[:k + 1])     # the seeds actually checked
            args = inputs.make_inputs(ctx.spec, case, variant, seed, ctx.device)
            expected, native, problem = reference_outputs(ctx, args)
            if problem:
                return {**row, "ok": False, "reason": f"the reference {problem} (seed {seed})"}
            if is_reference:
                check = compare_to_reference(ctx, args, native, expected, native)
            else:
                # Later seeds refill the same tensors in place: a kernel that caches by address shows.
                if ids is None:
                    ids = version.worker.put(args)
                else:
                    version.worker.refill(ids, args)
                check = checked_call(ctx, version, args, expected, native, ids=ids, before=before)
                before = check.out
            if check.max_rel_err >= row["max_rel_err"]:
                row["worst"] = check.worst
            row["max_abs_err"] = max(row["max_abs_err"], check.max_abs_err)
            row["max_rel_err"] = max(row["max_rel_err"], check.max_rel_err)
            if is_reference and check.tolerance_only and check.max_rel_err > GROSS_REL_ERR:
                return {**row, "ok": False, "reason": (
                    f"the reference in {dtype} and in float64 disagree far beyond rounding ({check.problem}): it "
                    f"must compute the same thing in every dtype, the float64 result being the truth (seed {seed})")}
            if is_reference and check.tolerance_only:
                ctx.warn(f"the reference in {dtype} differs from its float64 result at {case.label} beyond the "
                         f"kernel tolerance ({check.problem}); that is torch's own rounding, kernels are held "
                         "to the float64 result")
            elif check.problem:
                return {**row, "ok": False, "reason": f"{check.problem} (seed {seed})"}
        if ctx.spec.get("training") and not is_reference:     # on the last seed's inputs and reference
            problem = check_gradients(ctx, version, args, expected, native)
            row.update({"ok": False, "reason": problem} if problem else {"gradients": "ok"})
        return row
    except (CallFailed, WorkerDied) as e:
        raise DeviceLost(str(e)) from None
    finally:
        if ids is not None and version.worker.child.alive():
            version.worker.drop(ids)


def check_gradients(ctx: Context, version: Version, args: list[torch.Tensor], expected: torch.Tensor,
                    native: torch.Tensor) -> str:
    """A training kernel's backward on args (whose reference outputs are expected, in float64, and
    native): each float input's gradient from the kernel's forward and backward (in its worker)
    against the reference's autograd on float64 copies, from the same upstream gradient; '' when
    every one is within tolerance."""
    upstream = inputs.upstream_gradient(native, SEEDS[0])
    wrt = protocol.grad_indices(ctx.spec)
    try:
        want, problem = ctx.reference.worker.grads(upcast(args), upstream.double(), wrt)
        if problem:
            return f"the reference's backward {problem}"
        got, problem = version.worker.grads(args, upstream, wrt, fn=version.fn)
    except (WorkerDied, CallFailed) as e:
        raise DeviceLost(str(e)) from None
    if problem:
        return f"backward: {problem}"
    for i, g, w in zip(wrt, got, want):
        name = ctx.spec["inputs"][i]["name"]
        if (g is None) != (w is None):
            return (f"the gradient of {name} is {'missing' if g is None else 'given'} where the reference's autograd "
                    f"gives {'one' if w is not None else 'none'}")
        if g is None:
            continue
        rlen = max(reduce_len(ctx.spec, args, expected.numel()), expected.numel() // max(w.numel(), 1))
        check = compare(g, w, args[i].dtype, rlen, matmul=bool(ctx.spec.get("matmul")), scaled=True)
        if check.problem:
            return f"the gradient of {name}: {check.problem}"
    return ""


def interpreter_bf16(variant: dict[str, str]) -> bool:
    """A bfloat16 variant under Triton's CPU interpreter, which computes bfloat16 wrongly."""
    return INTERPRETER and "bfloat16" in variant.values()


def interpreter_stand_in(ctx: Context, variant: dict[str, str]) -> dict[str, str] | None:
    """What to run there for such a variant: nothing (None) when the spec has other dtypes to
    check; for a bfloat16-only spec, which would check nothing, the same with float32 in its place."""
    if any("bfloat16" not in v.values() for v in protocol.dtype_variants(ctx.spec)):
        return None
    return {name: "float32" if d == "bfloat16" else d for name, d in variant.items()}


def run_correctness(ctx: Context, version: Version, is_reference: bool) -> None:
    cases, notes = inputs.correctness_cases(ctx.spec, ctx.backend)
    for note in notes:
        ctx.warn(note)
    variants = protocol.dtype_variants(ctx.spec)
    todo = list(itertools.product(cases, variants))
    for i, (case, variant) in enumerate(todo, 1):
        progress("correctness", i, len(todo), case.label, protocol.variant_label(variant))
        lost = False
        try:
            row = check_row(ctx, version, case, variant, is_reference)
        except DeviceLost as e:
            row, lost = {**new_row(case, protocol.variant_label(variant)), "ok": False, "reason": str(e)}, True
            ctx.warn("a worker was lost after this error (its process died or its CUDA context broke); "
                     "the remaining cases were not run")
        ctx.result["correctness"].append(row)
        ctx.save()
        if lost:
            return


def run_ghost(ctx: Context, source: str, worker: Worker) -> None:
    """Ghost replay: the kernel with every @triton.jit body emptied, loaded as a module of its own
    beside it, on the first case of each dtype that was checked, twice (a launcher that launches
    only on its first call shows on the second). A ghost that still passes there means the answer
    came from elsewhere."""
    try:
        text, emptied = ghost.ghost_source(source)
        version = load(ctx, worker, GHOST_FILE, text, fn="ghost")
    except (SyntaxError, LoadError) as e:
        ctx.result["ghost"].append({"case": "", "dtype": "", "outcome": f"not run: {describe(e)}"})
        return
    checked = [r for r in ctx.result["correctness"] if not r["skipped"] and r["ok"]]
    cases = {c.label: c for c in inputs.correctness_cases(ctx.spec, ctx.backend)[0]}
    variants = protocol.dtype_variants(ctx.spec)
    for variant in variants:
        dtype = protocol.variant_label(variant)
        row = next((r for r in checked if r["dtype"] == dtype), None)
        if row is None:
            continue
        progress("ghost replay", len(ctx.result["ghost"]) + 1, len(variants), row["case"], dtype)
        if interpreter_bf16(variant):                      # checked as float32 there (check_row)
            variant = interpreter_stand_in(ctx, variant)
        outcomes = [ghost_outcome(ctx, version, cases[row["case"]], variant, seed) for seed in SEEDS[:2]]
        outcome = next((o for o in outcomes if o == "matches"), outcomes[-1])
        ctx.result["ghost"].append({"case": row["case"], "dtype": dtype, "outcome": outcome, "emptied": emptied})
        ctx.save()


def ghost_outcome(ctx: Context, version: Version, case: Case, variant: dict[str, str], seed: int) -> str:
    args = inputs.make_inputs(ctx.spec, case, variant, seed, ctx.device)
    expected, native, _ = reference_outputs(ctx, args)
    try:
        check = checked_call(ctx, version, args, expected, native)
    except DeviceLost as e:
        check = Check(str(e))
    if check.problem:
        return "differs"
    return "matches" if ghost.conclusive(expected) else "inconclusive (the output is one value everywhere)"


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


def ligers(ctx: Context, plan: dict) -> bool:
    """Whether the plan's Liger-Kernel version is timed here: its kernels run on a GPU only."""
    if not plan.get("liger"):
        ctx.warn("the bench plan lists liger but names no Liger-Kernel function; not timed")
        return False
    if ctx.device != "cuda":
        ctx.warn("Liger-Kernel skipped on the cpu backend (its kernels need a GPU)")
        return False
    return True


def compiles(ctx: Context) -> bool:
    if not protocol.benchmarks_compile(ctx.device):
        ctx.warn("torch.compile skipped on the cpu backend (a runner with KERNELBOT_CPU_COMPILE=1 includes it)")
        return False
    return True


def bench_row(case: Case, dtype: str, version: str) -> dict:
    return {"case": case.label, "dtype": dtype, "version": version, "ms": None, "ms_q": None, "gpu_ms": None,
            "gpu_ms_q": None, "judge_gpu_ms": None, "time_ms": None, "time_q": None, "basis": None, "gbps": None, "pct_of_copy": None, "implausible": False,
            "ok": True, "error": "", "config": None}


def time_version(ctx: Context, row: dict, worker: Worker, call: dict, timing: dict, out_bytes: int) -> dict:
    try:
        return {**row, **remote_timing.time_version(worker, call, ctx.device, timing, ctx.loop, out_bytes)}
    except TimingRejected as e:
        return {**row, "ok": False, "error": f"timing rejected: {e}", "rejected": True}
    except CallFailed as e:
        return {**row, "ok": False, "error": f"timing failed: {e}"}


def settle_basis(rows: list[dict], nbytes: int, ceiling: float, flops: int = 0) -> None:
    """Compare a case's versions on GPU time (L2 flushed, launch overhead hidden) when each timed
    version has it, else on wall-clock time (the cpu backend). Bandwidth, its share of the copy
    ceiling and plausibility follow from the basis."""
    timed = [r for r in rows if r.get("ms")]
    gpu = bool(timed) and all(r.get("gpu_ms") for r in timed)
    for r in timed:
        t = r["gpu_ms"] if gpu else r["ms"]
        gbps = nbytes / (t * 1e-3) / 1e9
        r.update(time_ms=t, time_q=r.get("gpu_ms_q" if gpu else "ms_q"), basis="GPU" if gpu else "wall-clock", gbps=gbps,
                 pct_of_copy=100 * gbps / ceiling, implausible=gbps > IMPLAUSIBLE * ceiling)
        if flops:
            r["tflops"] = flops / (t * 1e-3) / 1e12


def bench_case(ctx: Context, plan: dict, versions: dict, case: Case, variant: dict[str, str],
               ceiling: float, position: tuple[int, int]) -> list[dict]:
    """Every version on the same inputs; kernel versions are checked once first (a wrong one
    is flagged and not timed). The current kernel is tuned first when it has configs (position:
    the case's place among all cases, for progress)."""
    dtype = protocol.variant_label(variant)
    args = inputs.make_inputs(ctx.spec, case, variant, 0, ctx.device)
    expected, native, problem = reference_outputs(ctx, args)
    if problem:
        ctx.warn(f"{case.label} {dtype} not timed: the reference {problem}")
        return []
    nbytes = sum(map(_nbytes, args)) + _nbytes(native)
    if ctx.spec.get("training"):    # the backward reads the inputs and the upstream gradient, writes the gradients
        nbytes += 2 * sum(_nbytes(a) for a in args if a.is_floating_point()) + _nbytes(native)
    # A chain's output is no matmul's: its flops are not 2 x out x K.
    flops = 2 * native.numel() * reduce_len(ctx.spec, args, native.numel()) \
        if ctx.spec.get("matmul") and not ctx.spec.get("chain") else 0        # one output: the product
    fresh = inputs.make_inputs(ctx.spec, case, variant, SEEDS[1], ctx.device)
    fresh_out = reference_outputs(ctx, fresh)
    rows = []
    for label in plan.get("versions", ["torch", "torch.compile", "kernel"]):
        row = bench_row(case, dtype, label)
        version = ctx.reference if label in BASELINES else versions.get(label)
        if not isinstance(version, Version):
            rows.append({**row, "ok": False, "error": str(version or f"the job carries no {label}")})
        elif (label != "torch.compile" or compiles(ctx)) and (label != "liger" or ligers(ctx, plan)):
            try:
                rows.append(bench_version(ctx, plan, row, version, (args, expected, native), (fresh, *fresh_out),
                                          position))
            except (CallFailed, WorkerDied) as e:
                rows.append({**row, "ok": False, "error": f"failed: {e}"})
    settle_basis(rows, nbytes, ceiling, flops)
    return rows


def bench_version(ctx: Context, plan: dict, row: dict, version: Version, first: tuple, fresh: tuple,
                  position: tuple[int, int]) -> dict:
    """One version's bench row. Every version is timed on the same tensors, put in its worker with
    the first values and refilled in place with the fresh ones; a kernel version is checked on
    both first (a wrong one, or one that caches by address, is flagged and not timed)."""
    timing, config = plan.get("timing", {}), None
    label = row["version"]
    if label == "torch.compile":                      # its autotuning can take minutes: say so
        progress("timing: torch.compile compiling for", *position, row["case"], row["dtype"])
        version.worker.ok({"op": "compile", "mode": plan.get("compile_mode", "max-autotune-no-cudagraphs")})
    if label == "liger":                              # Liger-Kernel's function, as the plan names it
        version.worker.ok({"op": "liger", "liger": plan["liger"], "inputs": [i["name"] for i in ctx.spec["inputs"]]})
    if label == "kernel" and ctx.configs:
        tuning = tune(ctx, version, *first, (row["case"], row["dtype"]), position, timing)
        ctx.result["tuning"].append(tuning)
        config = tuning["best"]
        row["config"] = protocol.config_label(config) if config else None
    ids = version.worker.put(first[0])
    upstream: list[str] = []
    try:
        if label.startswith("kernel"):
            check = checked_call(ctx, version, *first, config, ids=ids)
            problem = check.problem or _fresh_problem(ctx, version, ids, fresh, config, check.out)
            if problem:
                return {**row, "ok": False, "error": f"{verdict(problem)}, not timed: {problem}"}
        else:
            version.worker.refill(ids, fresh[0])
        call = {"fn": BASELINES.get(label, "main"), "args": ids, "config": config}
        if ctx.spec.get("training"):        # forward and backward, every version alike
            upstream = version.worker.put([inputs.upstream_gradient(first[2], SEEDS[0])])
            call["upstream"], call["wrt"] = upstream[0], protocol.grad_indices(ctx.spec)
        timed = time_version(ctx, row, version.worker, call, timing, _nbytes(first[2]))
        if label.startswith("kernel") and timed["ok"]:    # one that turns wrong after many calls
            problem = checked_call(ctx, version, *fresh[:3], config, ids=ids).problem
            if problem:
                return {**row, "ok": False, "error": f"wrong result after its timed calls: {problem}"}
        return timed
    finally:
        version.worker.drop(ids + upstream)


def _nbytes(out: Output) -> int:
    return sum(t.numel() * t.element_size() for t in outputs(out))


def _fresh_problem(ctx: Context, version: Version, ids: list[str], fresh: tuple, config: dict | None,
                   before: Output) -> str:
    args, expected, native, problem = fresh
    if problem:
        return f"the reference {problem}"
    version.worker.refill(ids, args)
    return checked_call(ctx, version, args, expected, native, config, ids=ids, before=before).problem


def verdict(problem: str) -> str:
    """What a check's problem makes of a version: 'failed' where the call raised (out of shared
    memory, a compile error), 'wrong result' where it returned something wrong."""
    return "failed" if problem.startswith("raised ") else "wrong result"


def tune(ctx: Context, kernel: Version, args: list[torch.Tensor], expected: Output, native: Output,
         where: tuple[str, str], position: tuple[int, int], timing: dict) -> dict:
    """Every config of the kernel on one case x dtype: checked against the float64 reference (a
    wrong one is flagged and never wins), then timed briefly; the fastest correct one is best."""
    entries = []
    ids = kernel.worker.put(args)
    for k, config in enumerate(ctx.configs, 1):
        entry = {"config": config, "label": protocol.config_label(config), "time_ms": None, "ok": False, "error": ""}
        progress("tuning", (position[0] - 1) * len(ctx.configs) + k, position[1] * len(ctx.configs), where[0],
                 f"{where[1]} {entry['label']}")
        check = checked_call(ctx, kernel, args, expected, native, config)
        if check.problem:
            entry["error"] = f"{verdict(check.problem)}: {check.problem}"
        else:
            try:
                call = {"fn": "main", "args": ids, "config": config}
                entry.update(ok=True, time_ms=remote_timing.sweep_ms(kernel.worker, call, ctx.device,
                                                                     timing.get("tune_reps", TUNE_REPS), ctx.loop,
                                                                     _nbytes(native)))
            except (CallFailed, TimingRejected) as e:
                entry.update(ok=False, error=f"timing failed: {e}")
        entries.append(entry)
    kernel.worker.drop(ids)
    best = min((e for e in entries if e["ok"]), key=lambda e: e["time_ms"], default=None)
    return {"case": where[0], "dtype": where[1], "key": protocol.tuning_key(args), "configs": entries,
            "best": best["config"] if best else None}


def kernel_configs(ctx: Context, kernel: Version) -> list[dict]:
    """The kernel's CONFIGS when it is to be tuned; [] without them, or with a warning when they
    break the contract (the kernel is then timed on its default path)."""
    if kernel.configs is None:
        return []
    problem = config_problem(kernel.configs)
    if not problem and not kernel.takes_config:
        problem = f"{ctx.spec['name']}() takes no config argument"
    if problem:
        ctx.warn(f"the kernel is not tuned: {problem}")
        return []
    return kernel.configs


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
    case's time basis (see settle_basis), with the per-call speedup beside it. Each time has its
    interquartile range (*_q) and each speedup its interval (*_range) and whether it is a tie."""
    by = {r["version"]: r for r in rows}
    torch_row, compile_row, kernel = by.get("torch") or {}, by.get("torch.compile") or {}, by.get("kernel") or {}
    liger = by.get("liger") or {}
    ranked = kernel.get("ok") and kernel.get("time_ms") and not kernel.get("implausible")
    kernel_ms = kernel.get("time_ms") if ranked else None
    notes = [protocol.CPU_TIMING_NOTE] if on_cpu else []
    if kernel.get("implausible"):
        notes.append(f"implausible: {kernel['gbps']:.0f} GB/s is above the measured copy bandwidth; "
                     "the kernel may skip work, so no speedup is reported")
    if kernel.get("error"):
        notes.append(f"kernel: {kernel['error']}")
    return {"case": rows[0]["case"], "dtype": rows[0]["dtype"], "basis": kernel.get("basis") or torch_row.get("basis"),
            "torch_ms": torch_row.get("time_ms"), "compile_ms": compile_row.get("time_ms"), "kernel_ms": kernel_ms,
            "speedup": _ratio(torch_row.get("time_ms"), kernel_ms),
            "speedup_vs_compile": _ratio(compile_row.get("time_ms"), kernel_ms),
            "liger_ms": liger.get("time_ms"), "speedup_vs_liger": _ratio(liger.get("time_ms"), kernel_ms),
            "torch_call_ms": torch_row.get("ms"), "kernel_call_ms": kernel.get("ms") if ranked else None,
            "speedup_per_call": _ratio(torch_row.get("ms"), kernel.get("ms") if ranked else None),
            "gbps": kernel.get("gbps") if ranked else None,
            "pct_of_copy": kernel.get("pct_of_copy") if ranked else None, "config": kernel.get("config"),
            "tflops": kernel.get("tflops") if ranked else None, "torch_tflops": torch_row.get("tflops"),
            "note": "; ".join(notes),
            **_spreads(torch_row, compile_row, liger, kernel if ranked else {})}


def _spreads(torch_row: dict, compile_row: dict, liger: dict, kernel: dict) -> dict:
    """Each time's interquartile range, and each speedup's interval and tie (runner.spread)."""
    out = {"torch_q": torch_row.get("time_q"), "compile_q": compile_row.get("time_q"), "kernel_q": kernel.get("time_q"),
           "liger_q": liger.get("time_q"), "torch_call_q": torch_row.get("ms_q"), "kernel_call_q": kernel.get("ms_q")}
    for key, num, den in (("speedup", torch_row.get("time_q"), kernel.get("time_q")),
                          ("speedup_vs_compile", compile_row.get("time_q"), kernel.get("time_q")),
                          ("speedup_vs_liger", liger.get("time_q"), kernel.get("time_q")),
                          ("speedup_per_call", torch_row.get("ms_q"), kernel.get("ms_q"))):
        interval = spread.ratio_range(num, den)
        out.update({f"{key}_range": interval, f"{key}_tie": spread.is_tie(interval)})
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def timing_note(ctx: Context, timing: dict) -> str:
    if ctx.device == "cpu":
        note = (f"{protocol.CPU_TIMING_NOTE}. Median of {timing.get('cpu_runs', timers.CPU_RUNS)} interpreter calls on the judge's "
                "wall clock; copy ceiling from a 64 MiB host copy")
    else:
        note = (f"GPU time: median of {timing.get('gpu_reps', timers.GPU_REPS)} calls between CUDA events in the "
                "version's own worker, L2 flushed before each by a 2 GiB read (clean lines: no write-back inside the "
                "timed call) and the host kept ahead, so launch overhead is left out for every version alike; each "
                "version's events checked against the judge's wall clock over the same loop, less its own measure "
                "of the flushes. Per call: the judge's wall clock over back-to-back calls (launch path included, L2 "
                f"warm), the median of {remote_timing.PER_CALL_LOOPS} such loops. Copy ceiling: a 1 GiB "
                "device-to-device copy timed by the judge itself, on GPU time")
    if ctx.spec.get("training"):
        note += (". Training: each timed call is the forward and the backward (torch.autograd.grad of the float "
                 "inputs from one drawn upstream gradient), for every version alike; bytes count the backward's "
                 "reads and writes too")
    note += (". Spread: each time's interquartile range (±: half of it, as a share of the median); a speedup's "
             "interval runs from the faster quartile over the slower one, and a speedup whose interval holds 1.0 "
             "is a tie")
    if ctx.configs:
        note += (f". Tuned: each of the kernel's {len(ctx.configs)} configs checked against the float64 reference, "
                 f"then timed (median of {timing.get('tune_reps', TUNE_REPS)} checked calls) per case; the kernel "
                 "rows use the fastest correct one")
    return note


def run_benchmark(ctx: Context, versions: dict) -> None:
    plan = json.loads((ctx.jobdir / "bench_plan.json").read_text())
    timing = plan.get("timing", {})
    ceiling = timers.copy_gbps(ctx.device)
    if ctx.device == "cuda":
        ctx.loop = Loop(*timers.flush_ms(), timers.loop_overhead_ms(),
                        torch.cuda.get_device_properties(0).L2_cache_size, ceiling)
    ctx.result.update(copy_gbps=ceiling, timing_note=timing_note(ctx, timing),
                      accept_implausible=bool(plan.get("accept_implausible")))
    todo = list(itertools.product(select_cases(ctx, plan.get("cases")), select_variants(ctx.spec, plan.get("dtypes"))))
    for i, (case, variant) in enumerate(todo, 1):
        dtype = protocol.variant_label(variant)
        progress("timing", i, len(todo), case.label, dtype)
        if interpreter_bf16(variant):
            stand_in = interpreter_stand_in(ctx, variant)
            if stand_in is None:
                ctx.warn(f"{dtype} not timed: {BF16_SKIP}")
                continue
            ctx.warn(f"{dtype} timed as float32 at {case.label}: Triton's CPU interpreter computes bfloat16 "
                     "wrongly; a GPU runner times bfloat16 itself")
            variant = stand_in
        try:
            rows = bench_case(ctx, plan, versions, case, variant, ceiling, (i, len(todo)))
        except DeviceLost as e:
            ctx.warn(f"timing stopped at {case.label} {dtype}: {e}")
            return
        if rows:
            ctx.result["bench"].extend(rows)
            ctx.result["report_rows"].append(report_row(rows, ctx.device == "cpu"))
            ctx.save()


# --- entry point ---------------------------------------------------------------------------

def device_label(device: str) -> str:
    return torch.cuda.get_device_name(0) if device == "cuda" else "cpu (Triton interpreter)"


def load_versions(ctx: Context, files: dict[str, str], workers: dict[str, Worker]) -> dict:
    """Version label -> Version, or the LoadError text for a version that does not load."""
    versions = {}
    for label, name in files.items():
        try:
            versions[label] = load(ctx, workers[label], name)
        except LoadError as e:
            versions[label] = str(e)
    return versions


def run(ctx: Context) -> None:
    mode = ctx.config["mode"]
    files = {} if mode == "reference" else ctx.config.get("kernels", {"kernel": "kernel.py"})
    if files and ctx.device == "cuda":
        try:
            ctx.launch_library = launch_count.build(ctx.jobdir / "workers")
        except launch_count.Unavailable as e:
            ctx.result["harness_error"] = f"this runner cannot count kernel launches, which the judge requires: {e}"
            return
        ctx.result["launches_counted"] = True
    # Every worker starts now, so their imports of torch overlap.
    workers = {label: spawn(ctx, label) for label in ["reference", *files]}
    try:
        ctx.reference = load(ctx, workers["reference"], "reference.py")
    except LoadError as e:
        ctx.result["load_error"] = str(e)
        return
    if mode == "reference":
        run_correctness(ctx, ctx.reference, is_reference=True)
        return
    versions = load_versions(ctx, files, workers)
    if not isinstance(versions.get("kernel"), Version):
        ctx.result["load_error"] = versions.get("kernel") or "the job has no kernel.py"
        return
    if mode == "correctness":
        run_correctness(ctx, versions["kernel"], is_reference=False)
        if all(r["ok"] for r in ctx.result["correctness"]):
            run_ghost(ctx, (ctx.jobdir / files["kernel"]).read_text(), workers["kernel"])
    else:
        ctx.configs = kernel_configs(ctx, versions["kernel"])
        run_benchmark(ctx, versions)
        warn_failed_configs(ctx)


def main(argv: list[str] | None = None) -> int:
    jobdir = Path((argv if argv is not None else sys.argv[1:])[0]).resolve()
    config = jobfiles.read_json(jobdir / jobfiles.CONFIG)
    spec = json.loads((jobdir / "spec.json").read_text())
    ctx = Context(jobdir, spec, config["backend"], protocol.device_type(config["backend"]), config)
    ctx.result = {"done": False, "mode": config["mode"], "device": device_label(ctx.device),
                  "backend": config["backend"], "load_error": "", "harness_error": "", "correctness": [],
                  "ghost": [], "bench": [], "report_rows": [], "tuning": [], "copy_gbps": None, "timing_note": "",
                  "accept_implausible": False, "launches_counted": False, "warnings": []}
    ctx.save()
    try:
        run(ctx)
    except Exception as e:
        traceback.print_exc()
        ctx.result["harness_error"] = describe(e)
        ctx.save()
        return 1
    finally:
        for worker in ctx.workers:
            worker.close()
    ctx.result["done"] = True
    ctx.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
