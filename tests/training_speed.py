"""Issue 26: a training kernel's forward + backward against PyTorch eager, torch.compile and
Liger-Kernel where Liger has the op, at LLM shapes, on the GPU.

    python tests/training_speed.py [--only rmsnorm,attention] [--dtype bf16] [--json out.json]

Each case's training kernel.py (bot.training) is generated from its expression; one step is the
forward on fresh leaves, then torch.autograd.grad of every float input from one upstream gradient
(the same step for every version). GPU time: triton.testing.do_bench's median and interquartile
range in microseconds (a step is several launches, so per-call overheads count, as in training);
peak memory: torch.cuda.max_memory_allocated over one step, less what was allocated before it.
Gradients are checked against eager's before timing (2e-2 relative to each gradient's largest).
Liger is built as the benchmark's Liger version builds it (runner.liger_ops: RMSNorm with
in_place=False, since it would overwrite the upstream that every timed step reuses).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from generated import load  # noqa: E402

from bot import ir, lower_torch, training  # noqa: E402
from bot.liger import counterpart  # noqa: E402
from bot.spec import parse_expression, validate  # noqa: E402
from runner import liger_ops  # noqa: E402

# name -> (expression, input shapes); class indices are drawn for t
CASES = {
    "rmsnorm": ("rmsnorm(x, w, eps=1e-06)", {"x": [16384, 4096], "w": [4096]}),
    "layernorm": ("layernorm(x, w, b, eps=1e-05)", {"x": [16384, 4096], "w": [4096], "b": [4096]}),
    "swiglu": ("silu(a) * b", {"a": [8192, 11008], "b": [8192, 11008]}),
    "cross_entropy": ("cross_entropy(x, t)", {"x": [4096, 32000], "t": [4096]}),
    "attention": ("scaled_dot_product_attention(q, k, v, is_causal=True)",
                  {"q": [4, 16, 2048, 64], "k": [4, 16, 2048, 64], "v": [4, 16, 2048, 64]}),
}


def liger(spec: dict):
    """Liger-Kernel's function for the spec, as the benchmark builds it (bot.liger names it,
    runner.liger_ops builds it), or None where Liger lacks the op or is not installed."""
    entry = counterpart(spec)
    try:
        return entry and liger_ops.build(entry, [i["name"] for i in spec["inputs"]])
    except liger_ops.LigerUnavailable:
        return None


def make_inputs(expression: str, shapes: dict, dtype: torch.dtype) -> list[torch.Tensor]:
    out = []
    for name in ir.input_names(ir.parse(expression)):
        if name == "t":
            out.append(torch.randint(0, shapes["x"][-1], shapes[name], device="cuda"))
        else:
            out.append(torch.randn(shapes[name], device="cuda", dtype=dtype))
    return out


def step(fn, args: list[torch.Tensor]):
    """One training step of fn: forward on leaves, then every float input's gradient."""
    leaves = [a.detach().requires_grad_(a.is_floating_point()) for a in args]
    floats = [a for a in leaves if a.is_floating_point()]

    def run():
        out = fn(*leaves)
        return torch.autograd.grad(out, floats, torch.ones_like(out) if out.dim() == 0 else upstream(out))
    return run


_UPSTREAM: dict = {}


def upstream(out: torch.Tensor) -> torch.Tensor:
    key = (tuple(out.shape), out.dtype)
    if key not in _UPSTREAM:
        _UPSTREAM[key] = torch.randn(out.shape, device="cuda", dtype=out.dtype)
    return _UPSTREAM[key]


def measure(run) -> tuple[float, float, float]:
    """(median us, IQR us, peak MiB above the step's start) of one step."""
    from triton.testing import do_bench
    run()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    samples = do_bench(run, rep=200, return_mode="all")
    q = statistics.quantiles(samples, n=4)
    return statistics.median(samples) * 1e3, (q[2] - q[0]) * 1e3, peak


def agree(got: tuple, want: tuple) -> bool:
    return all(g is None and w is None or float((g.float() - w.float()).abs().max()) <= 2e-2 * float(w.float().abs().max())
               for g, w in zip(got, want))


def case_rows(name: str, dtype: str, folder: Path) -> list[dict]:
    expression, shapes = CASES[name]
    tdtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    names = ir.input_names(ir.parse(expression))
    spec = validate({"name": name, "expression": expression, "training": True, "inputs": [
        {"name": n, "dtypes": ["int64" if n == "t" else str(tdtype).removeprefix("torch.")], "shapes": [shapes[n]]}
        for n in names]})
    node = parse_expression(spec)
    kernel = getattr(load(folder, "kernel.py", training.kernel_source(spec, node)), name)
    eager = getattr(load(folder, "reference.py", lower_torch.reference_source(spec, node)), name)
    versions = {"kernel": kernel, "eager": eager, "compile": torch.compile(eager, dynamic=False)}
    if baseline := liger(spec):
        versions["liger"] = baseline
    args = make_inputs(expression, shapes, tdtype)
    want = step(eager, args)()
    rows = []
    for version, fn in versions.items():
        run = step(fn, args)
        ok = agree(run(), want)
        us, iqr, peak = measure(run)
        rows.append({"case": name, "dtype": dtype, "version": version, "us": us, "iqr": iqr, "peak_mib": peak, "ok": ok})
        print(f"{name:14} {dtype} {version:8} {us:10.1f} us ±{iqr / 2:7.1f}  peak {peak:9.1f} MiB  "
              f"{'' if ok else 'GRADIENTS DIFFER'}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.only.split(","):
            (Path(tmp) / name).mkdir()
            rows += case_rows(name, a.dtype, Path(tmp) / name)
    print("\nkernel's forward + backward against each (ratio of medians, > 1: the kernel is faster):")
    for name in dict.fromkeys(r["case"] for r in rows):
        mine = next(r for r in rows if r["case"] == name and r["version"] == "kernel")
        others = [r for r in rows if r["case"] == name and r["version"] != "kernel"]
        print(f"  {name:14} " + "  ".join(f"{r['version']} {r['us'] / mine['us']:5.2f} (mem {r['peak_mib'] / max(mine['peak_mib'], 1e-9):4.2f})"
                                          for r in others))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
