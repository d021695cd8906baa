"""The static integrity check of kernel.py (bot.integrity) and where it applies: a person's
edit of the kernel stage is refused with the violations listed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot import engine, integrity
from bot.events import Edit, Generated, Start
from bot.generator import GenRequest
from bot.model import Session
from bot.offline import OfflineGenerator

FIXTURES = Path(__file__).parent / "fixtures"
HEAD = '''import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


'''
LAUNCH = "    _k[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)\n"


def entry(*body: str, launch: bool = True) -> str:
    """HEAD plus `def f(x, y)`: the body lines, the launch, `return out`."""
    lines = "".join(f"    {line}\n" for line in body) + (LAUNCH if launch else "")
    return HEAD + "def f(x, y):\n" + lines + "    return out\n"


def rules(source: str, name: str = "f") -> list[str]:
    return [v.rule for v in integrity.check(source, name)]


@pytest.mark.parametrize("request_text", [
    "relu(x + y) for fp16 and fp32, shapes 64x48 and 33x17",
    "x * y + b for fp32 32x64 with b: [64]",
    "softmax over the last dim of a 64x100 fp32 tensor",
    "rmsnorm with weight, eps 1e-6 for fp32 32x64",
    "layernorm with weight and bias for fp32 32x64",
    "sum over the last dim for fp32 32x64",
    "where(x > 0, x, 0.01 * x) for fp32 shape 1024",
])
def test_offline_kernels_pass(request_text):
    gen = OfflineGenerator()
    spec = gen.generate(GenRequest("spec", request_text)).content
    kernel = gen.generate(GenRequest("kernel", request_text, approved={"spec": spec})).content
    assert integrity.check(kernel, json.loads(spec)["name"]) == []


def test_runner_fixture_kernel_passes():
    assert integrity.check((FIXTURES / "runner" / "add" / "kernel.py").read_text(), "add") == []


def test_allowed_launcher_idioms_pass():
    ok = entry("if y is None:", "    raise ValueError('y is required')", "x, y = x.contiguous(), y.contiguous()",
               "out = torch.empty(x.shape, dtype=x.dtype, device=x.device)",
               "n = out.numel() if x.dim() > 1 else x.shape[0] * 1",
               "kernel = _k if n < 2**31 else _k")
    assert integrity.check(ok.replace("    _k[", "    kernel["), "f") == []


@pytest.mark.parametrize("body, rule, words", [
    (["out = torch.add(x, y)"], "torch", "torch.add"),
    (["out = torch.empty_like(x)", "out = out + y"], "torch", "tensor arithmetic"),
    (["out = x.sum(-1)"], "torch", ".sum()"),
    (["out = torch.ops.aten.add.Tensor(x, y)"], "torch", "aten"),
    (["out = torch.nn.functional.relu(x)"], "torch", "torch.nn"),
    (["out = torch.empty_like(x)", "out[:] = x"], "torch", "writing tensor elements"),
    (["out = torch.empty_like(x)", "mask = x > 0"], "torch", "tensor comparison"),
    (["out = torch.empty_like(x)", "try:", "    pass", "except Exception:", "    out = x"], "fallback", "catches"),
    (["out = torch.empty_like(x)", "g = globals()"], "introspection", "globals()"),
    (["out = torch.empty_like(x)", "f = getattr(torch, 'add')"], "introspection", "getattr()"),
    (["out = torch.empty_like(x)", "code = f.__code__"], "introspection", "__code__"),
    (["out = torch.empty_like(x)", "open('/tmp/cache').read()"], "io", "touches files"),
    (["out = torch.empty_like(x)", "torch.cuda.Event.elapsed_time = lambda s, e: 1e-6"], "patch",
     "assigns torch.cuda.Event.elapsed_time"),
    (["out = torch.empty_like(x)", "del triton.testing.do_bench"], "patch", "deletes triton.testing.do_bench"),
    (["out = torch.empty_like(x)", "t = triton.testing", "t.do_bench = None"], "patch", "assigns t.do_bench"),
    (["out = torch.empty_like(x)", "with torch.cuda.stream(torch.cuda.Stream()):",
      "    _k[(1,)](x, out, 1, BLOCK=1024)"], "clock", "torch.cuda.Stream"),
    (["out = torch.empty_like(x)", "c = torch.cuda", "c.set_device(1)"], "clock", "c.set_device"),
])
def test_violations_are_named_with_their_line(body, rule, words):
    found = integrity.check(entry(*body), "f")
    assert rule in [v.rule for v in found], found
    line = next(v for v in found if v.rule == rule)
    assert words in line.message and line.line > 10


@pytest.mark.parametrize("module", ["inspect", "sys", "gc", "os", "subprocess", "socket", "torch.nn.functional",
                                    "ctypes", "importlib"])
def test_imports_outside_the_allowed_few_are_refused(module):
    found = integrity.check(f"import {module}\n" + entry("out = torch.empty_like(x)"), "f")
    assert [v.rule for v in found] == ["import"] and module in found[0].message


def test_computing_in_a_helper_the_entry_calls_is_caught():
    src = HEAD + ("def _combine(a, b):\n    return a * b\n\n\n"
                  "def f(x, y):\n    out = _combine(x, y)\n" + LAUNCH + "    return out\n")
    found = integrity.check(src, "f")
    assert [v.rule for v in found] == ["torch"] and "a * b" in found[0].message


def test_no_jit_no_entry_no_launch():
    assert rules("import torch\n\ndef f(x, y):\n    return x\n") == ["jit"]
    assert rules(HEAD + "def g(x):\n    return x\n") == ["launch"]              # no f
    assert rules(entry("out = torch.empty_like(x)", launch=False)) == ["launch"]
    assert rules("def f(:\n") == ["syntax"]


def test_report_lists_violations_and_points_to_the_rules():
    text = integrity.report(integrity.check(entry("out = torch.add(x, y)", "g = globals()"), "f"))
    assert "docs/INTEGRITY.md" in text and text.count("\n- line ") == 2


def test_edit_of_the_kernel_stage_with_a_violation_is_refused():
    s = Session(id="s1", request="hardswish", requester="alice", platform="t", channel="c", thread="t",
                backend="cpu", generator="llm", created_at=0.0)
    engine.handle(s, Start("hardswish", "alice"), 1.0)
    s.stage, s.gen_token = "kernel", s.gen_token + 1
    engine.handle(s, Generated("kernel", s.gen_token, (FIXTURES / "llm/hardswish/kernel.py").read_text(), "gen"), 2.0)
    cheat = (FIXTURES / "llm" / "hardswish" / "kernel_torch_add.py").read_text()
    effects = engine.handle(s, Edit("kernel", 1, "dave", cheat), 3.0)
    assert s.latest("kernel").rev == 1
    assert "Edit not applied" in effects[0].text and "torch.add" in effects[0].text
    effects = engine.handle(s, Edit("kernel", 1, "dave", cheat.replace("torch.add(x, 3.0)", "x")), 4.0)
    assert s.latest("kernel").rev == 2 and s.latest("kernel").author == "dave"


def test_edit_of_the_reference_that_patches_the_clock_is_refused():
    s = Session(id="s1", request="hardswish", requester="alice", platform="t", channel="c", thread="t",
                backend="cpu", generator="llm", created_at=0.0)
    engine.handle(s, Start("hardswish", "alice"), 1.0)
    s.stage, s.gen_token = "reference", s.gen_token + 1
    reference = (FIXTURES / "llm/hardswish/reference.py").read_text()
    engine.handle(s, Generated("reference", s.gen_token, reference, "gen"), 2.0)
    cheat = reference + "\n\ntorch.cuda.Event.elapsed_time = lambda self, end: 1e-6\n"
    effects = engine.handle(s, Edit("reference", 1, "dave", cheat), 3.0)
    assert s.latest("reference").rev == 1
    assert "Edit not applied" in effects[0].text and "assigns torch.cuda.Event.elapsed_time" in effects[0].text
