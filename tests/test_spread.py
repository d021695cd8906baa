"""Honest numbers (runner.spread and where it is shown): each time a median with its interquartile
range, each speedup an interval over those ranges, and a speedup whose interval holds 1.0 a tie in
the report row, the table, the catalog table and the chart."""
from __future__ import annotations

import pytest

from bot import catalog_bench
from bot.workflow.cards import bench_table
from runner import chart, harness, spread


def test_quartiles_and_ratio_intervals():
    assert spread.quartiles([3.0]) == (3.0, 3.0, 3.0)
    assert spread.quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 3.0, 4.0)
    # torch [0.9, 1.1] over a kernel [0.95, 1.0]: 0.9/1.0 to 1.1/0.95, holding 1.0
    interval = spread.ratio_range([0.9, 1.1], [0.95, 1.0])
    assert interval == pytest.approx([0.9, 1.1 / 0.95]) and spread.is_tie(interval)
    assert not spread.is_tie(spread.ratio_range([2.0, 2.2], [1.0, 1.1]))
    assert spread.ratio_range(None, [1.0, 1.0]) is None and not spread.is_tie(None)


def timed(version: str, ms: float, q: list[float]) -> dict:
    return {"case": "64x64", "dtype": "float16", "version": version, "ok": True, "ms": ms, "ms_q": q,
            "time_ms": ms, "time_q": q, "basis": "GPU", "gbps": 100 / ms, "pct_of_copy": 1.0, "implausible": False,
            "error": "", "config": None}


@pytest.mark.parametrize("kernel_q, tie", [([0.96, 1.0], True), ([0.5, 0.52], False)])
def test_a_report_row_carries_intervals_and_ties(kernel_q, tie):
    rows = [timed("torch", 1.0, [0.97, 1.03]), timed("torch.compile", 1.0, [0.99, 1.01]),
            timed("kernel", sum(kernel_q) / 2, kernel_q)]
    row = harness.report_row(rows, on_cpu=False)
    assert row["speedup_tie"] is tie and row["speedup_per_call_tie"] is tie and row["speedup_vs_compile_tie"] is tie
    assert row["speedup_range"][0] <= row["speedup"] <= row["speedup_range"][1]
    assert row["kernel_q"] == kernel_q and row["torch_call_q"] == [0.97, 1.03]
    table = bench_table({"report_rows": [row]})
    assert table[1][2] == "1 ±3%" and table[1][5].endswith(" tie") is tie
    assert ("tie)" in catalog_bench.table([{**row, "op": "add", "kind": "memory"}])) is tie


def test_the_chart_labels_a_tie_and_draws_whiskers():
    rows = [timed("torch", 1.0, [0.97, 1.03]), timed("kernel", 0.98, [0.96, 1.0])]
    fig = chart.figure(rows, 1000.0, operator="add", device="test", backend="cuda")
    speedup = fig.get_axes()[0]
    labels = [t.get_text() for t in speedup.texts]
    assert any(label.endswith(" tie") for label in labels), labels
    assert speedup.containers and any(c.has_yerr for c in speedup.containers if hasattr(c, "has_yerr"))


def test_on_a_gpu_the_chart_has_a_per_call_panel_beside_gpu_time():
    rows = [{**timed(v, t, [t * 0.97, t * 1.03]), "ms": c, "ms_q": [c * 0.9, c * 1.1]}
            for v, t, c in (("torch", 1.0, 0.009), ("torch.compile", 0.9, 0.03), ("kernel", 0.8, 0.012))]
    fig = chart.figure(rows, 1000.0, operator="add", device="test", backend="cuda")
    titles = [ax.get_title() for ax in fig.get_axes()]
    assert len(titles) == 3 and "per call" in titles[2] and "GPU time" in titles[0]
    cpu = [{**r, "basis": "wall-clock"} for r in rows]
    assert len(chart.figure(cpu, 10.0, operator="add", device="test", backend="cpu").get_axes()) == 2
