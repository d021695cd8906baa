"""Test inputs: the cases to run and reproducible random tensors for each case x dtype x seed.

Shapes are changed (odd sizes, shrinking for the CPU interpreter) through a map from each
distinct dimension size to a new size. Equal sizes stay equal, so every relation between the
inputs survives: broadcasting (x [M, N] with b [N]), matmul's shared K, and 1s stay 1.
"""
from __future__ import annotations

import zlib

import torch

from runner import protocol
from runner.protocol import Case

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "int64": torch.int64,
    "bool": torch.bool,
}
CPU_MAX_ELEMENTS = protocol.CPU_MAX_ELEMENTS


def dtype_name(dtype: torch.dtype) -> str | None:
    """'float16' for torch.float16; None for dtypes outside the spec's (e.g. float64)."""
    return next((n for n, d in TORCH_DTYPES.items() if d == dtype), None)


def seed_for(case: Case, dtype: str, seed: int) -> int:
    """Stable across processes and hosts (unlike hash())."""
    return zlib.crc32(f"{case.label}|{dtype}|{seed}".encode())


def make_inputs(spec: dict, case: Case, variant: dict[str, str], seed: int, device: str) -> list[torch.Tensor]:
    """Fresh inputs in spec order, drawn from the input's domain, then cast to its dtype."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed_for(case, protocol.variant_label(variant), seed))
    tensors = []
    for inp in spec["inputs"]:
        name, domain = inp["name"], inp.get("domain", "normal")
        span = (0, case.shapes[inp["index_of"]][inp.get("index_dim", -1)]) if domain == "index" else \
            tuple(inp["range"]) if domain == "whole" else None
        values = _draw(domain, case.shapes[name], gen, device, span, inp.get("padding", True))
        if domain == "normal":
            values = values * protocol.init_scale(spec["inputs"], name, case.shapes)
        tensors.append(values.to(TORCH_DTYPES[variant[name]]))
    return tensors


def upstream_gradient(out: torch.Tensor, seed: int) -> torch.Tensor:
    """The gradient a training kernel's backward is checked from: normal values of the output's
    shape and dtype, drawn from a seed of their own."""
    gen = torch.Generator(device=out.device.type)
    gen.manual_seed(zlib.crc32(f"upstream|{list(out.shape)}|{seed}".encode()))
    return torch.randn(out.shape, generator=gen, device=out.device.type).to(out.dtype)


def _draw(domain: str, shape: list[int], gen: torch.Generator, device: str, span: tuple[int, int] | None = None,
          padding: bool | int = True) -> torch.Tensor:
    if domain == "whole":       # whole numbers in [low, high), as the pasted get_inputs' torch.randint
        return torch.randint(*span, shape, generator=gen, device=device)
    if domain == "index":       # indices into a dim: span is (0, its size)
        indices = torch.randint(*span, shape, generator=gen, device=device)
        if padding is False:
            return indices
        # About one in eight is padding (IGNORE_INDEX, or the loss's own ignore_index), as in a
        # language model's batch; never the first, so no case is all padding.
        pad = torch.rand(shape, generator=gen, device=device) < 0.125
        pad.view(-1)[:1] = False
        return torch.where(pad, protocol.IGNORE_INDEX if padding is True else padding, indices)
    if domain == "mask":        # a boolean mask, True or False with even odds
        return torch.rand(shape, generator=gen, device=device) < 0.5
    if domain == "normal":
        return torch.randn(shape, generator=gen, device=device)
    if domain == "sign":        # a ±1 target, each value with even odds: both branches of the loss taken
        return torch.where(torch.rand(shape, generator=gen, device=device) < 0.5, -1.0, 1.0)
    if domain == "zeros":       # compared with 0: half of them 0, the others normal
        zero = torch.rand(shape, generator=gen, device=device) < 0.5
        return torch.where(zero, 0.0, torch.randn(shape, generator=gen, device=device))
    if domain == "unit":        # a probability strictly inside (0, 1): log(x) and log(1 - x) both finite
        return 0.05 + 0.9 * torch.rand(shape, generator=gen, device=device)
    magnitude = 0.5 + 1.5 * torch.rand(shape, generator=gen, device=device)     # uniform [0.5, 2)
    if domain == "positive":
        return magnitude
    if domain == "nonzero":
        sign = torch.where(torch.rand(shape, generator=gen, device=device) < 0.5, -1.0, 1.0)
        return sign * magnitude
    raise ValueError(f"unknown input domain {domain!r}; expected one of {', '.join(protocol.DOMAINS)}")


def _remap(case: Case, sizes: dict[int, int], index: int) -> Case:
    return Case(index, {n: [sizes.get(d, d) for d in s] for n, s in case.shapes.items()})


def odd_case(first: Case, index: int, fixed: list[int] = (), least: int = 1) -> Case:
    """The first case with every size other than 1 replaced by an odd one: the largest size
    becomes 97, the next 37, and so on (x [M, N], b [N] -> x [37, 97], b [97]). Fixed sizes (a
    pasted module's channels, a kernel's sizes) stay; none goes below least."""
    return _remap(first, protocol.odd_sizes(list(first.shapes.values()), fixed, least), index)


def shrink(case: Case, max_elements: int, fixed: list[int] = (), least: int = 1) -> Case:
    """The case with its sizes shrunk by protocol.shrunk_sizes until every tensor fits."""
    return _remap(case, protocol.shrunk_sizes(list(case.shapes.values()), max_elements, fixed, least), case.index)


def correctness_cases(spec: dict, backend: str, max_elements: int = CPU_MAX_ELEMENTS) -> tuple[list[Case], list[str]]:
    """The spec's cases (shrunk on the cpu backend) plus an odd-sized one; and warnings to show."""
    cases, warnings = bench_cases(spec, backend, max_elements)
    extra = odd_case(protocol.cases(spec)[0], len(cases), *protocol.size_rules(spec))
    if all(extra.shapes != c.shapes for c in cases):
        cases.append(extra)
    return cases, warnings


def bench_cases(spec: dict, backend: str, max_elements: int = CPU_MAX_ELEMENTS) -> tuple[list[Case], list[str]]:
    """The spec's own cases; on the cpu backend, each shrunk to what the interpreter can run."""
    cases = protocol.cases(spec)
    if protocol.device_type(backend) != "cpu":
        return cases, []
    shrunk = [shrink(c, max_elements, *protocol.size_rules(spec)) for c in cases]
    warnings = [f"cpu backend: case {c.label} shrunk to {s.label} for the interpreter"
                for c, s in zip(cases, shrunk) if s.shapes != c.shapes]
    return shrunk, warnings
