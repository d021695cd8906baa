"""The runner: takes jobs from its backend's queue, runs them in the sandbox, reports back.

``execute_job`` turns one job into one result (docs/CONTRACTS.md): the trusted harness and the
generated pytest file, each in a sandboxed child of its own directory, then a chart for a
benchmark. ``serve`` is the long-running consumer with heartbeats and presence.
Never imports bot, torch or triton: those run only in the sandboxed child.
"""
from __future__ import annotations

import argparse
import base64
import dataclasses
import functools
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import threading
import time
import traceback
from pathlib import Path
from typing import Callable

from runner import integrity, jobfiles, protocol, sandbox, workdirs
from runner import users as runner_users

DEFAULT_TIMEOUT_S = 900.0
MAX_TIMEOUT_S = 4 * 3600.0
GENERATED_TEST = {"reference_test": "test_reference.py", "kernel_test": "test_kernel.py"}
HARNESS_MODE = {"reference_test": "reference", "kernel_test": "correctness", "verify": "correctness",
                "benchmark": "benchmark"}
REQUIRED_FILES = {
    "reference_test": ("spec.json", "reference.py", "test_reference.py"),
    "kernel_test": ("spec.json", "reference.py", "kernel.py", "test_kernel.py"),
    "benchmark": ("spec.json", "reference.py", "kernel.py", "bench_plan.json"),
    "verify": ("spec.json", "reference.py", "kernel.py"),
}
# The host's name in runner ids (HOST/gpuN) and results; KERNELBOT_HOST names it where hostnames
# repeat (containers started from one image).
HOST = os.environ.get("KERNELBOT_HOST") or socket.gethostname()
LOAD_EVERY_S = 10.0     # how often a runner asks nvidia-smi for its GPU's load (for status replies)


class JobError(ValueError):
    """The job cannot be run as sent; the message says why."""


class Cancelled(Exception):
    """The runner is stopping; the job is left for the bot to re-queue."""


# --- the job --------------------------------------------------------------------------------

def validate(job) -> dict:
    """The job as a dict with every field the runner needs, or JobError naming what is wrong."""
    if isinstance(job, (str, bytes)):
        try:
            job = json.loads(job)
        except ValueError as e:
            raise JobError(f"job is not valid JSON: {e}") from None
    if not isinstance(job, dict):
        raise JobError(f"a job must be a JSON object, got {type(job).__name__}")
    if not isinstance(job.get("job_id"), str) or not job["job_id"]:
        raise JobError("job has no job_id")
    kind = job.get("kind")
    if kind not in protocol.JOB_KINDS:
        raise JobError(f"job kind {kind!r} is not one of {', '.join(protocol.JOB_KINDS)}")
    files, kernels = job.get("files"), job.get("kernels") or {}
    for what, table in (("files", files), ("kernels", kernels)):
        if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
            raise JobError(f"job {what} must map names to file text")
    missing = [n for n in REQUIRED_FILES[kind] if n not in files]
    if missing:
        raise JobError(f"a {kind} job needs {', '.join(missing)}")
    timeout = job.get("timeout_s", DEFAULT_TIMEOUT_S)
    if not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT_S:
        raise JobError(f"timeout_s must be a number of seconds in (0, {MAX_TIMEOUT_S:.0f}], got {timeout!r}")
    try:
        for name in files:
            jobfiles.check_name(name)
        for label in kernels:
            jobfiles.check_label(label)
        _check_spec(json.loads(files["spec.json"]))
        if "bench_plan.json" in files:
            json.loads(files["bench_plan.json"])
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise JobError(str(e) or type(e).__name__) from None
    return {**job, "timeout_s": float(timeout), "kernels": kernels, "attempt": job.get("attempt", 1)}


def _check_spec(spec: dict) -> None:
    if not isinstance(spec.get("name"), str) or not spec["name"].isidentifier():
        raise ValueError("spec.json needs a 'name' that is a Python identifier")
    protocol.cases(spec)
    protocol.dtype_variants(spec)


MODULE_CALL = Path(__file__).with_name("module_call.py")


def job_files(job: dict) -> dict[str, str]:
    """The job's files plus each kernel revision as kernel_rN.py, and the runner's own
    module_call.py (the generated tests call a pasted module through it), over any a job brings."""
    revisions = {jobfiles.kernel_file(f"kernel@{label}"): text for label, text in job["kernels"].items()}
    return {**job["files"], **revisions, MODULE_CALL.name: MODULE_CALL.read_text()}


def new_result(job, backend: str, gpu: int | None) -> dict:
    job = job if isinstance(job, dict) else {}
    return {"job_id": job.get("job_id"), "kind": job.get("kind"), "status": "error", "summary": "",
            "host": HOST, "device": device_name(backend, gpu), "gpu": gpu, "backend": backend,
            "attempt": job.get("attempt", 1),
            "started_at": time.time(), "finished_at": None, "correctness": [], "ghost": [], "pytest": None, "bench": [],
            "report_rows": [], "tuning": [], "copy_gbps": None, "timing_note": "", "accept_implausible": False,
            "launches_counted": False, "warnings": [], "log_tail": ""}


NVIDIA_SMI_S = 10.0        # an nvidia-smi slower than this gives no answer, and no verdict


def _ask_nvidia_smi(query: str, index: str) -> subprocess.CompletedProcess | None:
    """`nvidia-smi --query-gpu=QUERY -i INDEX`, or None where it is not installed or too slow."""
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", index],
                              capture_output=True, text=True, timeout=NVIDIA_SMI_S)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _nvidia_smi(query: str, index: str) -> str | None:
    """One GPU's answer to `nvidia-smi --query-gpu=QUERY`, or None where nvidia-smi does not answer."""
    out = _ask_nvidia_smi(query, index)
    return out.stdout.strip() if out is not None and out.returncode == 0 else None


def device_name(backend: str, gpu: int | None) -> str:
    """Asked of nvidia-smi, so the runner process itself never initialises CUDA."""
    if protocol.device_type(backend) == "cpu":
        return "cpu (Triton interpreter)"
    index = sandbox.pinned_gpu(gpu)
    return _nvidia_smi("name", index) or f"cuda:{index}"


def gpu_load(backend: str, gpu: int | None) -> dict | None:
    """The pinned GPU's utilisation (%) and memory (MiB) as nvidia-smi sees them, every tenant's work
    included; None on the cpu backend or where nvidia-smi gives no such line."""
    if protocol.device_type(backend) == "cpu":
        return None
    fields = (_nvidia_smi("utilization.gpu,memory.used,memory.total", sandbox.pinned_gpu(gpu)) or "").split(",")
    try:
        util, used, total = (float(f) for f in fields)
    except ValueError:
        return None
    return {"util_pct": util, "mem_used_mib": used, "mem_total_mib": total}


# --- running it -----------------------------------------------------------------------------

def execute_job(job: dict, progress: Callable[[str], None], *, backend: str | None = None,
                gpu: int | None = None, cancel: threading.Event | None = None, static_check: bool = True) -> dict:
    """Run one job and return its result dict; never raises for anything the job contains.
    backend: where this runner runs (defaults to the job's own); raises Cancelled when cancel is set.
    static_check=False (tests only: no job field reaches it) lets the judge's runtime defences be
    tried on code the static check would refuse."""
    backend = backend or (job.get("backend") if isinstance(job, dict) else None) or "cpu"
    result = new_result(job, backend, gpu)
    try:
        job = validate(job)
        sandbox.require_isolation()
    except JobError as e:
        return {**result, "summary": f"bad job: {e}", "finished_at": time.time()}
    except sandbox.SandboxUnavailable as e:
        return {**result, "summary": f"this runner cannot run generated code: {e}", "finished_at": time.time()}
    problem = environment_problem(backend)
    if problem:
        return {**result, "environment": True, "finished_at": time.time(),
                "summary": f"this runner cannot run {job['kind']} jobs: {problem}"}
    if job.get("backend", backend) != backend:
        result["warnings"].append(f"the job asked for backend {job['backend']}; it ran on {backend}")
    deadline = time.monotonic() + job["timeout_s"]
    share = 2 / 3 if job["kind"] in GENERATED_TEST else 1.0    # leave the generated tests a third
    with workdirs.job_dir(job["job_id"]) as tmp:
        progress("harness")
        harness, outcome, last = run_harness(job, Path(tmp) / "harness", backend, gpu,
                                             job["timeout_s"] * share, progress, cancel, static_check)
        status, summary = harness_verdict(job, harness, outcome, last)
        result.update(_harness_fields(harness, outcome, result["warnings"]))
        if job["kind"] in GENERATED_TEST and outcome.timed_out:
            result["warnings"].append("generated tests not run: the harness already timed out on this code")
        elif job["kind"] in GENERATED_TEST:
            progress("generated tests")
            result["pytest"] = run_pytest(job, Path(tmp) / "pytest", backend, gpu,
                                          max(deadline - time.monotonic(), 10.0), cancel)
            status, summary = _combine(status, summary, *pytest_verdict(result["pytest"]))
    if job["kind"] == "benchmark" and harness is not None:      # with nothing timed too: it says why
        progress("chart")
        _add_chart(result, job)
    return {**result, "status": status, "summary": summary, "finished_at": time.time()}


ENVIRONMENT_CHECK = """
import importlib, sys
missing = []
for name in ("torch", "triton", "pytest", "matplotlib", "numpy"):
    try:
        importlib.import_module(name)
    except Exception as e:
        missing.append(f"{name} ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})")
if missing:
    sys.exit("cannot import " + ", ".join(missing))
if sys.argv[1] == "cuda":
    import torch
    if not torch.cuda.is_available():
        sys.exit("torch sees no CUDA GPU (torch " + torch.__version__ + ")")
"""


@functools.cache
def environment_problem(backend: str) -> str:
    """What this host lacks to run jobs of the backend, or '': the runner's Python imports every
    package a stage uses (in a child, so a broken install cannot take the runner down), and sees
    a GPU for CUDA. Checked once per process."""
    try:
        proc = subprocess.run(sandbox.python_cmd("-c", ENVIRONMENT_CHECK, protocol.device_type(backend)),
                              capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"the runner's Python could not be checked ({e})"
    if proc.returncode == 0:
        return ""
    why = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    return f"{why}; install what is missing on this host: pip install 'kernelbot[runner]'"


def _sandboxed(cmd: list[str], workdir: Path, job: dict, backend: str, gpu: int | None, limits: sandbox.Limits,
               on_line: Callable[[str], None] | None, cancel: threading.Event | None,
               trusted: bool = False) -> sandbox.Outcome:
    jobfiles.write_files(workdir, job_files(job))
    outcome = sandbox.run(cmd, workdir, backend=backend, gpu=gpu, limits=limits, on_line=on_line, cancel=cancel,
                          trusted=trusted)
    if outcome.cancelled:
        raise Cancelled()
    return outcome


def run_harness(job: dict, workdir: Path, backend: str, gpu: int | None, timeout_s: float,
                progress: Callable[[str], None], cancel: threading.Event | None, static_check: bool = True):
    """(judge result or None, its process's outcome, the last progress line it printed). The judge
    is trusted code in a process of its own; it starts the sandboxed workers itself."""
    workdir.mkdir(parents=True)
    kernels = {"kernel": "kernel.py"} if "kernel.py" in job["files"] else {}
    kernels.update({f"kernel@{label}": jobfiles.kernel_file(f"kernel@{label}") for label in job["kernels"]})
    limits = sandbox.Limits.from_env(timeout_s)
    jobfiles.write_json(workdir / jobfiles.CONFIG,
                        {"mode": HARNESS_MODE[job["kind"]], "backend": backend, "kernels": kernels,
                         "gpu": gpu, "limits": dataclasses.asdict(limits), "static_check": static_check})
    last = [""]

    def on_line(line: str) -> None:
        if line.startswith("PROGRESS "):
            last[0] = line.removeprefix("PROGRESS ")
            progress(last[0])

    outcome = _sandboxed(sandbox.python_cmd("-m", "runner.harness", str(workdir)), workdir, job, backend, gpu,
                         limits, on_line, cancel, trusted=True)
    return jobfiles.read_json(workdir / jobfiles.RESULT), outcome, last[0]


def run_pytest(job: dict, workdir: Path, backend: str, gpu: int | None, timeout_s: float,
               cancel: threading.Event | None) -> dict:
    name = GENERATED_TEST[job["kind"]]
    found = integrity.check_test(job["files"][name])
    if found:
        return {**pytest_counts(""), "exit_code": None, "timed_out": False, "duration_s": 0.0,
                "refused": f"{name} is refused unrun: {integrity.summary(found)}", "log_tail": ""}
    cmd = sandbox.python_cmd("-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "-p", "runner.pytest_tf32", name)
    outcome = _sandboxed(cmd, workdir, job, backend, gpu, sandbox.Limits.from_env(timeout_s), None, cancel)
    return {**pytest_counts(outcome.stdout_tail), "exit_code": outcome.exit_code, "timed_out": outcome.timed_out,
            "duration_s": round(outcome.duration_s, 1), "log_tail": _tail(outcome.stdout_tail + outcome.stderr_tail)}


def pytest_counts(output: str) -> dict[str, int]:
    """Counts from pytest's last summary line, e.g. '2 failed, 7 passed, 3 skipped in 1.2s'."""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    for line in reversed(output.splitlines()):
        found = re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", line)
        if found and re.search(r"\bin [\d.]+s", line):
            for n, word in found:
                counts["errors" if word.startswith("error") else word] = int(n)
            break
    return counts


def _tail(text: str, limit: int = 4000) -> str:
    return text[-limit:]


# --- verdicts -------------------------------------------------------------------------------

def harness_verdict(job: dict, res: dict | None, outcome: sandbox.Outcome, last: str) -> tuple[str, str]:
    """(status, one-line summary) from what the harness wrote and how its process ended."""
    during = f" during {last}" if last else ""
    if res is None or not res.get("done"):
        if outcome.timed_out:
            return "fail", f"timed out after {outcome.duration_s:.0f} s{during} (generated code that never returns?)"
        if outcome.out_of_memory:
            return "fail", f"ran out of memory{during} (sandbox limit or allocation refused)"
        if outcome.signal_name == "SIGXCPU":
            return "fail", f"used up its CPU-time limit{during}"
        if outcome.signal_name:
            return "fail", f"the harness process died with {outcome.signal_name}{during} (a crash in generated code)"
        if res is not None and res.get("harness_error"):
            return "error", f"runner harness error{during}: {res['harness_error']}"
        last_err = (outcome.stderr_tail.strip().splitlines() or [""])[-1][:300]
        return "fail", (f"the harness stopped early (exit code {outcome.exit_code}){during}: {last_err}"
                        f"{sandbox.files_hint(last_err)}")
    if res["load_error"]:
        return "fail", res["load_error"]
    if job["kind"] == "benchmark":
        return bench_verdict(res)
    status, summary = correctness_verdict(res["correctness"])
    ghosts = res.get("ghost", [])
    ghost = next((g for g in ghosts if g["outcome"] == "matches"), None)
    if status == "pass" and ghost:
        return "fail", (f"ghost replay: with every @triton.jit body in kernel.py emptied, it still returns the "
                        f"right answer at {ghost['case']} {ghost['dtype']}: the result does not come from its "
                        "Triton code (docs/INTEGRITY.md)")
    if status == "pass" and ghosts and all(g["outcome"] == "differs" for g in ghosts):
        summary += "; ghost replay: the answer comes from its Triton code"
    if status == "pass" and res.get("launches_counted"):
        summary += "; every checked call launched its Triton kernels (counted in the CUDA driver)"
    return status, summary


def correctness_verdict(rows: list[dict]) -> tuple[str, str]:
    ran = [r for r in rows if not r["skipped"]]
    failed = [r for r in ran if not r["ok"]]
    if failed:
        first = failed[0]
        hint = "out of memory: " if sandbox.mentions_memory(first["reason"]) else ""
        return "fail", (f"{hint}{len(failed)}/{len(ran)} cases fail; first: {first['case']} {first['dtype']}: "
                        f"{first['reason']}{sandbox.files_hint(first['reason'])}")
    skipped = [r for r in rows if r["skipped"]]
    skip_note = f"; {len(skipped)} skipped ({skipped[0]['reason'].split(':')[0]})" if skipped else ""
    if not ran:
        return "pass", f"no case could run here{skip_note}"
    worst = max(ran, key=lambda r: r["max_rel_err"])
    return "pass", (f"{len(ran)}/{len(ran)} cases pass; worst rel err {worst['max_rel_err']:.1e} "
                    f"({worst['case']} {worst['dtype']}){skip_note}")


def bench_verdict(res: dict) -> tuple[str, str]:
    # A wrong current kernel, or any version (a baseline too) whose times the judge's clock rejected.
    wrong = [b for b in res["bench"] if (b["version"] == "kernel" and not b["ok"]) or b.get("rejected")]
    if wrong:
        return "fail", f"{wrong[0]['version']} at {wrong[0]['case']} {wrong[0]['dtype']}: {wrong[0]['error']}"
    flagged = [b for b in res["bench"] if b["implausible"] and b["version"].startswith("kernel")]
    if flagged and not res.get("accept_implausible"):
        b = flagged[0]
        return "fail", (f"{b['version']} at {b['case']} {b['dtype']}: {b['gbps']:.0f} GB/s is above the copy bandwidth "
                        f"measured on this GPU ({res['copy_gbps']:.0f} GB/s), which no kernel that does its work can "
                        f"reach ({len(flagged)} timing(s) flagged); a person who has checked it can set "
                        '"accept_implausible": true in the bench plan (docs/CONTRACTS.md)')
    ranked = [r for r in res["report_rows"] if r["speedup"]]
    if not ranked:
        return "pass", "nothing could be ranked: " + ("; ".join(res["warnings"]) or "no timings")
    best = max(ranked, key=lambda r: r["speedup"])
    text = (f"kernel vs torch eager: {statistics.median(r['speedup'] for r in ranked):.3g}x median over "
            f"{len(ranked)} case x dtype (best {best['speedup']:.3g}x at {best['case']} {best['dtype']})")
    vs_compile = [r["speedup_vs_compile"] for r in ranked if r["speedup_vs_compile"]]
    if vs_compile:
        text += f"; vs torch.compile {statistics.median(vs_compile):.3g}x median"
    vs_liger = [r["speedup_vs_liger"] for r in ranked if r.get("speedup_vs_liger")]
    if vs_liger:
        text += f"; vs Liger-Kernel {statistics.median(vs_liger):.3g}x median"
    ties = sum(bool(r.get("speedup_tie")) for r in ranked)
    if ties:
        text += f"; {ties} of them a tie (the times' interquartile ranges overlap)"
    if flagged:
        text += f"; {len(flagged)} timing(s) above the copy bandwidth, accepted by the bench plan"
    if protocol.device_type(res["backend"]) == "cpu":
        text += f" ({protocol.CPU_TIMING_NOTE})"
    return "pass", text


def pytest_verdict(report: dict) -> tuple[str, str]:
    counts = ", ".join(f"{report[k]} {k}" for k in ("failed", "errors", "passed", "skipped") if report[k])
    if report.get("refused"):
        return "fail", f"generated tests: {report['refused']}"
    if report["timed_out"]:
        return "fail", "generated tests timed out"
    if report["exit_code"] == 0:
        return "pass", f"generated tests: {counts}"
    if report["exit_code"] == 5:
        return "fail", "generated tests: none collected"
    counts = counts or f"exit code {report['exit_code']}"
    first = next((ln for ln in report["log_tail"].splitlines() if ln.startswith(("FAILED", "ERROR"))), "")
    return "fail", f"generated tests: {counts}" + (f"; {first[:300]}" if first else "")


def _combine(status: str, summary: str, status2: str, summary2: str) -> tuple[str, str]:
    rank = {"pass": 0, "fail": 1, "error": 2}
    return max(status, status2, key=rank.get), f"{summary}; {summary2}"


def _harness_fields(res: dict | None, outcome: sandbox.Outcome, warnings: list[str]) -> dict:
    """What the harness measured, as result fields; its warnings after the worker's own."""
    fields = {"log_tail": _tail(outcome.stderr_tail.strip() or outcome.stdout_tail)}
    if res is None:
        return fields
    keys = ("correctness", "ghost", "bench", "report_rows", "tuning", "copy_gbps", "timing_note", "device",
            "accept_implausible", "launches_counted")
    return {**fields, **{k: res[k] for k in keys}, "warnings": [*warnings, *res["warnings"]]}


def _add_chart(result: dict, job: dict) -> None:
    from runner import chart   # matplotlib only where a benchmark needs it
    try:
        png = chart.render(result["bench"], result["copy_gbps"], operator=json.loads(job["files"]["spec.json"])["name"],
                           device=result["device"], backend=result["backend"], tuning=result["tuning"],
                           notes=chart.chart_notes(result))
        result["chart_png_b64"] = base64.b64encode(png).decode()
    except Exception as e:   # a chart is a convenience: the numbers are in the result anyway
        result["warnings"].append(f"chart failed: {type(e).__name__}: {e}")


# --- the long-running runner ------------------------------------------------------------------

def gpu_lost(backend: str, gpu: int | None) -> str | None:
    """Why the runner's GPU cannot take jobs (it no longer answers nvidia-smi: fallen off the bus, a
    fatal Xid), or None. Asked where a GPU is pinned or the backend is a GPU's, and only where
    nvidia-smi is installed: without it there is nothing to ask."""
    if (gpu is None and protocol.device_type(backend) == "cpu") or not shutil.which("nvidia-smi"):
        return None
    index = sandbox.pinned_gpu(gpu)
    out = _ask_nvidia_smi("name", index)
    if out is None or (out.returncode == 0 and out.stdout.strip()):
        return None             # it answered, or was too slow to say: no verdict from silence
    said = (out.stderr or out.stdout).strip().splitlines()
    return f"GPU {index} does not answer nvidia-smi" + (f" ({said[0][:160]})" if said else "")


class Heartbeat:
    """hb:JOB_ID, written at once and then every every_s seconds from a thread, with the latest
    progress line as detail."""

    def __init__(self, queue, job_id: str, every_s: float, info: dict) -> None:
        self.queue, self.job_id, self.every_s, self.info = queue, job_id, every_s, info
        self.detail = "picked up"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{job_id}", daemon=True)

    def beat(self, state: str = "running") -> None:
        self.queue.put_heartbeat(self.job_id, {"ts": time.time(), "state": state, "detail": self.detail, **self.info})

    def start(self) -> None:
        self.beat()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.beat()
            except Exception as e:   # a queue hiccup must not end the job; the next beat retries
                print(f"heartbeat for {self.job_id} failed: {e}", flush=True)


class Runner:
    """Runs jobs from one queue, one at a time, with heartbeats; prints one line per state change."""

    def __init__(self, queue, gpu: int | None = None, heartbeat_s: float | None = None) -> None:
        self.queue, self.backend, self.gpu = queue, queue.backend, gpu
        self.heartbeat_s = heartbeat_s or float(os.environ.get("KERNELBOT_HEARTBEAT_S", 5))
        self.device = device_name(self.backend, gpu)
        self.stopping = threading.Event()
        self.wake = threading.Event()     # the serve loop's: a stop, or a GPU found lost
        self.current: str | None = None
        self.down: str | None = None      # why the GPU takes no jobs now (gpu_lost), or None
        # Watched: a GPU pinned by --gpu (the fleet's, from nvidia-smi's list), or one that answered
        # nvidia-smi at start; one it cannot name (a MIG slice, say) is never taken for lost.
        self.watched = gpu is not None or gpu_lost(self.backend, gpu) is None
        self.load, self.load_at = None, -LOAD_EVERY_S

    def gpu_load(self) -> dict | None:
        """The GPU's load for the presence, asked of nvidia-smi at most every LOAD_EVERY_S."""
        if time.monotonic() - self.load_at >= LOAD_EVERY_S:
            self.load, self.load_at = gpu_load(self.backend, self.gpu), time.monotonic()
        return self.load

    def say(self, text: str) -> None:
        print(f"[runner {self.backend}] {text}", flush=True)

    def report_alive(self) -> None:
        """The runner's alive record; a store that refuses it (disk full, locked) is logged and
        tried again on the next tick, never the end of the runner."""
        try:
            self.queue.put_runner_alive(self.presence())
        except Exception as e:
            self.say(f"could not write the alive record (retrying): {type(e).__name__}: {e}")

    def presence(self) -> dict:
        where = f"gpu{self.gpu}" if self.gpu is not None else f"pid{os.getpid()}"
        return {"ts": time.time(), "runner": f"{HOST}/{where}", "host": HOST, "pid": os.getpid(), "gpu": self.gpu,
                "device": self.device, "backend": self.backend, "busy": self.current, "load": self.gpu_load(),
                "down": self.down}

    def handle(self, job) -> None:
        job_id = job.get("job_id") if isinstance(job, dict) else None
        if not isinstance(job_id, str) or not job_id:
            self.say(f"dropped a job without a job_id (no key to answer under): {str(job)[:200]}")
            return
        attempt = job.get("attempt", 1)
        beat = Heartbeat(self.queue, job_id, self.heartbeat_s,
                         {"host": HOST, "device": self.device, "pid": os.getpid(), "attempt": attempt})
        beat.start()
        if self.gpu_down(job_id, beat):
            return
        self.current = job_id
        self.say(f"job {job_id} ({job.get('kind')}, attempt {attempt}): picked up")

        def progress(detail: str) -> None:
            if detail != beat.detail:
                beat.detail = detail
                self.say(f"job {job_id}: {detail}")

        try:
            result = execute_job(job, progress, backend=self.backend, gpu=self.gpu, cancel=self.stopping)
        except Cancelled:
            beat.stop()
            beat.beat("abandoned")      # the bot re-queues it now, not when the heartbeat goes stale
            self.say(f"job {job_id}: stopped with the runner; left for the bot to re-queue")
            return
        except Exception as e:   # the runner's own fault: answer anyway, so the bot is not left waiting
            traceback.print_exc()
            result = {**new_result(job, self.backend, self.gpu), "summary": f"runner error: {type(e).__name__}: {e}",
                      "finished_at": time.time()}
        finally:
            beat.stop()
            self.current = None
        if self.gpu_down(job_id, beat):     # a GPU lost during the job: its verdict is not the kernel's
            return
        # The result comes after the last heartbeat, never before one: the bot pops the result and
        # clears the heartbeat, and a beat landing later would stay in the store for good.
        self.queue.put_result(job_id, result)
        self.say(f"job {job_id}: {result['status']}: {result['summary']}")

    def gpu_lost(self) -> str | None:
        return gpu_lost(self.backend, self.gpu) if self.watched else None

    def gpu_down(self, job_id: str, beat: Heartbeat) -> bool:
        """Whether the GPU is lost (now, or found so before): the job is then left abandoned, which
        the bot re-queues at once for another runner, with no result from this one; serve() stops
        taking jobs until the GPU answers again."""
        self.down = self.down or self.gpu_lost()
        if not self.down:
            return False
        beat.stop()
        beat.beat("abandoned")
        self.say(f"job {job_id}: {self.down}; left for another runner, with no result from this one")
        self.wake.set()             # serve() stops taking jobs now, before the bot re-queues this one
        return True

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()


def wait_for_gpu(runner: Runner, users: Path | None) -> bool:
    """Until the runner's GPU answers nvidia-smi (True), or the runner is stopping (False); the
    presence says why it takes no jobs meanwhile."""
    runner.down = runner.gpu_lost()
    if runner.down:
        runner.say(f"{runner.down}: taking no jobs until it does")
    while runner.down:
        runner.report_alive()
        if users_gone(runner, users) or runner.stopping.wait(min(runner.heartbeat_s, 5.0)):
            return False
        runner.down = runner.gpu_lost()
        if not runner.down:
            runner.say("the GPU answers again: taking jobs")
    return True


def users_gone(runner: Runner, users: Path | None) -> bool:
    """A runner a command started for itself (users) whose commands have all ended: it stops."""
    if not users or runner_users.alive(users):
        return False
    runner.say(f"no command that uses this runner is alive any more ({users})")
    runner.stop()
    return True


def on_stop_signals(runner: Runner) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: runner.stop())


def start_consumer(queue, runner: Runner):
    consumer = queue.consumer()
    consumer.start()
    on_stop_signals(runner)         # after start(): ours replace Huey's handlers
    return consumer


def serve(backend: str, queue_url: str, gpu: int | None = None, heartbeat_s: float | None = None,
          users: Path | None = None) -> None:
    """Consume the backend's queue until SIGTERM or SIGINT, or (users: a runner a command started
    for itself) until no command in that users directory is alive (runner.users). A job running
    then is stopped (its sandbox killed) and gets no result: the bot re-queues it when its
    heartbeat goes stale."""
    from runner.queue import JobQueue   # huey only where a queue is served
    queue = JobQueue(queue_url, backend)
    runner = Runner(queue, gpu, heartbeat_s)
    queue.handler = runner.handle
    on_stop_signals(runner)
    if not wait_for_gpu(runner, users):
        return stopped(runner)
    consumer, serving = start_consumer(queue, runner), queue.opened
    runner.say(f"serving queue {protocol.queue_name(backend)} at {queue_url} on {runner.device} (pid {os.getpid()})")
    runner.report_alive()                          # now: the sandbox probes below take seconds
    swept = workdirs.sweep()
    if swept:
        runner.say(f"removed {len(swept)} work directories left by runners that died")
    runner.say(sandbox.isolation().summary())   # without one, untrusted jobs are refused unless KERNELBOT_SANDBOX=none
    problem = environment_problem(backend)
    runner.say(f"cannot run jobs here: {problem}" if problem else "environment: torch, triton, pytest, matplotlib")
    while True:
        runner.report_alive()
        queue.reopened()
        if queue.opened != serving:     # the SQLite file was deleted or replaced: serve the one there now
            runner.say(f"the queue file {queue.path} was replaced or deleted: serving the one there now")
            consumer.stop(graceful=True)
            consumer, serving = start_consumer(queue, runner), queue.opened
        if runner.down:                 # found lost during a job (Runner.gpu_down)
            consumer.stop(graceful=True)
            if not wait_for_gpu(runner, users):
                return stopped(runner)
            consumer, serving = start_consumer(queue, runner), queue.opened
        users_gone(runner, users)
        runner.wake.wait(min(runner.heartbeat_s, 5.0))
        runner.wake.clear()
        if runner.stopping.is_set():
            break
    consumer.stop(graceful=True)
    stopped(runner)


def stopped(runner: Runner) -> None:
    runner.say("stopping")
    runner.queue.put_runner_alive({**runner.presence(), "ts": 0.0, "stopped": True})   # gone now, not in 15 s
    runner.say("stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runner.worker", description="kernelbot GPU/CPU runner")
    parser.add_argument("--backend", required=True, help="queue to serve, e.g. cpu or cuda-h200")
    parser.add_argument("--queue", required=True, help="sqlite:///path/queue.db or redis://host:6379/0")
    parser.add_argument("--gpu", type=int, default=None, help="GPU index this runner pins its jobs to")
    parser.add_argument("--heartbeat-s", type=float, default=None, help="default: KERNELBOT_HEARTBEAT_S or 5")
    parser.add_argument("--users", type=Path, default=None,
                        help="serve only while a command named in this directory is alive (runner.users)")
    args = parser.parse_args(argv)
    serve(args.backend, args.queue, args.gpu, args.heartbeat_s, args.users)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
