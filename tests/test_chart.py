"""The benchmark chart renders, with the tuning panel when the kernel was tuned."""
from __future__ import annotations

import io

import matplotlib.image

from runner import chart, protocol

CASES = ["4096x4096", "8192x8192", "5333x497", "16x1048576", "1x65536", "3x5"]
CONFIGS = [{"BLOCK_M": m, "BLOCK_N": n, "num_warps": w}
           for m, n, w in [(1, 8192, 4), (1, 8192, 8), (1, 8192, 16), (1, 2048, 4), (16, 1024, 4), (64, 4096, 8),
                           (2, 8192, 4), (4, 8192, 4)]]


def bench() -> list[dict]:
    return [{"case": c, "dtype": "float16", "version": v, "time_ms": t, "gbps": 100 / t, "implausible": False,
             "basis": "GPU", "error": ""} for c in CASES for v, t in (("torch", 1.0), ("kernel", 0.8))]


def tuning() -> list[dict]:
    out = []
    for i, case in enumerate(CASES):
        entries = [{"config": c, "label": protocol.config_label(c), "time_ms": 1.0 + ((i + k) % 5) / 4, "ok": True,
                    "error": ""} for k, c in enumerate(CONFIGS)]
        entries[3].update(ok=False, time_ms=None, error="wrong result: 3 of 15 elements outside tolerance")
        if case == "3x5":         # nothing correct: no best
            for e in entries:
                e.update(ok=False, time_ms=None, error="timing failed: RuntimeError: x")
        best = min((e for e in entries if e["ok"]), key=lambda e: e["time_ms"], default=None)
        out.append({"case": case, "dtype": "float16", "key": "", "configs": entries, "best": best and best["config"]})
    return out


def image(png: bytes):
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return matplotlib.image.imread(io.BytesIO(png))


def test_chart_with_a_tuning_panel_grows_below_the_bars():
    plain = image(chart.render(bench(), 200.0, operator="softmax", device="NVIDIA H200", backend="cuda"))
    tuned = image(chart.render(bench(), 200.0, operator="softmax", device="NVIDIA H200", backend="cuda",
                               tuning=tuning()))
    assert tuned.shape[1] == plain.shape[1] and tuned.shape[0] > plain.shape[0] + 300


def test_matmul_rows_chart_throughput_and_long_case_labels():
    # Rows with TFLOP/s (matmul) plot throughput instead of bandwidth; a version without it (a
    # failed row) draws no bar rather than breaking the chart.
    rows = [{**r, "case": "3001x2999 (b:2999x3007)", "tflops": 600.0 if r["version"] == "torch" else None}
            for r in bench()[:2]]
    png = chart.render(rows, 200.0, operator="matmul", device="NVIDIA H200", backend="cuda")
    assert image(png).shape[1] > 1000


def test_case_labels_put_each_shape_on_a_line_of_its_own():
    label = chart._case_label("3001x2999 (b:2999x3007, bias:3007, residual:3001x3007)", "float16")
    assert label.splitlines() == ["3001x2999", "(b:2999x3007,", "bias:3007,", "residual:3001x3007)", "float16"]


def test_long_config_labels_do_not_push_the_bar_panels_right():
    # The tuning grid's config labels need a wide left margin; the bar panels above keep their own.
    configs = [{"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}]
    tuned = [{**t, "configs": [{**e, "config": configs[0], "label": protocol.config_label(configs[0]) + f" #{k}"}
                               for k, e in enumerate(t["configs"])]} for t in tuning()[:2]]
    fig = chart.figure(bench()[:4], 200.0, operator="matmul", device="NVIDIA H200", backend="cuda", tuning=tuned)
    fig.canvas.draw()
    speedup, _, grid = fig.get_axes()
    assert speedup.get_position().x0 < 0.08 < grid.get_position().x0


def test_cpu_notes_say_every_shrink_and_implausible_timing_under_the_chart():
    rows = bench()
    rows[1].update(implausible=True, gbps=999.0)
    result = {"bench": rows, "copy_gbps": 30.0, "warnings": [
        "cpu backend: case 1024x4096 shrunk to 256x256 for the interpreter",
        "bfloat16 timed as float32 at 64x48: Triton's CPU interpreter computes bfloat16 wrongly",
        "the reference is slow"]}
    notes = chart.chart_notes(result)
    assert len(notes) == 3 and "shrunk to 256x256" in notes[0] and "timed as float32" in notes[1]
    assert "kernel at 4096x4096 float16 reached 999 GB/s" in notes[2] and "not trusted" in notes[2]
    fig = chart.figure(rows, 30.0, operator="add", device="cpu", backend="cpu", notes=notes)
    said = fig.get_supxlabel()
    assert said.startswith("cpu backend (Triton's interpreter): it checks correctness only")
    assert "256x256" in said and "999 GB/s" in said and "reference is slow" not in said


def test_a_benchmark_with_nothing_timed_charts_what_was_tried_and_why():
    tried = [{"case": "3x5", "dtype": "float16", "version": "kernel", "time_ms": None,
              "error": "wrong result, not timed: 3 of 15 elements outside tolerance"}]
    fig = chart.figure(tried, None, operator="add", device="cpu", backend="cpu")
    table = fig.axes[0].tables[0]
    assert "wrong result" in " ".join(c.get_text().get_text() for c in table.get_celld().values())
    image(chart.render([], None, operator="add", device="cpu", backend="cpu", notes=["bfloat16 not timed: x"]))
