"""The benchmark chart: speedup over torch eager (left) and achieved bandwidth against the
measured copy ceiling (right), per case and dtype, one bar per version; below them, for a tuned
kernel, each config's time against the best config's, per case and dtype. PNG bytes.

The tuning panel is a grid (configs down, cases across) rather than bars: 6-12 configs over
6-12 cases are 36-144 values, which as bars would need a label per bar; as a grid each config
is named once and each cell holds its ratio."""
from __future__ import annotations

import io
import textwrap
from datetime import datetime

import matplotlib

matplotlib.use("Agg")   # no display on a runner host
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from runner import protocol, spread  # noqa: E402

NOTE_WIDTH = 150                # characters per footnote line
SIDE_BY_SIDE_MAX_GROUPS = 4     # more (case, dtype) groups than this: panels stacked, full width each
SLOW = 2.0                      # a config this many times slower than the best is full red


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"   # speedups keep two decimals


def _case_label(case: str, dtype: str) -> str:
    """Tick label: each other input's shape on a line of its own ('3001x2999 (b:2999x3007)' side by
    side ran into its neighbour, and a matmul epilogue's three shapes on one line into two)."""
    return f"{case.replace(' (', chr(10) + '(').replace(', ', ',' + chr(10))}\n{dtype}"


def _bar_label(row: dict | None) -> str:
    """Why a version has no bar in a group, or '' when it has one."""
    if row is None or row.get("time_ms") is None:
        error = "" if row is None else row.get("error", "")
        return next((word for word in ("wrong", "failed") if error.startswith(word)), "n/a")
    return "implausible" if row.get("implausible") else ""


def _grouped_bars(ax, groups: list[tuple[str, str]], versions: list[str], rows: dict, value, colors: dict,
                  interval=lambda row: None, ties: bool = False) -> None:
    """One cluster per (case, dtype); a missing bar is marked with why, at the axis bottom. interval(row):
    the value's [low, high] from the timings' interquartile ranges, drawn as an error bar; with ties
    (speedups), a bar whose interval holds 1.0 is labelled a tie."""
    width = 0.8 / max(1, len(versions))
    crowded = len(groups) * len(versions) > 16     # then value labels stand upright to fit
    for j, version in enumerate(versions):
        xs, heights, spans = [], [], []
        for i, group in enumerate(groups):
            row = rows.get((*group, version))
            x = i - 0.4 + width * (j + 0.5)
            note = _bar_label(row)
            if note:
                ax.annotate(note, (x, 0), xytext=(0, 3), textcoords="offset points", xycoords=("data", "axes fraction"),
                            rotation=90, ha="center", va="bottom", fontsize=7, color="0.35")
                continue
            xs.append(x)
            heights.append(value(row))
            spans.append(interval(row) or [heights[-1], heights[-1]])
        errors = np.array([[h - lo for h, (lo, _) in zip(heights, spans)], [hi - h for h, (_, hi) in zip(heights, spans)]])
        bars = ax.bar(xs, heights, width * 0.95, label=version, color=colors[version],
                      yerr=errors if errors.any() else None, capsize=2, error_kw={"elinewidth": 0.8})
        labels = [_number(h) + (" tie" if ties and spread.is_tie(span) else "") for h, span in zip(heights, spans)]
        # A white box under each label: a reference line (torch = 1.0, the copy ceiling) running
        # through a bar's top would otherwise strike its number out.
        ax.bar_label(bars, labels=labels, fontsize=7, padding=2, rotation=90 if crowded else 0,
                     bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.85})
    ax.set_xticks(range(len(groups)), [_case_label(case, dtype) for case, dtype in groups], fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.margins(y=0.15)     # room for the value labels above the tallest bar
    ax.grid(axis="y", alpha=0.3)


def _log_if_wide(ax, values: list[float]) -> None:
    """Log scale when bars differ by more than 20x, so the short ones stay visible."""
    values = [v for v in values if v and v > 0]
    if values and max(values) / min(values) > 20:
        ax.set_yscale("log")


def _legend_below(ax) -> None:
    """Under the axes and their tick labels, where it never hides a bar or the reference line."""
    lines = max((label.get_text().count("\n") + 1 for label in ax.get_xticklabels()), default=3)
    entries = len(ax.get_legend_handles_labels()[0])     # versions and the reference line: one row
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.02 - 0.04 * lines), ncol=max(1, min(4, entries)),
              frameon=False)


def _tuning_panel(ax, tuning: list[dict]) -> None:
    """Configs (rows, by label) x case and dtype (columns): each correct config's time over the
    fastest one's there, green at 1.00 (the best, boxed) to red at SLOW x; wrong ones marked."""
    labels = list(dict.fromkeys(e["label"] for t in tuning for e in t["configs"]))
    ratios = np.full((len(labels), len(tuning)), np.nan)
    for j, t in enumerate(tuning):
        fastest = min((e["time_ms"] for e in t["configs"] if e["ok"]), default=None)
        for e in t["configs"]:
            i = labels.index(e["label"])
            if e["ok"]:
                ratios[i, j] = e["time_ms"] / fastest
            text = f"{ratios[i, j]:.2f}" if e["ok"] else "wrong" if e["error"].startswith("wrong") else "failed"
            best = e["config"] == t["best"]
            ax.text(j, i, text, ha="center", va="center", fontsize=8, fontweight="bold" if best else "normal",
                    color="black" if e["ok"] else "crimson")
            if best:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=2.5))
    cmap = plt.get_cmap("RdYlGn_r").with_extremes(bad="0.88")      # grey: no time, wrong or failed
    ax.imshow(np.ma.masked_invalid(ratios), cmap=cmap, vmin=1.0, vmax=SLOW, aspect="auto", alpha=0.75)
    ax.set_xticks(range(len(tuning)), [_case_label(t["case"], t["dtype"]) for t in tuning], fontsize=8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.tick_params(length=0)
    # Two lines: with long config labels on the left, one line ran past the figure's edge.
    ax.set_title(f"tuning: config time / best config time per case, lower is better\n"
                 f"(best = 1.00, boxed; full red = {SLOW:g}x or slower)", fontsize=11)


def _throughput_panel(ax, groups, versions, rows, colors, copy_gbps: float | None, basis: str) -> None:
    """Matmul rows carry TFLOP/s, what a compute-bound kernel is judged on; the others GB/s
    against the copy bandwidth."""
    if any(r.get("tflops") for r in rows.values()):
        _grouped_bars(ax, groups, versions, rows, lambda r: r.get("tflops") or 0.0, colors)
        ax.set_title(f"achieved throughput (2*M*N*K flops / {basis} time)", fontsize=11)
        ax.set_ylabel("TFLOP/s")
    else:
        _grouped_bars(ax, groups, versions, rows, lambda r: r["gbps"], colors, interval=_bandwidth_interval)
        if copy_gbps:
            ax.axhline(copy_gbps, color="crimson", linewidth=1.5, linestyle="--",
                       label=f"copy bandwidth {copy_gbps:,.0f} GB/s (ceiling)")
        _log_if_wide(ax, [copy_gbps] + [r.get("gbps") for r in rows.values()])
        ax.set_title(f"achieved bandwidth (inputs + output bytes / {basis} time)", fontsize=11)
        ax.set_ylabel("GB/s")
    _legend_below(ax)


def _layout(n_groups: int, tuning: list[dict] | None, footnote_lines: int, panels_across: int = 2):
    """The figure and its axes: the bar panels (speedup, throughput, and per call where it differs
    from the basis) side by side (stacked past SIDE_BY_SIDE_MAX_GROUPS groups), then the tuning
    grid (None without tuning)."""
    stacked = n_groups > SIDE_BY_SIDE_MAX_GROUPS
    heights = [5.5 * panels_across if stacked else 6.2]
    if tuning:
        heights.append(1.6 + 0.3 * len({e["label"] for t in tuning for e in t["configs"]}))
    fig = plt.figure(figsize=(min(18.0, 3 + 1.3 * n_groups) if stacked else 7 * panels_across,
                              sum(heights) + 0.25 * footnote_lines), layout="constrained")
    # Subfigures lay out apart: the tuning grid's long config labels widen its own left margin,
    # not the bar panels' above it (one shared grid pushed them a quarter of the width right).
    panels = fig.subfigures(len(heights), 1, height_ratios=heights) if tuning else [fig]
    bars = panels[0].subplots(panels_across if stacked else 1, 1 if stacked else panels_across)
    return fig, list(bars), panels[1].subplots() if tuning else None


def _spread_key(key: str) -> str:
    return "time_q" if key == "time_ms" else f"{key}_q"


def _bandwidth_interval(row: dict) -> list[float] | None:
    """The bandwidth over the time's interquartile range: bytes are fixed, so it scales inversely."""
    q = row.get("time_q")
    return [row["gbps"] * row["time_ms"] / q[1], row["gbps"] * row["time_ms"] / q[0]] if q and q[0] > 0 else None


def _speedup_panel(ax, groups, versions, rows, colors, basis: str, key: str = "time_ms") -> None:
    """Each version's torch eager time over its own (key: the basis time, or "ms", per call), per
    group, with its interval from the two times' interquartile ranges (a tie where it holds 1.0);
    torch itself is the 1.0 line."""
    torch_ms = {g: (rows.get((*g, "torch")) or {}).get(key) for g in groups}
    torch_q = {g: (rows.get((*g, "torch")) or {}).get(_spread_key(key)) for g in groups}
    speedup_rows = {k: r for k, r in rows.items() if torch_ms.get(k[:2]) and k[2] != "torch" and r.get(key)
                    and r.get("time_ms")}
    others = [v for v in versions if v != "torch"]
    _grouped_bars(ax, groups, others, speedup_rows, lambda r: torch_ms[(r["case"], r["dtype"])] / r[key], colors,
                  interval=lambda r: spread.ratio_range(torch_q[(r["case"], r["dtype"])], r.get(_spread_key(key))),
                  ties=True)
    ax.axhline(1.0, color="black", linewidth=1.2, linestyle="--", label="torch eager = 1.0")
    _log_if_wide(ax, [1.0] + [torch_ms[k[:2]] / r[key] for k, r in speedup_rows.items()])
    what = f"{basis} time" if key == "time_ms" else "per call, launch path included"
    ax.set_title(f"speedup over torch eager, {what} (higher is better)\n"
                 "whiskers: from the times' interquartile ranges; 'tie' where they hold 1.0", fontsize=11)
    ax.set_ylabel("torch eager time / version time")
    _legend_below(ax)


def figure(bench: list[dict], copy_gbps: float | None, *, operator: str, device: str, backend: str,
           when: datetime | None = None, tuning: list[dict] | None = None, notes: list[str] = ()) -> Figure:
    """The chart for a benchmark result's bench rows and its tuning list if any; with nothing
    timed, a table of what was tried and why it has no time. notes: what the reader must know
    (shrunk cases, what was not timed or was timed otherwise, implausible timings), under it."""
    footnote = _footnote(backend, notes)
    lines = footnote.count("\n") + 1 if footnote else 0
    if any(r.get("time_ms") for r in bench):
        fig = _bench_figure(bench, copy_gbps, tuning, lines)
    else:
        fig = _untimed_figure(bench, lines)
    stamp = (when or datetime.now()).strftime("%Y-%m-%d %H:%M")
    fig.suptitle(f"{operator} — {device} — {stamp}", fontsize=13, fontweight="bold")
    if footnote:
        fig.supxlabel(footnote, fontsize=10, color="crimson", ha="center")
    return fig


def _footnote(backend: str, notes: list[str]) -> str:
    said = ([protocol.CPU_TIMING_NOTE] if protocol.device_type(backend) == "cpu" else []) + list(notes)
    return "\n".join(line for note in said for line in textwrap.wrap(note, NOTE_WIDTH))


def _bench_figure(bench: list[dict], copy_gbps: float | None, tuning: list[dict] | None, footnote_lines: int):
    groups = list(dict.fromkeys((r["case"], r["dtype"]) for r in bench))
    versions = list(dict.fromkeys(r["version"] for r in bench))
    rows = {(r["case"], r["dtype"], r["version"]): r for r in bench}
    palette = plt.get_cmap("tab10").colors
    colors = {v: palette[i % len(palette)] for i, v in enumerate(versions)}   # one colour per version
    basis = next((r["basis"] for r in bench if r.get("basis")), "")
    per_call = basis == "GPU" and any(r.get("ms") for r in bench)     # else the basis is the per-call time
    fig, axes, tuning_ax = _layout(len(groups), tuning, footnote_lines, 3 if per_call else 2)
    _speedup_panel(axes[0], groups, versions, rows, colors, basis)
    _throughput_panel(axes[1], groups, versions, rows, colors, copy_gbps, basis)
    if per_call:
        _speedup_panel(axes[2], groups, versions, rows, colors, basis, key="ms")
    if tuning:
        _tuning_panel(tuning_ax, tuning)
    return fig


def _untimed_figure(bench: list[dict], footnote_lines: int):
    """Nothing was timed (each version failed, or every dtype was skipped here): what was tried."""
    rows = [[r["version"], r["case"], r["dtype"], (r.get("error") or "")[:110]] for r in bench] or \
        [["-", "-", "-", "no case or dtype could be timed here (see below)"]]
    fig = plt.figure(figsize=(14, 1.8 + 0.32 * len(rows) + 0.25 * footnote_lines), layout="constrained")
    ax = fig.subplots()
    ax.axis("off")
    ax.set_title("nothing was timed", fontsize=11)
    table = ax.table(cellText=rows, colLabels=["version", "case", "dtype", "why it has no time"],
                     loc="upper center", cellLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(9)
    table.auto_set_column_width(list(range(4)))
    return fig


def chart_notes(result: dict) -> list[str]:
    """From a benchmark result: every case shrunk for the interpreter, what was not timed and why,
    and every timing above the copy ceiling (implausible: not ranked, not trusted)."""
    notes = [w for w in result.get("warnings", []) if any(said in w for said in (" shrunk to ", " not timed",
                                                                                   " timed as float32"))]
    for r in result.get("bench", []):
        if r.get("implausible"):
            notes.append(f"implausible: {r['version']} at {r['case']} {r['dtype']} reached {r['gbps']:.0f} GB/s, above "
                         f"the measured copy bandwidth ({result.get('copy_gbps') or 0:.0f} GB/s), which no real "
                         "kernel does: that timing is not trusted and not ranked")
    return notes


def render(bench: list[dict], copy_gbps: float | None, *, operator: str, device: str, backend: str,
           when: datetime | None = None, tuning: list[dict] | None = None, notes: list[str] = ()) -> bytes:
    """PNG bytes of the chart (figure's arguments)."""
    fig = figure(bench, copy_gbps, operator=operator, device=device, backend=backend, when=when, tuning=tuning,
                 notes=notes)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
