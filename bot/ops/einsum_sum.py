"""torch.einsum that is no matrix product ('i,j->ij', 'bi,bi->b', 'bhd,hd->bh', 'ij->ji'), written as
the product of its operands laid out over every index (each permuted to the output's indices first,
then those summed away, a unit dim where it lacks one) summed over the indices the output drops: a
broadcast multiply and one reduction, which the pointwise and reduction families fuse. Matrix
products stay with the matmul family (bot.ops.matmul), on the tensor cores.
"""
from __future__ import annotations

import ast
from typing import Callable

from bot.ops.node import IRError, Node, inp, substitute

_OPERAND = "einsum_operand_{}"      # placeholders the written expression reads each operand through


def summed_product(equation: str, operands: list[str], out: str, nodes: list[Node],
                   expr: Callable[[ast.expr], Node]) -> Node:
    """The einsum equation (operands' subscripts and the output's, no '...', no index repeated within
    one) of nodes, as a broadcast product summed over the dropped indices."""
    if any(x not in "".join(operands) for x in out) or len(set(out)) != len(out):
        raise IRError(f"einsum {equation!r}: every output index must come from an operand, once")
    every = out + "".join(dict.fromkeys(x for x in "".join(operands) if x not in out))
    factors = [_laid_out(_OPERAND.format(k), subscripts, every) for k, subscripts in enumerate(operands)]
    text = " * ".join(factors)
    if len(every) > len(out):
        text = f"({text}).sum(dim={tuple(range(len(out), len(every)))})"
    node = expr(ast.parse(text, mode="eval").body)
    for k, n in enumerate(nodes):
        node = substitute(node, inp(_OPERAND.format(k)), n)
    return node


def _laid_out(name: str, subscripts: str, every: str) -> str:
    """The operand's dims in the order of `every`, a unit dim for each index it lacks."""
    order = sorted(range(len(subscripts)), key=lambda d: every.index(subscripts[d]))
    text = name if order == list(range(len(order))) else f"{name}.permute({', '.join(map(str, order))})"
    held = sorted(subscripts, key=every.index)
    for k, x in enumerate(every):
        if x not in held:
            text = f"{text}.unsqueeze({k})"
    return text
