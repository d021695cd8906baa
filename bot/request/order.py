"""The order of operation words in a request, and the operands they name.

Words compose as row(step(binary(x, y))): 'softmax of x scaled by 0.5', 'add x and y, then
relu'. Where the order of the words says otherwise ('x squared plus y' is x ** 2 + y; 'log of
softmax' is log applied after softmax) or may, the parser refuses and asks for an expression,
rather than composing the operations some other way than the person meant.
"""
from __future__ import annotations

import re

from bot import ir
from bot.generators.interface import GenerationError
from bot.ops import pointwise
from bot.ops.text import FLAGS as _F

SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
# Words that put operations in sequence: "add, then relu", "fused add + rmsnorm", "exp 再求和".
_SEQ = re.compile(r"\bthen\b|\bfollowed\s+by\b|\bafter(?:wards|\s+that)?\b|\band\s+(?:finally|apply|take)\b|[,+&]|"
                  r"然后|之?后|再|并|的", _F)        # Chinese A 的 B is B of A: applied in text order


def named_inputs(prose: str) -> list[str]:
    """Single-letter input names in the words ('x', 'w1'), in order; 'a' only beside a 'b'."""
    names = re.findall(r"(?<![\w.-])([A-Za-z]\d*)(?![\w.-])", prose)
    return [n for n in names if n != "I" and (n != "a" or "b" in names)]


_BRANCHES = [re.compile(p, _F) for p in (
    r"\b(?:take|use|choose|pick|return|gives?)\s+([A-Za-z]\d*)\b.*?\b(?:else|otherwise)\s+([A-Za-z]\d*)\b",
    r"\b([A-Za-z]\d*)\s+where\b.*?\b(?:else|otherwise)\s+([A-Za-z]\d*)\b")]


def where_branches(prose: str, cond: str) -> tuple[str, str]:
    """'where x > 0 take x, else y' and 'x where x > 0 else y': the branches as written."""
    for pattern in _BRANCHES:
        if m := pattern.search(prose):
            return m.group(1), m.group(2)
    raise GenerationError(f"where {cond}: take what, and what else? Write it as where(cond, a, b), "
                          f"e.g. 'where({cond}, x, y)'.")


def operands(prose: str, op: str, other: str) -> tuple[str, str]:
    """The binary's operands as the words name them ('y minus x', 'subtract x from y' is y - x,
    'a and b'), else x and `other`; more names than two, or one named once, are refused."""
    names = named_inputs(prose)
    distinct = list(dict.fromkeys(names))
    if not distinct:
        return "x", other
    if len(distinct) == 1 and other != "y":
        return distinct[0], other                            # "add x and a bias"
    if len(distinct) == 1 and len(names) > 1:
        return distinct[0], distinct[0]                      # "x times x"
    if len(distinct) != 2:
        raise GenerationError(f"{op} takes two operands, but I read {', '.join(distinct)}; write it as an expression, "
                              f"e.g. '{distinct[0]} {SYMBOL.get(op, '+')} y'.")
    first, second = distinct
    if op == "sub" and re.search(rf"\b{first}\b\W+from\W+\b{second}\b", prose):
        first, second = second, first
    return first, second


def in_sequence(prose: str, positions: list[int]) -> bool:
    """Whether words join each pair of neighbouring positions in text order ('relu6 then hardtanh';
    not 'relu6 after hardtanh', nor a bare list 'relu6, hardtanh')."""
    return all(_THEN.search(prose, a, b) for a, b in zip(positions, positions[1:]))


_THEN = re.compile(r"\bthen\b|\bfollowed\s+by\b|->|→|然后|再|之后", _F)


def refuse_unclear_order(found: list[tuple[int, str, str, float | None]], prose: str, said: str, pair: bool) -> None:
    """Words compose as row(step(binary(x, y))). Where their order says otherwise, or may, refuse:
    a step before the binary unless 'of the' it ('relu of the sum of x and y'; 'x squared plus y' is
    x ** 2 + y), after it only in sequence ('add x and y, then relu'; 'x times sigmoid of x' is
    not sigmoid(x * y)); a step or binary before a row op only in sequence ('exp then sum',
    'fused add + rmsnorm'; 'log of softmax', 'x minus its mean' are not), and nothing in sequence
    after it ('sum of exp' is fine, 'sum, then sqrt' is not expressible)."""
    kinds = [(pos, ("binary" if pair else "row") if kind == "paired" else kind, op)
             for pos, kind, op, _ in found]
    binary = next(((pos, op) for pos, kind, op in kinds if kind == "binary"), None)
    row = next(((pos, op) for pos, kind, op in kinds if kind == "row"), None)
    for pos, kind, op in kinds:
        if kind == "step" and binary:
            _check_step_and_binary(prose, pos, op, *binary, said)
        if kind in ("step", "binary") and row:
            seq = (_SEQ.search(prose, min(pos, row[0]), max(pos, row[0])) or _and_joined(prose, pos, row[0])
                   or _add_then_norm(prose, said, pos, op, *row))
            if pos < row[0] and not seq:
                raise GenerationError(f"I read {op} before {row[1]}: {op} of the {row[1]}'s result is not supported "
                                      f"(it must be the outermost operation), and {row[1]} of {op} is written e.g. "
                                      f"'{op} then {row[1]}' or as an expression.")
            if pos > row[0] and seq:
                raise GenerationError(f"{op} after the {row[1]} is not supported: the reduction or row operation must be "
                                      "the outermost operation, over a pointwise body, e.g. 'sum(exp(x)) over the last dim'.")


def _add_then_norm(prose: str, said: str, pos: int, op: str, at: int, row: str) -> bool:
    """'add rmsnorm', 'residual add layernorm': the fused op's usual name ('x plus rmsnorm of y' is not)."""
    return (op == "add" and row in ir.NORMS and pos < at and said[pos:pos + 3].lower() == "add"
            and not prose[pos:at].split(";", 1)[1].strip(" ;"))


def _and_joined(prose: str, start: int, end: int) -> bool:
    """Two operation words joined by 'and' alone: 'bias add and gelu' (not 'add x and relu of y')."""
    return bool(re.fullmatch(r";[\s;]*\band\b[\s;]*(?:then\b[\s;]*)?", prose[start:end], re.I))


def _check_step_and_binary(prose: str, pos: int, op: str, at: int, binary: str, said: str) -> None:
    if pos < at and re.fullmatch(r"\W*\w*\W+of\s+the\s*", prose[pos:at], re.I):
        return
    if pos > at and (_SEQ.search(prose, at, pos) or _and_joined(prose, at, pos)):
        return
    bias = re.match(rf"bias{pointwise.BIAS_THEN}", said[at:], re.I)
    if bias and at + bias.end() == pos:             # "bias gelu": the add, then the gelu
        return
    example = ("'x ** 2 + y' or '(x + y) ** 2'" if op in ("square", "cube", "pow", "scale", "divide")
               else f"'{op}(x) + y' or '{op}(x + y)'")
    raise GenerationError(f"I found {op} {'before' if pos < at else 'after'} {binary}: does {op} apply to one operand "
                          f"or to the result? Write it as an expression, e.g. {example}.")
