"""Per-call cost of generated launchers (issue 25), apart from the GPU's work: each catalog request's
kernel.py, called back to back from Python on small tensors, against the torch op it replaces.

    python tests/launch_overhead.py [--device cuda] [--calls 20000]

Two columns per operator: "python us", the launcher with its Triton launch replaced by a no-op (what
the generated Python costs per call: checks, shapes, config lookup, the output's allocation, the lean
launch's key and lookup), and,
on a GPU, "call us", the whole call with the real launch (torch.cuda.synchronize once at the end of
the loop), beside torch eager's. Without a GPU only the first is measured (the interpreter's launch
is no launch). The median of 5 loops is printed with the spread of the 5.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from generated import load  # noqa: E402

from bot import ir  # noqa: E402
from bot.spec import parse_expression, validate  # noqa: E402

# (expression, the torch op it replaces, input shapes): small, the per-call regime.
CASES = [
    ("x + y", lambda x, y: x + y, {"x": [64, 64], "y": [64, 64]}),
    ("x * y", lambda x, y: x * y, {"x": [64, 64], "y": [64]}),
    ("softmax(x)", lambda x: torch.softmax(x, -1), {"x": [64, 1024]}),
    ("sum(x, dim=-1)", lambda x: x.sum(-1), {"x": [64, 1024]}),
    ("rmsnorm(x, w, eps=1e-06)", lambda x, w: torch.nn.functional.rms_norm(x, [x.shape[-1]], w, 1e-6),
     {"x": [64, 1024], "w": [1024]}),
    ("a @ b", lambda a, b: a @ b, {"a": [16, 512], "b": [512, 512]}),
]


def launcher(expression: str, shapes: dict[str, list[int]], workdir: Path, stub: bool):
    spec = validate({"name": "op", "expression": expression,
                     "inputs": [{"name": n, "dtypes": ["float16"], "shapes": [s]} for n, s in shapes.items()]})
    folder = workdir / f"k{abs(hash((expression, stub)))}"
    folder.mkdir()
    module = load(folder, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {}))
    if stub:            # every @triton.jit kernel launched as a no-op, through the lean launch's cache
        for name, value in list(vars(module).items()):
            if name.endswith("_kernel"):
                setattr(module, name, _NoLaunch())
        module.driver = SimpleNamespace(active=SimpleNamespace(get_current_device=lambda: 0,
                                                               get_current_stream=lambda device: 0))
    return module.op


class _NoLaunch:
    """A kernel whose launch returns a binary that launches nothing: the lean launch keeps it, so the
    calls after the first take its cached path, as on a GPU."""
    arg_names = ()

    def __getitem__(self, grid):
        binary = SimpleNamespace(packed_metadata=None, function=None, run=lambda *args: None,
                                 _init_handles=lambda: None)
        return lambda *args, **kwargs: binary


def per_call_us(fn, args, calls: int, device: str) -> tuple[float, float]:
    """(median, max - min) of 5 loops' microseconds per call."""
    for _ in range(min(calls, 1000)):
        fn(*args)
    samples = []
    for _ in range(5):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        if device == "cuda":
            torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples), max(samples) - min(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=20000)
    a = parser.parse_args()
    print(f"{'operator':28} {'torch us':>14} {'python us':>14} {'call us':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for expression, op, shapes in CASES:
            args = [torch.randn(s, device=a.device, dtype=torch.float16) for s in shapes.values()]
            cells = [per_call_us(op, args, a.calls, a.device),
                     per_call_us(launcher(expression, shapes, Path(tmp), stub=True), args, a.calls, a.device)]
            if a.device == "cuda":
                cells.append(per_call_us(launcher(expression, shapes, Path(tmp), stub=False), args, a.calls, a.device))
            print(f"{expression:28} " + " ".join(f"{m:8.2f} ±{s / 2:4.2f}" for m, s in cells))


if __name__ == "__main__":
    main()
