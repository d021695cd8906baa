"""State: what the request and the corrections read so far say together, and what is asked of it:
the operator's input names, its main input (whose shape is a case's shape), which inputs are
broadcast vectors, another input's shapes one per case, and the dtypes and shapes taken when none
are named.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from bot import ir
from bot.generators.interface import GenerationError
from bot.ops import matmul as mmf
from bot.ops import pointwise
from bot.request.pasted_module import Pasted
from bot.request.vocabulary import VECTOR_NAME
from runner import protocol

DEFAULT_SHAPES: list[list[int]] = [[4096, 4096], [5333, 497]]   # square, and odd: no block size divides it


@dataclass
class State:
    """What the request and the corrections read so far say together; None/empty where they are silent."""
    node: ir.Node | None = None
    name: str | None = None
    inputs: list[str] | None = None
    written: list[str] = field(default_factory=list)     # a typed expression's names, in the order typed
    scalars: dict[str, float] = field(default_factory=dict)
    op_notes: list[str] = field(default_factory=list)
    eps: float | None = None
    dtypes: list[str] | None = None
    shapes: list[list[int]] | None = None            # one per case, for the main input
    input_shapes: dict[str, list[list[int] | None]] = field(default_factory=dict)   # other inputs' given shapes
    vectors: set[str] = field(default_factory=set)   # inputs said to be vectors
    masks: set[str] = field(default_factory=set)     # inputs said to be bool masks, or made so by get_inputs
    dims: list[int] = field(default_factory=list)
    whole: str | None = None
    tf32: bool | None = None
    training: bool | None = None                     # the forward and its backward (bot.training)
    batched: bool = False
    typed: bool = False                              # the operator came from code or a typed expression
    pasted: Pasted | None = None                     # the pasted module the operator came from
    pasted_shapes: dict[str, list[int]] | None = None   # get_inputs' shapes (or named ones), until a correction gives others
    sized_dims: dict[str, list[int]] = field(default_factory=dict)   # per input, dims the code read sizes of

    @property
    def matmul(self) -> bool:
        return self.node is not None and ir.matmul_node(self.node) is not None


def input_names(st: State) -> list[str]:
    """The operator's inputs: a pasted function's tensor parameters, or the tree's inputs in the order
    the request typed them (the kernel's signature: F.kl_div(x, y) takes x first, though its formula
    reads y first), the rest in the tree's order."""
    if st.inputs:
        return st.inputs
    typed = {n: k for k, n in enumerate(st.written)}
    return sorted(ir.input_names(st.node), key=lambda n: typed.get(n, len(typed)))


def is_vector(st: State, n: str, names: list[str]) -> bool:
    """Whether input n is a broadcast vector of the last dim (said so, a norm's weight or bias, or named so)."""
    if n in st.vectors or (st.node.op in ir.NORMS and n in {a.name for a in st.node.args[1:]}):
        return True
    # "a + b" names a pair, not a bias
    return len(names) > 1 and bool(VECTOR_NAME.fullmatch(n)) and not (n == "b" and "a" in names)


def mask_inputs(st: State) -> set[str]:
    """The bool mask inputs: said or made so, or standing as a where's condition (torch.where(m, x, y))."""
    return st.masks | pointwise.where_conditions(st.node)


def main_input(st: State, names: list[str]) -> str:
    """The input whose shape is a case's shape: the first one that is neither a broadcast vector,
    class indices nor a mask."""
    other = set(ir.index_inputs(st.node)) | mask_inputs(st)
    return next((n for n in names if not is_vector(st, n, names) and n not in other), names[0])


def per_case(shapes: list, count: int, name: str) -> list:
    """One shape per case: shapes as given, or the one shape for every case."""
    if len(shapes) == count:
        return shapes
    if len(shapes) == 1:
        return shapes * count
    raise GenerationError(f"{name} has {len(shapes)} shapes but there are {count} cases; "
                          "give it one shape per case, or one for all")


def default_dtypes(st: State) -> list[str]:
    """The dtypes tested when none is named."""
    if st.matmul:
        return ["float32"] if st.tf32 else list(mmf.MATMUL_DTYPES)
    return list(protocol.DTYPES)


def default_shapes(st: State) -> list[list[int]]:
    """The cases taken when no shape is named: a matmul's problem sizes, else DEFAULT_SHAPES."""
    if st.matmul:
        return mmf.BMM_DEFAULTS if st.batched else mmf.MATMUL_DEFAULTS
    return DEFAULT_SHAPES
