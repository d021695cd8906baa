"""The softmax family: softmax and log_softmax over the last dim of a pointwise body. The row
template computes it: whole rows in one tile (max, then the sum of exponentials), longer rows by
an online softmax over chunks (the running sum rescaled to each new running max) and a second
pass that writes. Owns its words, IR rule, reference, row plan and catalog entry.
"""
from __future__ import annotations

import re

from bot.codegen.kernel_file import NEG_INF
from bot.codegen.row_kernel import RowKernel, RowPlan
from bot.ops import pointwise
from bot.ops.entry import Entry
from bot.ops.node import Call, Node, broadcast_shapes, call, dim_call, dim_text, input_names, over_dim, prints
from bot.ops.text import FLAGS as _F

NAME = "softmax"
OPS = {"softmax", "log_softmax"}
ROOT = True
SUPPORTED = ("over the last dim", "softmax, log_softmax")
ALIASES = {"logsoftmax": "log_softmax"}
KEYWORDS = dict.fromkeys((*OPS, "softmin"), {"dim", "axis", "keepdim"})
OUTPUT_DTYPES: dict[str, str] = {}
WORDS = [(re.compile(p, _F), kind, op) for p, kind, op in [
    (r"\blog[\s_-]?softmax\b|对数\s*softmax", "row", "log_softmax"),
    (r"\bsoft[\s_-]?max\b|归一化指数", "row", "softmax"),
]]


def convert(c: Call) -> Node | None:
    """softmax(x, dim=-1): the last dim only (parsing a spec and the request reader check it);
    softmin(x, dim) is softmax(-x, dim), as torch defines it."""
    if c.fname == "softmin":
        node = dim_call(c, over_dim(c, all_by_default=False))
        return call("softmax", call("neg", node.args[0]), **dict(node.attrs))
    return dim_call(c, over_dim(c, all_by_default=False)) if c.fname in OPS else None


def settled(node: Node, rank: int) -> Node:
    """softmax/log_softmax over dim d of a rank-`rank` body: over the last dim (dim -1, this family's
    row kernel), else written out as the fused family's reductions that keep d: exp(x - max) / sum(...),
    x - logsumexp(x)."""
    dim = node.attr("dim", -1)
    if dim % rank == rank - 1:
        return call(node.op, node.args[0], dim=-1)
    x = node.args[0]
    if node.op == "log_softmax":
        return call("sub", x, call("logsumexp", x, dim=dim, keepdim=True))
    e = call("exp", call("sub", x, call("max", x, dim=dim, keepdim=True)))
    return call("div", e, call("sum", e, dim=dim, keepdim=True))


@prints(*OPS)
def _print(node: Node, text) -> str:
    if node.attr("dim", -1) != -1:
        return dim_text(node, text)
    return f"{node.op}({text(node.args[0])})"


def check(node: Node) -> None:
    """Nothing beyond the root rule: the body is pointwise."""


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    return broadcast_shapes([shapes[n] for n in input_names(node.args[0])])


def torch_result(node: Node, names: dict[str, str], body: str, lines: list[str]) -> str:
    return f"torch.{node.op}({body}, dim={node.attr('dim', -1)})"


def kernel_source(spec: dict, node: Node, options: dict) -> str:
    return RowKernel.render(spec, node, options, row_plan, pointwise.triton_body)


# Rows of up to 32K elements are one tile on 32 warps (one read), longer ones 32K chunks: the best
# of the row space for bf16 rows of 32000 (1.32x the 8K chunks before) and 65536 on an H100.
def row_plan(node: Node, weight: str | None, bias: str | None) -> RowPlan:
    output = ("tl.exp(val - row_max[:, None]) / row_sum[:, None]" if node.op == "softmax"
              else "val - row_max[:, None] - tl.log(row_sum)[:, None]")
    return RowPlan(NEG_INF, ["row_max = tl.max(val, axis=1)", "row_sum = tl.sum(tl.exp(val - row_max[:, None]), axis=1)"],
                   [f"row_max = tl.full([BLOCK_M], {NEG_INF}, tl.float32)", "row_sum = tl.zeros([BLOCK_M], tl.float32)"],
                   ["# online softmax: rescale the running sum to the new running max",
                    "new_max = tl.maximum(row_max, tl.max(val, axis=1))",
                    "row_sum = row_sum * tl.exp(row_max - new_max) + tl.sum(tl.exp(val - new_max[:, None]), axis=1)",
                    "row_max = new_max"], [], output, whole=32768)


def reference_property(node: Node) -> tuple[str, bool]:
    """The generated reference test's check_property body (rows sum to 1; log: their logsumexp
    is 0), and whether it calls body()."""
    if node.op == "softmax":
        return '''    """softmax: every row sums to 1 (each of its N terms may be off by rtol of itself)."""
    sums = got.double().sum(-1)
    check_close(sums, torch.ones_like(sums), dtype, got.shape[-1], 0.0, "softmax row sums vs 1")
''', False
    return '''    """log_softmax: logsumexp of every row is 0, to within the rounding of its largest term."""
    out = got.double()
    lse = torch.logsumexp(out, -1)
    allowance = RTOL[dtype] * out.abs().amax(-1)
    check_close(lse, torch.zeros_like(lse), dtype, got.shape[-1], allowance, "log_softmax row logsumexp vs 0")
''', False


ENTRIES = (
    Entry("softmax", "softmax over the last dim on {shapes}, each in {dtypes}", "softmax(x)"),
)
