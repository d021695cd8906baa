"""Issue 24's count, checked apart from the runner's harness: each problem file of a KernelBench-layout
folder is pasted as a request exactly as written; where the offline generator gives a spec, its
kernel.py runs against the problem's own forward, Model(*get_init_inputs()) on get_inputs(), in
this process, with the module's own weights. Pass: same shape and dtype and KernelBench's own
criterion (torch.allclose, atol = rtol = 1e-2); the worst relative error is printed beside it.

    python tests/kernelbench_check.py PATH/level1 [--only 50,54] [--time] [--json rows.json]

Needs a GPU (KernelBench's sizes) and the problems' folder (not part of this repository). --time adds
the kernel's and the module's median GPU time (triton.testing.do_bench) at torch's defaults, as
KernelBench times them (cuDNN may round float32 convolutions to TF32; the kernel does not).
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import re
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.generators.interface import GenerationError  # noqa: E402
from bot import ir  # noqa: E402
from bot.request import parse_request  # noqa: E402
from bot.spec import parse_expression  # noqa: E402
from runner import integrity  # noqa: E402


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module          # Triton's jit looks modules up by name
    spec.loader.exec_module(module)
    return module


def learned(model: torch.nn.Module, path: str) -> torch.Tensor:
    owner, _, leaf = path.rpartition(".")
    return getattr(model.get_submodule(owner), leaf).detach()


def check(path: Path, workdir: Path, timed: bool, device: str) -> dict:
    row = {"problem": path.name, "status": "", "detail": ""}
    try:
        spec, _ = parse_request(path.read_text())
    except GenerationError as e:
        return {**row, "status": "refused", "detail": str(e).splitlines()[0][:200]}
    try:
        source = ir.kernel_source(spec, parse_expression(spec), {})
    except Exception as e:                  # a generator bug: named, never hidden
        return {**row, "status": "generator error", "detail": f"{type(e).__name__}: {e}"[:200]}
    found = integrity.check_kernel(source, spec["name"])
    if found:
        return {**row, "status": "integrity", "detail": integrity.summary(found)[:200]}
    (workdir / f"{path.stem}_kernel.py").write_text(source)
    try:
        return {**row, **run(path, workdir / f"{path.stem}_kernel.py", spec, timed, device)}
    except Exception as e:
        return {**row, "status": "error", "detail": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]}


def _against_float64(model: torch.nn.Module, inputs: list, want: torch.Tensor, got: torch.Tensor,
                     part: int | None = None) -> str:
    """For a mismatch: how far torch's own float32 forward and the kernel each are from the module run
    in float64 on the same inputs (part: which of its outputs). Both far off says the problem is
    ill-conditioned at this dtype (the check compares two roundings); the kernel alone far off says
    the kernel is wrong."""
    with torch.no_grad():
        exact = model.double()(*[t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                                 for t in inputs])
    exact = exact if part is None else exact[part]
    scale = float(exact.abs().max()) or 1.0
    return (f"max |error| / max |float64|: torch float32 {float((want.double() - exact).abs().max()) / scale:.2e}, "
            f"kernel {float((got.double() - exact).abs().max()) / scale:.2e}")


def _compare(got, want: torch.Tensor) -> dict:
    """One output against the module's: shape and dtype, then allclose (floats) or equality."""
    out = {"shape": list(want.shape), "dtype": str(want.dtype).removeprefix("torch.")}
    if got.shape != want.shape or got.dtype != want.dtype:
        return {**out, "status": "mismatch", "detail": f"kernel gave {list(got.shape)} {got.dtype}"}
    if want.is_floating_point():
        err = (got.double() - want.double()).abs()
        out["max_rel_err"] = float((err / want.double().abs().clamp_min(1e-3)).max())
        ok = torch.allclose(got, want, atol=1e-2, rtol=1e-2)
    else:
        ok = torch.equal(got, want)
    return {**out, "status": "pass" if ok else "mismatch"}


def run(path: Path, kernel_path: Path, spec: dict, timed: bool, device: str) -> dict:
    problem = load(path, "kb_" + re.sub(r"\W", "_", path.stem))
    kernel = getattr(load(kernel_path, "kb_kernel_" + re.sub(r"\W", "_", path.stem)), spec["name"])
    torch.manual_seed(0)
    model = problem.Model(*problem.get_init_inputs()).to(device)
    inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in problem.get_inputs()]
    params = [learned(model, i["parameter"]) for i in spec["inputs"] if i.get("parameter")]
    # A number get_inputs gives (a scalar argument) is a 0-d input of the spec: the kernel takes it as a tensor.
    first = next(t for t in inputs if isinstance(t, torch.Tensor))
    numbers = [t if isinstance(t, torch.Tensor) else torch.tensor(t, dtype=first.dtype, device=device) for t in inputs]
    with torch.no_grad():
        # the module on copies: a forward that changes its inputs in place (x += 1) leaves the kernel's as drawn
        want = model(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs])
        got = kernel(*numbers, *params)
    if device == "cuda":
        torch.cuda.synchronize()
    # torch.max(x, dim), torch.sort, torch.topk: (values, indices), each checked
    wants, gots = (tuple(want), tuple(got)) if isinstance(want, tuple) else ((want,), (got,))
    if len(gots) != len(wants):
        return {"status": "mismatch", "detail": f"kernel gave {len(gots)} outputs, the module {len(wants)}"}
    for k, (got, want) in enumerate(zip(gots, wants)):
        out = _compare(got, want)
        if out["status"] != "pass":
            if want.is_floating_point():
                out["detail"] = _against_float64(model, inputs, want, got, k if len(wants) > 1 else None)
            return out
    if timed:
        from triton.testing import do_bench
        with torch.no_grad():
            out["kernel_ms"] = do_bench(lambda: kernel(*numbers, *params), return_mode="median")
            out["torch_ms"] = do_bench(lambda: model(*inputs), return_mode="median")
        out["speedup"] = out["torch_ms"] / out["kernel_ms"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--only", default="", help="problem numbers, e.g. 50,54")
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/kernelbench_check"))
    ap.add_argument("--device", default="cuda", help="cpu: Triton's interpreter (TRITON_INTERPRET=1), small files only")
    args = ap.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    only = {int(n) for n in args.only.split(",") if n}
    files = sorted(args.folder.glob("*.py"), key=lambda p: int(p.name.split("_")[0]))
    rows = []
    for path in files:
        if only and int(path.name.split("_")[0]) not in only:
            continue
        start = time.monotonic()
        try:
            row = check(path, args.workdir, args.time, args.device)
        except Exception:
            row = {"problem": path.name, "status": "error", "detail": traceback.format_exc().splitlines()[-1][:200]}
        row["seconds"] = round(time.monotonic() - start, 1)
        rows.append(row)
        extra = " ".join(f"{k}={row[k]:.3g}" for k in ("max_rel_err", "speedup") if k in row)
        print(f"{row['status']:16} {path.name[:60]:60} {extra} {row['detail']}", flush=True)
        if args.json:           # after every problem: a run cut short keeps what it checked
            args.json.write_text(json.dumps(rows, indent=1))
        gc.collect()
        if args.device == "cuda":
            torch.cuda.empty_cache()
    counts = {s: sum(r["status"] == s for r in rows) for s in dict.fromkeys(r["status"] for r in rows)}
    print(f"{len(rows)} problems: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
