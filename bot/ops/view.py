"""Views: unsqueeze, squeeze, flatten and reshape/view to unit dims. They move no data, so no kernel
is written for one: in a chain (bot.ops.chain) a view is a stage of its own whose operand is an input
or an earlier stage's output, and the entry takes the view of that tensor (`stage0.unsqueeze(1)`)
before handing it to the next kernel, whose family then reads an ordinary input of the new shape
(broadcast where it has unit dims). `A.unsqueeze(1) * B` is one pointwise kernel over a view of A;
`max_pool1d(relu(x @ w).unsqueeze(1)).squeeze(1)` is a matmul kernel and a pooling kernel.

Reshapes are read where every size is 1 or -1 (inserting or removing unit dims, `bias.view(1, -1, 1, 1)`)
and flatten over any dims: sizes written as other numbers would not follow the odd and shrunk sizes
the runner draws.
"""
from __future__ import annotations

import ast
import math

from bot.ops.entry import Entry
from bot.ops.node import Call, IRError, Node, arguments, call, is_int_literal, is_none, number, prints

NAME = "view"
UNSQUEEZE, SQUEEZE, FLATTEN, RESHAPE = "unsqueeze", "squeeze", "flatten", "reshape"
OPS = {UNSQUEEZE, SQUEEZE, FLATTEN, RESHAPE}
ROOT = False
SUPPORTED = ("", "views of a tensor between kernels (unsqueeze, squeeze, flatten, reshape/view to unit dims)")
ALIASES = {"view": RESHAPE}
KEYWORDS = {UNSQUEEZE: {"dim"}, SQUEEZE: {"dim"}, FLATTEN: {"start_dim", "end_dim"}, RESHAPE: {"shape"}}
WORDS: list = []
OUTPUT_DTYPES: dict[str, str] = {}
ENTRIES: tuple[Entry, ...] = ()
MAX_RANK = 5
MAX_NUMEL = 2**31 - 1


def convert(c: Call) -> Node | None:
    if c.fname not in OPS:
        return None
    if not c.args:
        raise IRError(f"{c.fname} needs a tensor, e.g. x.{c.fname}(...)")
    x = c.expr(c.args[0])
    if x.op == "const":
        raise IRError(f"{c.fname} of a number: write the number itself")
    c = Call(c.fname, c.written, c.args[1:], c.kw, c.expr)
    if c.fname == UNSQUEEZE:
        return call(UNSQUEEZE, x, dim=_int(c, arguments(c, ("dim",)).get("dim"), "dim"))
    if c.fname == SQUEEZE:
        given = arguments(c, ("dim",)).get("dim")
        return call(SQUEEZE, x, dim=None if is_none(given) else _int(c, given, "dim"))
    if c.fname == FLATTEN:
        given = arguments(c, ("start_dim", "end_dim"))
        return call(FLATTEN, x, start=_int(c, given.get("start_dim", ast.Constant(0)), "start_dim"),
                    end=_int(c, given.get("end_dim", ast.Constant(-1)), "end_dim"))
    return call(RESHAPE, x, sizes=_sizes(c))


def _int(c: Call, n: ast.expr | None, what: str) -> int:
    if n is None or not is_int_literal(n):
        raise IRError(f"{c.fname} takes {what} as an integer, e.g. x.{c.fname}(1); got "
                      f"{'nothing' if n is None else repr(ast.unparse(n))}")
    return int(number(n))


def _sizes(c: Call) -> tuple[int, ...]:
    """reshape's sizes: x.view(1, -1, 1), x.view((1, -1)) or shape=(...); each 1 or -1, one -1 at most."""
    written = c.kw.pop("shape", None)
    elts = list(c.args) if written is None else [written]
    if len(elts) == 1 and isinstance(elts[0], (ast.Tuple, ast.List)):
        elts = list(elts[0].elts)
    if not elts or not all(is_int_literal(e) and number(e) in (1, -1) for e in elts) \
            or sum(number(e) == -1 for e in elts) > 1:
        text = ", ".join(ast.unparse(e) for e in elts)
        raise IRError(f"reshape/view to ({text}) is not supported: the offline generator reads views that add or "
                      "remove unit dims, each size 1 or -1 (one -1), e.g. b.view(1, -1, 1, 1); flatten(x, 1) "
                      "joins dims; other sizes would not follow the shapes the runner draws")
    return tuple(int(number(e)) for e in elts)


def check(node: Node) -> None:
    """A view stands over an input or an earlier stage's output: the chain makes it so."""
    if node.op not in OPS or node.args[0].op != "input":
        raise IRError(f"{node.op} is taken between kernels, over an input or a kernel's output")


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    shape = list(shapes[node.args[0].name])
    if node.op == RESHAPE:
        return _reshaped(shape, list(node.attr("sizes")))
    if node.op == UNSQUEEZE:
        return shape[:_dim(node, "dim", len(shape) + 1)] + [1] + shape[_dim(node, "dim", len(shape) + 1):]
    if node.op == SQUEEZE:
        dim = node.attr("dim")
        if dim is None:
            return [s for s in shape if s != 1]
        d = _dim(node, "dim", max(len(shape), 1))
        return shape[:d] + shape[d + 1:] if shape and shape[d] == 1 else shape
    start, end = _dim(node, "start", max(len(shape), 1)), _dim(node, "end", max(len(shape), 1))
    if start > end:
        raise IRError(f"flatten: start_dim {node.attr('start')} comes after end_dim {node.attr('end')}")
    return shape[:start] + [math.prod(shape[start:end + 1])] + shape[end + 1:]


def _dim(node: Node, key: str, rank: int) -> int:
    d = node.attr(key)
    if not -rank <= d < rank:
        raise IRError(f"{node.op} at dim {d}, but that tensor has {rank - (node.op == UNSQUEEZE)} dims")
    return d % rank


def _reshaped(shape: list[int], sizes: list[int]) -> list[int]:
    known = math.prod(s for s in sizes if s != -1)
    if math.prod(shape) % known or (-1 not in sizes and math.prod(shape) != known):
        raise IRError(f"a tensor of shape {shape} cannot be viewed as {tuple(sizes)}")
    return [math.prod(shape) // known if s == -1 else s for s in sizes]


def torch_text(node: Node, x: str) -> str:
    """The view of x (an expression's text) in PyTorch: the reference's body, the chain's entry and
    the expression's own text all write it so."""
    if not isinstance(ast.parse(x, mode="eval").body, (ast.Name, ast.Call, ast.Attribute, ast.Subscript)) \
            and not _parenthesised(x):
        x = f"({x})"
    if node.op == RESHAPE:
        return f"{x}.reshape({', '.join(map(str, node.attr('sizes')))})"
    if node.op == FLATTEN:
        return f"{x}.flatten({node.attr('start')}, {node.attr('end')})"
    dim = node.attr("dim")
    return f"{x}.{node.op}({'' if dim is None else dim})"


def _parenthesised(x: str) -> bool:
    """Whether x is one parenthesised expression ("(a + b)", not "(a) + (b)")."""
    try:
        return x.startswith("(") and x.endswith(")") and bool(ast.parse(x[1:-1], mode="eval"))
    except SyntaxError:
        return False


TORCH_OPS = {op: (lambda node, a: torch_text(node, a[0])) for op in OPS}


@prints(*OPS)
def _text(node: Node, text) -> str:
    return torch_text(node, text(node.args[0]))


def kernel_source(spec: dict, node: Node, options: dict) -> str:
    raise IRError(f"{node.op} alone moves no data: there is no kernel to write; ask for the computation around it")


def reference_property(node: Node) -> tuple[str, bool]:
    return "", False
