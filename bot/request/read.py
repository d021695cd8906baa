"""One text (the request or one correction) -> a Reading.

The passes run in order: the code split from the prose, dtypes, what is out of scope, an expression
typed in the words, dims, scalars, shapes (a matmul's as its problem sizes), the words of a
correction; then the operator, from pasted code (bot.request.pasted) or from the expression and the
operator words (bot.request.operation). What no pass placed must be filler (bot.request.residue),
else the text is refused naming it. A correction is read against the state it applies to: its
inputs' names, its matmul.
"""
from __future__ import annotations

import ast
import re

from bot import ir
from bot.generators.interface import GenerationError
from bot.ops import loss
from bot.ops import matmul as mmf
from bot.ops.text import blank as _blank, blank_range
from bot.request import pasted_module, residue
from bot.request.expression import find_expression, inverted_names, written_order
from bot.request.messages import CORRECTION_HELP, SUPPORTED, node_text
from bot.request.operation import operator
from bot.request.pasted import read_code, split_code
from bot.request.reading import Reading
from bot.request.state import State, input_names
from bot.request.vocabulary import APPEND, CORRECTION_WORDS, WHERE_CLAUSE
from bot.request.words import (bare_shape, bare_shape_phrase, mask_phrase, operand_order, refuse_out_of_scope, take_dims,
                               take_dtypes, take_scalars, take_shapes, take_training, vector_phrase)


def read(text: str, feedback: bool, context: State | None = None) -> Reading:
    """context: the state a correction applies to (its matmul reads shapes as M, N, K)."""
    rd = Reading()
    code, prose = split_code(text)
    tree = _syntax(code)
    init_said, prose = pasted_module.init_words(tree, prose) if tree is not None else ({}, prose)
    matmul = bool(mmf.MATMUL_WORD.search(text)) or bool(context and context.node and ir.matmul_node(context.node))
    rd.batched = bool(mmf.BATCHED_WORD.search(text)) or bool(context and context.batched)
    if matmul:
        prose, rd.tf32 = mmf.take_tf32(prose)
    prose = take_training(take_dtypes(loss.take_index_dtype(prose), rd), rd)
    expr = None if code is not None else find_expression(prose)
    matmul = matmul or (expr is not None and ir.matmul_node(expr[0]) is not None)    # torch.einsum('ij,jk->ik', ..)
    # A typed call (conv2d(x, w)) is read as written, whatever words it holds; 'top-k' is no call.
    called = expr is not None and "(" in prose[expr[2]:expr[3]]
    refuse_out_of_scope(blank_range(prose, expr[2], expr[3]) if called else prose, _code_names(tree, expr))
    if expr is not None:
        prose = blank_range(prose, expr[2], expr[3])
    prose = WHERE_CLAUSE.sub(_blank, take_dims(prose, rd))
    prose = take_scalars(prose, rd)
    if matmul:
        prose, batch = mmf.take_sizes(prose, rd.batched)
    prose = take_shapes(prose, rd)
    if feedback:                 # "gelu instead", "only 32x32": a correction replaces what it names
        prose = CORRECTION_WORDS.sub(_blank, prose)
    if feedback and (rd.shapes or rd.dtypes) and APPEND.search(prose):
        rd.append = True
        prose = APPEND.sub(_blank, prose)
    rd.typed = code is not None or expr is not None
    if expr is not None:
        rd.written = written_order(ast.unparse(expr[1]))     # unparsed: rewritten nodes carry no position
        rd.inverted = inverted_names(expr[1])
    if code is not None:
        read_code(code, rd, list(rd.shapes), init_said)
        if matmul and not (rd.pasted and rd.pasted.shapes):     # cases are problem sizes [B,] M, N, K, unless
            # the module's get_inputs or the words give its inputs' own shapes (each by name)
            _matmul_cases(rd, batch, prose)
        rd.left = prose
    else:
        prose = _take_label(prose, expr, rd)
        rd.node = operator(prose, expr, rd)
        if matmul:
            _matmul_cases(rd, batch, prose)
            if rd.named_shapes and rd.node is not None:
                rd.node = mmf.vector_products(rd.node, rd.named_shapes)
    if rd.tf32 is None and rd.node is not None and (mm := ir.matmul_node(rd.node)) and mm.attr("tf32"):
        rd.tf32 = True
    rd.rest = prose
    if rd.node is not None:
        if rd.typed:
            _refuse_other_dtypes(rd.node)
    if rd.node is not None or feedback:
        names = ir.input_names(rd.node) if rd.node is not None else input_names(context) if context else []
        _refuse_unplaced(rd, names, text, feedback)
    return rd


def _take_label(prose: str, expr: tuple | None, rd: Reading) -> str:
    """'swiglu: silu(x @ w1) * (x @ w2)': a word and a colon just before a typed expression name it
    (the spec's name), as a def's name does."""
    if expr is not None and (m := _LABEL.search(prose[:expr[2]])):
        rd.name = m.group(1).lower()
        prose = blank_range(prose, m.start(), m.end())
    return prose


_LABEL = re.compile(r"^\s*([A-Za-z_][\w-]*)\s*:\s*$")


def _syntax(code: str | None) -> ast.Module | None:
    """The pasted code's tree, for the words read beside it; None without code, or where it does not
    parse (read_code says why)."""
    try:
        return ast.parse(code) if code is not None else None
    except SyntaxError:
        return None


def _code_names(tree: ast.Module | None, expr: tuple | None) -> set[str]:
    """The identifiers of the pasted code or the typed expression: words that name its tensors."""
    if expr is not None:
        return set(ir.input_names(expr[0]))
    nodes = list(ast.walk(tree)) if tree is not None else []
    return {n.id for n in nodes if isinstance(n, ast.Name)} | {n.arg for n in nodes if isinstance(n, ast.arg)}


def _matmul_cases(rd: Reading, batch: int | None, prose: str) -> None:
    """A matmul's cases: its problem sizes [B,] M, N, K; or, where a typed expression's every input
    is given one shape by name ('x 2048x4096, w1 4096x11008, w2 4096x11008', 'b 512'), those shapes
    as they are (a chain of products has no one M, N, K; an epilogue input may be any broadcast
    shape)."""
    names = ir.input_names(rd.node) if rd.node is not None and rd.typed else []
    named = [(_operand_label(label, names, rd.shapes), s) for label, s in rd.shapes]
    named += [(n, shape) for n in names if n not in dict(named) and (shape := bare_shape(n, prose))]
    labels = [label for label, _ in named]
    if names and None not in labels and sorted(labels) == sorted(names):
        rd.named_shapes, rd.shapes = dict(named), []
        return
    if rd.node is not None and rd.node.op == ir.MATMUL and _operands(rd.node, rd.shapes):
        rd.named_shapes = {x.name: s for x, (_, s) in zip(rd.node.args, rd.shapes)}
        rd.shapes = []
        return
    rd.shapes = [(None, p) for p in mmf.problems(operand_order(rd.shapes), rd.batched, batch, rd.op_notes)]


def _operands(mm: ir.Node, shapes: list[tuple[str | None, list[int]]]) -> bool:
    """Two shapes that are a bare product's operands as they lie in memory, where no M, N, K says
    them: a transposed one ('a @ b.T for 512x256 by 512x256'), or a 3-D or 4-D a by one 2-D b
    ('16x1024x2048 by 2048x768')."""
    if len(shapes) != 2 or any(len(s) < 2 for _, s in shapes):
        return False
    (_, a), (_, b) = shapes
    transposed = bool(mm.attr("ta") or mm.attr("tb"))
    if not transposed and not (len(a) in (3, 4) and len(b) == 2):
        return False
    try:
        a, b = (mmf.logical(s, mm.attr(key)) for s, key in ((a, "ta"), (b, "tb")))
    except ir.IRError:
        return False
    return a[-1] == b[-2] and (len(b) == 2 or a[:-2] == b[:-2])


def _operand_label(label: str | None, names: list[str], shapes: list) -> str | None:
    """A shape's label, where 'with a 1024x4096' labelled it 'with': the article a is the input a (or A)."""
    a = next((n for n in names if n.lower() == "a"), None)
    if label in names or a is None or any(other == a for other, _ in shapes):
        return label
    return a if label is not None and _FILLER.fullmatch(label) else label


_FILLER = re.compile(r"with|of|is|has|and", re.I)


def _refuse_other_dtypes(node: ir.Node) -> None:
    """Code whose PyTorch result is not a float of the inputs' dtype: a comparison (bool) but under
    any or all, a sum or mean of one (int64, or an error), a where of two constants (the constants'
    dtype)."""
    body = node.args[0] if node.op in ir.ROOT_OPS else node
    if body.op in ir.COMPARE and node.op not in ir.LOGICAL:
        what = "a bool tensor" if body is node else f"{node.op} of a bool tensor (int64, or an error)"
        raise GenerationError(f"{node_text(node)!r} gives {what} in PyTorch, and the offline kernels return the inputs' "
                              "float dtype; multiply by 1.0 or use where(cond, x, y) to stay in it.")
    for sub in node.walk():
        if sub.op == "where" and sub.args[1].op == sub.args[2].op == "const":
            raise GenerationError(f"{node_text(sub)!r} takes the dtype of its constants in PyTorch, not the inputs'; "
                                  "write one branch with an input, e.g. where(x > 0, x * 0.0 + 1.0, x * 0.0).")


def _refuse_unplaced(rd: Reading, names: list[str], text: str, feedback: bool) -> None:
    """Every word must be placed in the spec: refuse, naming them, where some are not."""
    left = rd.left
    for n in names:
        left = re.sub(vector_phrase(n), _blank, left, flags=re.I)
        left = re.sub(mask_phrase(n), _blank, left, flags=re.I)
        left = re.sub(bare_shape_phrase(n), _blank, left, flags=re.I)
    words = residue.unplaced(left, set(names))
    if words:
        quoted = ", ".join(repr(w.strip()) for w in words[:6])
        if feedback:
            raise GenerationError(f"I could not apply the correction {text.strip()[:80]!r}: I could not place {quoted}. "
                                  f"{CORRECTION_HELP}", unplaced=[w.strip() for w in words])
        sizes = next((w for w in words if re.fullmatch(r"[\d\sx×*]+", w.strip())), None)
        ask = (f" If {sizes.strip()} is a tensor's shape, say so ('of a {sizes.strip()} tensor'); the sizes of windows, "
               "kernels and strides are not shapes." if sizes else "")
        raise GenerationError(f"I could not place {quoted} of {text.strip()[:80]!r} in any operation I know, so I did "
                              f"not guess.{ask} {SUPPORTED}", unplaced=[w.strip() for w in words])
    if rd.pairwise and rd.node is not None and len(ir.input_names(rd.node)) < 2:
        raise GenerationError(f"you named two tensors, but I read {node_text(rd.node)!r}, which has one input; "
                              f"write the operation as an expression of both, e.g. 'mean(abs(x - y), "
                              f"dim=-1)'. {SUPPORTED}", unplaced=[rd.pairwise])
