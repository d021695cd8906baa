"""`kernelbot bench`'s table and targets, from report.json files as `kernelbot run` writes them
(the GPU runs themselves are recorded in docs/BENCHMARKS.md)."""
from __future__ import annotations

import json

from bot import catalog, catalog_bench, cli


def bench_row(case: str, dtype: str, kernel_us: float, torch_us: float, compile_us: float, pct: float,
              tflops: float | None = None) -> dict:
    return {"case": case, "dtype": dtype, "kernel_ms": kernel_us / 1e3, "torch_ms": torch_us / 1e3,
            "compile_ms": compile_us / 1e3, "speedup": torch_us / kernel_us, "speedup_vs_compile": compile_us / kernel_us,
            "pct_of_copy": pct, "tflops": tflops, "config": "BLOCK=1024 w4"}


def write_report(out, name: str, bench: list[dict], stages=("benchmark", "passed")) -> None:
    (out / name).mkdir(parents=True, exist_ok=True)
    report = {"device": "NVIDIA H200", "bench": bench, "stages": [{"stage": stages[0], "status": stages[1]}]}
    (out / name / "report.json").write_text(json.dumps(report))


def good_catalog(out) -> None:
    """A run meeting every target (numbers shaped like the H200's)."""
    for entry in catalog.ENTRIES:
        if entry.kind == "matmul":
            rows = [bench_row("4096x4096", d, 200, 190, 195, 10, 690) for d in ("float16", "bfloat16")]
        elif entry.name == "softmax":
            rows = [bench_row("8192x8192", "float16", 70, 260, 128, 90.4)]
        else:
            rows = [bench_row("8192x8192", "float16", 99, 99, 99, 96.4)]
        write_report(out, entry.name, rows)


def run_table(out, *more: str, stem: str = "catalog") -> tuple[int, str]:
    code = cli.main(["bench", "--out", str(out), "--table-only", *more])
    return code, (out / f"{stem}.txt").read_text()


def test_a_run_meeting_every_target_exits_zero(tmp_path):
    good_catalog(tmp_path)
    code, text = run_table(tmp_path)
    assert code == 0, text
    assert "MISSED" not in text and text.count("[met]") == len(catalog_bench.targets([]))
    assert "690 (95% of cuBLAS)" in text      # plain matmul: torch eager is cuBLAS


def test_each_missed_target_is_named_with_what_was_measured(tmp_path):
    good_catalog(tmp_path)
    write_report(tmp_path, "sum", [bench_row("8192x8192", "float16", 42, 59, 38, 75.4)])
    (tmp_path / "softmax" / "report.json").write_text(json.dumps(
        {"bench": [bench_row("8192x8192", "float32", 135, 280, 134, 94.2)], "stages": []}))
    code, text = run_table(tmp_path)
    assert code == 1
    assert "[MISSED] memory-bound at 8192x8192 >= 90% of copy bandwidth: below: sum float16 75%" in text
    assert "[MISSED] softmax >= 1.5x torch.compile: below: 8192x8192 float32 0.99" in text


def test_an_only_run_leaves_the_targets_it_has_no_rows_for_unmeasured(tmp_path):
    good_catalog(tmp_path)
    code = cli.main(["bench", "--out", str(tmp_path), "--only", "add,sum", "--table-only"])
    text = (tmp_path / "catalog.txt").read_text()
    assert code == 0, text
    assert "[not measured] softmax >= 1.5x torch.compile: no row of this run bears on it" in text
    assert "[not measured] matmul 4096^3 fp16/bf16 >= 90% of cuBLAS" in text
    assert "[met] memory-bound at 8192x8192 >= 90% of copy bandwidth: 2 rows" in text
    write_report(tmp_path, "sum", [bench_row("8192x8192", "float16", 42, 59, 38, 75.4)])
    assert cli.main(["bench", "--out", str(tmp_path), "--only", "add,sum", "--table-only"]) == 1


def test_entries_that_stopped_keep_their_rows_and_say_why(tmp_path):
    good_catalog(tmp_path)
    (tmp_path / "bmm" / "report.json").write_text(json.dumps({
        "bench": [bench_row("32x1024x1024", "float16", 128, 108, 109, 5, 534)],
        "stages": [{"stage": "benchmark", "status": "failed", "job": {"summary": "ran out of memory during timing 3/4"}}]}))
    (tmp_path / "argmax" / "report.json").unlink()
    (tmp_path / "matmul" / "report.json").write_text(json.dumps({"bench": [], "stages": [
        {"stage": "benchmark", "status": "cancelled", "job": {"status": "cancelled",
                                                              "summary": "by you (timeout) during tuning 14/44"}}]}))
    code, text = run_table(tmp_path)
    assert code == 1
    assert "534 (84% of cuBLAS)" in text and "benchmark failed: ran out of memory" in text
    assert "benchmark cancelled: by you (timeout) during tuning 14/44" in text
    assert "[MISSED] every catalog entry ran: argmax, matmul, bmm" in text
    assert "argmax" in text and "not run" in text


def test_unknown_entries_are_refused_with_the_known_ones(tmp_path, capsys):
    assert cli.main(["bench", "--out", str(tmp_path), "--only", "add,conv2d", "--table-only"]) == 2
    assert "unknown catalog entries ['conv2d']; known: add, swiglu" in capsys.readouterr().err


# --- the LLM grid (issue 25) -------------------------------------------------------------------

def test_grid_entries_keep_their_words_and_parse_to_their_expressions_at_the_grid_shapes():
    from bot import bench_grid
    from bot.request import parse_request
    from generated import canon
    for entry in bench_grid.entries("llm"):
        spec, _ = parse_request(entry.request())
        assert canon(spec["expression"]) == canon(entry.expression), entry.name
        first = spec["inputs"][0]
        assert len(first["shapes"]) == entry.big.count(",") + 1 and set(first["dtypes"]) <= {"bfloat16", "int64"}


def llm_row(case: str, vs_compile: float, per_call: float, speedup: float = 1.2) -> dict:
    row = bench_row(case, "bfloat16", 10, 10 * speedup, 10 * vs_compile, 80)
    return {**row, "speedup_per_call": per_call}


def test_grid_targets_name_the_worst_cases(tmp_path):
    from bot import bench_grid
    for entry in bench_grid.entries("llm"):
        rows = [llm_row(c.strip(), 1.2, 0.9) for c in bench_grid.LLM[entry.name].split(",")]
        if entry.name == "matmul":
            rows = [{**r, "case": r["case"].replace(" by ", " (b:") + ")"} for r in rows]
        write_report(tmp_path, entry.name, rows)
    write_report(tmp_path, "rmsnorm", [llm_row("16x4096", 0.8, 0.5), llm_row("16384x4096", 1.3, 1.0)])
    code, text = run_table(tmp_path, "--grid", "llm", stem="grid-llm")
    assert code == 1, text
    assert "[MISSED] no case under 0.9x torch.compile: rmsnorm 16x4096 0.80" in text
    assert "[MISSED] per call within 1.5x torch eager under 1,048,576 elements: rmsnorm 16x4096 2.00x eager" in text
    assert "[met] matmul >= 90% of cuBLAS in every case" in text
    assert "vs torch.compile, GPU time: geomean" in text and "worst 0.80 (rmsnorm 16x4096 bfloat16)" in text


def test_a_grid_names_its_shapes_or_refuses(tmp_path, capsys):
    assert cli.main(["bench", "--out", str(tmp_path), "--grid", "llm", "--only", "conv2d_3x3", "--table-only"]) == 2
    assert "grid 'llm' has no shapes for conv2d_3x3" in capsys.readouterr().err
