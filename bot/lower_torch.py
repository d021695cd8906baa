"""Lowering of the operator IR to PyTorch: the reference (stage 2). The body is written with the
families' torch op table; the root op over it by its family (torch_result)."""
from __future__ import annotations

from bot.codegen.code import body_text, doc_text
from bot.codegen.expr import ExprWriter
from bot.codegen.names import allocate
from bot.ops import chain, pointwise, registry, view
from bot.ops.node import Node, inp, substitute
from runner import protocol


def torch_expression(node: Node, names: dict[str, str], anchor: str, taken: set[str],
                     round_with: str | None = None, round_result: bool = True) -> tuple[list[str], str]:
    """(statements, expression) computing a pointwise node (a matmul epilogue included) with torch,
    in the inputs' dtype."""
    # A view rounds nothing (and rounding an index tensor's view to a float would break its use).
    writer = ExprWriter(registry.torch_ops(anchor), names, f"to({anchor}.dtype)", taken, round_with, view.OPS)
    writer.ops.update(registry.nested_torch_ops(writer))      # a chain's root ops inside its expression
    text = writer.write(pointwise.fold_constants(node), round_result)
    return writer.lines, text


def torch_lines(spec: dict, node: Node, names: dict[str, str], round_with: str | None = None) -> tuple[list[str], str]:
    """(statements, result expression) computing the whole operator with torch over the local
    names. With round_with, every pointwise step feeding the result (the body of a row op
    included) is passed through that function; the result itself is not."""
    if node.op == chain.OUTPUTS:
        return _results_lines(spec, node, names, round_with)
    anchor = names[protocol.float_inputs(spec)[0]["name"]]
    root = registry.root_family(node.op)
    if root and node.op in getattr(root, "TORCH_OPS", {}):      # written like any op, over its operands' texts
        root = None
    body_node = node.args[0] if root else node
    lines, body = torch_expression(body_node, names, anchor, set(names.values()), round_with,
                                   round_result=root is not None)
    if root:
        node, names = _operands_bound(node, names, anchor, lines)
        result = root.torch_result(node, names, body, lines)
    elif body_node.op == "input":
        result = f"{body}.clone()"       # the expression is one input: still return a new tensor
    else:
        result = body
    if _mixed_dtypes(spec):
        result = f"({result}).to({anchor}.dtype)"   # the output takes the first input's dtype
    return lines, result


def _results_lines(spec: dict, node: Node, names: dict[str, str], round_with: str | None) -> tuple[list[str], str]:
    """outputs(a, b, ...): each result computed into a local of its own (the next one's temporaries
    may reuse names the last one's expression read), one inside another first and read there, as the
    kernel's stages do; returned as a tuple in order."""
    lines, done, names = [], {}, dict(names)
    for result in chain.computing_order(node):
        tree = result
        for earlier, local in reversed(done.items()):       # the largest first: it may hold the others
            tree = tree if earlier.op == "input" else substitute(tree, earlier, inp(local))
        more, text = torch_lines(spec, tree, names, round_with)
        if round_with and any(o != result and result in set(o.walk()) for o in node.args):
            text = f"{round_with}({text})"      # read by a later result, as the dtype holds it
        local = next(f"result{k}" for k in range(len(names) + 1)
                     if f"result{k}" not in names.values() and f"result{k}" not in names)
        lines += [*more, f"{local} = {text}"]
        names[local] = local
        done[result] = local
    return lines, f"({', '.join(done[r] for r in node.args)})"


def _operands_bound(node: Node, names: dict[str, str], anchor: str, lines: list[str]) -> tuple[Node, dict[str, str]]:
    """The root op with each operand past its body that is no input (a view of one: a cross entropy's
    targets.flatten()) computed first into a local of its own, which the family then reads as an input."""
    args, names = [node.args[0]], dict(names)
    for a in node.args[1:]:
        if a.op != "input":
            arg_lines, text = torch_expression(a, names, anchor, set(names.values()))
            local = next(f"operand{k}" for k in range(len(names) + 2) if f"operand{k}" not in names.values())
            lines += [*arg_lines, f"{local} = {text}"]
            names[local] = local
            a = inp(local)
        args.append(a)
    return Node(node.op, tuple(args), node.name, node.value, node.attrs), names


def reference_source(spec: dict, node: Node) -> str:
    """reference.py: `import torch` and `def <spec name>(<inputs in spec order>)` in plain
    PyTorch, computing in the inputs' own dtype (it is the eager baseline for timing AND,
    called on float64 inputs, the ground truth), returning one new tensor."""
    order = [i["name"] for i in spec["inputs"]]

    def render(names: dict[str, str], operator: str) -> str:
        lines, result = torch_lines(spec, node, names)
        statements = body_text(lines)
        return (f'"""PyTorch reference for {spec["name"]}: {doc_text(spec.get("description") or spec["expression"])}.\n\n'
                "Generated by kernelbot. It is the eager baseline the kernel is timed against and, called on\n"
                'float64 inputs, the ground truth the kernel is checked against."""\n'
                "import torch\n\n\n"
                f"def {operator}({', '.join(names[n] for n in order)}):\n"
                f'    """{doc_text(spec["expression"])}{over_text(node)}, in the inputs\' dtype."""\n'
                f"{statements}"
                f"    return {result}\n")

    return render(allocate(order, spec["name"], render), spec["name"])


def over_text(node: Node) -> str:
    """' over the last dim', ' over dim 0' or '' for the docstrings of generated files."""
    root = registry.root_family(node.op)
    if root is None:
        return ""
    if hasattr(root, "over_text"):
        return root.over_text(node)
    dim = node.attr("dim", -1)
    return " over the last dim" if dim == -1 else f" over dim {dim}"


def _mixed_dtypes(spec: dict) -> bool:
    floats = protocol.float_inputs(spec)
    return any(len({i["dtypes"][j] for i in floats}) > 1 for j in range(len(floats[0]["dtypes"])))
