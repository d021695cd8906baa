"""The State of a request and its corrections -> the spec: the eps settled (a norm's default said
in the notes), each input's shapes one per case (the main input's cases, broadcast vectors' last
dim, class indices; a matmul's from its problem sizes), the dtypes (defaults said in the notes),
the dim the words name, a name, a description and the params, validated by bot.spec.
"""
from __future__ import annotations

from bot import ir
from bot import spec as specmod
from bot.generators.interface import GenerationError
from bot.ops import matmul as mmf
from bot.ops import attention, channel_norm, fused, pointwise, pool, registry, softmax
from bot.ops.node import WITH_INDICES
from bot.ops.text import sizes_text
from bot.request.describe import default_name, describe, spec_params
from bot.request.messages import SUPPORTED, node_text
from bot.request.state import (DEFAULT_SHAPES, State, default_dtypes, default_shapes, input_names, is_vector,
                               main_input, mask_inputs, per_case)
from runner import protocol


def build(st: State, request: str, backend: str | None) -> tuple[dict, list[str]]:
    """The spec and its notes (the defaults taken, in plain words) from what the request and its corrections say."""
    notes = list(st.op_notes)
    _refuse_identity(st.node)
    node = _with_eps(st, st.node, notes)
    names = input_names(st)
    if st.pasted_shapes:              # get_inputs' own shapes (a matmul's shared 2-D weight among them)
        shapes = {n: [st.pasted_shapes[n]] for n in names}
    else:
        shapes = _matmul_shapes(st, node, names, notes) if st.matmul else _input_shapes(st, node, names, notes)
    _refuse_class_dim_1(st, node, shapes)
    dtypes = st.dtypes
    if not dtypes:
        dtypes = default_dtypes(st)
        listed = ", ".join(dtypes[:-1]) + " and " * (len(dtypes) > 1) + dtypes[-1]
        more = " (float32 when asked for: fp32, or tf32 to allow TF32)" if "float32" not in dtypes else ""
        notes.append(f"no dtype named: testing {listed}{more}")
    if st.matmul:
        node = mmf.with_tf32(node, bool(st.tf32) and "float32" in dtypes)
    first = {n: s[0] for n, s in shapes.items()}
    try:
        node = ir.settled(node, first)
    except ir.IRError as e:
        raise GenerationError(str(e)) from None
    node = node if st.training else _gathered(node, first)      # no gradient rule reads the permuted copy yet
    node = _rows_settled(node, first)
    node = _with_dim(st, node, _operand_cases(node, shapes, main_input(st, names)))
    node = _rotated(st, node, shapes)
    domains, index, masks = ir.domains(node), ir.index_inputs(node), mask_inputs(st)
    _refuse_float_indices(st, node, index)
    whole = _whole_numbers(st, names, index)
    if st.training and any(n.op in ("max", "min") and n.attr("dim") != ir.ALL for n in node.walk()):
        notes.append("the gradient of max/min over a dim is torch.amax/amin's: tied maxima share it evenly "
                     "(torch.max(x, dim).values gives it all to the first)")
    learned = st.pasted.parameters if st.pasted and st.pasted_shapes else {}
    spec = {
        "name": _kernel_name(st.name or default_name(node, shapes), notes),
        "expression": node_text(node),
        "description": describe(node, shapes),
        "inputs": [{"name": n, "dtypes": _input_dtypes(n, dtypes, index, masks, whole),
                    "shapes": shapes[n], "domain": "whole" if n in whole else domains[n], **index.get(n, {}),
                    **({"range": whole[n]} if n in whole else {}),
                    **({"fixed_dims": st.sized_dims[n]} if n in st.sized_dims else {}),
                    **({"parameter": learned[n]} if n in learned else {})}
                   for n in names],
        "outputs": [],                        # filled in by spec.validate from the expression
        "params": spec_params(node, st.scalars),
        **({"training": True} if st.training else {}),
        "backend": backend,
        "defaults_used": notes,
        "request": request,
    }
    try:
        return specmod.validate(spec), notes
    except specmod.SpecError as e:
        raise GenerationError(str(e)) from None


def _refuse_identity(node: ir.Node) -> None:
    """An expression that is one input or one number computes nothing a kernel could speed up."""
    if node.op in ("input", "const"):
        what = f"its input {node.name!r} unchanged" if node.op == "input" else f"the constant {node_text(node)}"
        raise GenerationError(f"the expression returns {what} (dropout with p=0 or training=False, an identity "
                              f"layer and a copy change nothing): there is nothing for a kernel to compute. "
                              f"Ask for the ops around it, e.g. 'gelu(x) * y'.")


def _input_dtypes(name: str, dtypes: list[str], index: dict[str, str], masks: set[str],
                  whole: dict[str, list[int]]) -> list[str]:
    """An input's dtype per variant: int64 for class indices and whole numbers, bool for a mask (whose
    domain bot.spec sets), else the dtypes tested."""
    held = protocol.INDEX_DTYPE if name in index or name in whole else protocol.MASK_DTYPE if name in masks else None
    return [held] * len(dtypes) if held else list(dtypes)


def _rotated(st: State, node: ir.Node, shapes: dict[str, list[list[int]]]) -> ir.Node:
    """A rotary embedding's rotate_half written as a cat of x's negated upper half and its lower half:
    one pointwise kernel reading x in place (bot.ops.pointwise.rotations) where the whole expression
    is then pointwise; a training request keeps the cat, whose gradient rules exist."""
    new = pointwise.rotations(node, _per_case(shapes))
    fused = new != node and not ir.is_chain(new) and ir.kind(new) == "pointwise"
    return new if fused and not st.training else node


def _gathered(node: ir.Node, shapes: dict[str, list[int]]) -> ir.Node:
    """Each reduction over dims that are not neighbours (x.amax(dim=(1, 3))) over x permuted so that
    they come last, one run the kernels reduce (the permute a layout kernel's copy of x first), and
    where keepdim asks, the reduced dims put back as unit dims."""
    def visit(n: ir.Node) -> ir.Node:
        n = ir.Node(n.op, tuple(visit(a) for a in n.args), n.name, n.value, n.attrs)
        dim = n.attr("dim")
        if n.op not in fused.REDUCTIONS or not isinstance(dim, tuple):
            return n
        rank = len(ir.output_shape(n.args[0], shapes))
        dims = sorted({d % rank for d in dim})
        if dims == list(range(dims[0], dims[0] + len(dims))):
            return n
        moved = ir.call("permute", n.args[0], dims=tuple(d for d in range(rank) if d not in dims) + tuple(dims))
        attrs = {**dict(n.attrs), "dim": tuple(range(rank - len(dims), rank)), "keepdim": False}
        out = ir.Node(n.op, (moved, *n.args[1:]), n.name, n.value, tuple(sorted(attrs.items())))
        for d in dims if n.attr("keepdim") else ():
            out = ir.call("unsqueeze", out, dim=d)
        return out
    return visit(node)


def _rows_settled(node: ir.Node, shapes: dict[str, list[int]]) -> ir.Node:
    """Each softmax/log_softmax below the root over its body's last dim as dim -1, over another
    dim written out as the fused family's reductions (bot.ops.softmax.settled); the root's dim the
    words may still name (_with_dim settles it)."""
    def settle(n: ir.Node, root: bool) -> ir.Node:
        n = ir.Node(n.op, tuple(settle(a, False) for a in n.args), n.name, n.value, n.attrs)
        if n.op not in ir.ROW_PRESERVING or (root and n.attr("dim", -1) == -1):
            return n
        return softmax.settled(n, len(ir.output_shape(n.args[0], shapes)))
    return settle(node, True)


def _refuse_class_dim_1(st: State, node: ir.Node, shapes: dict[str, list[list[int]]]) -> None:
    """Pasted F.cross_entropy and F.nll_loss take N-D logits' classes on dim 1; the kernel takes them on the last."""
    if node.op in ir.LOSSES and (st.inputs or -1 not in st.dims):
        ranks = {len(ir.output_shape(node.args[0], case)) for case in _per_case(shapes)}
        if ranks != {2}:
            raise GenerationError(f"{st.name or node.op} on {max(ranks)}-D logits, whose classes "
                                  "PyTorch takes on dim 1; the offline kernel takes 2-D logits [rows, classes]. "
                                  "Give 2-D shapes, e.g. 'for 4096x32000'.")


def _with_eps(st: State, node: ir.Node, notes: list[str]) -> ir.Node:
    if node.op not in ir.NORMS:
        if st.eps is not None:
            raise GenerationError(f"you gave eps {st.eps!r}, but {node_text(node)!r} has no eps: only layernorm and "
                                  "rmsnorm take one")
        return node
    eps = st.eps if st.eps is not None else ir.DEFAULT_EPS[node.op]
    if st.eps is None:
        notes.append(f"no eps named: using {eps!r}, the usual {node.op} default")
    return ir.call(node.op, *node.args, **{**dict(node.attrs), "eps": eps})


def _whole_numbers(st: State, names: list[str], index: dict[str, dict]) -> dict[str, list[int]]:
    """The inputs get_inputs makes int64 that the operation reads as numbers, not indices (an int
    attention mask compared with 0, counts it multiplies by), with the [low, high) torch.randint draws
    them from: they stay int64 (the judge draws whole numbers there), never quietly made float."""
    made = st.pasted.indices if st.pasted and st.pasted_shapes else []
    whole = {n: st.pasted.ranges.get(n) for n in names if n in made and n not in index}
    if unknown := [n for n, r in whole.items() if r is None]:
        raise GenerationError(f"get_inputs makes {unknown[0]} int64 other than by torch.randint(low, high, size) with "
                              "numbers, and the operation reads it as numbers, not indices: make it that way (the "
                              "judge draws whole numbers in that range), or as a float tensor")
    return whole


def _refuse_float_indices(st: State, node: ir.Node, index: dict[str, dict]) -> None:
    """An input the operation reads as indices must be made as indices where get_inputs makes it:
    a float tensor there is not quietly drawn as int64 instead."""
    made = st.pasted.shapes if st.pasted else {}
    for name in index:
        if name in made and name not in st.pasted.parameters and name not in st.pasted.indices:
            made_as = "a bool mask (x[mask] keeps a varying number of elements, which no kernel's output shape follows)" \
                if name in st.masks else "a float tensor"
            raise GenerationError(f"{node_text(node)!r} reads {name} as int64 indices, but get_inputs makes it {made_as}; "
                                  f"make it with torch.randint(0, n, size), as torch requires")


def _input_shapes(st: State, node: ir.Node, names: list[str], notes: list[str]) -> dict[str, list[list[int]]]:
    """One shape per case for each input: the main input's cases; broadcast vectors get the last
    dim, class indices the cases without it, the rest the main input's shape."""
    main = main_input(st, names)
    cases = _cases(st, names, main, notes)
    index, own = ir.index_inputs(node), [channel_norm.parameter_shapes(node, c) for c in cases]
    shapes = {main: cases}
    for n in names:
        if n == main:
            continue
        given = per_case(st.input_shapes[n], len(cases), n) if n in st.input_shapes else [None] * len(cases)
        vector = is_vector(st, n, names) and not own[0].get(n)
        shapes[n] = [g or p.get(n) or (c[:-1] if n in index else [c[-1]] if vector else list(c))
                     for g, c, p in zip(given, cases, own)]
        if vector and None in given and node.op not in ir.NORMS:
            notes.append(f"no shape named for {n}: using [N], the last dim of {main}, broadcast over the rows")
        elif st.inputs and not vector and n not in index and None in given:     # a pasted function's parameter
            notes.append(f"no shape named for {n}: using {main}'s shape")
    return shapes


def _matmul_shapes(st: State, node: ir.Node, names: list[str], notes: list[str]) -> dict[str, list[list[int]]]:
    """Each input's shapes from the cases' problem sizes [B,] M, N, K."""
    problems = st.shapes
    if not problems:
        problems = default_shapes(st)
        notes.append(f"no shape named: using {sizes_text(problems[0])} and an odd {sizes_text(problems[1])} "
                     "(no block size divides it)")
    products = [sub for sub in node.walk() if sub.op == ir.MATMUL]
    if any(x.op != "input" for mm in products for x in mm.args):
        raise GenerationError(f"{node_text(node)!r} multiplies a product again, which has no one M, N and K: give each "
                              "input's shape by name, e.g. 'x 64x128, w1 128x256, w2 256x32'")
    operands = {x.name for mm in products for x in mm.args}
    epilogue = {n: is_vector(st, n, names) for n in names if n not in operands}
    if given := [n for n in st.input_shapes if n in epilogue or n in operands]:
        raise GenerationError(f"the shape given for {given[0]} is not read: a matmul's shapes are its problem sizes "
                              "('64x128 by 128x256', or M, N and K), and its epilogue inputs take [N] (a bias) or "
                              "the output's shape.")
    notes += [f"no shape named for {n}: using [N], the output's last dim, broadcast over its rows"
              for n, vector in epilogue.items() if vector]
    cases = [_operand_shapes(node, products, p, epilogue) for p in problems]
    return {n: [c[n] for c in cases] for n in names}


def _operand_shapes(node: ir.Node, products: list[ir.Node], problem: list[int],
                    epilogue: dict[str, bool]) -> dict[str, list[int]]:
    """Each input's shape for one problem [.., M, N, K]: every product of the expression is that
    problem's (silu(x @ w1) * (x @ w2): w1 and w2 both [K, N]), an input taking one shape in all."""
    shapes: dict[str, list[int]] = {}
    for mm in products:
        a, b = (x.name for x in mm.args)
        for n, shape in mmf.matmul_shapes(problem, a, b, epilogue, mm.attr("ta"), mm.attr("tb")).items():
            if shapes.setdefault(n, shape) != shape:
                raise GenerationError(f"{n} is an operand of two products of {node_text(node)!r} in different places, "
                                      "so it has no one shape from M, N and K: give each input's shape by name, e.g. "
                                      "'x 64x128, w 128x128'")
    return shapes


def _cases(st: State, names: list[str], main: str, notes: list[str]) -> list[list[int]]:
    if st.shapes:
        return st.shapes
    given = [s for n, lst in st.input_shapes.items() if n in names for s in lst if s]
    if given and len(given[0]) > 1:     # "mse loss of x and y with y 128x512": the others alike
        notes.append(f"no shape named for {', '.join(n for n in names if not st.input_shapes.get(n))}: using "
                     f"{'x'.join(map(str, given[0]))}, the shape given")
        return [given[0]]
    if given:                 # "b: [1024]" alone: keep the default rows, take the last dim from b
        n_last = given[0][-1]
        cases = [[rows, n_last] for rows, _ in DEFAULT_SHAPES]
        notes.append(f"no shape named for {main}: using {cases[0][0]}x{n_last} and {cases[1][0]}x{n_last} "
                     f"to match the shapes given")
        return cases
    if st.node is not None and st.node.op == attention.SDPA:
        notes.append("no shape named: using [batch, heads, L, E] 4x16x2048x64 and an odd 1x8x1000x80")
        return [list(s) for s in attention.DEFAULT_SHAPES]
    if st.node is not None and (pooled := pool.default_shapes(st.node)):
        first, odd = ("x".join(map(str, s)) for s in pooled)
        notes.append(f"no shape named: using [batch, channels, ...] {first} and an odd {odd}")
        return pooled
    notes.append("no shape named: using 4096x4096 and an odd 5333x497 (no block size divides it)")
    return [list(s) for s in DEFAULT_SHAPES]


def _per_case(shapes: dict[str, list[list[int]]]) -> list[dict[str, list[int]]]:
    """Each case's input shapes by name (shapes: every input's shape per case)."""
    return [{n: s[k] for n, s in shapes.items()} for k in range(len(next(iter(shapes.values()))))]


def _kernel_name(name: str, notes: list[str]) -> str:
    """The name, or where it is one kernel.py calls (Python's max, sum; a module it imports) the name
    with '_op' after it, noted: the kernel's function would shadow the builtin."""
    if name not in specmod.RESERVED_NAMES:
        return name
    notes.append(f"named the kernel '{name}_op': '{name}' is Python's {name} (or a module kernel.py imports), "
                 "which the generated code calls")
    return f"{name}_op"


def _operand_cases(node: ir.Node, shapes: dict[str, list[list[int]]], main: str) -> list[list[int]]:
    """Per case, the shape of what the root works over (its operand), where a dim counts: a sum over
    dim 1 of an embedding of [4, 7] ids runs over the lookup's [4, 7, D], not the ids' [4, 7]. The main
    input's shapes where the root takes no operand or the words name the dim of an inner reduction."""
    if not node.args or node.args[0].op == "const" or fused.dim_unsaid(node):
        return shapes[main]
    try:
        return [ir.output_shape(node.args[0], case) for case in _per_case(shapes)]
    except ir.IRError:          # shapes that do not fit: the checks after name it
        return shapes[main]


def _with_dim(st: State, node: ir.Node, cases: list[list[int]]) -> ir.Node:
    """The dim named in words: any one for a reduction (written -1 when it is the last dim of
    every case; every reduction of a fused one named in words), the last one only for softmax,
    norms and cross entropy."""
    k = ir.kind(node)
    root = registry.root_family(node.op)
    if k == "chain" and root is not None and root.NAME in ("reduce", "argreduce", "scan", "sort", "softmax", "norm"):
        k = root.NAME                   # a chain ending in an op over a dim: the words may name its dim
    words = fused.dim_unsaid(node)      # 'variance', 'L2 normalize': over the dim the words name
    if words:
        k = "reduce"
    op = fused.word_op(node) if words else node.op
    if k in ("conv", "pool", "fused", "layout", "gather", "chain"):
        if st.dims or st.whole:
            raise GenerationError(f"you named a dim, but {node_text(node)!r} works over the dims its arguments "
                                  "say; drop the dim", unplaced=[f"over dim {d}" for d in st.dims])
        return node
    if k in ("pointwise", "matmul") and st.whole:
        raise GenerationError(f"you said {st.whole!r}, but {node_text(node)!r} is elementwise; a reduction over all "
                              "elements (one value) is not supported by the offline generator.", unplaced=[st.whole])
    if k in ("pointwise", "matmul"):
        if st.dims:
            raise GenerationError(f"you named a dim ({', '.join(map(str, st.dims))}), but {node_text(node)!r} is "
                                  "elementwise and runs over no dim. Which reduction or row operation over it did "
                                  f"you mean? {SUPPORTED}", unplaced=[f"over dim {d}" for d in st.dims])
        return node
    reduces = k in ("reduce", "argreduce", "scan", "sort")          # over any one dim
    # Typed with no dim ('x.sum()', 'torch.max(x)'), torch reduces every element: one value.
    every = st.typed and not words and not st.dims and node.attr("dim") is None and node.op not in WITH_INDICES
    if (st.whole or every) and k in ("reduce", "argreduce"):
        written = node.attr("dim")
        dims = st.dims or ([] if written in (None, ir.ALL) else [written])
        if dims:
            raise GenerationError(f"you said {st.whole!r} and dim {dims[0]}: {op} over every element (one "
                                  f"value) or over dim {dims[0]}? Say one of them.")
        if node.attr("keepdim"):
            raise GenerationError(f"{op} over every element keeping the dim is not supported; name a dim, or drop "
                                  "keepdim (one value)")
        return _over(node, ir.ALL, words)
    if st.whole:
        raise GenerationError(f"{node.op} over {st.whole!r} is not supported: {node.op} runs over one dim"
                              f"{' at a time, e.g. dim 0 or the last dim' if reduces else ', the last'}. {SUPPORTED}")
    written = None if words else node.attr("dim", -1)
    if st.dims and written is not None and st.typed and written not in st.dims:
        raise GenerationError(f"{node_text(node)!r} is over dim {written}, but the words say dim {st.dims[0]}; which one?")
    dims = list(dict.fromkeys(st.dims)) or ([] if written is None else [written])
    if not dims:
        whole = k in ("reduce", "argreduce") and node.op not in WITH_INDICES
        every = " or 'over all elements' (one value)" if whole else ""
        raise GenerationError(f"{op} over which dim? Say e.g. '{op} over the last dim', 'over dim 0'{every}.")
    if len(dims) > 1 and k == "reduce" and not words:      # sum, mean, max, min over several dims at once
        return ir.with_dim(node, _several(dims, cases, op))
    if len(dims) > 1:
        raise GenerationError(f"I found dims {', '.join(map(str, dims))}: {op} runs over one dim; which one?")
    last = all(dims[0] in (-1, len(c) - 1) for c in cases)
    if reduces:
        return _over(node, -1 if last else dims[0], words)
    if not last and node.op in ir.ROW_PRESERVING:       # softmax over another dim: the fused reductions'
        return softmax.settled(ir.with_dim(node, dims[0]), len(cases[0]))
    if not last:
        raise GenerationError(f"{node.op} over dim {dims[0]} is not supported: {node.op} runs over the last dim "
                              f"(dim=-1) only. {SUPPORTED}")
    return ir.with_dim(node, -1) if node.op in ir.ROW_PRESERVING else node


def _several(dims: list[int], cases: list[list[int]], op: str) -> tuple[int, ...]:
    """Several dims the words name, in order, counted from the end where all are ('the last two
    dims'), else from 0, inside every case."""
    if any(not -len(c) <= d < len(c) for d in dims for c in cases):
        raise GenerationError(f"{op} over dims {', '.join(map(str, dims))}, but a case has fewer dims: "
                              f"{', '.join('x'.join(map(str, c)) for c in cases)}")
    if all(d < 0 for d in dims):
        return tuple(sorted(set(dims)))
    ranks = {len(c) for c in cases}
    if len(ranks) > 1:
        raise GenerationError(f"{op} over dims {', '.join(map(str, dims))} of cases of different ranks: count them "
                              "from the end (dim -1 is the last) or give cases of one rank")
    rank = ranks.pop()
    return tuple(sorted({d % rank for d in dims}))


def _over(node: ir.Node, dim: int | str, words: bool) -> ir.Node:
    """The reduction over dim: the root's, or every one of a fused reduction named in words."""
    return fused.over(node, dim) if words else ir.with_dim(node, dim)
