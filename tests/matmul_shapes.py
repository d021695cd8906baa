"""Matmul on the shapes LLMs run (issue 25): the generated kernel against cuBLAS (torch.matmul) side by
side, GPU time only. Each case's kernel.py is generated for its own shape by the offline generator,
checked against torch on the case's inputs, then timed two ways: GPU time (do_bench_cudagraph, the
calls replayed from a CUDA graph) and per call from Python (do_bench): medians, the kernel's
interquartile range, the ratios, and the kernel with K unsplit.

    python tests/matmul_shapes.py [--only decode] [--json rows.json]

Needs a GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from generated import load  # noqa: E402

from bot import ir  # noqa: E402
from bot.spec import parse_expression, validate  # noqa: E402

# (group, M, N, K): decode (1-64 rows), prefill MLP and attention projections, odd sizes, long K.
CASES = [
    *(("decode", m, 4096, 4096) for m in (1, 16, 64)),
    ("decode", 16, 11008, 4096), ("decode", 16, 4096, 11008), ("decode", 32, 14336, 4096),
    ("prefill", 4096, 4096, 4096), ("prefill", 4096, 11008, 4096), ("prefill", 4096, 4096, 11008),
    ("odd", 2000, 1000, 3000), ("odd", 333, 7001, 1537),
    ("long_k", 256, 256, 131072),
]


def kernel_for(m: int, n: int, k: int, dtype: str, workdir: Path):
    spec = validate({"name": "mm", "expression": "a @ b",
                     "inputs": [{"name": "a", "dtypes": [dtype], "shapes": [[m, k]]},
                                {"name": "b", "dtypes": [dtype], "shapes": [[k, n]]}]})
    return load(workdir, f"mm_{m}_{n}_{k}_{dtype}.py", ir.kernel_source(spec, parse_expression(spec), {}))


def timed(fn, graph: bool) -> tuple[float, float, float]:
    """(median, first quartile, third quartile) in ms: per call from Python (do_bench), or GPU time alone
    (do_bench_cudagraph: the calls replayed from a CUDA graph, no Python between them)."""
    from triton.testing import do_bench, do_bench_cudagraph
    q = (do_bench_cudagraph if graph else do_bench)(fn, quantiles=[0.25, 0.5, 0.75])
    return q[1], q[0], q[2]


def row(group: str, m: int, n: int, k: int, dtype: str, workdir: Path) -> dict:
    module = kernel_for(m, n, k, dtype, workdir)
    kernel, unsplit = module.mm, {**module._default_config(1, m, n), "SPLIT_K": 1}
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", generator=gen).to(getattr(torch, dtype))
    b = torch.randn(k, n, device="cuda", generator=gen).to(getattr(torch, dtype))
    want, got = torch.matmul(a.double(), b.double()), kernel(a, b).double()
    err = float(((got - want).abs() / (want.abs() + k ** 0.5)).max())
    kern, torch_ms = timed(lambda: kernel(a, b), True), timed(lambda: torch.matmul(a, b), True)
    whole = timed(lambda: kernel(a, b, config=unsplit), True)
    call, torch_call = timed(lambda: kernel(a, b), False), timed(lambda: torch.matmul(a, b), False)
    return {"group": group, "shape": f"{m}x{n}x{k}", "dtype": dtype, "err": err, "kernel_ms": kern[0],
            "kernel_iqr": kern[2] - kern[1], "cublas_ms": torch_ms[0], "cublas_iqr": torch_ms[2] - torch_ms[1],
            "vs_cublas": torch_ms[0] / kern[0], "unsplit_vs_cublas": torch_ms[0] / whole[0],
            "call_ms": call[0], "cublas_call_ms": torch_call[0], "call_vs_cublas": torch_call[0] / call[0],
            "tflops": 2 * m * n * k / kern[0] / 1e9}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="groups, e.g. decode,odd")
    ap.add_argument("--dtypes", default="bfloat16,float16")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--profile", action="store_true", help="then cProfile a decode call's launcher")
    args = ap.parse_args(argv)
    groups = set(filter(None, args.only.split(",")))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for group, m, n, k in CASES:
            if groups and group not in groups:
                continue
            for dtype in args.dtypes.split(","):
                r = row(group, m, n, k, dtype, Path(tmp))
                rows.append(r)
                print(f"{r['group']:8} {r['shape']:18} {dtype:9} GPU: kernel {r['kernel_ms'] * 1e3:7.1f} us "
                      f"(iqr {r['kernel_iqr'] * 1e3:.1f}) cuBLAS {r['cublas_ms'] * 1e3:7.1f} us "
                      f"x{r['vs_cublas']:.2f} (K unsplit x{r['unsplit_vs_cublas']:.2f}) {r['tflops']:.0f} TFLOP/s | "
                      f"per call: {r['call_ms'] * 1e3:.1f} vs {r['cublas_call_ms'] * 1e3:.1f} us "
                      f"x{r['call_vs_cublas']:.2f} | err {r['err']:.1e}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    for key, what in (("vs_cublas", "GPU time"), ("call_vs_cublas", "per call")):
        ratios = [r[key] for r in rows]
        if ratios:
            geo = torch.tensor(ratios).log().mean().exp().item()
            print(f"{len(rows)} cases, {what}: geomean x{geo:.2f} of cuBLAS, worst x{min(ratios):.2f}")
    if args.profile:
        profile(Path(tempfile.mkdtemp()))
    return 0


def profile(workdir: Path) -> None:
    """Where a decode call's time goes on the CPU: cProfile of 500 back-to-back calls."""
    import cProfile
    import pstats
    kernel = kernel_for(16, 4096, 4096, "bfloat16", workdir).mm
    a = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(50):
        kernel(a, b)
    with cProfile.Profile() as p:
        for _ in range(500):
            kernel(a, b)
        torch.cuda.synchronize()
    pstats.Stats(p).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    sys.exit(main())
