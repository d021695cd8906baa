"""Several pointwise expressions of the same inputs as one kernel with one output each: what a
training kernel's backward takes for the gradients of a pointwise operator (silu(a) * b gives da and
db from a, b and the upstream), so each input is read once for all of them instead of once per
gradient. Only expressions over inputs that all have the output's full shape qualify (a broadcast
input's gradient is summed down, which is no pointwise work); bot.training picks them.
"""
from __future__ import annotations

import inspect

from bot.codegen import fixed
from bot.codegen.code import Code, jit_source, launch
from bot.codegen.kernel_file import TRITON_MATH, KernelInput, _cdiv, _require_full
from bot.ops import pointwise
from bot.ops.node import Node


def qualifies(node: Node, cases: list[dict[str, list[int]]]) -> bool:
    """Whether node is pointwise ops of inputs that each have the expression's (full) shape in every case."""
    if not _pointwise(node):
        return False
    names = set(_names(node))
    return all(len({tuple(c[n]) for n in names}) == 1 for c in cases)


def _pointwise(node: Node) -> bool:
    return node.op in ("input", "const") or (node.op in pointwise.OPS and all(_pointwise(a) for a in node.args))


def _names(node: Node) -> list[str]:
    return [node.name] if node.op == "input" else [n for a in node.args for n in _names(a)]


def kernel_source(nodes: list[Node], name: str, params: list[str], likes: list[str]) -> str:
    """A kernel.py part defining name(*params) -> the tuple of nodes' values; params: the launcher's
    tensors in order, those the expressions read and those in likes; likes: for each node, the
    parameter whose dtype and shape its value takes (the input it is the gradient of, read or not)."""
    read = {n for node in nodes for n in _names(node)}
    tensors = [KernelInput(p, f"in{k}", []) for k, p in enumerate(params)]
    inputs = [t for t in tensors if t.name in read]
    bodies = [pointwise.triton_body(n, inputs) for n in nodes]
    helpers = [jit_source(f"_grad{k}", [i.local for i in inputs], [*b.lines, f"return {b.expr}"],
                          f"    # {b.text} in float32\n") for k, b in enumerate(bodies)]
    code = Code()("block_start = tl.program_id(0).to(tl.int64) * BLOCK",
                  "offs = block_start + tl.arange(0, BLOCK)")
    for masked, head in ((False, "if block_start + BLOCK <= n_elements:"), (True, "else:")):
        with code.block(head):
            mask = ", mask=mask" if masked else ""
            if masked:
                code("mask = offs < n_elements")
            code(*[f"{i.local} = tl.load({i.local}_ptr + offs{mask}).to(tl.float32)" for i in inputs])
            args = ", ".join(i.local for i in inputs)
            code(*[f"tl.store(out{k}_ptr + offs, _grad{k}({args}).to(out{k}_ptr.dtype.element_ty){mask})"
                   for k in range(len(nodes))])
    ptrs = [f"{i.local}_ptr" for i in inputs] + [f"out{k}_ptr" for k in range(len(nodes))]
    kernel = jit_source(f"{name}_kernel", [*ptrs, "n_elements", "BLOCK: tl.constexpr"], code.lines,
                        "    # Each BLOCK of the flattened inputs is read once for every output.\n")
    first, outs = inputs[0].local, [f"out{k}" for k in range(len(nodes))]
    returned = f"{', '.join(outs)}{',' * (len(outs) == 1)}"
    launcher = Code(1)(*[f"{i.local} = {i.local}.contiguous()" for i in tensors],
                       f"shape = {first}.shape",
                       *[f'_require_full("{i.name}", {i.local}.shape, shape)' for i in tensors if i is not inputs[0]],
                       *[f"{o} = torch.empty_like({tensors[params.index(like)].local})" for o, like in zip(outs, likes)],
                       f"n_elements = {first}.numel()",
                       "if n_elements == 0:", f"    return {returned}",
                       "config = _pointwise_config(n_elements)")
    launcher.lines.append(launch(f"{name}_kernel", '(_cdiv(n_elements, config["BLOCK"]),)',
                                 [i.local for i in inputs] + outs + ["n_elements", 'BLOCK=config["BLOCK"]',
                                                                     'num_warps=config["num_warps"]'], "    "))
    launcher(f"return {returned}")
    text = " ".join(helpers)
    math_helpers = fixed.sources(TRITON_MATH, {h for h in fixed.functions(TRITON_MATH) if f"{h}(" in text})
    py = [inspect.getsource(f) for f in (pointwise._pointwise_config, _require_full, _cdiv)]
    blocks = ["import math\nimport torch\nimport triton\nimport triton.language as tl", *math_helpers, *helpers,
              kernel, *py,
              f"def {name}({', '.join(i.local for i in tensors)}):\n" + launcher.text()]
    return "\n\n\n".join(b.strip("\n") for b in blocks) + "\n"
