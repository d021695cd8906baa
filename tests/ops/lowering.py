"""What the operator-family tests (tests/ops/test_*.py) share: generated reference.py and kernel.py
files, imported and run, and checked against the reference on float64 inputs.

Kernels run under Triton's interpreter here (tests/conftest.py), in float32 and float16 (the
interpreter gets bfloat16 wrong), and are compared with the reference evaluated on float64 inputs
within runner.protocol's tolerance (indices and bools exactly).

Two ways in, as the lowerings were once split:
- generate / check: kernel.py as the registry lowers the tree (pointwise, or a row op over the
  last dim through the row template), the launcher function;
- generate_reduction / check_reduction: sum/mean/max/min always through the dim template (its
  rows kernel over the last dim), argmax/argmin and cross_entropy as their families lower them;
  the kernel.py module, each case run with given configs.
"""
from __future__ import annotations

import itertools
import math

import torch

from generated import load

from bot import ir, lower_torch
from bot.ops import reduce, registry
from bot.spec import parse_expression
from runner import inputs as runner_inputs
from runner import protocol

SQUARE = [[3, 5], [17, 33]]


def configs_for(configs, first_dtype: bool):
    """Every given config in the first dtype, the first config alone in the others: a config picks the
    tiles and loops, a dtype only the loads and stores, so their product adds interpreter time, not
    cover (the GPU tests run every dtype)."""
    return tuple(configs) if first_dtype else tuple(configs)[:1]

MATRIX, CUBE, VECTOR = [37, 97], [5, 7, 11], [97]
COLS_CASE, ROWS_CASE = [301, 45], [45, 301]     # dim 0 / dim 1 of these: D = 301, long enough to split
SPLIT = {"BLOCK_B": 16, "BLOCK_R": 2, "BLOCK_D": 16, "SPLIT_D": 5, "num_warps": 4, "num_stages": 2}
DIMS = {0: [MATRIX, CUBE, VECTOR], 1: [MATRIX, CUBE], 2: [CUBE], -1: [MATRIX, CUBE, VECTOR], -2: [MATRIX, CUBE]}


# ---------------------------------------------------------------- the registry's lowering, launcher functions

def generate(tmp_path, spec: dict, options: dict | None = None):
    """(reference function, kernel function)."""
    node = parse_expression(spec)
    reference = load(tmp_path, "reference.py", lower_torch.reference_source(spec, node))
    kernel = load(tmp_path, "kernel.py", registry.kernel_source(spec, node, options or {}))
    return getattr(reference, spec["name"]), getattr(kernel, spec["name"])


def make_inputs(spec: dict, case: protocol.Case, variant: dict[str, str]) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(case.index)
    out = []
    for spec_input in spec["inputs"]:
        shape = case.shapes[spec_input["name"]]
        if spec_input["domain"] == "mask":
            values = torch.rand(shape, generator=gen) < 0.5
        elif spec_input["domain"] == "normal":
            values = torch.randn(shape, generator=gen)
        elif spec_input["domain"] == "sign":
            values = torch.where(torch.rand(shape, generator=gen) < 0.5, -1.0, 1.0)
        elif spec_input["domain"] == "unit":
            values = 0.05 + 0.9 * torch.rand(shape, generator=gen)
        else:
            values = 0.5 + 1.5 * torch.rand(shape, generator=gen)
            if spec_input["domain"] == "nonzero":
                values = torch.where(torch.rand(shape, generator=gen) < 0.5, -values, values)
        out.append(values.to(getattr(torch, variant[spec_input["name"]])))
    return out


def upcast(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """float64 copies of the float inputs, for the reference's ground truth (masks stay bool)."""
    return [t.double() if t.is_floating_point() else t for t in inputs]


def assert_close(got: torch.Tensor, want: torch.Tensor, dtype: str, reduce_len: int, what: str) -> None:
    if not got.is_floating_point():                 # indices and bools: exactly
        assert torch.equal(got, want), f"{what}: {got} != {want}"
        return
    rtol, atol = protocol.tolerance(dtype, reduce_len)
    err = (got.double() - want).abs()
    ok = err <= atol + rtol * want.abs()       # NaN fails
    assert bool(ok.all()), f"{what}: {int((~ok).sum())} bad values, max err {err.max().item():.3g}"


def check(tmp_path, spec: dict, options: dict | None = None, looped: bool = False) -> None:
    """Kernel vs reference(float64 inputs) and reference shapes/dtypes, on every case x variant.
    looped: the row op must go through the looped kernel (the one-tile kernel is removed)."""
    reference, kernel = generate(tmp_path, spec, options)
    if looped:
        kernel.__globals__[f"{spec['name']}_kernel"] = None
    node = parse_expression(spec)
    out = spec["outputs"][0]
    for case, (v, variant) in itertools.product(protocol.cases(spec), enumerate(protocol.dtype_variants(spec))):
        inputs = make_inputs(spec, case, variant)
        want = reference(*upcast(inputs))
        dtype = out["dtypes"][v]
        label = f"{spec['expression']} {case.label} {protocol.variant_label(variant)}"
        for who, got in (("reference", reference(*inputs)), ("kernel", kernel(*inputs))):
            assert list(got.shape) == out["shapes"][case.index], f"{who} shape, {label}"
            assert got.dtype == getattr(torch, dtype), f"{who} dtype, {label}"
        reduce_len = ir.broadcast_shapes(list(case.shapes.values()))[-1] if node.op in ir.REDUCE else 1
        assert_close(kernel(*inputs), want, dtype, reduce_len, f"kernel, {label}")


# ---------------------------------------------------------------- reductions over any dim, kernel.py modules

def reduction_source(spec: dict, node, options: dict | None = None) -> str:
    """kernel.py of a reduction: sum/mean/max/min from the dim template over any dim, the last
    included (bot.ops.reduce.dim_kernel_source); argmax/argmin and cross_entropy from their families."""
    if node.op in reduce.OPS:
        return reduce.dim_kernel_source(spec, node, options or {})
    return registry.kernel_source(spec, node, options or {})


def generate_reduction(tmp_path, spec: dict, options: dict | None = None):
    """(reference function, kernel.py module)."""
    node = parse_expression(spec)
    reference = load(tmp_path, "reference.py", lower_torch.reference_source(spec, node))
    kernel = load(tmp_path, "kernel.py", reduction_source(spec, node, options))
    return getattr(reference, spec["name"]), kernel


def ties(spec: dict, case: protocol.Case, variant: dict[str, str]) -> list[torch.Tensor]:
    """Small integers: every row and column holds its max and min several times."""
    gen = torch.Generator().manual_seed(case.index)
    return [torch.randint(-2, 3, case.shapes[i["name"]], generator=gen).to(getattr(torch, variant[i["name"]]))
            for i in spec["inputs"]]


def check_reduction(tmp_path, spec: dict, options: dict | None = None, configs=(None,), draw=None) -> None:
    """Kernel vs reference(float64 inputs) on every case x dtype variant x config: shape, dtype,
    values within tolerance (indices exactly)."""
    reference, module = generate_reduction(tmp_path, spec, options)
    kernel = getattr(module, spec["name"])
    out = spec["outputs"][0]
    for case in protocol.cases(spec):
        for v, variant in enumerate(protocol.dtype_variants(spec)):
            inputs = draw(spec, case, variant) if draw else runner_inputs.make_inputs(spec, case, variant, 0, "cpu")
            want = reference(*upcast(inputs))
            reduced = spec["reduce"]
            full = ir.broadcast_shapes([case.shapes[n] for n in reduced["inputs"]])
            length = math.prod(full) if reduced["dim"] is None else full[reduced["dim"]]
            for config in configs_for(configs, v == 0):
                got = kernel(*inputs, config=config)
                label = f"{spec['expression']} {case.label} {protocol.variant_label(variant)} config={config}"
                assert list(got.shape) == out["shapes"][case.index], label
                assert got.dtype == getattr(torch, out["dtypes"][v]), label
                if not got.is_floating_point():
                    assert torch.equal(got, want), f"{label}: {got} != {want}"
                    continue
                rtol, atol = protocol.tolerance(out["dtypes"][v], length)
                err = (got.double() - want).abs()
                assert bool((err <= atol + rtol * want.abs()).all()), f"{label}: max err {err.max().item():.3g}"


# ---------------------------------------------------------------- aligned kernels: odd rows of 1024+

# Rows of no whole number of 16-byte vectors, long enough for the aligned kernel: row r starts
# r * 1031 elements in, so its head (before its first 16-byte boundary) and tail vary by row.
ODD_ROWS = [5, 1031]
ALIGNED_CONFIG = {"BLOCK_R": 1, "BLOCK_D": 128, "BLOCK_V": 128, "SPLIT_D": 1, "num_warps": 4, "num_stages": 2}


def aligned_only(module) -> None:
    """Remove module's other row kernels: a launch that does not take the aligned kernel fails."""
    for name in ("op_rows_kernel", "op_kernel", "op_persistent_kernel"):
        if hasattr(module, name):
            setattr(module, name, None)
