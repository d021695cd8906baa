"""kernel.py of an operator for training (issue 26): a torch.autograd.Function whose forward runs the
operator's kernels and whose backward runs each float input's gradient (bot.autodiff) as kernels of
their own, each lowered by the families like any expression, then summed down to its input's shape
where the input was broadcast (a bias over rows: its gradient summed over them).

The parts are whole kernel.py files of their own (the forward, then one per gradient), joined the
way a chain joins its stages (bot.ops.chain): each part's module-level names suffixed _p<k>. The
forward saves its inputs; the backward recomputes what it reads from them.
"""
from __future__ import annotations

from typing import NamedTuple

from bot import autodiff, ir
from bot.ops import attention, chain, multi_pointwise, norm_grad
from runner import protocol


def upstream_name(spec: dict) -> str:
    """The upstream gradient's name in the backward's expressions: one no input has."""
    taken = {i["name"] for i in spec["inputs"]}
    name = "grad_out"
    while name in taken:
        name += "_"
    return name


def differentiable(spec: dict) -> list[str]:
    """The inputs that get gradients: the float ones (not masks, not indices), but class weights."""
    return [spec["inputs"][k]["name"] for k in protocol.grad_indices(spec)]


def gradient_expressions(spec: dict, node: ir.Node) -> dict[str, str]:
    """Each differentiable input's gradient, at its own shape in every case; an input the output
    does not depend on gets none (its gradient is None, as torch gives)."""
    upstream = upstream_name(spec)
    cases = _cases(spec, node, upstream)
    raw = autodiff.gradients(node, upstream, cases)
    return {name: autodiff.summed_to(_materialized(raw[name]), [c[name] for c in cases], cases, name)
            for name in differentiable(spec) if name in raw}


def _materialized(text: str) -> str:
    """A gradient that only views the upstream (a cat piece's slice of it) is copied by a kernel: the
    backward returns a tensor of its own, as torch's does."""
    return f"({text}) * 1.0" if ir.only_views(text) else text


def _cases(spec: dict, node: ir.Node, upstream: str) -> list[dict[str, list[int]]]:
    """Each case's input shapes, with the upstream gradient's (the output's)."""
    out = []
    for c in range(len(spec["inputs"][0]["shapes"])):
        shapes = {i["name"]: i["shapes"][c] for i in spec["inputs"]}
        out.append({**shapes, upstream: ir.output_shape(node, shapes)})
    return out


# Operators whose whole backward is one part, each: (spec, node, cases, name, upstream) -> (its
# kernel.py part, the tensors it takes: the inputs, then the upstream gradient) or None.
FUSED_BACKWARDS = (norm_grad.fused_backward, attention.fused_backward)


class _Part(NamedTuple):
    name: str                   # the function it defines
    source: str                 # its kernel.py text (chain.part suffixes its other names)
    args: list[str]             # the tensors it is called with
    wrt: tuple[str, ...]        # the inputs whose gradients it returns
    joint: bool = False         # returns a tuple of them (else the one gradient)


def kernel_source(spec: dict, node: ir.Node) -> str:
    """kernel.py: the forward's kernels, then the gradients' (one fused backward for a norm or an
    attention of inputs, FUSED_BACKWARDS; one kernel for the pointwise gradients of full-shape inputs,
    bot.ops.multi_pointwise; a kernel.py of its own for each other), and the autograd.Function."""
    upstream = upstream_name(spec)
    cases = _cases(spec, node, upstream)
    with_upstream = spec["inputs"] + [{"name": upstream, "dtypes": spec["outputs"][0]["dtypes"],
                                       "shapes": spec["outputs"][0]["shapes"]}]
    parts = [_expression_part(spec, f"{spec['name']}_forward", spec["inputs"], spec["expression"], ())]
    name = f"{spec['name']}_backward"
    fused = next(filter(None, (f(spec, node, cases, name, upstream) for f in FUSED_BACKWARDS)), None)
    if fused:
        source, args = fused
        parts.append(_Part(name, source, args, tuple(args[:-1]), True))
    else:
        grads = gradient_expressions(spec, node)
        nodes = {x: ir.parse(text, as_written=True) for x, text in grads.items()}
        joint = [x for x in grads if multi_pointwise.qualifies(nodes[x], cases)]
        if len(joint) > 1:
            name = f"{spec['name']}_grads"
            args = [i["name"] for i in with_upstream
                    if i["name"] in joint or any(i["name"] in ir.input_names(nodes[x]) for x in joint)]
            parts.append(_Part(name, multi_pointwise.kernel_source([nodes[x] for x in joint], name, args, joint), args,
                               tuple(joint), True))
        parts += [_expression_part(spec, f"{spec['name']}_grad_{x}", with_upstream, text, (x,))
                  for x, text in grads.items() if len(joint) < 2 or x not in joint]
    imports, bodies = [], []
    for k, part in enumerate(parts):
        head, body = chain.part(part.source, f"_p{k}", keep=part.name)
        imports += [line for line in head if line not in imports]
        bodies.append(body)
    return (f'"""Triton kernels for {spec["name"]} with its backward, for training.\n\nGenerated by kernelbot from '
            f"`{spec['expression']}`: the forward's kernels, then the gradients', each part's names\n"
            'suffixed _p<k>, and a torch.autograd.Function calling them."""\n' + "\n".join(imports) + "\n\n"
            + protocol.lean_launch_source() + "\n\n" + "\n\n".join(b.strip("\n") + "\n" for b in bodies) + "\n\n"
            + _function(spec, parts, upstream))


def _expression_part(spec: dict, name: str, inputs: list[dict], text: str, wrt: tuple[str, ...]) -> _Part:
    """A part computing one expression of the inputs, lowered by the families like any spec's."""
    node = ir.parse(text, as_written=True)
    used = set(ir.input_names(node))
    part = {"name": name, "expression": ir.to_text(node), "inputs": [i for i in inputs if i["name"] in used]}
    part["outputs"] = [{"name": "out", "dtypes": spec["outputs"][0]["dtypes"],
                        "shapes": [ir.output_shape(node, {i["name"]: i["shapes"][c] for i in inputs})
                                   for c in range(len(inputs[0]["shapes"]))]}]
    return _Part(name, ir.kernel_source(part, node, {}), [i["name"] for i in part["inputs"]], wrt)


def _function(spec: dict, parts: list[_Part], upstream: str) -> str:
    """The autograd.Function: the forward saves the inputs and runs parts[0]; the backward calls the
    other parts (a single gradient's only where it is needed) and returns each input's gradient. Its
    own names (the context, the gradients) are chosen apart from the inputs' ("ctx", "d_x": inputs)."""
    inputs = [i["name"] for i in spec["inputs"]]
    taken = {*inputs, upstream}
    ctx = _fresh("ctx", taken)
    grad = {x: _fresh(f"d_{x}", taken) for x in inputs}
    cls = f"{spec['name']}_function"
    lines = [f"class {cls}(torch.autograd.Function):",
             "    @staticmethod",
             f"    def forward({ctx}, {', '.join(inputs)}):",
             f"        {ctx}.save_for_backward({', '.join(inputs)})",
             f"        return {parts[0].name}({', '.join(parts[0].args)})",
             "",
             "    @staticmethod",
             f"    def backward({ctx}, {upstream}):",
             f"        {', '.join(inputs)}{',' if len(inputs) == 1 else ''} = {ctx}.saved_tensors",
             f"        {upstream} = {upstream}.contiguous()"]
    for part in parts[1:]:
        call = f"{part.name}({', '.join(part.args)})"
        if part.joint:
            lines.append(f"        {', '.join(grad[x] for x in part.wrt)}{',' * (len(part.wrt) == 1)} = {call}")
        else:
            k = inputs.index(part.wrt[0])
            lines.append(f"        {grad[part.wrt[0]]} = {call} if {ctx}.needs_input_grad[{k}] else None")
    given = {x for part in parts[1:] for x in part.wrt}
    returned = [(f"{grad[x]} if {ctx}.needs_input_grad[{k}] else None" if x in given else "None")
                for k, x in enumerate(inputs)]
    lines.append(f"        return {', '.join(returned)}{',' if len(returned) == 1 else ''}")
    return "\n".join(lines) + f"\n\n\n{spec['name']} = {cls}.apply\n"


def _fresh(base: str, taken: set[str]) -> str:
    """base, or base with underscores added until no name in taken has it; then taken."""
    while base in taken:
        base += "_"
    taken.add(base)
    return base
