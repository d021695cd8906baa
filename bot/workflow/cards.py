"""Cards: the platform-neutral message model, and the cards of a session.

Adapters render a Card their own way (Block Kit, Discord embeds, plain text).
Everything a person sees about a stage, a runner result or a session is built here.
"""
from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field

from bot.generators.interface import failed_verification
from bot.workflow import stages
from bot.workflow.model import Job, Revision, Session

ACTIONS = ("approve", "correct", "edit", "regenerate", "cancel")
ACTION_LABELS = {"approve": "Approve", "correct": "Request changes", "edit": "Edit",
                 "regenerate": "Regenerate", "cancel": "Cancel"}


@dataclass
class Card:
    title: str
    status: str
    session_id: str
    fields: list[tuple[str, str]] = field(default_factory=list)
    code: str | None = None
    code_lang: str = ""
    code_filename: str | None = None
    table: list[list[str]] | None = None          # first row is the header
    image: bytes | None = None
    image_name: str | None = None
    notes: list[str] = field(default_factory=list)
    actions: tuple[str, ...] = ()
    stage: str | None = None
    rev: int | None = None
    job_id: str | None = None

    @property
    def action_value(self) -> str:
        """What a button carries back: session, stage and revision it acts on."""
        return f"{self.session_id}|{self.stage or ''}|{self.rev or 0}"


def format_table(rows: list[list[str]]) -> list[str]:
    """Aligned columns; the first row is the header."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    out = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    return out


def parse_action_value(value: str) -> tuple[str, str, int]:
    """Inverse of Card.action_value; raises ValueError on anything malformed."""
    session_id, stage, rev = value.split("|")
    if stage and stage not in stages.STAGES:
        raise ValueError(f"unknown stage {stage!r}")
    return session_id, stage, int(rev)


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def revision_card(s: Session, r: Revision) -> Card:
    """The card of one revision of a stage: key fields, code, approval and job state."""
    latest = s.latest(r.stage)
    current = s.active and s.stage == r.stage and latest is r and not s.generating
    card = Card(title=f"{stages.label(r.stage)} · r{r.rev}", status=_revision_status(s, r, current),
                session_id=s.id, stage=r.stage, rev=r.rev, notes=list(r.notes))
    card.fields = list(r.summary.items())
    card.fields.append(("author", r.author if r.origin == "generated" else f"{r.author} (edit)"))
    if r.feedback:
        card.fields.append(("answers", _clip(r.feedback, 300)))
    card.fields += _approval_fields(s, r)
    card.code = r.content
    card.code_lang = "json" if r.stage in stages.JSON_STAGES else "python"
    card.code_filename = stages.FILENAMES[r.stage]
    if current:
        card.actions = ACTIONS if not _approved_and_running(s, r) else ("correct", "edit", "regenerate", "cancel")
    return card


def _approved_and_running(s: Session, r: Revision) -> bool:
    return bool(s.approval(r.stage, r.rev)) and s.open_job(r.stage) is not None


def _revision_status(s: Session, r: Revision, current: bool) -> str:
    job = _job_for(s, r)
    if job and job.open:
        return _job_status(job)
    if s.approval(r.stage, r.rev):
        done = f" · {job.status}" if job else ""
        return f"approved{done}"
    if job and not job.open:
        return f"{job.status}: {job.result.get('summary', '') if job.result else ''}".strip()
    if current and failed_verification(r.summary):
        return "FAILED verification: correct or edit it"
    if current:
        return "waiting for review"
    latest = s.latest(r.stage)
    return "superseded" if latest and latest.rev > r.rev else s.status


def _job_for(s: Session, r: Revision) -> Job | None:
    jobs = [j for j in s.jobs if j.stage == r.stage and j.rev == r.rev]
    return jobs[-1] if jobs else None


def _job_status(job: Job) -> str:
    where = f" on {job.host}" + (f" ({job.device})" if job.device else "") if job.host else ""
    attempt = f" · attempt {job.attempt}/{job.max_attempts}" if job.attempt > 1 else ""
    detail = f": {job.detail}" if job.detail else ""
    if job.status == "queued":
        return f"queued for a {job.backend} runner{attempt}"
    return f"running{where}{detail}{attempt}"


def _approval_fields(s: Session, r: Revision) -> list[tuple[str, str]]:
    out = []
    for a in s.approvals:
        if a.stage == r.stage and a.rev == r.rev:
            text = f"{a.approver} at {_when(a.at)} · sha256 {a.sha[:12]}"
            if not a.valid:
                text += f" · void ({a.voided_why})"
            out.append(("approved by", text))
    return out


def result_card(s: Session, job: Job) -> Card:
    """A runner result: pass/fail with the worst error per case, bench table, chart."""
    r = job.result or {}
    card = Card(title=f"{stages.TITLES[job.stage]} result · {r.get('status', job.status).upper()}",
                status=r.get("summary", job.status), session_id=s.id, stage=job.stage, rev=job.rev,
                job_id=job.id)
    card.fields = [("runner", f"{r.get('host', job.host) or '?'} · {r.get('device', job.device) or '?'}"),
                   ("job", f"{job.id} · attempt {job.attempt}")]
    if r.get("pytest"):
        p = r["pytest"]
        card.fields.append(("generated tests", f"{p.get('passed', 0)} passed, {p.get('failed', 0)} failed, "
                                               f"{p.get('skipped', 0)} skipped"))
    if r.get("timing_note"):
        card.fields.append(("timing", r["timing_note"]))
    card.table = bench_table(r) if r.get("report_rows") else correctness_table(r)
    card.notes = list(r.get("warnings", []))
    if r.get("status") != "pass" and (r.get("pytest") or {}).get("failed"):
        card.code, card.code_lang = _clip(r["pytest"].get("log_tail", ""), 3000), "text"
    if r.get("chart_png_b64"):
        card.image, card.image_name = base64.b64decode(r["chart_png_b64"]), f"{s.id}-chart.png"
    return card


def correctness_table(r: dict) -> list[list[str]] | None:
    rows = r.get("correctness") or []
    if not rows:
        return None
    table = [["case", "dtype", "result", "max abs err", "max rel err", "note"]]
    for c in rows:
        verdict = "skipped" if c.get("skipped") else ("ok" if c.get("ok") else "FAIL")
        note = c.get("reason") or ("gradients ok; " if c.get("gradients") else "") + (c.get("worst") or "")
        table.append([str(c.get("case")), str(c.get("dtype")), verdict, _num(c.get("max_abs_err")),
                      _num(c.get("max_rel_err")), _clip(note, 80)])
    return table


def bench_table(r: dict) -> list[list[str]]:
    """Times (medians, ± half their interquartile range) and speedups on each row's basis (GPU
    time on a GPU), with the per-call speedup (Python launch overhead included) beside them, a
    speedup whose interval holds 1.0 marked a tie; Liger-Kernel's where it was timed; a tuned
    kernel's best config."""
    rows = r.get("report_rows", [])
    tuned = any(row.get("config") for row in rows)
    liger = any(row.get("liger_ms") for row in rows)        # Liger-Kernel timed: its time and the ratio beside
    versions = ["torch", "compile", *(["liger"] if liger else []), "kernel"]
    ratios = ["speedup", "speedup_vs_compile", *(["speedup_vs_liger"] if liger else []), "speedup_per_call"]
    table = [["case", "dtype", *(f"{v} ms" for v in versions), "speedup", "vs compile", *(["vs Liger"] if liger else []),
              "per call", "GB/s", "% copy"] + (["best config"] if tuned else [])]
    for row in rows:
        times = [_time(row.get(f"{v}_ms"), row.get(f"{v}_q")) for v in versions]
        speedups = [_ratio(row.get(k), row.get(f"{k}_tie")) for k in ratios]
        table.append([str(row.get("case")), str(row.get("dtype")), *times, *speedups,
                      _num(row.get("gbps"), 0), _pct(row.get("pct_of_copy"))]
                     + ([row.get("config") or "-"] if tuned else []))
    return table


def summary_card(s: Session) -> Card:
    """The last card of a session: where it ended and what was approved."""
    card = Card(title=f"Session {s.id} · {s.status}", status=s.status, session_id=s.id)
    card.fields = [("request", _clip(s.request, 300)), ("requester", s.requester)]
    for stage in stages.STAGES:
        rev = s.approved(stage)
        job = s.last_job(stage) if stage in stages.EXECUTION else None
        state = f"r{rev.rev} approved by {s.approval(stage, rev.rev).approver}" if rev else "not approved"
        if job:
            state += f" · {job.status}"
        card.fields.append((stages.label(stage), state))
    if s.usage:
        card.fields.append(("LLM tokens", ", ".join(f"{k} {v}" for k, v in s.usage.items())))
    return card


RUNNER_SEEN_S = 30.0        # a runner whose presence is older than this is not listed


def runner_line(r: dict) -> str:
    """One runner's presence (runner.queue's record): host, GPU, device and what it runs."""
    gpu = f"GPU {r['gpu']}" if r.get("gpu") is not None else "no GPU pinned"
    job = f"running {r['busy']}" if r.get("busy") else f"down ({r['down']})" if r.get("down") else "idle"
    load = r.get("load")
    if isinstance(load, dict) and {"util_pct", "mem_used_mib", "mem_total_mib"} <= load.keys():
        job += (f", GPU {load['util_pct']:.0f}% busy, {load['mem_used_mib'] / 1024:.1f} of "
                f"{load['mem_total_mib'] / 1024:.0f} GiB in use")
    return f"{r.get('host')} {gpu} ({r.get('device')}): {job}, seen {max(0.0, time.time() - r['ts']):.0f} s ago"


def runners_text(runners: list[dict], backend: str) -> str:
    """The runners of a backend for a status reply: each GPU and its load, or that none is alive."""
    if not runners:
        return f"none alive for {backend}: its jobs wait in the queue until one starts"
    busy = sum(bool(r.get("busy")) for r in runners)
    lines = sorted(runner_line(r) for r in runners)
    return f"{len(runners)} for {backend}, {busy} busy: " + "; ".join(lines)


def _num(v, digits: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, (int, float)):
        return f"{v:.{digits}g}" if digits else f"{v:.0f}"
    return str(v)


def _pct(v) -> str:
    return f"{v:.1f}" if isinstance(v, (int, float)) else "-"


def _time(ms, q) -> str:
    """A median time with ± half its interquartile range, as a share of it."""
    if not (isinstance(ms, (int, float)) and q):
        return _num(ms)
    return f"{ms:.4g} ±{50 * (q[1] - q[0]) / ms:.0f}%"


def _ratio(v, tie: bool = False) -> str:
    if not isinstance(v, (int, float)):
        return "-"
    return f"{v:.2f}x tie" if tie else f"{v:.2f}x"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
