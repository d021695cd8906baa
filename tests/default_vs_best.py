"""Issue 25, item 2: on shapes no benchmark tuned, how far is each family's default config from the
best config of its own space? Each catalog entry's request, with shapes none of the catalog's tables
hold (LLM-shaped and odd), generates its kernel.py; the default (config=None) and every config of
CONFIGS are timed on the GPU and checked against the default's output.

    python tests/default_vs_best.py [--only softmax,rmsnorm] [--dtype bf16] [--torch] [--json out.json]
    python tests/default_vs_best.py --catalog --default-only --torch     # catalog sizes, vs torch only

Time is GPU time: the median of triton.testing.do_bench_cudagraph (launch overhead removed, so the
comparison is of the configs' device work), with the interquartile range of its samples. The table
gives default / best per case (1.00: the default is the best); the target is 1.10 at most.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from generated import load  # noqa: E402

from bot import catalog, ir, lower_torch  # noqa: E402
from bot.request.parse import parse_request  # noqa: E402
from bot.spec import parse_expression  # noqa: E402

TARGET = 1.10
# entry -> shapes as its request takes them; none is in a catalog table (docs/BENCHMARKS.md)
UNTUNED = {
    "add": "16x4096, 4096x11008, 1000x999",
    "swiglu": "4096x11008, 333x7001",
    "sum": "1x4096, 16384x4096, 4096x1024, 1024x16384",
    "mean_dim0": "4096x11008, 333x7001",
    "max": "16384x4096, 1000x999",
    "min_dim0": "4096x11008",
    "sum_all": "4096x11008",
    "argmax": "4096x32000, 1000x999",
    "argmin_dim0": "4096x11008",
    "softmax": "16384x1024, 4096x32000, 512x128256, 1000x999",
    "layernorm": "16x2048, 16384x4096, 1000x999",
    "rmsnorm": "1x4096, 16x4096, 16384x4096, 4096x2048, 2048x8192",
    "add_rmsnorm": "16x4096, 16384x4096",
    "cross_entropy": "4096x32000, 1024x128256",
    "cumsum": "4096x4096, 1000x999",
    "cummax": "4096x4096",
    "matmul": "16x4096 by 4096x4096, 64x4096 by 4096x11008, 2000x3000 by 3000x1000",
    "bmm": "16x512x512 by 16x512x512",
    "transpose": "4096x11008, 1000x999",
    "group_norm": "8x128x28x28",
    "max_pool2d": "16x64x112x112",
    "avg_pool2d_3x3": "16x64x56x56",
    "conv2d_3x3": "8x64x28x28",
    "conv2d_1x1": "8x64x28x28",
    "attention_causal": "2x16x1024x128",
}


def inputs(spec: dict, case: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """Random inputs of one case: class indices within their range, masks half set, floats normal."""
    out = []
    for i in spec["inputs"]:
        shape = i["shapes"][case]
        if i.get("domain") == "index":
            of = next(j for j in spec["inputs"] if j["name"] == i.get("index_of", spec["inputs"][0]["name"]))
            out.append(torch.randint(0, of["shapes"][case][-1], shape, device="cuda"))
        elif i["dtypes"][0] == "bool":
            out.append(torch.rand(shape, device="cuda") < 0.5)
        else:
            out.append(torch.randn(shape, device="cuda", dtype=dtype))
    return out


def gpu_us(fn) -> tuple[float, float]:
    """(median, interquartile range) of the call's GPU time in microseconds."""
    from triton.testing import do_bench_cudagraph
    fn()                                   # compile outside the graph
    samples = do_bench_cudagraph(fn, rep=50, return_mode="all")
    q = statistics.quantiles(samples, n=4)
    return statistics.median(samples) * 1e3, (q[2] - q[0]) * 1e3


def close(a, b) -> bool:
    a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
    return all(torch.allclose(x.float(), y.float(), rtol=2e-2, atol=2e-2) for x, y in zip(a, b))


def torch_times(spec: dict, node, folder: Path, args: list, out) -> dict:
    """The reference's GPU time in torch eager and under torch.compile, and a device copy of as many
    bytes as the inputs and output hold (read and written once), us (median)."""
    reference = getattr(load(folder, "reference.py", lower_torch.reference_source(spec, node)), spec["name"])
    compiled = torch.compile(reference, dynamic=False)
    moved = sum(t.numel() * t.element_size() for t in [*args, *(out if isinstance(out, tuple) else (out,))])
    # int64 words (whole vectors for torch's copy kernel), half the bytes each way
    src, dst = (torch.empty(max(1, moved // 16), dtype=torch.int64, device="cuda") for _ in range(2))
    return {"eager_us": gpu_us(lambda: reference(*args))[0], "compile_us": gpu_us(lambda: compiled(*args))[0],
            "copy_us": gpu_us(lambda: dst.copy_(src))[0]}


def measure(entry, shapes: str, dtype: str, workdir: Path, against_torch: bool = False,
            sweep: bool = True) -> list[dict]:
    spec, _ = parse_request(entry.words.format(shapes=shapes, dtypes=dtype))
    node = parse_expression(spec)
    folder = workdir / entry.name
    folder.mkdir()
    module = load(folder, "kernel.py", ir.kernel_source(spec, node, {}))
    op = getattr(module, spec["name"])
    rows = []
    for case in range(len(spec["inputs"][0]["shapes"])):
        args = inputs(spec, case, getattr(torch, {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[dtype]))
        want = op(*args)
        default, spread = gpu_us(lambda: op(*args))
        timed = []
        for config in module.CONFIGS if sweep else []:
            try:
                got = op(*args, config=config)
            except Exception as e:          # a config this shape cannot take (the launcher says why)
                print(f"  {entry.name} case {case}: {config} raised {type(e).__name__}: {str(e)[:80]}")
                continue
            if close(got, want):
                timed.append((gpu_us(lambda c=config: op(*args, config=c))[0], config))
            else:
                print(f"  {entry.name} case {case}: {config} DIFFERS from the default's output; not timed")
        best, config = min(timed, key=lambda t: t[0]) if timed else (math.nan if sweep else default, None)
        case_text = " by ".join("x".join(map(str, i["shapes"][case])) for i in spec["inputs"][:2]
                                if i.get("domain") != "index")
        rows.append({"entry": entry.name, "case": case_text, "dtype": dtype, "default_us": default,
                     "default_iqr": spread, "best_us": best, "best_config": config,
                     "ratio": default / best if best == best else math.nan, "configs": len(timed),
                     "timed": sorted(timed, key=lambda t: t[0]),
                     **(torch_times(spec, node, folder, args, want) if against_torch else {})})
        versus = (f"  eager {rows[-1]['eager_us']:9.2f}  compile {rows[-1]['compile_us']:9.2f}  copy "
                  f"{100 * rows[-1]['copy_us'] / default:5.1f}%" if against_torch else "")
        print(f"{entry.name:16} {case_text:28} {dtype}  default {default:9.2f} ±{spread / 2:5.2f}  best "
              f"{best:9.2f}  {rows[-1]['ratio']:5.2f}  of {len(timed)}  {config}{versus}", flush=True)
    return rows


def print_geomeans(rows: list[dict]) -> None:
    """The kernels' geomean and worst case against torch eager and torch.compile (GPU time)."""
    for side in ("eager", "compile"):
        ratios = [(r[f"{side}_us"] / r["default_us"], r) for r in rows]
        geo = math.exp(statistics.fmean(math.log(v) for v, _ in ratios))
        worst, row = min(ratios, key=lambda t: t[0])
        print(f"vs {side}: geomean {geo:.3f} over {len(ratios)} cases; worst {worst:.2f} ({row['entry']} {row['case']})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="catalog entries, e.g. softmax,rmsnorm")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--shapes", action="append", default=[], metavar="ENTRY=SHAPES",
                    help="other shapes for an entry, e.g. 'mean_dim0=8192x8192, 7919x6007' (a catalog table's, to check it)")
    ap.add_argument("--torch", action="store_true", help="time the reference in torch eager and torch.compile too")
    ap.add_argument("--catalog", action="store_true", help="each entry at its catalog sizes (Entry.big)")
    ap.add_argument("--default-only", action="store_true", help="time the default config only, not the space")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    given = dict(item.split("=", 1) for item in a.shapes)
    names = [n for n in a.only.split(",") if n] or ([] if a.catalog else list(UNTUNED))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for entry in catalog.by_name(names):
            dtype = "fp32" if entry.dtypes == "fp32" else a.dtype
            shapes = given.get(entry.name) or (entry.big if a.catalog else UNTUNED[entry.name])
            rows += measure(entry, shapes, dtype, Path(tmp), a.torch, not a.default_only)
    worst = {}
    for r in rows:
        if r["ratio"] == r["ratio"]:
            worst[r["entry"]] = max(worst.get(r["entry"], 0.0), r["ratio"])
    print("\nworst default / best per family (target <= %.2f):" % TARGET)
    for name, ratio in sorted(worst.items(), key=lambda kv: -kv[1]):
        print(f"  {name:16} {ratio:5.2f}{'  MISSED' if ratio > TARGET else ''}")
    if a.torch:
        print_geomeans(rows)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
