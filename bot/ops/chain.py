"""Chains: an expression no one family lowers as one kernel (relu(group_norm(conv2d(x, w, b), 8, g, gb)),
max_pool2d(conv2d(x, w)), softmax(x @ w.T + b) * 2) split into the fewest stages the families' rules
allow, each one kernel of its family, the later ones reading the earlier ones' outputs.

The plan walks the tree from its leaves: a subtree any family takes whole stays whole; where a node
is refused, its computed operands become stages of their own (those holding a matmul, convolution or
root op first, then any), and the node reads their outputs as inputs. Stages between kernels keep
float32 (as a kernel keeps its own intermediates), so the chain rounds once, at its output, like any
kernel; a matmul or convolution stage reads them in its weight's dtype, for the tensor cores.

A function returning several tensors is the op OUTPUTS over them: each output is a stage (one inside
another, a residual returned beside its norm, computed once and read there), and the entry returns
them in order.

kernel.py holds every stage's file, each module-level name of a stage suffixed with its number so
none meets another's, and an entry of the spec's name calling the stages in order. Stages keep their
own default configs: a chain carries no config space of its own to sweep.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass

from bot.ops import conv, fill, fused, matmul, reduce, registry, view
from bot.ops.entry import Entry
from bot.ops.node import IRError, Node, inp, input_names, to_text
from runner import protocol

NAME = "chain"
OPS: set[str] = set()
ROOT = False
SUPPORTED = ("", "chains of these (a convolution or matmul, then norms, pooling, softmax and pointwise ops) as "
             "the fewest kernels their rules allow")
ALIASES: dict[str, str] = {}
KEYWORDS: dict[str, set[str]] = {}
OUTPUT_DTYPES: dict[str, str] = {}
MAX_RANK = 5
MAX_NUMEL = 2**31 - 1
WORDS: list = []
ENTRIES: tuple[Entry, ...] = ()
TEMP = "stage{}"            # a stage's output as the next stage's input
OUTPUTS = "outputs"         # a function's several results, in order: the last stage, over earlier ones
NO_KERNEL = view.OPS | fill.OPS | {OUTPUTS}     # stages the entry takes itself: a view, a constant's allocation
_REDUCTIONS = reduce.OPS | fused.OPS


@dataclass(frozen=True)
class Stage:
    name: str               # its output's name as an input of later stages; the last: the chain's output
    node: Node              # over the chain's inputs and earlier stages' outputs


def is_anchor(node: Node) -> bool:
    """Whether a subtree holds an op that needs a kernel of its own kind (matmul, convolution, a root op)."""
    return any(sub.op in (matmul.MATMUL, conv.CONV) or registry.root_family(sub.op) is not None
               for sub in node.walk())


def plan(node: Node, check_single) -> list[Stage]:
    """The stages of node, the last computing it; check_single(tree) raises IRError where no one
    family lowers the tree whole. Raises the first refusal no split can avoid. A stage tried and
    not taken leaves no trace: stages are made only for the cut that is kept."""
    stages: list[Stage] = []
    taken = set(input_names(node))

    def name_for(sub: Node, pending: dict[Node, str]) -> str:
        """The stage name of sub: an existing stage's (a subtree used twice is one stage), else a new one."""
        for s in stages:
            if s.node == sub:
                return s.name
        if sub not in pending:
            k = len(stages) + len(pending)
            while TEMP.format(k) in taken or TEMP.format(k) in pending.values():
                k += 1
            pending[sub] = TEMP.format(k)
        return pending[sub]

    def staged(sub: Node) -> Node:
        """sub as an input: itself where it is one, else the output of a stage computing it."""
        if sub.op == "input":
            return sub
        pending: dict[Node, str] = {}
        name = name_for(sub, pending)
        commit(pending)
        return inp(name)

    def commit(pending: dict[Node, str]) -> None:
        for sub, name in pending.items():
            if sub.op in registry.TWO_OUTPUTS:
                raise IRError(f"{to_text(sub)} gives two tensors, (values, indices), so it cannot be an operand or "
                              "one of several results; take one of them (.values or .indices, [0] or [1]), or "
                              "return it alone")
            taken.add(name)
            stages.append(Stage(name, sub))

    def walk(n: Node) -> Node:
        if n.op in ("input", "const"):
            return n
        if not input_names(n) and not any(sub.op in fill.OPS for sub in n.walk()):
            return n                    # numbers (smooth_l1's 0.5 * beta): the kernel around them computes them
        if n.op in fill.OPS:            # a constant tensor: a stage the entry allocates (no kernel)
            return staged(n)
        if n.op in view.OPS:            # a view of a tensor: over an input or a stage, a stage itself (no kernel)
            return Node(n.op, tuple(staged(walk(a)) for a in n.args), n.name, n.value, n.attrs)
        args = tuple(staged(walk(a)) if a.op in view.OPS else walk(a) for a in n.args)
        n = Node(n.op, args, n.name, n.value, n.attrs)
        try:
            check_single(n)
            return n
        except IRError as refused:
            computed = [a for a in n.args if a.op not in ("input", "const")]
            heavy = [a for a in computed if is_anchor(a)]
            inner = _inner_reduction(computed)
            # the fewest stages first: the one reduction inside the computed operands (one stage, as
            # cutting an operand whole, but what it writes is reduced), one heavy operand its own, then
            # every heavy one, then every computed one
            for cut in [[inner]] * bool(inner) + ([[a] for a in heavy] if len(heavy) > 1 else []) + [heavy, computed]:
                if not cut:
                    continue
                pending: dict[Node, str] = {}
                trial = _cut(n, cut, lambda a: inp(name_for(a, pending)))
                try:
                    check_single(trial)
                except IRError:
                    continue
                commit(pending)
                return trial
            raise refused

    if node.op != OUTPUTS:
        last = walk(node)           # before stages is read: walking adds to it
        return [*stages, Stage("", last)]
    done: dict[Node, Node] = {}
    for out in computing_order(node):
        within = set(out.walk())
        inside = [d for d in done if d.op != "input" and d in within]
        done[out] = staged(walk(_cut(out, inside, done.__getitem__)))
    return [*stages, Stage("", Node(OUTPUTS, tuple(done[a] for a in node.args)))]


def computing_order(node: Node) -> list[Node]:
    """The results of outputs(...), each once, the smaller first: one inside another (a residual
    returned beside its norm) is computed before it, and read there."""
    first = {a: k for k, a in reversed(list(enumerate(node.args)))}
    return sorted(first, key=lambda a: (len(list(a.walk())), first[a]))      # ties in the order written


def _inner_reduction(computed: list[Node]) -> Node | None:
    """The reduction the computed operands hold below their roots where they hold just one (a
    subtree used twice counts once), else None: rmsnorm's weight gradient, sum(up * x * rsqrt(mean(x * x,
    -1) + eps), dim=0), stages the per-row mean rather than the full-size product around it."""
    found = {sub for a in computed for sub in a.walk() if sub is not a and sub.op in _REDUCTIONS}
    outermost = [f for f in found if not any(f is not g and f in set(g.walk()) for g in found)]
    return outermost[0] if len(outermost) == 1 and len(found) == len(set(outermost[0].walk()) & found) else None


def _cut(n: Node, cut: list[Node], staged) -> Node:
    """n with each subtree in cut (an operand, or one deeper) replaced by staged(subtree)."""
    if n in cut:
        return staged(n)
    if n.op in ("input", "const"):
        return n
    return Node(n.op, tuple(_cut(a, cut, staged) for a in n.args), n.name, n.value, n.attrs)


def stage_shapes(stages: list[Stage], shapes: dict[str, list[int]], output_shape) -> dict[str, list[int]]:
    """Every input's and every stage output's shape, for one case."""
    out = dict(shapes)
    for s in stages[:-1]:
        out[s.name] = output_shape(s.node, out)
    return out


# ---------------------------------------------------------------- kernel.py

def kernel_source(spec: dict, stages: list[Stage], stage_source, output_shape) -> str:
    """kernel.py: each stage's file from its family (stage_source(stage spec, node)), renamed apart,
    and the entry calling them in order."""
    cases = [{i["name"]: i["shapes"][c] for i in spec["inputs"]} for c in range(len(spec["inputs"][0]["shapes"]))]
    all_shapes = [stage_shapes(stages, case, output_shape) for case in cases]
    dtypes = {i["name"]: i["dtypes"] for i in spec["inputs"]}
    n_dtypes = len(spec["inputs"][0]["dtypes"])
    bodies, imports = [], []
    for stage in stages:        # a view of a chain input keeps its dtype
        if stage.node.op in view.OPS and stage.node.args[0].name in dtypes:
            dtypes[stage.name] = dtypes[stage.node.args[0].name]
    for k, stage in enumerate(stages):
        if stage.node.op in NO_KERNEL:       # no kernel: the entry takes the view, allocates the constant
            continue
        names = input_names(stage.node)
        last = k == len(stages) - 1
        stage_spec = {"name": f"{spec['name']}_s{k}", "expression": to_text(stage.node),
                      "description": f"stage {k + 1} of {len(stages)} of {spec['name']}",
                      "inputs": [{"name": n, "shapes": [s[n] for s in all_shapes],
                                  "dtypes": dtypes.get(n, ["float32"] * n_dtypes)} for n in names],
                      "outputs": [{"name": "out", "dtypes": ["float32"] * n_dtypes,
                                   "shapes": [output_shape(stage.node, s) for s in all_shapes]}],
                      **({} if last else {"float32_out": True})}
        head, body = part(stage_source(stage_spec, stage.node), f"_s{k}", keep=stage_spec["name"])
        imports += [line for line in head if line not in imports]
        bodies.append(body)
    kernels = sum(s.node.op not in NO_KERNEL for s in stages)
    return ('"""Triton kernels for ' + spec["name"] + ": " + _doc(spec.get("description") or spec["expression"])
            + f".\n\nGenerated by kernelbot from `{_doc(spec['expression'])}`, as {kernels} "
            f"kernel{'s' * (kernels > 1)}: the fewest the\nfamilies' rules allow. Each stage below is a file of its "
            "family, its names suffixed _s<k>; "
            "the\nentry at the end calls them in order (views between them are taken there, constants made). Stages between "
            "kernels keep\nfloat32."
            + '"""\n' + "\n".join(imports) + "\n\n" + protocol.lean_launch_source() + "\n\n"
            + "\n\n".join(b.strip("\n") + "\n" for b in bodies)
            + "\n\n" + _entry(spec, stages))


def _entry(spec: dict, stages: list[Stage]) -> str:
    inputs = [i["name"] for i in spec["inputs"]]
    first = protocol.float_inputs(spec)[0]["name"]
    lines = [f"def {spec['name']}({', '.join(inputs)}):",
             f"    # {len(stages)} stages, {sum(s.node.op not in NO_KERNEL for s in stages)} of them kernels "
             "(a view or a constant needs none); the ones between keep float32."]
    for k, stage in enumerate(stages):
        if stage.node.op == OUTPUTS:        # the return below takes it
            continue
        args = []
        anchor = matmul.matmul_node(stage.node) or conv.conv_node(stage.node)
        operands = [a.name for a in anchor.args] if anchor else []
        weight = [n for n in operands if n in inputs]
        indices = registry.index_inputs(stage.node)
        for n in input_names(stage.node):
            if n in operands and n not in inputs:       # the tensor cores take the weight's dtype (else the inputs')
                args.append(f"{n}.to({(weight or [first])[0]}.dtype)")
            elif n in indices and n not in inputs:      # indices an earlier stage counted (torch.arange): int64
                args.append(f"{n}.to(torch.int64)")
            else:
                args.append(n)
        target = stage.name or "out"
        if stage.node.op in view.OPS:
            lines.append(f"    {target} = {view.torch_text(stage.node, *args)}")
        elif stage.node.op in fill.OPS:
            lines.append(f"    {target} = {fill.torch_text(stage.node, 'torch.float32', f'{first}.device')}")
        else:
            lines.append(f"    {target} = {spec['name']}_s{k}({', '.join(args)})")
    if stages[-1].node.op == OUTPUTS:
        steps = {s.name: s.node for s in stages}
        returned, seen = [], set()
        for a in stages[-1].node.args:      # a tensor (or its view) returned twice is copied: no two outputs alias
            text, source = _returned(a.name, steps, first)
            returned.append(text + ".clone()" * (source in seen and not text.endswith(".clone()")))
            seen.add(source)
        lines.append(f"    return {', '.join(returned)}      # the outputs, each float one in the inputs' dtype")
    elif stages[-1].node.op in registry.TWO_OUTPUTS:     # (values, indices): the values in the inputs' dtype
        lines.append(f"    return out[0].to({first}.dtype), out[1]")
    elif registry.output_dtype(stages[-1].node):          # indices (argmax), bools (any) stay as they are
        lines.append("    return out")
    else:
        lines.append(f"    return out.to({first}.dtype)      # the chain's output in the inputs' dtype")
    return "\n".join(lines) + "\n"


def _returned(name: str, steps: dict[str, Node], first: str) -> tuple[str, str]:
    """(one of several results as the entry returns it, the tensor whose memory it is): an input or a
    view of one copied (a custom op's outputs may not alias its inputs), indices or bools an op gave as
    they are, a float stage (float32 between kernels) in the inputs' dtype."""
    source = name
    while source in steps and steps[source].op in view.OPS:
        source = steps[source].args[0].name
    if source not in steps:
        return f"{name}.clone()", source
    return (name if registry.output_dtype(steps[source]) else f"{name}.to({first}.dtype)"), source


def part(source: str, suffix: str, keep: str) -> tuple[list[str], str]:
    """A generated file as part of a larger one: (its import lines, the rest without its docstring,
    its names but `keep` suffixed, and without the lean launch block, which the whole file carries
    once, under its own names: the integrity check accepts only its exact text)."""
    imports, body = split_imports(source)
    return imports, suffixed(body.replace(protocol.lean_launch_source(), ""), suffix, keep)


def split_imports(source: str) -> tuple[list[str], str]:
    """(the file's import lines, the rest without its docstring)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    imports, skip = [], set()
    for n in tree.body:
        if isinstance(n, (ast.Import, ast.ImportFrom)) or (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                                                           and isinstance(n.value.value, str)):
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                imports += [line.rstrip("\n") for line in lines[n.lineno - 1:n.end_lineno]]
            skip |= set(range(n.lineno - 1, n.end_lineno))
    return imports, "".join(line for i, line in enumerate(lines) if i not in skip)


def suffixed(source: str, suffix: str, keep: str) -> str:
    """source with each name it defines at module level (functions, assignments) but `keep` renamed
    name + suffix wherever it is used as a name (not an attribute, not a keyword argument)."""
    tree = ast.parse(source)
    defined = set()
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            defined.add(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                defined |= {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}
    defined.discard(keep)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, int]] = []          # (row, start col, end col) of each name to rename
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
              if t.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)]
    for i, tok in enumerate(tokens):
        before = tokens[i - 1].string if i else ""
        after = tokens[i + 1].string if i + 1 < len(tokens) else ""
        keyword_arg = after == "=" and before in ("(", ",")
        if tok.type == tokenize.NAME and tok.string in defined and before != "." and not keyword_arg:
            edits.append((tok.start[0] - 1, tok.start[1], tok.end[1]))
    for row, start, end in sorted(edits, reverse=True):
        lines[row] = lines[row][:end] + suffix + lines[row][end:]
    return "".join(lines)


def _doc(text: str) -> str:
    return re.sub(r"\s+", " ", str(text)).replace("\\", "/").replace('"', "'")


def reference_property(node: Node) -> tuple[str, bool]:
    return "", False

