"""The static integrity checks (runner.integrity, through bot.integrity): kernel.py by allow-list,
reference.py and the generated tests; the corpus in tests/integrity/ (honest/ must pass, every file
in attacks/ must be refused with the message its first line expects); and where the checks apply:
a person's edit of the kernel, reference or a test stage is refused with the violations listed."""
from __future__ import annotations

import ast
import json
import re
import types
from pathlib import Path

import pytest

from bot import catalog, integrity, ir, lower_torch, testgen
from bot.ops import registry
from bot.generators.interface import GenRequest
from bot.generators.offline import OfflineGenerator
from bot.request import parse_request
from bot.spec import parse_expression, validate
from bot.workflow import engine
from bot.workflow.events import Edit, Generated, Start
from bot.workflow.model import Session
from runner import integrity as rules
from runner import protocol

FIXTURES = Path(__file__).parent / "fixtures"
CORPUS = Path(__file__).parent / "integrity"
HONEST = sorted((CORPUS / "honest").glob("*.py"))
ATTACKS = sorted((CORPUS / "attacks").glob("*.py"))
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


def rules_of(source: str, name: str = "f") -> list[str]:
    return [v.rule for v in integrity.check(source, name)]


def header(path: Path, key: str, default: str | None = None) -> str | None:
    found = re.search(rf"^# {key}: (.+)$", path.read_text(), re.MULTILINE)
    return found.group(1).strip() if found else default


# ---------------------------------------------------------------- what the generators emit passes

def catalog_files(size: str) -> list[tuple[str, str, dict[str, str]]]:
    out = []
    for e in catalog.ENTRIES:
        spec, _ = parse_request(e.request(size))
        node = parse_expression(spec)
        out.append((e.name, spec["name"], {
            "kernel.py": registry.kernel_source(spec, node, {}),
            "reference.py": lower_torch.reference_source(spec, node),
            "test_reference.py": testgen.reference_test_source(spec),
            "test_kernel.py": testgen.kernel_test_source(spec)}))
    return out


@pytest.mark.parametrize("size", ["small", "big"])
def test_every_catalog_file_the_offline_generator_emits_passes(size):
    for name, entry_name, files in catalog_files(size):
        for file, source in files.items():
            found = (rules.check_kernel(source, entry_name) if file == "kernel.py" else
                     rules.check_reference(source, entry_name) if file == "reference.py" else
                     rules.check_test(source))
            assert found == [], f"{name} {size} {file}:\n{rules.report(found, file)}"


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
    found = integrity.check(kernel, json.loads(spec)["name"])
    assert found == [], integrity.report(found)


@pytest.mark.parametrize("path, check", [
    ("runner/add/kernel.py", lambda s: rules.check_kernel(s, "add")),
    ("runner/add/reference.py", lambda s: rules.check_reference(s, "add")),
    ("runner/add/test_kernel.py", rules.check_test),
    ("runner/add/test_reference.py", rules.check_test),
    ("llm/hardswish/kernel.py", lambda s: rules.check_kernel(s, "hardswish")),
    ("llm/hardswish/reference.py", lambda s: rules.check_reference(s, "hardswish")),
    ("llm/hardswish/llm_test_kernel.py", rules.check_test),
    ("llm/hardswish/llm_test_reference.py", rules.check_test),
], ids=lambda p: p if isinstance(p, str) else "")
def test_fixture_files_pass(path, check):
    found = check((FIXTURES / path).read_text())
    assert found == [], rules.report(found, path)


# ---------------------------------------------------------------- the corpus

@pytest.mark.parametrize("path", HONEST, ids=[p.stem for p in HONEST])
def test_honest_kernels_pass(path):
    """Every file in honest/ passes: kernels, and references where the name starts with reference_."""
    reference = path.name.startswith("reference_")
    check = rules.check_reference if reference else rules.check_kernel
    found = check(path.read_text(), header(path, "entry"))
    assert found == [], rules.report(found, "reference.py" if reference else "kernel.py")


@pytest.mark.parametrize("path", ATTACKS, ids=[p.stem for p in ATTACKS])
def test_attacks_are_refused(path):
    source = path.read_text()
    expect = header(path, "expect")
    assert expect, f"{path.name} needs a first line `# expect: <part of the message>`"
    name = header(path, "entry", "op")
    kind = path.name.split("_")[0]
    found = {"kernel": lambda: rules.check_kernel(source, name),
             "reference": lambda: rules.check_reference(source, name),
             "testfile": lambda: rules.check_test(source)}[kind]()
    assert found, f"{path.name} was accepted"
    assert any(expect in v.message for v in found), rules.report(found, path.name)


def test_the_corpus_covers_each_kind_of_file():
    kinds = {p.name.split("_")[0] for p in ATTACKS}
    assert kinds == {"kernel", "reference", "testfile"} and len(HONEST) >= 15


# ---------------------------------------------------------------- kernel.py rules, one by one

def test_allowed_launcher_idioms_pass():
    ok = entry("if y is None:", "    raise ValueError('y is required')", "x, y = x.contiguous(), y.contiguous()",
               "out = torch.empty(x.shape, dtype=x.dtype, device=x.device)",
               "n = out.numel() if x.dim() > 1 else x.shape[0] * 1",
               "kernel = _k if n < 2**31 else _k")
    assert integrity.check(ok.replace("    _k[", "    kernel["), "f") == []


@pytest.mark.parametrize("body, rule, words", [
    (["out = torch.add(x, y)"], "torch", "uses torch.add"),
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
    (["out = torch.empty_like(x)", "c = torch.cuda", "c.set_device(1)"], "module", "torch.cuda as a value"),
    (["put = setattr", "out = torch.empty_like(x)"], "introspection", "uses setattr()"),
    (["out = sum((x, y))"], "torch", "uses sum()"),
    (["out = torch.Tensor.add(x, y)"], "torch", "uses torch.Tensor.add"),
    (["T = torch", "out = T.empty_like(x)"], "module", "the module torch as a value"),
    (["out = [torch][0].empty_like(x)"], "module", "the module torch as a value"),
])
def test_violations_are_named_with_their_line(body, rule, words):
    found = integrity.check(entry(*body), "f")
    assert any(v.rule == rule and words in v.message and v.line > 10 for v in found), found


@pytest.mark.parametrize("module", ["inspect", "sys", "gc", "os", "subprocess", "socket", "torch.nn.functional",
                                    "ctypes", "importlib", "numpy", "time", "functools", "triton.testing",
                                    "triton.runtime", "builtins"])
def test_imports_outside_the_allowed_few_are_refused(module):
    found = integrity.check(f"import {module}\n" + entry("out = torch.empty_like(x)"), "f")
    assert [v.rule for v in found] == ["import"] and module in found[0].message


@pytest.mark.parametrize("line", [
    "from triton import jit, cdiv, next_power_of_2, Config, autotune, heuristics",
    "from triton.language.extra import libdevice", "from triton.language.extra.cuda import libdevice",
    "from triton.tools.tensor_descriptor import TensorDescriptor", "import triton.language as language",
    "from typing import Optional, Tuple", "import math as m", "from math import prod, ceil",
    "from torch import Tensor", "from triton.runtime import driver", "from torch.autograd import Function",
])
def test_allowed_imports_pass(line):
    assert integrity.check(f"{line}\n" + entry("out = torch.empty_like(x)"), "f") == []


def test_computing_in_a_helper_the_entry_calls_is_caught():
    src = HEAD + ("def _combine(a, b):\n    return a * b\n\n\n"
                  "def f(x, y):\n    out = _combine(x, y)\n" + LAUNCH + "    return out\n")
    found = integrity.check(src, "f")
    assert [v.rule for v in found] == ["torch"] and "a * b" in found[0].message


def test_no_jit_no_entry_no_launch():
    assert rules_of("import torch\n\ndef f(x, y):\n    return x\n") == ["jit"]
    assert rules_of(HEAD + "def g(x):\n    return x\n") == ["launch"]              # no f
    assert rules_of(entry("out = torch.empty_like(x)", launch=False)) == ["launch"]
    assert rules_of("def f(:\n") == ["syntax"]


def test_a_set_is_a_container_but_a_tensor_is_not():
    ok = entry("seen = set()", "seen.add(x.dtype)", "out = torch.empty_like(x)")
    assert integrity.check(ok, "f") == []
    found = integrity.check(entry("out = torch.empty_like(x)", "x.add(y)"), "f")
    assert [v.rule for v in found] == ["torch"] and ".add()" in found[0].message


def test_the_entry_is_bound_once_and_is_not_decorated():
    src = entry("out = torch.empty_like(x)")
    assert "binds f 2 times" in integrity.report(integrity.check(src + "\n\nf = len\n", "f"))
    swapped = src.replace("def f(x, y):", "@staticmethod\ndef f(x, y):")
    assert rules_of(swapped) == ["decorator"]


def test_report_lists_violations_and_points_to_the_rules():
    text = integrity.report(integrity.check(entry("out = torch.add(x, y)", "g = globals()"), "f"))
    assert text.startswith("kernel.py breaks the integrity rules (docs/INTEGRITY.md)")
    assert text.count("\n- line ") == 2
    many = integrity.check(entry(*[f"out{i} = x + {i}" for i in range(20)], "out = torch.empty_like(x)"), "f")
    assert integrity.report(many).endswith(f"- ... and {len(many) - 12} more")


# ---------------------------------------------------------------- reference.py and tests

HONEST_REFERENCE = '''"""A KernelBench-style paste: a Model, its inputs, and the entry the harness calls."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from typing import Optional

batch_size = 16
dim = 1024


class Model(nn.Module):
    def __init__(self, scale: float = 2.0):
        super().__init__()
        self.scale = scale
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        y = self.act(x) * self.scale
        if bias is not None:
            y = y + bias
        out = y.clone()
        out[out < 0] = 0.0
        return F.softmax(out, dim=-1) + torch.ops.aten.mul.Tensor(x, math.pi) * 0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def op(x, bias=None):
    return Model(2.0)(x, bias)
'''


def test_an_honest_reference_with_a_model_class_passes():
    assert rules.check_reference(HONEST_REFERENCE, "op") == []


@pytest.mark.parametrize("change, words", [
    (("return Model(2.0)(x, bias)", "return Model(2.0)(x, bias).cpu()"), "copies to the host"),
    (("self.scale = scale\n", "self.scale = scale\n        torch.cuda.synchronize()\n"), "uses torch.cuda"),
    (("y = y + bias", "x += bias"), "changes the input x in place"),
    (("out = y.clone()", "out = x"), "writes items of out"),
    (("out = y.clone()", "out = y.clone()\n        x.mul_(2)"), ".mul_() changes x"),
    (("batch_size = 16", "batch_size = [16]\n_cache = {}"), None),
])
def test_reference_changes_that_keep_state_or_touch_the_device_are_refused(change, words):
    source = HONEST_REFERENCE.replace(*change)
    found = rules.check_reference(source, "op")
    if words is None:
        assert found == []                      # module-level constants are fine as long as nothing writes them
    else:
        assert any(words in v.message for v in found), rules.report(found, "reference.py")


def test_a_generated_test_may_read_its_spec_and_nothing_else():
    _, _, files = catalog_files("small")[0]
    source = files["test_kernel.py"]
    assert rules.check_test(source) == []
    for old, new, words in [
            ('"spec.json"', '"kernel.py"', "opens"),
            ("sys.path.insert(0, HERE)", "sys.path.insert(0, '/')", "sys.path.insert(0, HERE)"),
            ('importlib.import_module("kernel")', 'importlib.import_module("os")', "job's modules"),
            ("def test_kernel(case, variant):", "def test_kernel(case, variant, monkeypatch):", "monkeypatch")]:
        assert old in source
        found = rules.check_test(source.replace(old, new, 1))
        assert any(words in v.message for v in found), (old, rules.report(found, "test_kernel.py"))


# ---------------------------------------------------------------- the lists match the installed libraries

def test_triton_names_match_the_installed_triton():
    import triton.language as tl
    from triton.language.extra import libdevice
    public = {n for n in dir(tl) if not n.startswith("_")}
    modules = {n for n in public if isinstance(getattr(tl, n), types.ModuleType)}
    assert public - modules <= rules.TL_NAMES, "new triton.language names: add them to TL_NAMES"
    assert not rules.TL_NAMES & modules
    odd = {n for n in dir(libdevice) if not n.startswith("_") and not callable(getattr(libdevice, n))}
    assert odd <= rules.WILDCARD_REFUSED
    assert "handle" not in rules.JIT_VALUE_ATTRIBUTES          # the interpreter's numpy arrays


def test_torch_names_are_functions_of_the_installed_torch():
    import torch
    import torch.nn.functional as F
    for module, names in [(torch, rules.TORCH_FUNCTIONS), (F, rules.F_FUNCTIONS), (torch.linalg,
                          rules.LINALG_FUNCTIONS), (torch.fft, rules.FFT_FUNCTIONS), (torch.special,
                                                                                 rules.SPECIAL_FUNCTIONS)]:
        missing = {n for n in names if not hasattr(module, n)}
        assert not missing, (module.__name__, missing)
        assert not {n for n in names if isinstance(getattr(module, n), types.ModuleType)}
    assert rules.CONTAINER_ONLY == rules.PLAIN_METHODS & set(dir(torch.Tensor))
    assert {n for n in rules.TORCH_DTYPES if hasattr(torch, n)} == rules.TORCH_DTYPES


def test_ctx_names_match_the_installed_torch():
    """A Function's ctx never has an attribute of its own assigned: the list covers what torch gives it."""
    from torch.autograd.function import BackwardCFunction
    public = {n for n in dir(BackwardCFunction) if not n.startswith("_")}
    assert public <= rules.CTX_RESERVED, "new ctx attributes in torch: add them to CTX_RESERVED"
    assert rules.CTX_METHODS | rules.CTX_READS <= public


def test_the_checks_are_pure_and_the_runner_never_imports_bot():
    tree = ast.parse((Path(rules.__file__)).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | {
        n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "ast", "dataclasses", "functools", "runner"}, imported
    # from runner: the wire contract alone (the lean launch block's text), which is pure itself
    assert {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "runner"
            for a in n.names} == {"protocol"}
    protocol_tree = ast.parse(Path(rules.__file__).with_name("protocol.py").read_text())
    assert {n.module for n in ast.walk(protocol_tree) if isinstance(n, ast.ImportFrom)} <= {"__future__", "dataclasses",
                                                                                              "pathlib"}


# ---------------------------------------------------------------- where the checks apply

def session_at(stage: str, content: str) -> Session:
    s = Session(id="s1", request="hardswish", requester="alice", platform="t", channel="c", thread="t",
                backend="cpu", generator="llm", created_at=0.0)
    engine.handle(s, Start("hardswish", "alice"), 1.0)
    s.stage, s.gen_token = stage, s.gen_token + 1
    engine.handle(s, Generated(stage, s.gen_token, content, "gen"), 2.0)
    return s


def test_edit_of_the_kernel_stage_with_a_violation_is_refused():
    s = session_at("kernel", (FIXTURES / "llm/hardswish/kernel.py").read_text())
    cheat = (FIXTURES / "llm" / "hardswish" / "kernel_torch_add.py").read_text()
    effects = engine.handle(s, Edit("kernel", 1, "dave", cheat), 3.0)
    assert s.latest("kernel").rev == 1
    assert "Edit not applied" in effects[0].text and "torch.add" in effects[0].text
    effects = engine.handle(s, Edit("kernel", 1, "dave", cheat.replace("torch.add(x, 3.0)", "x")), 4.0)
    assert s.latest("kernel").rev == 2 and s.latest("kernel").author == "dave"


def test_edit_of_the_reference_that_patches_the_clock_is_refused():
    reference = (FIXTURES / "llm/hardswish/reference.py").read_text()
    s = session_at("reference", reference)
    cheat = reference + "\n\ntorch.cuda.Event.elapsed_time = lambda self, end: 1e-6\n"
    effects = engine.handle(s, Edit("reference", 1, "dave", cheat), 3.0)
    assert s.latest("reference").rev == 1
    assert "Edit not applied" in effects[0].text and "assigns torch.cuda.Event.elapsed_time" in effects[0].text


def test_edit_of_the_reference_that_sleeps_is_refused_and_an_honest_one_applied():
    reference = (FIXTURES / "llm/hardswish/reference.py").read_text()
    s = session_at("reference", reference)
    cheat = "import time\n" + reference.replace("    return", "    time.sleep(0.01)\n    return")
    effects = engine.handle(s, Edit("reference", 1, "dave", cheat), 3.0)
    assert s.latest("reference").rev == 1
    assert "reference.py breaks the integrity rules" in effects[0].text and "imports time" in effects[0].text
    engine.handle(s, Edit("reference", 1, "dave", reference.replace("6.0", "6")), 4.0)
    assert s.latest("reference").rev == 2


def test_edit_of_a_test_stage_that_reads_files_is_refused():
    test = (FIXTURES / "llm/hardswish/llm_test_kernel.py").read_text()
    s = session_at("kernel_test", test)
    cheat = test.replace('"spec.json"', '"reference.py"')
    effects = engine.handle(s, Edit("kernel_test", 1, "dave", cheat), 3.0)
    assert s.latest("kernel_test").rev == 1
    assert "test_kernel.py breaks the integrity rules" in effects[0].text and "opens" in effects[0].text
    engine.handle(s, Edit("kernel_test", 1, "dave", test.replace("1e-6)", "2e-6)")), 4.0)
    assert s.latest("kernel_test").rev == 2


# ---------------------------------------------------------------- the lean launch block

def _lean_add() -> str:
    spec = validate({"name": "op", "expression": "x + y",
                     "inputs": [{"name": n, "dtypes": ["float16"], "shapes": [[64, 64]]} for n in "xy"]})
    return ir.kernel_source(spec, parse_expression(spec), {})


def test_the_lean_launch_block_is_copied_exactly_and_passes():
    source = _lean_add()
    assert protocol.lean_launch_source() in source and "_launch(op_kernel, grid, " in source
    assert rules.check_kernel(source, "op") == []


@pytest.mark.parametrize("change, words", [
    # the block's own text changed: launched off the caller's stream, or results kept between calls
    (lambda s: s.replace("driver.active.get_current_stream(device)", "0"), "not as runner/lean_launch.py writes"),
    (lambda s: s.replace("_COMPILED = {}\n", "_COMPILED = {}\n_RESULTS = {}\n", 1) + "\n_COMPILED = {}\n",
     "not as runner/lean_launch.py writes"),
    (lambda s: s.replace("    return out\n", "    _COMPILED.clear()\n    return out\n"), "belongs to the lean launch"),
    (lambda s: s.replace("    return out\n", "    keep = _keep\n    return out\n"), "belongs to the lean launch"),
    (lambda s: s.replace("    return out\n", "    f = _launch\n    return out\n"), "uses _launch as a value"),
    (lambda s: s.replace("_launch(op_kernel, grid, ", "_launch(torch.add, grid, "), "torch.add"),
    (lambda s: s.replace("_launch(op_kernel, grid, ", "_launch(*(op_kernel, grid), "), "without a kernel and a grid"),
    (lambda s: s.replace(protocol.lean_launch_source(), ""), "uses _launch, which kernel.py does not define"),
    # the block's text kept, what its names mean changed: another kernel's binary for this key, hooks
    # never seen, arguments dropped, the cap gone
    (lambda s: s + "\n\ndef id(k):\n    return 0\n", "binds id, which the lean launch block reads"),
    (lambda s: s + "\n\ndef getattr(a, b, c):\n    return None\n", "binds getattr, which the lean"),
    (lambda s: s + "\n\ndef tuple(a):\n    return ()\n", "binds tuple, which the lean"),
    (lambda s: s.replace("import torch\n", "import torch\nimport math as _PLAIN\n", 1), "binds _PLAIN"),
    (lambda s: s.replace("import torch\n", "import torch\nfrom triton.runtime import driver as knobs\n", 1),
     "binds knobs"),
    (lambda s: s.replace("import torch\n", "import torch\nfrom triton import jit as _keep\n", 1), "binds _keep"),
])
def test_the_lean_launch_is_the_runners_text_and_stands_for_a_checked_launch(change, words):
    found = rules.check_kernel(change(_lean_add()), "op")
    assert any(words in v.message for v in found), rules.report(found, "kernel.py")
