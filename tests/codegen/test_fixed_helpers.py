"""The fixed helpers generated files carry (bot/codegen/triton_math.py, bot/ops/matmul_pad.py,
bot/ops/conv_gather.py, bot/ops/norm_grad_kernels.py) are real code: imported, linted, run, and copied into kernel.py exactly as
written (bot.codegen.fixed)."""
from __future__ import annotations

import importlib
import pyflakes.api
import pyflakes.reporter
import pytest
import torch
import triton
import triton.language as tl

from bot.codegen import fixed
from bot.codegen.kernel_file import TRITON_MATH
from bot.codegen.triton_math import _erf, _gelu, _gelu_tanh, _tanh
from bot.ops import conv, matmul, norm_grad, registry
from bot.spec import parse_expression, validate

FILES = {"bot.codegen.triton_math": TRITON_MATH, "bot.ops.matmul_pad": matmul.PAD, "bot.ops.conv_gather": conv.GATHER,
         "bot.ops.norm_grad_kernels": norm_grad.KERNELS}


class _Collect(pyflakes.reporter.Reporter):
    def __init__(self):
        self.found: list[str] = []

    def unexpectedError(self, filename, message):
        self.found.append(f"{filename}: {message}")

    def syntaxError(self, filename, message, lineno, offset, text):
        self.found.append(f"{filename}:{lineno}: {message}")

    def flake(self, message):
        self.found.append(str(message))


@pytest.mark.parametrize("module", FILES)
def test_fixed_files_import_and_lint_clean(module):
    loaded = importlib.import_module(module)
    functions = fixed.functions(FILES[module])
    assert functions and all(callable(getattr(loaded, name)) for name in functions)
    report = _Collect()
    pyflakes.api.check(FILES[module].read_text(), str(FILES[module]), report)
    assert report.found == []


def test_a_helper_brings_the_helpers_it_calls_in_file_order():
    names = [text.split("def ")[1].split("(")[0] for text in fixed.sources(TRITON_MATH, {"_gelu"})]
    assert names == ["_erf", "_gelu"]
    assert [t.split("def ")[1].split("(")[0] for t in fixed.sources(matmul.PAD, {"_pad"})] == ["_pad_kernel", "_pad"]


def _spec(expression: str, names: list[str]) -> dict:
    return validate({"name": "op", "expression": expression,
                     "inputs": [{"name": n, "dtypes": ["float32"], "shapes": [[4, 8]]} for n in names]})


@pytest.mark.parametrize("expression, used", [
    ("gelu(x)", ["_erf", "_gelu"]), ("gelu(x, approximate='tanh')", ["_tanh", "_gelu_tanh"]),
    ("tanh(x) + silu(y)", ["_tanh", "_silu"]), ("x ** 3.0", ["_powi"]), ("x + y", [])])
def test_kernel_files_carry_exactly_the_helpers_they_call(expression, used):
    spec = _spec(expression, ["x", "y"] if "y" in expression else ["x"])
    source = registry.kernel_source(spec, parse_expression(spec), {})
    table = fixed.functions(TRITON_MATH)
    for name, (text, _) in table.items():
        assert (text in source) == (name in used), name


@triton.jit
def _apply(x_ptr, out_ptr, n, WHICH: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    if WHICH == 0:
        y = _erf(x)
    elif WHICH == 1:
        y = _tanh(x)
    elif WHICH == 2:
        y = _gelu(x)
    else:
        y = _gelu_tanh(x)
    tl.store(out_ptr + offs, y, mask=offs < n)


@pytest.mark.parametrize("which, want, tol", [
    (0, torch.erf, 5e-7), (1, torch.tanh, 2e-6),
    (2, lambda x: torch.nn.functional.gelu(x), 2e-6),
    (3, lambda x: torch.nn.functional.gelu(x, approximate="tanh"), 2e-6)])
def test_math_helpers_compute_what_they_say(which, want, tol):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.linspace(-9.0, 9.0, 1000, device=device)
    out = torch.empty_like(x)
    _apply[(1,)](x, out, x.numel(), WHICH=which, BLOCK=1024)
    assert torch.allclose(out.double(), want(x.double()), rtol=0, atol=tol)


def test_the_launchers_broadcast_shape_is_torchs(monkeypatch):
    # Written out for speed (torch.broadcast_shapes' guards cost tens of microseconds a call): the same
    # shape, or the same refusal, as torch's on random shapes with 0, 1 and other sizes, ranks 0-4.
    from bot.codegen import kernel_file
    monkeypatch.setattr(kernel_file, "torch", torch, raising=False)    # a generated file imports it
    gen = torch.Generator().manual_seed(0)
    for _ in range(3000):
        shapes = [torch.Size(torch.randint(0, 4, (int(torch.randint(0, 5, (), generator=gen)),), generator=gen).tolist())
                  for _ in range(int(torch.randint(1, 4, (), generator=gen)))]
        try:
            want = torch.broadcast_shapes(*shapes)
        except RuntimeError:
            want = None
        try:
            got = kernel_file._broadcast_shape(*shapes)
        except RuntimeError:
            got = None
        assert got == want, shapes
