"""The layout every generated kernel.py shares, and what writes it: the file head, the tuning
block (CONFIGS, TUNED, tuning_key; docs/CONTRACTS.md), the float32 math helpers it calls, the
`_body` helper of a family's pointwise body, the kernels, the launcher's Python helpers (real
functions, copied with inspect.getsource, so generator and kernel agree by construction) and the
launcher, `def <operator>(<inputs>, *, config=None)` with the reference's signature.

A reviewer's knobs ('block size 2048', '8 warps') pin config values; a family's kernel says which
config key its block size is (block_key). This module imports neither torch nor triton.
"""
from __future__ import annotations

import inspect
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from bot.codegen import fixed
from bot.codegen.code import doc_text, indented, jit_source
from bot.codegen.names import allocate
from bot.ops.node import Node
from runner import protocol

TRITON_MATH = Path(__file__).with_name("triton_math.py")
NEG_INF, POS_INF = 'float("-inf")', 'float("inf")'     # as Triton literals
WARPS = (1, 2, 4, 8, 16, 32)


@dataclass
class KernelInput:
    name: str           # as in the spec (and the launcher's signature)
    local: str          # variable name in kernel.py
    shapes: list[list[int]]


@dataclass
class Body:
    """A family's pointwise body, written in Triton over the body inputs' local names
    (bot.ops.pointwise.triton_body)."""
    lines: list[str]    # temporaries
    expr: str           # the float32 value
    bare: bool          # the body is one input, loaded as it is
    text: str           # for comments


# ---------------------------------------------------------------- launcher helpers (copied into kernel.py)

def _expanded_strides(shape_in, shape):
    # Element strides of a contiguous tensor of shape_in broadcast to shape (0 where broadcast).
    strides, step = [0] * len(shape), 1
    for i in range(1, len(shape_in) + 1):
        if shape_in[-i] != 1:
            strides[-i] = step
        step *= shape_in[-i]
    return strides


def _as_3d(values, fill):
    # A 1-d or 2-d op's per-dim values (sizes, strides, paddings) as a 3-d one's: unit dims first.
    return (fill,) * (3 - len(values)) + tuple(values)


def _cdiv(a, b):
    # in plain Python: triton.cdiv, a constexpr function, costs microseconds a call
    return -(-a // b)


def _broadcast_shape(*shapes):
    # torch's broadcast rule in plain Python (torch.broadcast_shapes costs tens of us a call)
    if all(s == shapes[0] for s in shapes[1:]):
        return shapes[0]
    out = [1] * max(len(s) for s in shapes)
    for s in shapes:
        for i, d in enumerate(s, len(out) - len(s)):
            if d != 1 and out[i] not in (1, d):
                raise RuntimeError(f"shapes {[list(s) for s in shapes]} do not broadcast")
            out[i] = out[i] if d == 1 else d
    return torch.Size(out)


def _expanded(x, shape):
    # x with every element of the broadcast shape: itself where it has them all, else a copy.
    return x if x.numel() == math.prod(shape) else x.expand(shape).contiguous()


def _require_full(name, shape, full):
    # The kernel reads this input at the output's own offsets: it must hold every output element.
    if math.prod(shape) != math.prod(full):
        raise ValueError(f"input {name} has shape {list(shape)}, but this kernel was generated for the full "
                         f"shape {list(full)}; regenerate it for these shapes")


def shape_lines(inputs: list[str], checks: list[str], always: bool) -> list[str]:
    """Launcher lines setting `shape`, the inputs' broadcast shape, and running `checks` against it.
    Inputs of one shape (the usual call) skip the broadcast rule and the checks, which cost
    microseconds a call; `always` keeps both (some input is broadcast by design)."""
    rule = [f"shape = _broadcast_shape({', '.join(f'{x}.shape' for x in inputs)})", *checks]
    if always:
        return rule
    if len(inputs) == 1:
        return [f"shape = {inputs[0]}.shape"]
    others = " or ".join(f"{x}.shape != shape" for x in inputs[1:])
    return [f"shape = {inputs[0]}.shape", f"if {others}:", *indented(rule)]


def empty_line(like: str, dtype: str, shape: str) -> str:
    """`out = ...`: empty_like where the output has `like`'s shape (half of torch.empty's cost a call)."""
    same = f"torch.empty_like({like})" if dtype == f"{like}.dtype" else f"torch.empty_like({like}, dtype={dtype})"
    return f"out = {same} if {shape} == {like}.shape else torch.empty({shape}, dtype={dtype}, device={like}.device)"


# ---------------------------------------------------------------- review options

def parse_options(feedback: list[str]) -> dict:
    """Knobs a reviewer can ask for in words: 'block size 2048', 'BLOCK=4096', 'num_warps 8',
    '8 warps'. The latest mention wins."""
    options: dict[str, int] = {}
    patterns = {
        "block": r"\bblock(?:[ _-]?size)?\s*(?:=|:|to|of|is)?\s*(\d+)",
        "num_warps": r"\bnum[ _-]?warps\s*(?:=|:|to|of|is)?\s*(\d+)|\b(\d+)\s+warps\b",
    }
    for text in feedback:
        for key, pattern in patterns.items():
            for match in re.finditer(pattern, text, re.IGNORECASE):
                options[key] = int(next(g for g in match.groups() if g))
    return options


def _check_options(options: dict) -> None:
    block, warps = options.get("block"), options.get("num_warps")
    if block is not None and (block < 16 or block > 65536 or block & (block - 1)):
        raise ValueError(f"block size must be a power of two from 16 to 65536 (Triton tiles are), got {block}")
    if warps is not None and warps not in WARPS:
        raise ValueError(f"num_warps must be one of {', '.join(map(str, WARPS))}, got {warps}")


def tuning_source(configs: list[dict]) -> str:
    """The tuning block of kernel.py (docs/CONTRACTS.md): the config space, the winners per case
    (empty until the benchmark's export fills it in) and the key both are looked up by."""
    if not 1 <= len(configs) <= protocol.MAX_CONFIGS:
        raise ValueError(f"a kernel carries 1 to {protocol.MAX_CONFIGS} configs, got {len(configs)}")
    lines = "".join(f"    {json.dumps(config)},\n" for config in configs)
    return ("# The configs the benchmark stage tries on each case (block sizes, warps, stages).\n"
            f"CONFIGS = [\n{lines}]\n"
            "# tuning_key(inputs) -> the config that won on the runner's GPU; the export fills it in.\n"
            "TUNED = {}\n\n\n" + inspect.getsource(protocol.tuning_key))


class KernelFile:
    """What pointwise and row kernels share: the body helper, math helpers, tuning, file layout."""

    description: str
    block_key: str          # the config key a reviewer's 'block size N' sets
    imports = ""            # import lines the file adds to torch's and triton's

    def __init__(self, spec: dict, body: Body, inputs: list[KernelInput], body_inputs: list[KernelInput],
                 options: dict):
        self.spec, self.name, self.inputs, self.options = spec, spec["name"], inputs, options
        self.body_inputs = body_inputs
        self.body_lines, self.body_expr = body.lines, body.expr
        self.is_bare_input = body.bare
        self.body_text = body.text

    @classmethod
    def render(cls, spec: dict, node: Node, options: dict | None, *args) -> str:
        """kernel.py of cls for the spec: rendered once with probe names to learn the names the
        file uses (bot.codegen.names), then with the inputs' names, each renamed where it clashes.
        options: a reviewer's knobs ('block size 2048'), checked here."""
        options = dict(options or {})
        _check_options(options)

        def write(locals_: dict[str, str], operator: str) -> str:
            inputs = [KernelInput(i["name"], locals_[i["name"]], i["shapes"]) for i in spec["inputs"]]
            return cls({**spec, "name": operator}, node, inputs, options, *args).source()

        return write(allocate([i["name"] for i in spec["inputs"]], spec["name"], write), spec["name"])

    def out_dtype(self, like: str) -> str:
        """The output's dtype in the launcher: like's (the first input's), the first float input's
        where like holds none (a bool mask, class indices), float32 for a chain's stage before the
        last (spec "float32_out": stages between kernels keep float32), or bool (spec "bool_out": any
        and all, which the reduce family writes as max and min)."""
        if self.spec.get("float32_out"):
            return "torch.float32"
        if self.spec.get("bool_out"):
            return "torch.bool"
        floats = [i.local for i in self.inputs if i.name in {f["name"] for f in protocol.float_inputs(self.spec)}]
        return f"{like if like in floats or not floats else floats[0]}.dtype"

    def body_call(self) -> str:
        """The float32 body on the loaded inputs: a call of the _body helper, or the input itself."""
        if self.is_bare_input:
            return self.body_expr
        return f"_body({', '.join(i.local for i in self.body_inputs)})"

    def body_values(self, offs: str, fill: str) -> list[str]:
        """Load every body input at offs (lanes where `mask`) and compute val, the body's values,
        fill in masked lanes. A bare input loads its masked lanes as the fill: no select."""
        if self.is_bare_input:
            return [f"val = tl.load({self.body_inputs[0].local}_ptr + {offs}, mask=mask, other={fill}).to(tl.float32)"]
        loads = [f"{i.local} = tl.load({i.local}_ptr + {offs}, mask=mask, other=0.0).to(tl.float32)"
                 for i in self.body_inputs]
        return loads + [f"val = tl.where(mask, {self.body_call()}, {fill})"]

    def _body_helper(self) -> list[str]:
        if self.is_bare_input:
            return []
        return [jit_source("_body", [i.local for i in self.body_inputs], [*self.body_lines, f"return {self.body_expr}"],
                           f"    # {self.body_text} in float32\n")]

    def _math_helpers(self, kernels: list[str]) -> list[str]:
        """The float32 math helpers (bot/codegen/triton_math.py) the body and kernels call."""
        text = " ".join(self.body_lines + [self.body_expr] + kernels)
        return fixed.sources(TRITON_MATH, {h for h in fixed.functions(TRITON_MATH) if re.search(rf"\b{h}\b", text)})

    def pins(self) -> dict[str, int]:
        """Config values a reviewer asked for: the default and every config in CONFIGS keep them."""
        keys = {"block": self.block_key, "num_warps": "num_warps"}
        return {keys[k]: v for k, v in self.options.items() if k in keys}

    def _space(self, candidates: list[dict], fitted=lambda config: config) -> list[dict]:
        """CONFIGS: the candidates with the reviewer's pins, dropping any that fit every case of
        the spec as an earlier one does (`fitted`: what a config becomes on the cases)."""
        seen, space = [], []
        for config in ({**c, **self.pins()} for c in candidates):
            if fitted(config) not in seen:
                seen.append(fitted(config))
                space.append(config)
        return space[:protocol.MAX_CONFIGS]

    def _config_line(self, default: str) -> str:
        """The launcher's choice of config; `default` is the heuristic's call."""
        pins = self.pins()
        lines = "    # The caller's config, else the one tuned for these inputs, else the default.\n"
        if pins:
            asked = ", ".join(f'"{k}": {v}' for k, v in pins.items())
            default = f"{{**{default}, {asked}}}"
            lines += "    # Asked for in review: the default and every config in CONFIGS keep it.\n"
        names = ", ".join(i.local for i in self.inputs) + ("," if len(self.inputs) == 1 else "")
        # TUNED is empty until the export fills it in: no key is built for it per call then.
        return lines + f"    config = config or (TUNED and TUNED.get(tuning_key(({names})))) or {default}\n"

    def _file(self, kernels: list[str], py_helpers: list, launcher: str) -> str:
        head = (f'"""Triton kernel for {self.name}: {doc_text(self.spec.get("description") or self.spec["expression"])}.\n\n'
                f"Generated by kernelbot from `{doc_text(self.spec['expression'])}`.\n{self.description}\n"
                'Math in float32; the output has the first input\'s dtype."""\n'
                "import math\n\nimport torch\nimport triton\nimport triton.language as tl\n" + self.imports)
        for helper in (_broadcast_shape, _cdiv):        # the launchers' per-call helpers, where used
            if f"{helper.__name__}(" in launcher and helper not in py_helpers:
                py_helpers = [*py_helpers, helper]
        blocks = [head, protocol.lean_launch_source(), tuning_source(self.configs()), *self._math_helpers(kernels),
                  *self._body_helper(), *kernels,
                  *(inspect.getsource(f) for f in py_helpers), launcher]
        return "\n\n".join(block.strip("\n") + "\n" for block in blocks if block)

    def _signature_and_prologue(self) -> str:
        # config is keyword-only: the positional parameters are the reference's, all tensors.
        head = (f"def {self.name}({', '.join(i.local for i in self.inputs)}, *, config=None):\n"
                "    # The kernels index contiguous memory; inputs may arrive as views.\n")
        return head + "".join(f"    {i.local} = {i.local}.contiguous()\n" for i in self.inputs)
