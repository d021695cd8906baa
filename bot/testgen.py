"""Generated tests (stages 3 and 5) and the bench plan (stage 6).

test_reference.py and test_kernel.py are pytest files the runner executes in a
sandbox directory holding spec.json, reference.py and kernel.py. They import only
torch, pytest, the standard library and those two modules, read the cases and dtype
variants from spec.json (one test id per case x variant, e.g. "5333x497-float16"),
and compare against the reference evaluated on float64 copies of the inputs.

Tolerance, per output dtype: |got - want| <= atol + rtol * |want| (+ a rounding
allowance, below), with rtol/atol from runner.protocol and atol growing with sqrt(N)
for sum/mean/max/min over N elements. The rounding allowance: code that keeps
intermediate values in limited precision (the reference rounds each step to its
dtype, as eager PyTorch does; the kernel to float32) inherits an error the expression
itself causes, e.g. x * y + z in float16 after cancellation. The tests measure it
(the expression evaluated in float64 with those steps rounded, minus the exact value)
and allow it on top; expressions with a single step get the plain tolerance.
"""
from __future__ import annotations

import inspect

from bot import ir
from bot.codegen.code import body_text, doc_text
from bot.codegen.names import allocate
from bot.liger import counterpart
from bot.lower_torch import torch_expression, torch_lines
from bot.ops import conv, registry
from bot.ops.node import plain_text
from bot.ops.pointwise import EXACT as _EXACT, fold_constants
from bot.spec import parse_expression
from runner import protocol

def bench_plan(spec: dict) -> dict:
    """bench_plan.json: every case and dtype, eager torch vs torch.compile vs the kernel, and vs
    Liger-Kernel's function where Liger has the operator (bot.liger)."""
    liger = counterpart(spec)
    return {"cases": "all", "dtypes": "all",
            "versions": ["torch", "torch.compile", *(["liger"] if liger else []), "kernel"],
            "timing": {"gpu_reps": 100, "cpu_runs": 5},
            "compile_mode": "max-autotune-no-cudagraphs", **({"liger": liger} if liger else {})}


def reference_test_source(spec: dict) -> str:
    """test_reference.py: on every case x dtype, the reference's output shape and dtype,
    finite values, agreement with itself on float64 inputs, and the op's property if it has one."""
    return _allocated(spec, _reference_test)


def kernel_test_source(spec: dict) -> str:
    """test_kernel.py: on every case x dtype, kernel(inputs) against reference(float64 inputs),
    output shape and dtype, NaN never passing, and the inputs left unchanged."""
    return _allocated(spec, _kernel_test)


def _allocated(spec: dict, write) -> str:
    """A test file written with its inputs' names, each renamed where it clashes (bot.codegen.names)."""
    order = [i["name"] for i in spec["inputs"]]
    names = allocate(order, None, lambda locals_, _: write(_TestFile(spec, locals_)))
    return write(_TestFile(spec, names))


def _reference_test(gen: "_TestFile") -> str:
    prop = gen.property_check()
    checks = [
        "    inputs = make_inputs(case, variant)",
        "    got = reference(*inputs)",
        "    inputs64 = upcast(inputs)",
        "    want = reference(*inputs64)",
        *gen.each_output("reference", [
            "    bad = int((~torch.isfinite(got)).sum())",
            '    assert bad == 0, f"the reference gives {bad} non-finite values in {dtype}"',
            f"    allowance = {gen.allowance('getattr(torch, dtype)')}{gen.matmul_term()}{gen.chain_term()}",
            '    check_close(got, want, dtype, reduced_length(inputs), allowance, f"reference in {dtype} vs float64")']),
    ]
    if prop:
        checks.append("    check_property(got, inputs, inputs64, dtype)")
    test = ("\n\n@pytest.mark.parametrize(\"case, variant\", params(skip_bf16=False))\n"
            "def test_reference(case, variant):\n" + "\n".join(checks) + "\n")
    return gen.header("Reference test", "reference(inputs) in each dtype against reference(float64 inputs)",
                      ("reference",)) \
        + gen.helpers() + gen.matmul_allowance() + prop + test


def _kernel_test(gen: "_TestFile") -> str:
    checks = [
        "    inputs = make_inputs(case, variant)",
        "    before = [t.clone() for t in inputs]",
        "    inputs64 = upcast(inputs)",
        "    want = reference(*inputs64)",
        "    got = kernel(*inputs)",
        *gen.each_output("kernel", [
            f"    allowance = {gen.allowance('torch.float32')}{gen.chain_term()}  # the kernel computes in float32",
            '    check_close(got, want, dtype, reduced_length(inputs), allowance, "kernel vs reference on float64 inputs")']),
        "    for spec_input, t, t0 in zip(SPEC[\"inputs\"], inputs, before):",
        "        assert torch.equal(t, t0), f\"the kernel changed its input {spec_input['name']}\"",
    ]
    test = ("\n\n# bf16 is skipped only under Triton's interpreter, which gets it wrong; the GPU tests it.\n"
            "@pytest.mark.parametrize(\"case, variant\", params(skip_bf16=INTERPRETED))\n"
            "def test_kernel(case, variant):\n" + "\n".join(checks) + "\n")
    return gen.header("Kernel test", "kernel(inputs) against reference(float64 inputs)",
                      ("reference", "kernel")) + gen.helpers() + test + (_GRADIENT_TEST if gen.spec.get("training") else "")


# A training kernel's backward: every float input's gradient against the reference's autograd on
# float64 copies, from the same upstream gradient, within the dtype's tolerance over the rows a
# broadcast input's gradient sums.
_GRADIENT_TEST = '''

@pytest.mark.parametrize("case, variant", params(skip_bf16=INTERPRETED))
def test_gradients(case, variant):
    inputs = make_inputs(case, variant)
    # the float inputs but those the spec marks "grad": false (class weights)
    floats = [k for k, t in enumerate(inputs) if t.is_floating_point() and SPEC["inputs"][k].get("grad", True)]
    ours = [t.clone().requires_grad_(k in floats) for k, t in enumerate(inputs)]
    truth = [t.double().requires_grad_(k in floats) if t.is_floating_point() else t for k, t in enumerate(inputs)]
    got, want = kernel(*ours), reference(*truth)
    upstream = torch.randn(want.shape, generator=torch.Generator(device=DEVICE).manual_seed(SEED), device=DEVICE)
    grads = torch.autograd.grad(got, [ours[k] for k in floats], upstream.to(got.dtype), allow_unused=True)
    wants = torch.autograd.grad(want, [truth[k] for k in floats], upstream.to(got.dtype).double(), allow_unused=True)
    for k, g, w in zip(floats, grads, wants):
        name = SPEC["inputs"][k]["name"]
        assert (g is None) == (w is None), f"the gradient of {name}: given where torch gives none, or missing"
        if g is not None:
            rows = max(1, want.numel() // w.numel(), reduced_length(inputs))
            dtype = SPEC["inputs"][k]["dtypes"][variant]
            # a gradient rounds like the largest values summed into it: its scale joins the allowance
            check_close(g, w, dtype, rows, RTOL[dtype] * float(w.abs().max()), f"the gradient of {name}")
'''


# A chain keeps each stage's output in the dtype, as torch does; a later stage that sums such
# values ((x @ w1) @ w2) carries their rounding at the scale of the terms it sums, not of its own
# result, which may cancel: allowed as a gradient's is (runner.harness, scaled).
_CHAIN_ERROR = '''

def chain_error(want, dtype):
    """The rounding a chain's stored intermediates may carry into the output: rtol of its largest value."""
    return RTOL.get(dtype, 0.0) * float(want.double().abs().max()) if want.numel() else 0.0
'''


class _TestFile:
    """The parts both generated tests share, written from one place."""

    def __init__(self, spec: dict, names: dict[str, str]):
        self.spec = spec
        self.node = parse_expression(spec)
        self.order = [i["name"] for i in spec["inputs"]]
        self.names = names
        # The first float input: what a number in torch code is cast to (a mask's bool would not do).
        self.anchor = names[protocol.float_inputs(spec)[0]["name"]]
        self.body = self.node.args[0] if self.node.op in ir.ROOT_OPS else self.node

    def _is_built(self, module: str) -> bool:
        return module == "reference" and bool(self.spec.get("reference_class"))

    def _entry(self, module: str) -> str:
        """`reference = ...`: the spec's function, or a pasted nn.Module built once as the runner builds
        it, called with its learned tensors (the spec's parameter inputs) bound in (module_call)."""
        cls = self.spec.get("reference_class") if module == "reference" else None
        if not cls:
            return f'{module} = getattr(importlib.import_module("{module}"), "{self.spec["name"]}")\n'
        found = f'importlib.import_module("{module}")'
        return (f'{module} = importlib.import_module("module_call").module_call(\n'
                f'    {found}.{cls}(*{found}.get_init_inputs()), {protocol.parameters(self.spec)!r}, DEVICE)\n')

    def header(self, title: str, what: str, modules: tuple[str, ...]) -> str:
        name = self.spec["name"]
        # A pasted module is built on DEVICE, so it comes after it.
        imports = "".join(self._entry(m) for m in modules if not self._is_built(m))
        built = "".join(self._entry(m) for m in modules if self._is_built(m))
        return f'''"""{title} for {name} ({doc_text(self.spec["expression"])}): {what},
on every case x dtype variant of spec.json.

Generated by kernelbot; the runner runs it with pytest beside spec.json, reference.py and kernel.py.
Tolerance per output dtype: |got - want| <= atol + rtol * |want| + rounding allowance, want computed
in float64; NaN never passes; integer outputs (indices) must be equal. atol grows with sqrt(N) for an
output accumulated over N elements (a sum over a dim, a matmul's K).
"""
import importlib
import json
import math
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
{imports}with open(os.path.join(HERE, "spec.json")) as f:
    SPEC = json.load(f)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
{built}INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
BF16_SKIP = "Triton's interpreter computes bfloat16 wrongly; bf16 is tested on the GPU"
SEED = 0
# runner.protocol's tolerances (FlagGems' rtol per dtype).
RTOL = {protocol.RTOL!r}
ATOL = {protocol.ATOL!r}
# (rtol, atol) instead for float32 when the matmul may use TF32 (spec "tf32").
TF32_TOL = {protocol.TF32_TOL!r}
ERF_ULPS = {protocol.ERF_ULPS!r}
# On the CPU every case shrinks to at most this many elements a tensor, as the runner's harness does.
CPU_MAX_ELEMENTS = {protocol.CPU_MAX_ELEMENTS!r}


''' + "\n\n".join(inspect.getsource(f) for f in (protocol.shrunk_sizes, protocol.accumulated_length,
                                                     protocol.init_scale))

    def helpers(self) -> str:
        return (_COMMON + self._rounding_error() + self._step_error() + self._erf_error() + self._body_function()
                + (_CHAIN_ERROR if ir.is_chain(self.node) else ""))

    def chain_term(self) -> str:
        return " + chain_error(want, dtype)" if ir.is_chain(self.node) else ""

    def each_output(self, who: str, checks: list[str]) -> list[str]:
        """The shape and dtype checks, then checks, of the output; of each in turn where the op has
        several (torch.max(x, dim)'s values and indices: integer indices get no rounding allowance)."""
        if len(self.spec["outputs"]) == 1:
            return [*self.shape_and_dtype_checks(who, 0), *checks]
        loop = [*self.shape_and_dtype_checks(who, "k"), *checks]
        allowance = next(i for i, line in enumerate(loop) if line.startswith("    allowance = "))
        loop.insert(allowance + 1, '    allowance = allowance if out["dtypes"][variant].startswith("float") else 0.0')
        n = len(self.spec["outputs"])
        return [f'    assert isinstance(got, tuple) and len(got) == {n}, "{who} gives no tuple of the spec\'s {n} outputs"',
                "    for k, (got, want) in enumerate(zip(got, tuple(want))):",
                *("    " + line for line in loop)]

    def shape_and_dtype_checks(self, who: str, k: int | str) -> list[str]:
        return [
            f'    out = SPEC["outputs"][{k}]',
            '    dtype = out["dtypes"][variant]',
            f'    shape = case_shapes(case, {k})[1] or list(want.shape)',
            '    assert list(got.shape) == shape, \\',
            f'        f"{who} output shape {{list(got.shape)}}, spec says {{shape}}"',
            f'    assert got.dtype == getattr(torch, dtype), f"{who} output dtype {{got.dtype}}, spec says {{dtype}}"',
        ]

    # ------------------------------------------------------------ rounding allowance

    def has_steps(self) -> bool:
        """Does the expression round intermediate values? A pointwise expression does from its
        second rounding op on; a row op from its body's first (the body is rounded before the op)."""
        body = fold_constants(self.body)
        rounding = [n for n in body.walk() if n.args and n.op not in _EXACT]
        return len(rounding) >= (1 if self.node.op in ir.ROOT_OPS else 2)

    def allowance(self, dtype: str) -> str:
        which = ", k" * (len(self.spec["outputs"]) > 1)        # several outputs: the one checked
        terms = ([f"rounding_error(inputs64, want, {dtype}{which})"] * self.has_steps()
                 + [f"step_error(inputs64, {dtype})"] * self.has_step_bound() + ["erf_error(inputs64)"] * bool(self._erfs()))
        return " + ".join(terms) or "0.0"

    # ------------------------------------------------------------ erf's own error (GELU)

    def _erfs(self) -> list[ir.Node]:
        """The exact GELUs whose error reaches the output unscaled (through +, - and neg): their
        0.5 * x * (1 + erf(x / sqrt 2)) cancels for x << 0, where an erf correct to a few units in
        the last place of 1 leaves an absolute error of that many units times |x| / 2."""
        found, todo = [], [self.body]
        while todo:
            n = todo.pop()
            if n.op == "gelu" and n.attr("approximate", "none") == "none":
                found.append(n.args[0])
            elif n.op in ("add", "sub", "neg"):
                todo += n.args
        return found

    def _erf_error(self) -> str:
        args = self._erfs()
        if not args:
            return ""
        lines, terms = [], []
        for arg in args:
            arg_lines, text = torch_expression(arg, self.names, self.anchor, set(self.names.values()))
            lines += arg_lines
            terms.append(f"({text}).abs()")
        body = body_text(lines)
        unpack = self._unpack("inputs")
        return f'''

def erf_error(inputs):
    """GELU's erf, computed in float32 (for float16 and bfloat16 too) as torch and the kernel both
    do, is off by up to ERF_ULPS units in the last place of 1: after 1 + erf cancels, that error
    times |x| / 2 is all that is left of it. torch's own float32 GELU is that far off."""
{unpack}{body}    return ERF_ULPS * 2.0 ** -23 * 0.5 * ({" + ".join(terms)})
'''

    def _rounding_error(self) -> str:
        if not self.has_steps():
            return ""
        lines, result = torch_lines(self.spec, self.node, self.names, round_with="r")
        body = body_text(lines)
        return f'''

def rounding_error(inputs, want, dtype, k=0):
    """How far {doc_text(self.spec["expression"])} moves from its exact value `want` when its
    intermediate steps are rounded to `dtype`: an error of the expression in that precision, which
    code keeping its intermediates in `dtype` inherits, so it is allowed on top of the tolerance."""
    def r(t):
        return t.to(dtype).to(torch.float64)

{self._unpack("inputs")}{body}    rounded = {result}
    rounded = rounded[k] if isinstance(rounded, tuple) else rounded      # of several outputs, output k
    return (rounded.double() - want.double()).abs()      # a bool output (any, all) as 1 or 0
'''

    def _unpack(self, source: str) -> str:
        return f"    {', '.join(self.names[n] for n in self.order)}{',' * (len(self.order) == 1)} = {source}\n"

    # ------------------------------------------------------------ one unit in the last place per step

    def has_step_bound(self) -> bool:
        """Pointwise expressions: every intermediate element feeds one output element, so autograd
        with the steps as leaves gives each one's weight in it. (A reduction's N rounded terms add
        up like a random walk, which its sqrt(N) atol and the measured rounding error cover; a
        worst-case sum of N units would let a wrong reduction pass.)"""
        return self.has_steps() and ir.kind(self.node) == "pointwise"

    def _step_error(self) -> str:
        if not self.has_step_bound():
            return ""
        lines, result = torch_lines(self.spec, self.node, self.names, round_with="r")
        body = body_text(lines, 2)
        return f'''

def ulp(t, dtype):
    """One unit in the last place of each value of t in dtype (subnormals: the smallest step)."""
    info = torch.finfo(dtype)
    exponent = torch.frexp(t)[1]                # t = m * 2 ** exponent, 0.5 <= |m| < 1
    return torch.ldexp(torch.full_like(t, info.eps), exponent - 1).clamp(min=info.tiny * info.eps)


def step_error(inputs, dtype):
    """A first-order bound on what rounding the intermediate steps of {doc_text(self.spec["expression"])}
    to `dtype` may cost when a step is off by one unit in the last place (torch's float16 sigmoid or
    exp is, at times: rounded in float32 first, or not correctly rounded): each step's unit times
    how much its output element moves with it (autograd, the step a leaf)."""
    steps = []

    def r(t):
        t = t.to(dtype).to(torch.float64).detach().requires_grad_()
        steps.append(t)
        return t

    shape = torch.broadcast_shapes(*(t.shape for t in inputs))    # no step is broadcast
{self._unpack("[t.expand(shape) for t in inputs]")}    with torch.enable_grad():
{body}        out = {result}
        grads = torch.autograd.grad(out.sum(), steps, allow_unused=True)
    bound = torch.zeros(shape, dtype=torch.float64, device=out.device)
    for t, g in zip(steps, grads):
        if g is not None:
            bound = bound + g.abs() * ulp(t.detach(), dtype)
    return bound
'''

    # ------------------------------------------------------------ torch's own matmul (reference test)

    def matmul_term(self) -> str:
        if ir.is_chain(self.node) and (ir.matmul_node(self.node) or conv.conv_node(self.node)):
            return " + matmul_allowance(want, dtype)"
        if ir.matmul_node(self.node) or conv.conv_node(self.node):
            return " + matmul_allowance(inputs64, dtype)"
        return ""

    def matmul_allowance(self) -> str:
        mm = ir.matmul_node(self.node)
        if ir.is_chain(self.node) and (mm or conv.conv_node(self.node)):
            return '''

def matmul_allowance(want, dtype):
    """A chain's matmul or convolution in torch may round float32 operands to TF32 (cuDNN's default)
    and add float16/bfloat16 partial sums in that dtype; what follows carries that rounding, relative
    to the values: allow it."""
    return (2.0 ** -10 if dtype == "float32" else 4 * RTOL[dtype]) * want.abs()
'''
        if conv.conv_node(self.node):
            return self._conv_allowance(conv.conv_node(self.node))
        if not mm:
            return ""
        a, b = (self.order.index(arg.name) for arg in mm.args)
        # a transposed operand (a.T @ b) squared as it lies in memory, then transposed as the product reads it
        sa, sb = (f"({name} * {name}).{mm.attr(key)}" if mm.attr(key) else f"{name} * {name}"
                  for name, key in (("a", "ta"), ("b", "tb")))
        return f'''

def matmul_allowance(inputs, dtype):
    """torch's matmul in float16/bfloat16 may add partial sums in that dtype (cuBLAS split-K with
    reduced-precision reductions): allow 4 * rtol of the sum's size, sqrt((a * a) @ (b * b))."""
    a, b = inputs[{a}], inputs[{b}]
    return 4 * RTOL[dtype] * torch.sqrt(torch.matmul({sa}, {sb}))
'''

    def _conv_allowance(self, node: ir.Node) -> str:
        x, w = (self.order.index(arg.name) for arg in node.args[:2])
        squares = conv.TORCH_OPS[conv.CONV](node, ["x * x", "w * w"])
        return f'''

def matmul_allowance(inputs, dtype):
    """torch's convolution may round float32 operands to TF32 (cuDNN's default) and add float16/bfloat16
    partial sums in that dtype: allow that rounding of the sum's size, sqrt(conv(x * x, w * w))."""
    x, w = inputs[{x}], inputs[{w}]
    return (2.0 ** -10 if dtype == "float32" else 4 * RTOL[dtype]) * torch.sqrt({squares})
'''

    # ------------------------------------------------------------ properties (reference test)

    def _body_function(self) -> str:
        if not self._property_needs_body():
            return ""
        lines, expr = torch_expression(self.body, self.names, self.anchor, set(self.names.values()))
        body = body_text(lines)
        return f'''

def body({", ".join(self.names[n] for n in self.order)}):
    """The values {self.node.op} works on: {doc_text(plain_text(self.body))}."""
{body}    return {expr}
'''

    def _property_needs_body(self) -> bool:
        return registry.family(self.node).reference_property(self.node)[1]

    def property_check(self) -> str:
        """check_property(got, inputs, inputs64, dtype) for ops that have a property (their family
        writes it), else ''."""
        text = registry.family(self.node).reference_property(self.node)[0]
        return "\n\ndef check_property(got, inputs, inputs64, dtype):\n" + text if text else ""


_COMMON = '''

def case_shapes(case, k=0):
    """Each input's shape and output k's in this case; on the CPU (Triton's interpreter) shrunk
    exactly as the runner's harness shrinks them, so a 8192x8192 case fits in memory there. A
    shrunk case's output shape is None (an op may compute its sizes, as a convolution or a pooling
    does): the reference's own output shape stands for it."""
    shapes = {i["name"]: i["shapes"][case] for i in SPEC["inputs"]}
    out = SPEC["outputs"][k]["shapes"][case]
    if DEVICE != "cpu":
        return shapes, out
    sizes = shrunk_sizes(list(shapes.values()), CPU_MAX_ELEMENTS, SPEC.get("fixed_sizes", ()), SPEC.get("least_size", 1))
    out = out if all(sizes[d] == d for d in sizes) else None
    return {n: [sizes[d] for d in s] for n, s in shapes.items()}, out


def shapes_label(shapes):
    # As runner.protocol.Case.label: the first input's shape, other inputs' where they differ.
    first = next(iter(shapes.values()))
    others = [f"{n}:{'x'.join(map(str, s))}" for n, s in shapes.items() if s != first]
    return ("x".join(map(str, first)) or "scalar") + (f" ({', '.join(others)})" if others else "")


def case_label(case):
    """The spec's case, and what it shrank to on the CPU: '8192x8192 (cpu: 256x256)'."""
    spec = shapes_label({i["name"]: i["shapes"][case] for i in SPEC["inputs"]})
    run = shapes_label(case_shapes(case)[0])
    return spec if run == spec else f"{spec} (cpu: {run})"


def variant_label(variant):
    # As runner.protocol.variant_label: "float16", or "x:float16,y:float32" when float inputs differ
    # (indices and masks aside).
    dtypes = {i["name"]: i["dtypes"][variant] for i in SPEC["inputs"]}
    dtypes = {n: d for n, d in dtypes.items() if d not in ("int64", "bool")} or dtypes
    if len(set(dtypes.values())) == 1:
        return next(iter(dtypes.values()))
    return ",".join(f"{n}:{d}" for n, d in dtypes.items())


def params(skip_bf16):
    """One pytest param per case x dtype variant, with ids like "5333x497-float16"."""
    out = []
    for case in range(len(SPEC["inputs"][0]["shapes"])):
        for variant in range(len(SPEC["inputs"][0]["dtypes"])):
            bf16 = any(i["dtypes"][variant] == "bfloat16" for i in SPEC["inputs"])
            marks = [pytest.mark.skip(reason=BF16_SKIP)] if skip_bf16 and bf16 else []
            out.append(pytest.param(case, variant, id=f"{case_label(case)}-{variant_label(variant)}", marks=marks))
    return out


def make_inputs(case, variant):
    """The case's inputs in the variant's dtypes, drawn from each input's domain with a fixed seed:
    normal (standard normal; a learned weight and its bias at the layer's initial scale), positive
    (uniform in [0.5, 2)), nonzero (random sign times that), sign (-1.0 or 1.0 with even odds: a target compared with 1 and -1),
    zeros (normal, about half of it 0: a tensor compared with 0), index (indices into dim
    index_dim, default the last, of the input named by index_of; unless padding is false about one
    in eight is padding, as in a language model's batch: -100, torch's default ignore_index, or the
    index padding gives), mask
    (bool, True or False with even odds), whole (int64 uniform over range: numbers a module reads as such)."""
    gen = torch.Generator(device=DEVICE).manual_seed(SEED)
    shapes = case_shapes(case)[0]
    inputs = []
    for spec_input in SPEC["inputs"]:
        shape, domain = shapes[spec_input["name"]], spec_input.get("domain", "normal")
        if domain == "index":
            high = shapes[spec_input["index_of"]][spec_input.get("index_dim", -1)]
            values = torch.randint(0, high, shape, generator=gen, device=DEVICE)
            pad_value = spec_input.get("padding", True)
            if pad_value is not False:
                padding = torch.rand(shape, generator=gen, device=DEVICE) < 0.125
                padding.view(-1)[:1] = False        # never all padding
                values = torch.where(padding, -100 if pad_value is True else pad_value, values)
        elif domain == "mask":
            values = torch.rand(shape, generator=gen, device=DEVICE) < 0.5
        elif domain == "whole":
            values = torch.randint(*spec_input["range"], shape, generator=gen, device=DEVICE)
        elif domain == "normal":
            values = torch.randn(shape, generator=gen, device=DEVICE) * init_scale(SPEC["inputs"], spec_input["name"],
                                                                                 shapes)
        elif domain == "sign":
            values = torch.where(torch.rand(shape, generator=gen, device=DEVICE) < 0.5, -1.0, 1.0)
        elif domain == "zeros":
            zero = torch.rand(shape, generator=gen, device=DEVICE) < 0.5
            values = torch.where(zero, 0.0, torch.randn(shape, generator=gen, device=DEVICE))
        elif domain == "unit":
            values = 0.05 + 0.9 * torch.rand(shape, generator=gen, device=DEVICE)
        else:
            values = 0.5 + 1.5 * torch.rand(shape, generator=gen, device=DEVICE)
            if domain == "nonzero":
                values = torch.where(torch.rand(shape, generator=gen, device=DEVICE) < 0.5, -values, values)
        inputs.append(values.to(getattr(torch, spec_input["dtypes"][variant])))
    return inputs


def upcast(inputs):
    """float64 copies of the float inputs (indices stay int64, masks bool): the reference's ground truth."""
    return [t.double() if t.is_floating_point() else t for t in inputs]


def reduced_length(inputs):
    """N for an output accumulated over N elements (spec "reduce": a sum over a dim, a matmul's K),
    whose rounding error grows like sqrt(N); else 1."""
    reduce = SPEC.get("reduce")
    if not reduce:
        return 1
    return accumulated_length(reduce, {i["name"]: t.shape for i, t in zip(SPEC["inputs"], inputs)})


def position(flat, shape):
    """The index in `shape` of the flat position `flat`."""
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return tuple(reversed(index))


def check_close(got, want, dtype, reduce_len, allowance, what):
    """Fail, naming the worst element, unless |got - want| <= atol + rtol * |want| + allowance
    everywhere (NaN never passes); integer and bool outputs must be equal (up to the allowance)."""
    want = want.double()            # bools (any, all) as 1 or 0
    if dtype in ("int64", "bool"):
        rtol, atol = 0.0, 0.0
    elif SPEC.get("tf32") and dtype == "float32":
        rtol, atol = TF32_TOL[0], TF32_TOL[1] * math.sqrt(max(1, reduce_len))
    elif (SPEC.get("matmul") or SPEC.get("scan")) and dtype == "float32":
        # A float32 matmul's (or scan's) partial sums grow like sqrt(k) and each addition rounds at that size.
        rtol, atol = RTOL[dtype], ATOL[dtype] * max(1, reduce_len)
    else:
        rtol, atol = RTOL[dtype], ATOL[dtype] * math.sqrt(max(1, reduce_len))
    err = (got.double() - want).abs()
    allowed = atol + rtol * want.abs() + allowance
    ok = err <= allowed
    if bool(ok.all()):
        return
    excess = torch.where(ok, 0.0, (err / allowed).nan_to_num(float("inf"))).flatten()
    i = int(excess.argmax())
    pytest.fail(
        f"{what}: {int((~ok).sum())} of {ok.numel()} values outside |got - want| <= {atol:.3g} + {rtol:.3g} * |want|"
        f" (+ rounding allowance); worst at {position(i, got.shape)}: got {got.flatten()[i].item():.7g}, "
        f"want {want.flatten()[i].item():.7g}, |err| {err.flatten()[i].item():.3g} > "
        f"allowed {allowed.flatten()[i].item():.3g}",
        pytrace=False,
    )
'''
