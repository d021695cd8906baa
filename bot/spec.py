"""Stage-1 artifact: the operator spec, its validation and its card summary.

Spec JSON::

    {"name": "add", "expression": "x + y", "description": "...",
     "inputs": [{"name": "x", "dtypes": ["float16", ...], "shapes": [[1, 32], ...], "domain": "normal"}, ...],
     "outputs": [{"name": "out", "dtypes": [...], "shapes": [...]}],
     "params": {"eps": 1e-06}, "backend": "cuda", "defaults_used": ["..."]}

Every input has one dtype per dtype variant and one shape per case; the test
matrix is cases x dtype variants. ``expression`` is in bot.ir's language; the
offline generator needs it, an LLM-written spec may leave it out.
"""
from __future__ import annotations

import builtins
import json
import keyword
import math
import re

from bot import autodiff, ir, training
from bot.ops import argreduce, attention, chain, conv, pointwise, sort, view
from runner import protocol

MAX_RANK = 5                     # a 3-d convolution's or pooling's [N, C, D, H, W]
MAX_NUMEL = 2**31 - 1            # per tensor, where the family's kernels index with int32 (most do)
MAX_CASE_BYTES = 32 * 2**30      # inputs plus output of one case
MAX_TENSORS = 100               # inputs plus outputs: one call's tensors cross the judge's channel at once


class SpecError(ValueError):
    """The spec is not usable; the message names the field and what would work."""


def loads(text: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError(f"spec is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    return validate(data)


def dumps(spec: dict) -> str:
    """Indented JSON with short lists (shapes, dtypes) kept on one line, so a person reads and
    edits a spec card at a glance."""
    return _format(spec, 0) + "\n"


def _format(value, depth: int) -> str:
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {_format(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and value:
        flat = json.dumps(value, ensure_ascii=False)
        if len(flat) <= 100 and not any(isinstance(v, dict) for v in value):
            return flat
        return "[\n" + ",\n".join(inner + _format(v, depth + 1) for v in value) + f"\n{pad}]"
    return json.dumps(value, ensure_ascii=False)


# Names a generated kernel.py calls or imports (builtins such as max and sum, the modules): a kernel
# function of one of these names would shadow it.
RESERVED_NAMES = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | {"torch", "triton", "tl", "math"}


def validate(spec: dict) -> dict:
    """Check a spec (possibly edited by a person) and return it normalised:
    canonical dtype names, integer shapes, outputs recomputed from the expression."""
    if not isinstance(spec, dict):
        raise SpecError("spec must be a JSON object with name, inputs and expression")
    name = spec.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise SpecError(f"spec name must be a Python identifier like 'add_relu', got {name!r}")
    if name in RESERVED_NAMES:
        raise SpecError(f"spec name {name!r} is Python's {name} or a module kernel.py imports, which the generated "
                        f"code calls: the kernel's function would shadow it. Name it e.g. '{name}_op'")
    inputs = spec.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise SpecError("spec needs 'inputs': a list of {name, dtypes, shapes}")
    out = dict(spec)
    out["inputs"] = [_validate_input(i, inp) for i, inp in enumerate(inputs)]
    _check_counts(out["inputs"])
    _check_mask_dtypes(out["inputs"])
    _check_parameters(out["inputs"])
    if out.get("backend") is not None:
        try:
            protocol.check_backend(out["backend"])
        except ValueError as e:
            raise SpecError(str(e)) from None
    ref = out.get("reference_class")
    if ref is not None and not (isinstance(ref, str) and ref.isidentifier()):
        raise SpecError(f"reference_class names the pasted nn.Module class reference.py defines, e.g. 'Model'; "
                        f"got {ref!r}")
    node = parse_expression(out) if out.get("expression") else None
    _check_numel(out["inputs"], node)
    if node:
        _check_rank(out["inputs"], node)
        _check_dtypes(out["inputs"], node)
        _check_compared(out["inputs"], node)
        _mark_constants(out["inputs"], node)
        _check_mask_uses(out["inputs"], node)
    _check_index_of(out["inputs"])
    if node:
        out["outputs"] = _outputs(out, node)
        out = _with_derived(out, node)
        _check_training(out, node)
    _check_sizes(out)
    return out


def _check_training(spec: dict, node: ir.Node) -> None:
    """"training": true asks for the forward and its backward (bot.training): every float input's
    gradient must have a rule and a kernel, else the spec is refused naming why."""
    flag = spec.get("training", False)
    if not isinstance(flag, bool):
        raise SpecError(f"'training' is true (forward and backward, for training) or false, got {flag!r}")
    if not flag:
        spec.pop("training", None)
        return
    if spec.get("reference_class"):
        raise SpecError("training kernels are generated from an expression; a pasted module's backward is not read yet: "
                        "write its forward as an expression, e.g. 'rmsnorm(x, w, eps=1e-6) for training'")
    if node.op == chain.OUTPUTS:
        raise SpecError(f"a training kernel has one output; {spec['expression']} returns {len(node.args)}: ask for each "
                        "result's training kernel on its own, or for the forward alone (without training)")
    try:
        training.gradient_expressions(spec, node)
    except (autodiff.NoGradient, ir.IRError) as e:
        raise SpecError(f"no backward for {spec['expression']}: {e}") from None


DERIVED = ("reduce", "matmul", "tf32", "scan", "fixed_sizes", "least_size", "chain")


def _with_derived(spec: dict, node: ir.Node) -> dict:
    """The fields the runner reads off the expression (docs/CONTRACTS.md): what the output
    accumulates over, and whether it is a matmul (and may use TF32). Recomputed on every
    validation, so an edit cannot loosen a tolerance."""
    out = {k: v for k, v in spec.items() if k not in DERIVED}
    if ir.is_chain(node):
        out.update(_chain_derived(spec, node))
    else:
        rank = max(len(s) for i in spec["inputs"] for s in i["shapes"][:1])
        reduced, mm = ir.reduced(node, rank), ir.matmul_node(node) or conv.conv_node(node)
        if reduced and reduced[1] != []:
            out["reduce"] = {"inputs": reduced[0], "dim": reduced[1]}
        if mm:               # a matmul or a convolution: float32 sums of K products
            out["matmul"] = True
            out["tf32"] = bool(mm.attr("tf32"))
        if node.op in ir.SCANS:
            out["scan"] = True
    cases = protocol.cases(spec)
    fixed, least = ir.size_rules(node, [c.shapes for c in cases])
    fixed |= {d for i in spec["inputs"] if i.get("parameter") for s in i["shapes"] for d in s}
    fixed |= {s[d] for i in spec["inputs"] for d in i.get("fixed_dims", ()) for s in i["shapes"]}
    fixed |= _sizes_no_other_case_fits(node, cases, fixed, least)
    if fixed:
        out["fixed_sizes"] = sorted(fixed)
    if least > 1:
        out["least_size"] = least
    return out


def _sizes_no_other_case_fits(node: ir.Node, cases: list[protocol.Case], fixed: set[int], least: int) -> set[int]:
    """Every size of the cases where the runner's other cases (the odd-sized one, the cpu backend's
    shrunk ones: each a map of sizes) would not fit the expression (a constant of 20 beside x.flatten(1) of
    x [3, 4, 5]: 4 and 5 change, 20 stays), so the runner keeps the sizes given; else none."""
    maps = [protocol.odd_sizes(list(cases[0].shapes.values()), fixed, least)]
    maps += [protocol.shrunk_sizes(list(c.shapes.values()), protocol.CPU_MAX_ELEMENTS, fixed, least) for c in cases]
    for case, sizes in zip([cases[0], *cases], maps):
        try:
            ir.output_shapes(node, {n: [sizes.get(d, d) for d in s] for n, s in case.shapes.items()})
        except ValueError:              # IRError: the shapes no longer fit together
            return {d for c in cases for s in c.shapes.values() for d in s}
    return set()


def _chain_derived(spec: dict, node: ir.Node) -> dict:
    """A chain's fields: its stage count; the longest sum any stage accumulates, per case (its error
    reaches the output: the tolerance grows with it); matmul, tf32 and scan where any stage is one."""
    cases = ir.stage_cases(node, [c.shapes for c in protocol.cases(spec)])
    lengths, out = [1] * len(cases), {"chain": len(ir.stages(node))}
    for stage in ir.stages(node):
        mm = ir.matmul_node(stage.node) or conv.conv_node(stage.node)
        if mm:
            out["matmul"] = True
            out["tf32"] = out.get("tf32", False) or bool(mm.attr("tf32"))
        if stage.node.op in ir.SCANS:
            out["scan"] = True
        for k, shapes in enumerate(cases):
            rank = max((len(shapes[n]) for n in ir.input_names(stage.node)), default=0)     # a constant: none
            reduced = ir.reduced(stage.node, rank)
            dims = reduced[1] if reduced and isinstance(reduced[1], list) else [reduced[1]] if reduced else []
            if any(d is not None and not -rank <= d < rank for d in dims):         # a 0-D value has none
                raise SpecError(f"{stage.node.op} over dim {reduced[1]} of a {rank}-D value: it has no such dim "
                                f"(in {ir.to_text(stage.node)!r})")
            if reduced:
                reduce = {"inputs": reduced[0], "dim": reduced[1]}
                lengths[k] = max(lengths[k], protocol.accumulated_length(reduce, shapes))
    if max(lengths) > 1:
        out["reduce"] = {"lengths": lengths}
    return out


def _check_parameters(inputs: list[dict]) -> None:
    """A pasted module's learned tensors ("parameter": "conv.weight") are its last inputs, one shape
    for every case (a module has one weight), so the judge binds them after forward's tensors."""
    seen = False
    for inp in inputs:
        path = inp.get("parameter")
        if path is None:
            if seen:
                raise SpecError(f"input {inp['name']} comes after a module parameter; forward's tensors come first, "
                                "then the parameters")
            continue
        seen = True
        if not isinstance(path, str) or not all(p.isidentifier() or p.isdigit() for p in path.split(".")):
            raise SpecError(f"input {inp['name']}: 'parameter' names a tensor of the pasted module as a dotted path, "
                            f"e.g. 'conv.weight'; got {path!r}")
        if any(s != inp["shapes"][0] for s in inp["shapes"]):
            raise SpecError(f"input {inp['name']} is the module's {path}: one shape in every case, got {inp['shapes']}")


def _check_numel(inputs: list[dict], node: ir.Node | None) -> None:
    """Elements a tensor: MAX_NUMEL, or more where the family's kernel indexes with int64."""
    most = ir.max_numel(node) if node else MAX_NUMEL
    for inp in inputs:
        for shape in inp["shapes"]:
            if math.prod(shape) > most:
                raise SpecError(f"input {inp['name']}: shape {shape} has {math.prod(shape):,} elements; the limit is "
                                f"{most:,}")


def _check_rank(inputs: list[dict], node: ir.Node) -> None:
    """Ranks up to 4, or up to 5 where the family takes [N, C, D, H, W] (a 3-d convolution)."""
    most = ir.max_rank(node)
    for inp in inputs:
        for shape in inp["shapes"]:
            if len(shape) > most:
                raise SpecError(f"input {inp['name']}: shape {shape} has rank {len(shape)}; supported ranks are 1 to "
                                f"{most} ({MAX_RANK} for convolutions)")


def _check_index_of(inputs: list[dict]) -> None:
    names = [i["name"] for i in inputs]
    for inp in inputs:
        if inp["domain"] == "index" and inp.get("index_of") not in set(names) - {inp["name"]}:
            raise SpecError(f"input {inp['name']}: an index input needs 'index_of', the input whose dim its "
                            f"values index (one of {[n for n in names if n != inp['name']]})")


def _check_mask_dtypes(inputs: list[dict]) -> None:
    """A bool mask is bool in every dtype variant, and its domain is "mask" (either one says so);
    the output takes a float input's dtype, so some input holds floats."""
    for inp in inputs:
        bools = [d == protocol.MASK_DTYPE for d in inp["dtypes"]]
        if not any(bools) and inp["domain"] != "mask":
            continue
        if not all(bools):
            raise SpecError(f"input {inp['name']} is a boolean mask: its dtypes must all be bool (one per variant), "
                            f"got {inp['dtypes']}")
        if inp.get("parameter"):
            raise SpecError(f"input {inp['name']} is the module's {inp['parameter']}, a learned float tensor; it "
                            "cannot be a bool mask")
        inp["domain"] = "mask"
    if not protocol.float_inputs({"inputs": inputs}):
        raise SpecError("every input is a bool mask or class indices; the kernels take their dtype from a float "
                        "input, so at least one input must be float16, bfloat16 or float32 (any and all of a mask "
                        "alone are not supported: compare a float tensor instead, e.g. any(x > 0, dim=-1))")


def _check_mask_uses(inputs: list[dict], node: ir.Node) -> None:
    """An input standing as where's condition is a mask, and a mask is read as PyTorch reads a bool
    tensor in float math (bot.ops.pointwise.reads_mask)."""
    masks = {i["name"] for i in inputs if i["domain"] == "mask"}
    floats = {i["name"] for i in protocol.float_inputs({"inputs": inputs})}
    if floating := sorted(pointwise.where_conditions(node) - masks):
        raise SpecError(f"input {floating[0]} stands as where's condition, so it is a boolean mask: give it dtype "
                        "bool in every variant (or write the condition as a comparison, e.g. where(x > 0, ...))")
    for sub in node.walk():
        for k, arg in enumerate(sub.args):
            if arg.op == "input" and arg.name in masks and not (pointwise.reads_mask(sub, k, floats)
                                                                 or attention.reads_mask(sub, k)):
                raise SpecError(f"{ir.to_text(sub)}: PyTorch refuses the bool mask {arg.name} there, or gives a bool "
                                "or int64 result, not the float inputs' dtype. A mask stands as where's condition "
                                f"(where({arg.name}, x, 0.0)), in a comparison, or beside a float tensor in +, *, "
                                f"maximum, minimum or a division's numerator (x * {arg.name})")


def _check_dtypes(inputs: list[dict], node: ir.Node) -> None:
    """Indices (class indices, gather's index, embedding's ids) are int64 and nothing else is: kernels
    compute in float."""
    index = ir.index_inputs(node)
    for inp in inputs:
        name = inp["name"]
        if name in index:
            if set(inp["dtypes"]) != {protocol.INDEX_DTYPE}:
                raise SpecError(f"input {name} holds indices: its dtypes must all be int64, got {inp['dtypes']}")
            for key in ("index_dim", "padding"):        # computed from the expression, never kept from an edit
                inp.pop(key, None)
            inp.update(domain="index", **index[name])
        elif inp["domain"] == "whole":
            _check_whole(inp, protocol.float_inputs({"inputs": inputs}))
        elif protocol.INDEX_DTYPE in inp["dtypes"] or inp["domain"] == "index":
            raise SpecError(f"input {name}: int64 and the index domain are only for indices (cross_entropy's target, "
                            "gather's index, embedding's ids) and whole numbers (domain whole, with a range); use "
                            "float16, bfloat16 or float32 and domain normal")


# The largest whole number each float dtype holds exactly, and every one below it.
_EXACT_WHOLE = {"float32": 2**24, "float16": 2**11, "bfloat16": 2**8}


def _check_whole(inp: dict, floats: list[dict]) -> None:
    """Whole numbers a module reads as numbers (domain whole): int64 in every variant, drawn from
    "range": [low, high), as get_inputs' torch.randint(low, high, size) makes them; the kernel reads
    them in the float inputs' dtype, which must hold each exactly."""
    bounds = inp.get("range")
    if set(inp["dtypes"]) != {protocol.INDEX_DTYPE} or not (
            isinstance(bounds, list) and len(bounds) == 2 and all(type(b) is int for b in bounds)
            and bounds[0] < bounds[1] and all(abs(b) <= 2**24 for b in bounds)):
        raise SpecError(f"input {inp['name']}: domain whole is int64 in every variant with \"range\": [low, high], "
                        f"whole numbers low < high within 2**24 (float32 holds them exactly); got dtypes "
                        f"{inp['dtypes']} and range {bounds!r}")
    for dtype in {d for f in floats[:1] for d in f["dtypes"]}:
        if max(abs(bounds[0]), abs(bounds[1] - 1)) > _EXACT_WHOLE[dtype]:
            raise SpecError(f"input {inp['name']}: its whole numbers in [{bounds[0]}, {bounds[1]}) reach past "
                            f"{_EXACT_WHOLE[dtype]}, which {dtype} (the kernel's arithmetic beside them) no longer "
                            "holds exactly; test it in float32, or draw smaller numbers")


_COMPARED = {"sign": "sign (-1 or 1) is for a target the expression compares with 1 or -1 (hinge_embedding_loss's, "
                     "cosine_embedding_loss's)",
             "zeros": "zeros (half of the values 0) is for a tensor the expression compares with 0 (a mask of ones)"}


def _check_compared(inputs: list[dict], node: ir.Node) -> None:
    """A float input the expression compares for equality with 1 or -1 (hinge_embedding_loss's target)
    is drawn as -1 and 1, domain sign; with 0, half its values 0, domain zeros: both set from the
    expression, never kept from an edit."""
    compared = {n: d for n, d in ir.domains(node).items() if d in _COMPARED}
    for inp in inputs:
        if inp["name"] in compared and inp["domain"] not in ("mask", "whole"):
            inp["domain"] = compared[inp["name"]]
        elif inp["domain"] in _COMPARED:
            raise SpecError(f"input {inp['name']}: domain {_COMPARED[inp['domain']]}; use normal, positive or nonzero")


def _mark_constants(inputs: list[dict], node: ir.Node) -> None:
    """A float input torch differentiates nowhere (class weights) is marked "grad": false: set from the
    expression, never kept from an edit."""
    constant = ir.no_grad_inputs(node)
    for inp in inputs:
        inp.pop("grad", None)
        if inp["name"] in constant:
            inp["grad"] = False


def _validate_input(i: int, inp: dict) -> dict:
    if not isinstance(inp, dict):
        raise SpecError(f"inputs[{i}] must be an object with name, dtypes and shapes")
    name = inp.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise SpecError(f"inputs[{i}].name must be an identifier, got {name!r}")
    dtypes = inp.get("dtypes")
    if isinstance(dtypes, str):
        dtypes = [dtypes]
    if not isinstance(dtypes, list) or not dtypes:
        raise SpecError(f"input {name}: 'dtypes' must be a list like [\"float16\", \"float32\"]")
    try:
        dtypes = [protocol.canonical_dtype(d) for d in dtypes]
    except ValueError as e:
        raise SpecError(f"input {name}: {e}") from None
    shapes = inp.get("shapes")
    if not isinstance(shapes, list) or not shapes:
        raise SpecError(f"input {name}: 'shapes' must be a list with one shape per case, like [[4096, 4096]]")
    shapes = [_validate_shape(name, s) for s in shapes]
    fixed_dims = inp.get("fixed_dims", [])
    if not isinstance(fixed_dims, list) or not all(isinstance(d, int) and not isinstance(d, bool) and
                                                    all(0 <= d < len(s) for s in shapes) for d in fixed_dims):
        raise SpecError(f"input {name}: 'fixed_dims' lists dims of its shapes whose size the code reads as a number, "
                        f"like [1]; got {fixed_dims!r}")
    domain = inp.get("domain", "normal")
    if domain not in protocol.DOMAINS:
        raise SpecError(f"input {name}: domain must be one of {', '.join(protocol.DOMAINS)}, got {domain!r}")
    return {**inp, "name": name, "dtypes": dtypes, "shapes": shapes, "domain": domain}


def _validate_shape(name: str, shape) -> list[int]:
    if isinstance(shape, int):
        shape = [shape]
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise SpecError(f"input {name}: shape {shape!r} must be a list of integers like [4096, 4096]")
    if not 0 <= len(shape) <= MAX_RANK:           # [] : one number (a scalar argument)
        raise SpecError(f"input {name}: shape {shape} has rank {len(shape)}; supported ranks are 0 to {MAX_RANK}")
    if any(d < 1 for d in shape):
        raise SpecError(f"input {name}: shape {shape} has a dimension below 1; every dim must be a positive size")
    return shape


def _check_counts(inputs: list[dict]) -> None:
    n_cases, n_dtypes = len(inputs[0]["shapes"]), len(inputs[0]["dtypes"])
    for inp in inputs[1:]:
        if len(inp["shapes"]) != n_cases:
            raise SpecError(f"input {inp['name']} has {len(inp['shapes'])} shapes but {inputs[0]['name']} has "
                            f"{n_cases}; give every input one shape per case")
        if len(inp["dtypes"]) != n_dtypes:
            raise SpecError(f"input {inp['name']} has {len(inp['dtypes'])} dtypes but {inputs[0]['name']} has "
                            f"{n_dtypes}; give every input one dtype per variant")
    names = [i["name"] for i in inputs]
    if len(set(names)) != len(names):
        raise SpecError(f"input names must be unique, got {names}")


def parse_expression(spec: dict) -> ir.Node:
    """The spec's operator as IR, checked against its inputs."""
    try:
        node = ir.parse(spec["expression"])
    except ir.IRError as e:
        raise SpecError(f"expression: {e}") from None
    used, declared = ir.input_names(node), [i["name"] for i in spec["inputs"]]
    if set(used) != set(declared):
        raise SpecError(f"expression uses inputs {used} but the spec declares {declared}; make them match")
    first = {i["name"]: i["shapes"][0] for i in spec["inputs"] if isinstance(i, dict) and i.get("shapes")}
    try:
        return ir.settled(node, first) if set(first) == set(declared) else node
    except ir.IRError as e:
        raise SpecError(f"expression: {e}") from None


def _outputs(spec: dict, node: ir.Node) -> list[dict]:
    """The outputs' names, dtypes and shapes: one, (values, indices), or out0, out1, ... of outputs(...)."""
    per_case = []
    for case in protocol.cases(spec):
        try:
            per_case.append(ir.output_shapes(node, case.shapes))
        except ir.IRError as e:
            raise SpecError(f"case {case.index + 1}: {e}") from None
    floats = protocol.float_inputs(spec)[0]["dtypes"]
    if node.op == chain.OUTPUTS:
        held = {i["name"]: i["dtypes"] for i in spec["inputs"]}
        return [{"name": f"out{k}", "dtypes": held.get(_viewed_input(r), [ir.output_dtype(r, d) for d in floats]),
                 "shapes": [shapes[k] for shapes in per_case]} for k, r in enumerate(node.args)]
    shapes, dtypes = [s[0] for s in per_case], [ir.output_dtype(node, d) for d in floats]
    return argreduce.outputs(node, dtypes, shapes) or sort.outputs(node, dtypes, shapes) or [{"name": "out", "dtypes": dtypes, "shapes": shapes}]


def _viewed_input(node: ir.Node) -> str | None:
    """The input a result is, or views (idx, mask.flatten()): it keeps that input's dtype; None for a computed one."""
    while node.op in view.OPS:
        node = node.args[0]
    return node.name if node.op == "input" else None


def _shapes_text(cases: list[protocol.Case], shapes: list[list[int]]) -> str:
    return ", ".join(f"{c.label} -> {'x'.join(map(str, s)) or 'one value'}" for c, s in zip(cases, shapes))


def _check_sizes(spec: dict) -> None:
    tensors = len(spec["inputs"]) + len(spec.get("outputs", []))
    if tensors > MAX_TENSORS:
        raise SpecError(f"{len(spec['inputs'])} inputs and {len(spec.get('outputs', []))} outputs: at most "
                        f"{MAX_TENSORS} tensors in all; split the operator into smaller ones")
    for case in protocol.cases(spec):
        for variant in protocol.dtype_variants(spec):
            total = sum(math.prod(s) * protocol.ITEMSIZE[variant[n]] for n, s in case.shapes.items())
            total += sum(math.prod(o["shapes"][case.index]) * 4 for o in spec.get("outputs", []))
            if total > MAX_CASE_BYTES:
                raise SpecError(f"case {case.label} needs {total / 2**30:.1f} GiB of tensors; "
                                f"the limit is {MAX_CASE_BYTES // 2**30} GiB per case. Use smaller shapes.")


def summary(spec: dict) -> dict[str, str]:
    """Key fields for the spec card."""
    cases = protocol.cases(spec)
    variants = protocol.dtype_variants(spec)
    out = spec["outputs"][0]
    fields = {
        "operator": spec["name"],
        "computes": spec.get("description") or spec.get("formula", ""),
        "expression": spec.get("expression") or spec.get("formula", ""),
        "inputs": ", ".join(f"{i['name']} ({i['domain']})" for i in spec["inputs"]),
        "cases": ", ".join(c.label for c in cases),
        "output": _shapes_text(cases, out["shapes"]),
        "dtypes": ", ".join(protocol.variant_label(v) for v in variants),
        "backend": spec.get("backend") or "default",
    }
    if len({str(o["shapes"]) for o in spec["outputs"]}) > 1:       # several results of their own shapes
        fields["output"] = "; ".join(f"{o['name']}: {_shapes_text(cases, o['shapes'])}" for o in spec["outputs"])
    elif len(spec["outputs"]) > 1:             # torch.max(x, dim): values and indices, each of that shape
        fields["output"] = f"({', '.join(o['name'] for o in spec['outputs'])}), each " + fields["output"]
    if spec.get("params"):
        fields["params"] = ", ".join(f"{k}={v}" for k, v in spec["params"].items())
    if spec.get("training"):
        fields["training"] = ("forward and backward, as a torch.autograd.Function: gradients for "
                              + ", ".join(training.differentiable(spec)))
    return fields
