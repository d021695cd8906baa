"""float32 matmul: the generated kernel's three-TF32-product precision (tf32x3, its default) against
the same kernel in IEEE float32 FMA, plain TF32 and cuBLAS (torch.matmul with TF32 off, and on), side
by side: do_bench medians and each result's largest error against a float64 product, as a share of
the product's largest value.

    python tests/fp32_matmul_precision.py

Needs a GPU.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from generated import load  # noqa: E402

from bot import ir  # noqa: E402
from bot.spec import parse_expression, validate  # noqa: E402

# (M, K, N): square, odd, tall and wide, and a long K with a small output.
CASES = [(4096, 4096, 4096), (2048, 2048, 2048), (8205, 2949, 5921), (16384, 256, 16384), (256, 16384, 256),
         (1024, 4096, 1024)]
PRECISION = 'precision = "tf32x3" if a.dtype == torch.float32 else None'


def kernels(m: int, k: int, n: int, workdir: Path) -> dict:
    """The generated kernel at its default precision and with the two others written in."""
    spec = validate({"name": "mm", "expression": "a @ b",
                     "inputs": [{"name": "a", "dtypes": ["float32"], "shapes": [[m, k]]},
                                {"name": "b", "dtypes": ["float32"], "shapes": [[k, n]]}]})
    source = ir.kernel_source(spec, parse_expression(spec), {})
    assert PRECISION in source, "the float32 default is no longer tf32x3: update this script"
    out = {}
    for name in ("tf32x3", "ieee", "tf32"):
        folder = workdir / f"{name}_{m}_{k}_{n}"
        folder.mkdir()
        text = source.replace('"tf32x3"', f'"{name}"')
        if name == "ieee":          # IEEE FMA reads B row-major, as the kernels did before tf32x3
            text = text.replace("b_kmajor = precision is not None", 'b_kmajor = precision == "tf32"')
        out[name] = load(folder, "kernel.py", text).mm
    return out


def main() -> None:
    print(f"{torch.cuda.get_device_name()}; us (error / largest value)")
    with tempfile.TemporaryDirectory() as tmp:
        for m, k, n in CASES:
            a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
            exact = a.double() @ b.double()
            scale = exact.abs().max().item()
            runs = {f"kernel {p}": f for p, f in kernels(m, k, n, Path(tmp)).items()}
            runs["cuBLAS"] = runs["cuBLAS tf32"] = lambda: a @ b
            row = {}
            for name, fn in runs.items():
                torch.backends.cuda.matmul.allow_tf32 = name.endswith("tf32")
                fn2 = (lambda f=fn: f(a, b)) if name.startswith("kernel") else fn
                err = (fn2().double() - exact).abs().max().item() / scale
                row[name] = (do_bench(fn2, return_mode="median", rep=200) * 1e3, err)
            torch.backends.cuda.matmul.allow_tf32 = False
            cells = "  ".join(f"{k_} {t:.0f} ({e:.1e})" for k_, (t, e) in row.items())
            print(f"{m}x{k}x{n}: {cells} | tf32x3 vs cuBLAS {row['cuBLAS'][0] / row['kernel tf32x3'][0]:.2f}x",
                  flush=True)


if __name__ == "__main__":
    main()
