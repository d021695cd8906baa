"""Reading: what one text (the request or one correction) says. bot.request.read fills it with the
passes of bot.request.words and the operator readers (bot.request.operation, bot.request.pasted);
bot.request.merge applies it on top of what the request and earlier corrections said.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from bot import ir
from bot.request.pasted_module import Pasted


@dataclass
class Reading:
    """What one text (the request or one correction) says; None/empty where it is silent."""
    node: ir.Node | None = None
    name: str | None = None                  # a pasted function's name
    inputs: list[str] | None = None          # a pasted function's tensor parameters, in order
    written: list[str] = field(default_factory=list)   # a typed expression's names, in the order typed
    inverted: set[str] = field(default_factory=set)    # a typed expression's names under ~: bool masks
    scalars: dict[str, float] = field(default_factory=dict)
    op_notes: list[str] = field(default_factory=list)
    eps: float | None = None
    dtypes: list[str] = field(default_factory=list)
    shapes: list[tuple[str | None, list[int]]] = field(default_factory=list)   # (label, shape)
    shapes_at: list[tuple[int, int]] = field(default_factory=list)     # where in the text the shapes read were said
    append: bool = False
    dims: list[int] = field(default_factory=list)
    whole: str | None = None                 # "over all elements": no one dim
    tf32: bool | None = None
    training: bool | None = None             # "for training": the backward too; "forward only": not
    batched: bool = False
    rest: str = ""                           # prose left over, for phrases about named inputs
    left: str = ""                           # prose no pass placed: must be filler (bot.request.residue)
    pairwise: str | None = None              # "two tensors", "between", "x and y": more than one input
    typed: bool = False                      # the operator came from code or an expression typed in it
    pasted: Pasted | None = None             # a pasted nn.Module (its reference is the pasted file)
    named_shapes: dict[str, list[int]] | None = None   # a typed matmul expression's inputs' shapes, by name
    sized_dims: dict[str, list[int]] = field(default_factory=dict)   # dims whose size the code reads as a number
