"""Export a session: the approved artifacts, report.json, chart.png and REPORT.md."""
from __future__ import annotations

import base64
import json
import time
from pathlib import Path

from bot import stages
from bot.cards import bench_table, correctness_table
from bot.console import format_table
from bot.model import Session


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
            written.append(_write(out_dir / stages.FILENAMES[stage], rev.content))
    rep = report(s)
    written.append(_write(out_dir / "report.json", json.dumps(rep, indent=2) + "\n"))
    bench = _bench_result(s)
    if bench and bench.get("chart_png_b64"):
        path = out_dir / "chart.png"
        path.write_bytes(base64.b64decode(bench["chart_png_b64"]))
        written.append(path)
    written.append(_write(out_dir / "REPORT.md", markdown(s, rep, chart=(out_dir / "chart.png").exists())))
    return written


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def markdown(s: Session, rep: dict, chart: bool) -> str:
    lines = [f"# kernelbot session {s.id}", "", f"Request: {s.request}", "",
             f"Status: **{s.status}** · backend `{s.backend}` · generator `{s.generator}` · "
             f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(s.updated_at or s.created_at))}", "",
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
    if chart:
        lines += ["", "![chart](chart.png)"]
    return "\n".join(lines) + "\n"
