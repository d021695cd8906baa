"""Export a session: the approved artifacts, report.json, chart.png and REPORT.md. The kernel
carries the configs its benchmark tuned (bot.workflow.export.tuned_kernel) once that benchmark passed on
a GPU (interpreter timings say nothing about which config is fastest there)."""
from __future__ import annotations

import base64
import json
import time
from pathlib import Path

from bot.workflow import stages
from bot.workflow.cards import bench_table, correctness_table, format_table
from bot.workflow.custom_op import custom_op_source
from bot.workflow.export import tuned_kernel
from bot.workflow.model import Session
from runner import protocol

MODULE_CALL = Path(protocol.__file__).with_name("module_call.py")
AUTOTUNE = Path(__file__).resolve().parents[1] / "codegen" / "autotune_cache.py"     # exported as autotune.py


def stage_status(s: Session, stage: str) -> str:
    """passed / failed / approved / pending / not reached, for one stage."""
    job = s.last_job(stage) if stage in stages.EXECUTION else None
    if job and not job.open:
        return {"pass": "passed", "cancelled": "cancelled"}.get(job.status, "failed")
    if job:
        return "running"
    if stage not in stages.EXECUTION and s.approved(stage):
        return "approved"
    return "pending" if s.revisions_of(stage) else "not reached"


def report(s: Session) -> dict:
    """report.json: stages with status, approvals and job results, and the bench table."""
    out = {"session": s.id, "request": s.request, "requester": s.requester, "status": s.status,
           "backend": s.backend, "generator": s.generator, "usage": s.usage, "stages": [], "bench": []}
    if s.refusal:
        out["refusal"] = s.refusal
    for stage in stages.STAGES:
        entry = {"stage": stage, "status": stage_status(s, stage), "file": stages.FILENAMES[stage]}
        rev = s.approved(stage) or s.latest(stage)
        if rev:
            entry.update(rev=rev.rev, sha256=rev.sha, author=rev.author)
            approval = s.approval(stage, rev.rev)
            if approval:
                entry.update(approved_by=approval.approver, approved_at=approval.at)
        job = s.last_job(stage)
        if job and job.result:
            entry["job"] = {k: v for k, v in job.result.items() if k != "chart_png_b64"}
        elif job and job.status == "cancelled":
            entry["job"] = {"status": "cancelled", "summary": job.detail}
        out["stages"].append(entry)
    bench = _bench_result(s)
    if bench:
        out["bench"] = bench.get("report_rows", [])
        out["device"] = bench.get("device")
        out["timing_note"] = bench.get("timing_note")
        out["copy_gbps"] = bench.get("copy_gbps")
    return out


def _bench_result(s: Session) -> dict | None:
    job = s.last_job("benchmark")
    return job.result if job and job.result else None


def export(s: Session, out_dir: Path) -> list[Path]:
    """Write every artifact (approved revision, else the latest) and the reports to out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for stage in stages.STAGES:
        rev = s.approved(stage) or s.latest(stage)
        if rev:
            content = _with_tuning(s, rev.content) if stage == "kernel" and rev is s.approved(stage) else rev.content
            written.append(_write(out_dir / stages.FILENAMES[stage], content))
    spec = s.approved("spec") or s.latest("spec")
    if spec and '"parameter"' in spec.content:      # the generated tests call the pasted module through it
        written.append(_write(out_dir / MODULE_CALL.name, MODULE_CALL.read_text()))
    op = custom_op_source(_approved_spec(s)) if s.approved("kernel") else None
    if op:
        written.append(_write(out_dir / "torch_op.py", op))
    if s.approved("kernel"):
        written.append(_write(out_dir / "autotune.py", AUTOTUNE.read_text()))
    rep = report(s)
    written.append(_write(out_dir / "report.json", json.dumps(rep, indent=2) + "\n"))
    bench = _bench_result(s)
    if bench and bench.get("chart_png_b64"):
        path = out_dir / "chart.png"
        path.write_bytes(base64.b64decode(bench["chart_png_b64"]))
        written.append(path)
    written.append(_write(out_dir / "REPORT.md", markdown(s, rep, chart=(out_dir / "chart.png").exists())))
    return written


def _tuning(s: Session) -> list[dict]:
    """The config sweep of a benchmark that passed on a GPU ([] otherwise): what the exported kernel carries."""
    job = s.last_job("benchmark")
    if not (job and job.status == "pass" and job.result) or protocol.device_type(job.backend) == "cpu":
        return []
    return job.result.get("tuning") or []


def _with_tuning(s: Session, kernel: str) -> str:
    """The approved kernel with TUNED filled from its passed benchmark."""
    tuning = _tuning(s)
    return tuned_kernel(kernel, tuning, s.last_job("benchmark").result.get("device") or "") if tuning else kernel


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def markdown(s: Session, rep: dict, chart: bool) -> str:
    lines = [f"# kernelbot session {s.id}", "", f"Request: {s.request}", "",
             f"Status: **{s.status}** · backend `{s.backend}` · generator `{s.generator}` · "
             f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(s.updated_at or s.created_at))}", "",
             *([f"Not generated: {s.refusal}", ""] if s.refusal else []),
             "| stage | status | revision | approved by | sha256 |", "|---|---|---|---|---|"]
    for e in rep["stages"]:
        lines.append(f"| {stages.label(e['stage'])} | {e['status']} | r{e.get('rev', '-')} | "
                     f"{e.get('approved_by', '-')} | {e.get('sha256', '-')[:12]} |")
    for e in rep["stages"]:
        job = e.get("job")
        if not job:
            continue
        lines += ["", f"## {stages.TITLES[e['stage']]}: {job.get('status')}", "", job.get("summary", "")]
        table = bench_table(job) if job.get("report_rows") else correctness_table(job)
        if table:
            lines += ["", "```", *format_table(table), "```"]
        for w in job.get("warnings", []):
            lines.append(f"- {w}")
    if rep.get("timing_note"):
        lines += ["", f"Timing: {rep['timing_note']} on {rep.get('device')}"]
    bench = s.last_job("benchmark")
    if any(t.get("best") for t in _tuning(s)):
        lines += ["", f"kernel.py carries the best config per case above (`TUNED`, tuned on {rep.get('device')}): "
                      "called on those shapes and dtypes it launches with it; `config=` overrides it."]
    elif bench and (bench.result or {}).get("tuning") and protocol.device_type(bench.backend) == "cpu":
        lines += ["", "kernel.py keeps `TUNED` empty: its configs were timed on the Triton interpreter, "
                      "which says nothing about which is fastest on a GPU."]
    if chart:
        lines += ["", "![chart](chart.png)"]
    return "\n".join(lines + _usage(s)) + "\n"


def _approved_spec(s: Session) -> dict:
    """The approved spec ({} where none is, or it is not JSON)."""
    rev = s.approved("spec")
    try:
        return json.loads(rev.content) if rev else {}
    except ValueError:
        return {}


def _usage(s: Session) -> list[str]:
    """How a team uses the exported kernel: the function, or the custom op where torch_op.py is written."""
    spec = _approved_spec(s)
    if not (s.approved("kernel") and spec.get("name") and spec.get("inputs")):
        return []
    name, args = spec["name"], ", ".join(i["name"] for i in spec["inputs"])
    lines = ["", "## Use", "", "```python", "import kernel", f"out = kernel.{name}({args})"]
    if custom_op_source(spec):
        lines += ["", "import torch_op      # kernelbot::" + name + ", traced whole by torch.compile",
                  f"out = torch_op.{name}({args})"]
        if spec.get("training"):
            lines += ["out.backward(grad)   # the Triton backward"]
    lines += ["", "import autotune      # opt-in: shapes the benchmark did not time are tuned once, cached on disk",
              "op = autotune.autotuned(kernel)", f"out = op({args})"]
    return lines + ["```", "", "test_kernel.py runs as is beside them: `pytest test_kernel.py`."]
