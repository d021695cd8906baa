"""A Reading merged into the State that the request and earlier corrections left, later ones
winning: a new operator brings its own inputs, scalars and eps; eps, tf32, dims, dtypes ('also
fp32' adds to them) and shapes (of the main input, or of another input named) replace or add to
what was said. A correction must say something, and one that names an operation must name all of
it.
"""
from __future__ import annotations

from bot import ir
from bot.generators.interface import GenerationError
from bot.ops import fused
from bot.request.messages import node_text
from bot.request.reading import Reading
from bot.request.state import State, default_dtypes, default_shapes, input_names, main_input, per_case
from bot.request.vocabulary import REPLACE, SHAPE_OWNER
from bot.request.words import bare_shape, said_mask, said_vector


def apply(st: State, rd: Reading, feedback: bool) -> None:
    """Merge rd into st: the request's reading (feedback False), or a correction's on top of it."""
    if rd.node is not None:          # a new operator brings its own inputs, scalars and eps
        if st.node is not None and st.matmul != bool(ir.matmul_node(rd.node)):
            st.shapes, st.input_shapes = None, {}        # a matmul's cases are M, N, K: not comparable
        st.node, st.name, st.inputs, st.scalars, st.op_notes = rd.node, rd.name, rd.inputs, rd.scalars, rd.op_notes
        st.written = rd.written
        st.eps, st.tf32, st.batched, st.typed = rd.eps, rd.tf32, rd.batched, rd.typed
        st.pasted, st.sized_dims = rd.pasted, rd.sized_dims
        st.pasted_shapes = rd.pasted.shapes if rd.pasted and rd.pasted.shapes else rd.named_shapes
    else:
        if rd.shapes:                                # a correction's shapes replace get_inputs'
            st.pasted_shapes = None
        st.op_notes = st.op_notes + rd.op_notes          # how a correction's shapes were read
        st.eps = rd.eps if rd.eps is not None else st.eps
        st.tf32 = rd.tf32 if rd.tf32 is not None else st.tf32
    st.training = rd.training if rd.training is not None else st.training      # kept across a new operator
    # "mean instead" on "sum over dim 0" keeps the dim ("std instead" too); "make it relu" drops it
    over_a_dim = rd.node is not None and (ir.kind(rd.node) in ("reduce", "argreduce", "sort") or fused.dim_unsaid(rd.node))
    keeps_dim = feedback and over_a_dim and not rd.dims
    if (rd.node is not None or rd.dims or rd.whole) and not keeps_dim:
        st.dims, st.whole = rd.dims, rd.whole
    append = feedback and rd.append
    if rd.dtypes:
        st.dtypes = list(dict.fromkeys((st.dtypes or default_dtypes(st)) + rd.dtypes)) if append else rd.dtypes
    names = input_names(st)
    st.vectors |= {n for n in names if said_vector(n, rd.rest)}
    st.masks |= {n for n in names if said_mask(n, rd.rest) or rd.pasted and n in rd.pasted.masks or n in rd.inverted}
    _apply_shapes(st, rd, names, append, feedback)


# Words for an input by another name: "labels 4096" are cross-entropy's target.
_SYNONYMS = {"label": "target", "labels": "target"}


def _input_label(label: str | None, names: list[str]) -> str | None:
    """The input a shape's label names: itself, its singular ("targets": target) or a synonym."""
    if label is None or label in names:
        return label
    if label[:-1] in names:
        return label[:-1]
    return _SYNONYMS[label.lower()] if _SYNONYMS.get(label.lower()) in names else label


def _apply_shapes(st: State, rd: Reading, names: list[str], append: bool, feedback: bool) -> None:
    rd.shapes = [(_input_label(label, names), s) for label, s in rd.shapes]
    for label, s in rd.shapes:
        if label and label not in names and SHAPE_OWNER.fullmatch(label):
            shape = "x".join(map(str, s))
            raise GenerationError(f"you gave {label} the shape {shape}, but {label} is not an input of "
                                  f"{node_text(st.node)!r} (its inputs: {', '.join(names)}); the output's shape follows "
                                  "from the inputs'. Name the shape of an input, e.g. 'x of shape 64x128'.")
    main = main_input(st, names)
    main_new = [s for label, s in rd.shapes if label not in names or label == main]
    named_new: dict[str, list[list[int] | None]] = {}
    for label, s in rd.shapes:
        if label in names and label != main:
            named_new.setdefault(label, []).append(s)
    for n in names:
        if n != main and n not in named_new and (shape := bare_shape(n, rd.rest)):
            named_new[n] = [shape]
    if not main_new and (shape := bare_shape(main, rd.rest)):
        main_new = [shape]                       # "relu(x), x is 512"
    if main_new:
        if append:
            old = st.shapes or default_shapes(st)
            st.input_shapes = {n: per_case(s, len(old), n) + [None] * len(main_new)
                               for n, s in st.input_shapes.items()}
            st.shapes = old + main_new
        else:
            st.shapes = main_new
            if feedback:             # other inputs follow the new cases unless this correction names them
                st.input_shapes = {}
    st.input_shapes.update(named_new)


def refuse_partial_operator(st: State, rd: Reading, correction: str) -> None:
    """A correction that names an operation replaces the operator: one that drops the current
    inputs or the matmul ('scale by 0.5' on x * y, 'with relu' on a matmul) names only a part, and
    one that turns a row op into something else without saying so ('log' on softmax, 'of exp(x)'
    on a sum) may mean a part too."""
    if rd.node is None or st.node is None:
        return
    other_kind = ir.kind(rd.node) != ir.kind(st.node) and st.node.op in ir.ROOT_OPS
    if other_kind and not REPLACE.search(correction):
        raise GenerationError(f"the correction {correction.strip()[:60]!r} reads as {node_text(rd.node)!r} in place of "
                              f"{node_text(st.node)!r}. Is that what you mean? Say 'make it {node_text(rd.node)}', or write "
                              "the whole operation you want.")
    if rd.typed:
        return
    lost = [n for n in input_names(st) if n not in ir.input_names(rd.node)]
    if lost or (st.matmul and not ir.matmul_node(rd.node)):
        raise GenerationError(f"the correction {correction.strip()[:60]!r} reads as {node_text(rd.node)!r}, which drops "
                              f"{', '.join(lost) or 'the matmul'} of {node_text(st.node)!r}. Write the whole operation, "
                              f"e.g. 'make it relu({node_text(st.node)})'.")


def says_something(st: State, rd: Reading) -> bool:
    """Whether a correction says anything this reader can apply."""
    said = rd.node, rd.eps, rd.tf32, rd.whole, rd.training
    return any(v is not None for v in said) or bool(rd.dtypes or rd.shapes or rd.dims) or _names_mentioned(st, rd)


def _names_mentioned(st: State, rd: Reading) -> bool:
    """A correction like 'b 4096', 'b is a vector' or 'm is bool' is about an input's shape or dtype."""
    return any(said_vector(n, rd.rest) or bare_shape(n, rd.rest) or said_mask(n, rd.rest) for n in input_names(st))
