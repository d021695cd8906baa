"""kernel.py of an operator for training (issue 26): a torch.autograd.Function whose forward runs the
operator's kernels and whose backward runs each float input's gradient (bot.autodiff) as kernels of
their own, each lowered by the families like any expression, then summed down to its input's shape
where the input was broadcast (a bias over rows: its gradient summed over them).

The parts are whole kernel.py files of their own (the forward, then one per gradient), joined the
way a chain joins its stages (bot.ops.chain): each part's module-level names suffixed _p<k>. The
forward saves its inputs; the backward recomputes what it reads from them.
"""
from __future__ import annotations

from bot import autodiff, ir
from bot.ops import chain, norm_grad
from runner import protocol


def upstream_name(spec: dict) -> str:
    """The upstream gradient's name in the backward's expressions: one no input has."""
    taken = {i["name"] for i in spec["inputs"]}
    name = "grad_out"
    while name in taken:
        name += "_"
    return name


def differentiable(spec: dict) -> list[str]:
    """The inputs that get gradients: the float ones (not masks, not indices)."""
    return [i["name"] for i in protocol.float_inputs(spec)]


def gradient_expressions(spec: dict, node: ir.Node) -> dict[str, str]:
    """Each differentiable input's gradient, at its own shape in every case; an input the output
    does not depend on gets none (its gradient is None, as torch gives)."""
    upstream = upstream_name(spec)
    cases = _cases(spec, node, upstream)
    raw = autodiff.gradients(node, upstream, cases)
    return {name: _summed_down(_materialized(raw[name]), name, cases) for name in differentiable(spec) if name in raw}


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


def _summed_down(text: str, name: str, cases: list[dict[str, list[int]]]) -> str:
    """text summed over the dims its input was broadcast along: leading dims it lacks (dropped) and
    dims where it has 1 (kept), the same in every case."""
    node = ir.parse(text, as_written=True)
    plans = set()
    for shapes in cases:
        full, own = ir.output_shape(node, shapes), shapes[name]
        lead = len(full) - len(own)
        kept = tuple(lead + d for d, s in enumerate(own) if s == 1 and full[lead + d] != 1)
        plans.add((lead, kept))
    if len(plans) > 1:
        raise autodiff.NoGradient(f"{name} is broadcast along different dims in different cases; give every case "
                                  "the same layout of broadcast dims")
    lead, kept = plans.pop()
    if kept:
        text = f"sum({text}, dim={list(kept) if len(kept) > 1 else kept[0]}, keepdim=True)"
    if lead:
        text = f"sum({text}, dim={list(range(lead)) if lead > 1 else 0})"
    return text


def kernel_source(spec: dict, node: ir.Node) -> str:
    """kernel.py: the forward's kernels, then each gradient's (or one fused backward: a norm of inputs,
    bot.ops.norm_grad), and the autograd.Function calling them."""
    upstream = upstream_name(spec)
    fused = norm_grad.applies(node, _cases(spec, node, upstream))
    grads = {} if fused else gradient_expressions(spec, node)
    # (function name, the inputs it may read, its expression, the input it is the gradient of)
    parts = [(f"{spec['name']}_forward", spec["inputs"], spec["expression"], None)]
    with_upstream = spec["inputs"] + [{"name": upstream, "dtypes": spec["outputs"][0]["dtypes"],
                                       "shapes": spec["outputs"][0]["shapes"]}]
    parts += [(f"{spec['name']}_grad_{name}", with_upstream, text, name) for name, text in grads.items()]
    imports, bodies = [], []
    for k, (name, inputs, text, wrt) in enumerate(parts):
        part_node = ir.parse(text, as_written=True)
        used = set(ir.input_names(part_node))
        part = {"name": name, "expression": ir.to_text(part_node), "description": f"part {k + 1} of {len(parts)}",
                "inputs": [i for i in inputs if i["name"] in used]}
        part["outputs"] = [{"name": "out", "dtypes": spec["outputs"][0]["dtypes"],
                            "shapes": [ir.output_shape(part_node, {i["name"]: i["shapes"][c] for i in inputs})
                                       for c in range(len(inputs[0]["shapes"]))]}]
        head, body = chain.part(ir.kernel_source(part, part_node, {}), f"_p{k}", keep=name)
        imports += [line for line in head if line not in imports]
        bodies.append(body)
        parts[k] = (name, part["inputs"], text, wrt)
    if fused:
        name = f"{spec['name']}_backward"
        head, body = chain.part(norm_grad.kernel_source(node, name, upstream), f"_p{len(parts)}", keep=name)
        imports += [line for line in head if line not in imports]
        bodies.append(body)
    backward = (f"{spec['name']}_backward", norm_grad.inputs_of(node)) if fused else None
    return (f'"""Triton kernels for {spec["name"]} with its backward, for training.\n\nGenerated by kernelbot from '
            f"`{spec['expression']}`: the forward's kernels, then each input's gradient's, each part's names\n"
            'suffixed _p<k>, and a torch.autograd.Function calling them."""\n' + "\n".join(imports) + "\n\n"
            + protocol.lean_launch_source() + "\n\n" + "\n\n".join(b.strip("\n") + "\n" for b in bodies) + "\n\n" + _function(spec, parts, upstream, backward))


def _function(spec: dict, parts: list[tuple[str, list[dict], str, str | None]], upstream: str,
              backward: tuple[str, list[str]] | None) -> str:
    """The autograd.Function: its backward calls each gradient's function, or the fused backward
    (its name and tensor parameters) once for all of them."""
    inputs = [i["name"] for i in spec["inputs"]]
    cls = f"{spec['name']}_function"
    lines = [f"class {cls}(torch.autograd.Function):",
             "    @staticmethod",
             f"    def forward(ctx, {', '.join(inputs)}):",
             f"        ctx.save_for_backward({', '.join(inputs)})",
             f"        return {parts[0][0]}({', '.join(i['name'] for i in parts[0][1])})",
             "",
             "    @staticmethod",
             f"    def backward(ctx, {upstream}):",
             f"        {', '.join(inputs)}{',' if len(inputs) == 1 else ''} = ctx.saved_tensors",
             f"        {upstream} = {upstream}.contiguous()"]
    grads = {wrt: (name, used) for name, used, _, wrt in parts[1:]}
    if backward:
        name, used = backward
        lines.append(f"        {', '.join(f'd_{x}' for x in used)}{',' if len(used) == 1 else ''} = "
                     f"{name}({', '.join([*used, upstream])})")
        grads = {x: None for x in used}
    returned = []
    for k, x in enumerate(inputs):
        if x in grads and backward:
            returned.append(f"d_{x} if ctx.needs_input_grad[{k}] else None")
        elif x in grads:
            name, used = grads[x]
            lines.append(f"        d_{x} = {name}({', '.join(i['name'] for i in used)}) "
                         f"if ctx.needs_input_grad[{k}] else None")
            returned.append(f"d_{x}")
        else:
            returned.append("None")
    lines.append(f"        return {', '.join(returned)}{',' if len(returned) == 1 else ''}")
    return "\n".join(lines) + f"\n\n\n{spec['name']} = {cls}.apply\n"
