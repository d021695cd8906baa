"""The operation a request names in words ('softmax of x scaled by 0.5', 'matmul with bias, then
relu', 'cross entropy'), or types as an expression with words beside it. The operator words are
the families' (bot.ops.registry.WORDS) and compose as row(step(binary(x, y))); their order and the
operands they name are read by bot.request.order.
"""
from __future__ import annotations

import re

from bot import ir
from bot.generators.interface import GenerationError
from bot.ops import (attention, channel_norm, conv, fused, gather, layout, loss, norm, pointwise, pool, registry,
                     remap, scan, sort)
from bot.ops import matmul as mmf
from bot.ops.text import blank as _blank
from bot.request import order
from bot.request.expression import written_order
from bot.request.messages import SUPPORTED, node_text
from bot.request.reading import Reading
from bot.request.torch_code import refuse_other_meanings
from bot.request.vocabulary import (KEEPDIM, LINES, MATRIX, PAIRED, PAIRWISE, SCALAR_STEPS, STEP_IR_OP, TWO_TENSORS,
                                    VAGUE_NORM)
from bot.request.words import one_eps


def operator(prose: str, expr: tuple | None, rd: Reading) -> ir.Node | None:
    """Compose the operator from an expression typed in the request and/or operator words."""
    # a bare product of two inputs takes its epilogue from the words; a chain ((x @ w1) @ w2) is as typed
    bare = expr is not None and expr[0].op == ir.MATMUL and all(x.op == "input" for x in expr[0].args)
    if expr is not None and ir.matmul_node(expr[0]) and not bare:
        prose = mmf.MATMUL_WORD.sub(_blank, prose)       # "matmul a @ b + bias": the word names the expression
    if bare or (expr is None and mmf.MATMUL_WORD.search(prose)):
        return _matmul_words(prose, expr, rd)
    if expr is None and any(pattern.search(prose) for pattern, _ in loss.LOSS_WORDS):
        return _loss_words(prose, rd)
    if expr is None and loss.CLASS_LOSS.search(prose):
        return _cross_entropy_words(prose, rd)
    if expr is None and attention.ATTENTION_WORD.search(prose):
        return _family_words(lambda p: (*attention.attention_words(p), []), prose, rd,
                             "'F.scaled_dot_product_attention(q, k, v, is_causal=True)'")
    if expr is None and pool.POOL_WORD.search(prose):
        return _pool_words(prose, rd)
    if expr is None and conv.CONV_WORD.search(prose):
        return _conv_words(prose, rd)
    if expr is None and channel_norm.CHANNEL_NORM_WORD.search(prose):
        return _channel_norm_words(prose, rd)
    if expr is None and sort.SORT_WORD.search(prose):
        return _family_words(lambda p: (*sort.sort_words(p), []), prose, rd,
                             "'torch.sort(x, dim=-1, descending=True)' or 'torch.topk(x, 8, dim=-1)'")
    if expr is None and layout.LAYOUT_WORD.search(prose):
        return _layout_words(prose, rd)
    if expr is None and gather.LOOKUP_WORD.search(prose):
        return _lookup_words(prose, rd)
    if expr is None and pointwise.GATED_WORD.search(prose):
        said, rd.shapes = rd.shapes, []         # the reader gives every input's
        return _family_words(lambda p: pointwise.gated_words(p, said), prose, rd,
                             "'silu(x @ w1) * (x @ w2)' or 'silu(x) * y'")
    if expr is None and remap.REMAP_WORD.search(prose):
        ranks = {len(shape) for _, shape in rd.shapes}
        node = _family_words(lambda p: (*remap.remap_words(p, order.named_inputs(p), rd.dims, ranks), [], []), prose, rd,
                             "'torch.flip(x, [1]) + y' or 'F.pad(x, (1, 1), mode=\'reflect\')'")
        rd.dims = []                    # said in the expression
        return node
    said, (found, prose) = prose, _find_op_words(prose)
    if m := VAGUE_NORM.search(prose):
        raise GenerationError(f"which {m.group(0)!r} do you mean? Say 'L2 norm' (or L1, max, Frobenius) for a vector "
                              "norm over a dim, 'L2 normalize' for x divided by it, or 'layer norm', 'rms norm', "
                              f"'group norm', 'batch norm'. {SUPPORTED}")
    said_pair = TWO_TENSORS.search(prose)
    pair = bool(PAIRWISE.search(prose))
    rd.left = PAIRWISE.sub(_blank, prose)
    rd.pairwise = said_pair.group(0) if said_pair else None
    rows, binaries, steps, where = _by_kind(found, pair)
    if expr is not None:
        rows, body = _expression_body(expr, said, rows, binaries, steps, where, rd)
    else:
        if not (rows or binaries or steps or where):
            return None
        order.refuse_unclear_order(found, prose, said, pair)
        body = _base(prose, said, rows, binaries, where, rd)
        in_sequence = order.in_sequence(prose, [pos for pos, kind, _, _ in found if kind == "step"])
        body = _apply_steps(body, steps, rd, in_sequence)
    rows = _values_and_indices(rows, rd) if expr is None else rows
    if len(rows) > 1:
        raise GenerationError(f"I found {' and '.join(rows)}: one row operation per kernel. Which one do you want? "
                              f"Or write it as an expression, e.g. 'softmax(x * 0.5)'.")
    if rows and rows[0] in fused.WORD_OPS:
        return _fused_words(rows[0], body, said, rd)
    if rows:
        if rows[0] == "cumsum" and scan.MASKED_WORD.search(prose) and expr is None:
            body = f"where(mask, {body}, 0.0)"          # a bool mask: a where's condition is one
            rd.left = scan.MASKED_WORD.sub(_blank, rd.left)
        body = _wrap_row(rows[0], body, prose, rd)
        if rows[0] in ir.SCANS:
            rd.left = scan.FLAG_WORDS.sub(_blank, rd.left)
        if rows[0] in ir.NORMS:
            for pattern in (norm.NO_WEIGHT, norm.NO_BIAS, norm.WEIGHT_WORD, norm.BIAS_WORD):
                rd.left = pattern.sub(_blank, rd.left)
    return _parse(body)


def _by_kind(found: list[tuple[int, str, str, float | None]],
             pair: bool) -> tuple[list[str], list[str], list[tuple[str, float | None]], bool]:
    """The operator words found, by kind: (row ops, binaries, steps with their numbers, whether a
    where is named); max, min, sum and prod of a pair are elementwise binaries, of one tensor row ops."""
    rows, binaries, steps, where = [], [], [], False
    for _, kind, op, value in found:
        if kind == "paired":
            kind, op = ("binary", PAIRED[op]) if pair else ("row", op)
        if kind == "row" and op not in rows:
            rows.append(op)
        elif kind == "binary" and op not in binaries:
            binaries.append(op)
        elif kind == "step" and all(op != s[0] for s in steps):
            steps.append((op, value))
        elif kind == "where":
            where = True
    return rows, binaries, steps, where


def _expression_body(expr: tuple, said: str, rows: list[str], binaries: list[str],
                     steps: list[tuple[str, float | None]], where: bool, rd: Reading) -> tuple[list[str], str]:
    """(the row words left to apply, the body) for an expression typed in the words: words that merely
    describe it are dropped, and a step or binary named besides it is refused."""
    node, tree = expr[0], expr[1]
    used = {n.op for n in node.walk()}
    numbers = {n.value for n in node.walk() if n.op == "const"} | {n.attr("exponent") for n in node.walk()}
    rows = [r for r in rows if r not in used]           # words that merely describe the expression
    # a step or binary the words name must be one the expression holds, with the same number
    steps = [s for s in steps if STEP_IR_OP.get(s[0], s[0]) not in used or
             (s[1] is not None and s[1] not in numbers)]
    named = [s[0] for s in steps] + [b for b in binaries if b not in used]
    example = f"'{named[0]}({node_text(node)})'" if named and named[0] in ir.UNARY else "'relu(x) + y' or '(x * y) * 0.5'"
    if named:
        raise GenerationError(f"I read the expression {node_text(node)!r} but you also named "
                              f"{', '.join(named)}; write the whole operation as one expression, "
                              f"e.g. {example}.")
    refuse_other_meanings("the expression", tree, torch_only=True)
    if node.op in ir.NORMS and norm.eps_given(tree):
        rd.eps = one_eps(rd.eps, node.attr("eps"))
    body = node_text(node)
    if where and node.op in ir.COMPARE:                 # "where x > 0 take x, else y"
        a, b = order.where_branches(said, body)
        body = f"where({body}, {a}, {b})"
        rd.op_notes.append(f"where: taking {a} where {node_text(node)}, else {b}")
    return rows, body


def _parse(body: str) -> ir.Node:
    try:
        return ir.parse(body, as_written=True)
    except ir.IRError as e:
        raise GenerationError(f"{e}. {SUPPORTED}") from None


def _matmul_words(prose: str, expr: tuple | None, rd: Reading) -> ir.Node:
    """A matmul named in words, or typed bare ('a @ b'), with its epilogue in words."""
    mm = expr[0] if expr else None
    operands = tuple(x.name + (f".{mm.attr(key)}" if mm.attr(key) else "") for x, key in zip(mm.args, ("ta", "tb"))) \
        if mm else ("a", "b")
    said, (prose, epilogue) = prose, mmf.take_epilogue(prose)
    if mm is not None and mmf.triangle(mm):         # typed triu(a @ b): its triangle, as written
        epilogue = epilogue._replace(triangle=mmf.triangle(mm))
    found, rd.left = _find_op_words(prose)
    mmf.check_epilogue_order(said, [(pos, op) for pos, _, op, _ in found])
    words = [(kind, op, value) for _, kind, op, value in found]
    body = mmf.matmul_expression(epilogue, words, operands, tf32=bool(mm and mm.attr("tf32")))
    if scales := [v for _, op, v in words if op == "scale"]:
        rd.scalars["scale"] = scales[0]
    return _parse(body)


def _cross_entropy_words(prose: str, rd: Reading) -> ir.Node:
    body, prose, notes = loss.cross_entropy_words(prose)
    words, rd.left = _find_op_words(prose)
    if words:
        raise GenerationError(f"I read {body.split('(')[0]} but you also named {', '.join(w[2] for w in words)}; write "
                              "the whole operation as an expression, e.g. 'cross_entropy(logits * 0.5, target)'.")
    rd.op_notes += notes
    return _parse(body)


def _loss_words(prose: str, rd: Reading) -> ir.Node:
    rd.shapes = loss.row_target_shapes(prose, rd.shapes)
    node = _family_words(lambda p: (*loss.loss_words(p, rd.dims), []), prose, rd, "'F.mse_loss(relu(x), y)'")
    rd.dims = []                        # a cosine's: said in the expression
    return node


def _conv_words(prose: str, rd: Reading) -> ir.Node:
    """A convolution in words, and the pointwise steps said after it ('conv2d 3x3 ... then relu'):
    its fused epilogue."""
    at = conv.CONV_WORD.search(prose).start()

    def read(p: str) -> tuple:
        said = conv.conv_words(p, rd.shapes)
        rd.shapes = [s for s in rd.shapes if s[0] not in conv.PARAM_LABELS]     # said again, checked, in said[3]
        return said
    return _family_words(read, prose, rd, "'relu(conv2d(x, w, b, padding=1))'", steps_after=at)


def _channel_norm_words(prose: str, rd: Reading) -> ir.Node:
    node = _family_words(lambda p: channel_norm.norm_words(p, rd.shapes, rd.eps), prose, rd,
                         "'relu(group_norm(x, 8, weight, bias))'")
    rd.eps = None                       # said in the expression
    return node


def _pool_words(prose: str, rd: Reading) -> ir.Node:
    return _family_words(lambda p: (*pool.pool_words(p, rd.shapes), []), prose, rd,
                         "'max_pool2d(relu(x), kernel_size=2)'")


def _layout_words(prose: str, rd: Reading) -> ir.Node:
    node = _family_words(lambda p: (*layout.layout_words(p, rd.shapes, order.named_inputs(p), rd.dims), []), prose, rd,
                         "'relu(x.transpose(1, 2))' or 'torch.cat([relu(x), y], dim=1)'")
    rd.dims = []                        # said in the expression
    if node.op == layout.PERMUTE:       # the shape reader took its order, "(0, 2, 1)", for a shape
        rd.shapes = [s for s in rd.shapes if not layout.is_order(s[1])]
    return node


def _lookup_words(prose: str, rd: Reading) -> ir.Node:
    """An embedding lookup or index_select in words: the shapes it names are the table's and the indices'."""
    given, rd.shapes = rd.shapes, []
    said_at = rd.shapes_at if len(rd.shapes_at) == len(given) else None
    node = _family_words(lambda p: gather.lookup_words(p, given, rd.dims, said_at), prose, rd,
                         "'F.embedding(ids, weight)' or 'x.index_select(0, idx)'")
    rd.dims = []                        # said in the expression
    return node


def _family_words(read, prose: str, rd: Reading, example: str, steps_after: int | None = None) -> ir.Node:
    """A family's operation from its words: read(prose) gives (expression, prose left, notes, the
    shapes of the tensors it adds, as (name, shape)). steps_after: pointwise steps said after this
    position are applied to it, in order (a convolution's epilogue)."""
    try:
        body, prose, notes, shapes = read(prose)
    except ir.IRError as e:
        raise GenerationError(str(e)) from None
    rd.shapes += shapes
    return _alone(body, prose, notes, rd, example, steps_after)


def _alone(body: str, prose: str, notes: list[str], rd: Reading, example: str, steps_after: int | None = None) -> ir.Node:
    """A family's operation read from its words, with no other operator word beside it (those
    compose only as an expression), but for pointwise steps said after steps_after where given."""
    words, rd.left = _find_op_words(prose)
    if words and steps_after is not None and all(kind == "step" and pos > steps_after for pos, kind, _, _ in words):
        in_sequence = order.in_sequence(prose, [pos for pos, _, _, _ in words])
        body, words = _apply_steps(body, _by_kind(words, False)[2], rd, in_sequence), []
    if words:
        raise GenerationError(f"I read {body.split('(')[0]} but you also named {', '.join(w[2] for w in words)}; write "
                              f"the whole operation as an expression, e.g. {example}.")
    rd.op_notes += notes
    rd.written = written_order(body)      # the family's call, as torch orders it
    return _parse(body)


def _find_op_words(prose: str) -> tuple[list[tuple[int, str, str, float | None]], str]:
    """The operator words in prose, in order, and prose with them blanked."""
    found = []
    for pattern, kind, op in registry.WORDS:
        for m in pattern.finditer(prose):
            # named groups are keyword arguments ('softplus with beta 2 and threshold 10')
            keywords = tuple((k, float(v)) for k, v in m.groupdict().items() if v is not None)
            value = keywords or next((float(g) for g in m.groups() if g is not None), None)
            found.append((m.start(), kind, op, value))
        prose = pattern.sub(_blank, prose)
    if any(op == "gelu_tanh" for _, _, op, _ in found):      # "gelu with tanh approximation" is one gelu
        found = [f for f in found if f[2] != "gelu"]
    return sorted(found), prose


def _base(prose: str, said: str, rows: list[str], binaries: list[str], where: bool, rd: Reading) -> str:
    """The operand(s) the words name: x, or a binary of the inputs they name in their order."""
    if len(binaries) > 1:
        raise GenerationError(f"I found {' and '.join(binaries)}; which one do you want? "
                              f"Or write it as an expression, e.g. 'x * y + z'.")
    if binaries:
        op = binaries[0]
        if op == "mul" and MATRIX.search(prose):
            rd.op_notes.append("read 'multiply' as elementwise x * y; for a matrix product say 'matmul'")
        # "add then rmsnorm": the fused residual add; "add a bias": x + bias, a vector
        other = ("residual" if op == "add" and set(rows) & ir.NORMS else
                 "bias" if op == "add" and norm.BIAS_WORD.search(said) else "y")
        first, other = order.operands(prose, op, other)
        return f"{first} {order.SYMBOL[op]} {other}" if op in order.SYMBOL else f"{op}({first}, {other})"
    if where and not rows:
        raise GenerationError("where needs a condition: which one? e.g. 'where(x > 0, x, y)'")
    named = list(dict.fromkeys(order.named_inputs(prose)))
    if len(named) > 1:
        raise GenerationError(f"I read one input but you named {', '.join(named)}; write the operation as an "
                              f"expression of them, e.g. 'relu({named[0]} + {named[1]})'.")
    return named[0] if named else "x"


def _apply_steps(body: str, steps: list[tuple[str, float | None]], rd: Reading, in_sequence: bool) -> str:
    """The steps around the body: in the order said where words join them in sequence ('relu6 then
    hardtanh'), else at most one activation and one scalar step (scale, clamp, ...)."""
    plain = [op for op, _ in steps if op not in SCALAR_STEPS]
    if not in_sequence and (len(plain) > 1 or len(steps) - len(plain) > 1):
        raise GenerationError(f"I found {', '.join(op for op, _ in steps)}; in which order? Write it as an "
                              f"expression, e.g. '{steps[1][0]}({steps[0][0]}({body}))'.")
    for op, value in steps:
        if op == "scale":
            body, rd.scalars["scale"] = f"({body}) * {value!r}", value
        elif op == "divide":
            body, rd.scalars["divisor"] = f"({body}) / {value!r}", value
        elif op in ("square", "cube", "pow"):
            body = f"({body}) ** {({'square': 2.0, 'cube': 3.0}.get(op, value))!r}"
        elif op == "gelu_tanh":
            body = f"gelu({body}, approximate='tanh')"
        elif op == "squared_relu":
            body = f"relu({body}) ** 2.0"
        elif op == "clamp":
            if "min" not in rd.scalars and "max" not in rd.scalars:
                raise GenerationError("clamp needs bounds: which range? e.g. 'clamp x to [-1, 1]'")
            body = f"clamp({body}, {rd.scalars.pop('min', None)!r}, {rd.scalars.pop('max', None)!r})"
        elif isinstance(value, tuple):        # keywords: "softplus with beta 2 and threshold 10"
            body = f"{op}({body}, {', '.join(f'{k}={v!r}' for k, v in value)})"
        else:           # an activation's one parameter, where said: "leaky relu with slope 0.2"
            body = f"{op}({body}{'' if value is None else f', {value!r}'})"
    return body


# "max with indices", "the values and indices of the max", "min and its index", "最大值及其索引"
WITH_INDICES_WORD = re.compile(r"\b(?:with|and)\s+(?:its\s+|their\s+|the\s+)?ind(?:ices|ex(?:es)?)\b|"
                               r"\bvalues?\s+and\s+(?:their\s+|the\s+)?ind(?:ices|ex(?:es)?)\b|(?:及其|和)(?:索引|下标)", re.I)


def _values_and_indices(rows: list[str], rd: Reading) -> list[str]:
    """'max and argmax', 'min with its index', 'values and indices of the max': torch.max(x, dim)
    whole, max_with_indices (its indices said as argmax's words, or as 'with (its) indices')."""
    extremes = [r for r in rows if r in ("max", "min")]
    said = set(rows) - set(extremes) == {f"arg{extremes[0]}"} if len(extremes) == 1 else False
    if len(extremes) == 1 and (said or (len(rows) == 1 and WITH_INDICES_WORD.search(rd.left))):
        rd.left = WITH_INDICES_WORD.sub(_blank, rd.left)
        return [f"{extremes[0]}_with_indices"]
    return rows


def _wrap_row(op: str, body: str, prose: str, rd: Reading) -> str:
    if op in ir.SCANS:
        return f"{op}({body}{scan.flags_in_words(prose, op)})"
    if op in ir.REDUCE | ir.ARG_REDUCE:
        return f"{op}({body}{', keepdim=True' if _keeps_dim(rd) else ''})"
    if op not in ir.NORMS:
        return f"{op}({body})"
    extras = norm.extras_in_words(op, prose, rd.op_notes)
    return f"{op}({', '.join([body, *extras])}, eps={ir.DEFAULT_EPS[op]!r})"   # eps is settled when building


def _keeps_dim(rd: Reading) -> bool:
    """Whether the words keep a reduction's dim ('keeping the dim'), taking them."""
    said = bool(KEEPDIM.search(rd.left))
    rd.left = KEEPDIM.sub(_blank, rd.left)
    return said


NORMALIZED_LINE = re.compile(r"\b(rows?|columns?)\b", re.I)


def _fused_words(op: str, body: str, said: str, rd: Reading) -> ir.Node:
    """A reduction of the fused family named in words ('variance', 'L2 norm', 'L1 normalize'), its
    dim left to the words' (bot.request.build settles it): a Frobenius norm with no dim said is
    over every element."""
    keep = op != "normalize" and _keeps_dim(rd)
    try:
        node, notes = fused.words_node(op, _parse(body), said, keep, rd.eps)
    except ir.IRError as e:
        raise GenerationError(f"{e} {SUPPORTED}") from None
    if op == "normalize":
        rd.eps = None                       # said in the expression
        # "L2 normalize the rows", and the rows said inside its words: "normalize each row by its L2 norm"
        said_lines = "".join(m.group(0) for m in fused.NORMALIZE_WORD.finditer(said))
        rd.dims += [-1 if m.group(1).lower().startswith("row") else -2
                    for m in (*LINES.finditer(rd.left), *NORMALIZED_LINE.finditer(said_lines))]
        rd.left = LINES.sub(_blank, rd.left)
    if op == "norm" and fused.FROBENIUS.search(said) and not (rd.dims or rd.whole):
        rd.whole = "Frobenius"
    if op in ("var", "std"):
        rd.left = fused.CORRECTION_WORD.sub(_blank, rd.left)
    rd.op_notes += notes
    return node
