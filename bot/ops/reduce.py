"""The reduce family: sum, mean, max and min over any one dim of a pointwise body, and any and all
(a bool output: the max and min of the body read as 1 where it holds, else 0).

Over the last dim in every case the row template computes it (whole rows in one tile, an online
fold over chunks of longer rows, an aligned kernel for rows of odd length); over any other dim
the dim template (the body as [A, D, B], tiles of neighbouring outputs, D split over programs
whose partials are combined in a fixed order). Owns its words, IR rule, reference, both plans and
the dim template's config spaces for it, and its catalog entries.
"""
from __future__ import annotations

import re
from typing import Callable

from bot.ops.entry import SMALL_LONG_ODD, Entry
from bot.codegen.dim_kernel import DimKernel, Reduction
from bot.codegen.kernel_file import NEG_INF, POS_INF
from bot.codegen.row_kernel import RowKernel, RowPlan, refuse_empty_dim
from bot.ops import pointwise
from bot.ops.pointwise import NAN_WINS
from bot.ops.node import (ALL, WITH_INDICES, Call, Node, broadcast_shapes, call, const, dim_call, dim_text, input_names,
                          keepdim, over_dim, prints, reduced_shape)
from bot.ops.text import FLAGS as _F
from runner import protocol

NAME = "reduce"
LOGICAL = {"any": "max", "all": "min"}          # computed as the max / min of the body's truth, 0 or 1
OPS = {"sum", "mean", "max", "min", *LOGICAL}
ROOT = True
SUPPORTED = ("over any one dim", "sum, mean, max, min, any, all")
ALIASES = {"max": "max", "amax": "max", "min": "min", "amin": "min"}
KEYWORDS = dict.fromkeys(OPS, {"dim", "axis", "keepdim"})
OUTPUT_DTYPES = dict.fromkeys(LOGICAL, "bool")
# Nouns after "any" and "all" that make them no reduction: "any shape", "all dims", "all rows".
_NOT_LOGICAL = (r"(?!\s+(?:of\s+)?(?:the\s+)?(?:elements?|dims?|dimensions?|ax[ie]s|dtypes?|types?|shapes?|sizes?|"
                r"cases?|precisions?|rows?|columns?|inputs?|values?|entries|three|3|supported)\b)")
# "max"/"sum" of two tensors is elementwise (the request reader decides): kind "paired".
WORDS = [(re.compile(p, _F), kind, op) for p, kind, op in [
    (r"\bmean\b|\baverage\b|平均值?|均值", "row", "mean"),
    (r"\bmax(?:imum)?\b|\bamax\b|最大值?", "paired", "max"),
    (r"\bmin(?:imum)?\b|\bamin\b|最小值?", "paired", "min"),
    (r"\bsum\b|求和", "paired", "sum"),
    (rf"\b(?:logical[\s_-]?)?any\b{_NOT_LOGICAL}|任一(?:元素)?(?:为真|非零)", "row", "any"),
    (rf"\b(?:logical[\s_-]?)?all\b{_NOT_LOGICAL}|全(?:部)?(?:元素)?(?:为真|非零)", "row", "all"),
]]
_TORCH = {"sum": "torch.sum", "mean": "torch.mean", "max": "torch.amax", "min": "torch.amin", "any": "torch.any",
          "all": "torch.all"}

# Config spaces, after the default's pick for each of the spec's cases (_reduce_config), from
# sweeps on an H200 (docs/BENCHMARKS.md).
# cols layout: narrow, deep tiles first. The cols kernel keeps one accumulator per lane, so a tile
# 64 outputs wide (one 128-byte line of fp16 per row) and 64-256 rows deep needs no block reduction
# per step; with SPLIT_D 1 and 3-8 pipelined stages, 128 such programs read an 8192x8192 fp16 matrix
# at 88% of copy bandwidth on an H200 (wide tiles split 64-128 ways: 79%; fp32 96% against 91%).
# Then wide tiles: BLOCK_B of 1024 neighbouring outputs puts every thread on its own columns and D
# is split 64-128 ways. Wide, split tiles also win where rows are not 16-byte aligned (7919x6007),
# which narrow tiles read element by element.
COLS_CONFIGS = [
    {"BLOCK_B": 64, "BLOCK_D": 128, "SPLIT_D": 1, "num_warps": 8, "num_stages": 6},
    {"BLOCK_B": 64, "BLOCK_D": 256, "SPLIT_D": 1, "num_warps": 8, "num_stages": 3},
    {"BLOCK_B": 64, "BLOCK_D": 128, "SPLIT_D": 1, "num_warps": 8, "num_stages": 4},
    {"BLOCK_B": 64, "BLOCK_D": 64, "SPLIT_D": 1, "num_warps": 4, "num_stages": 6},
    {"BLOCK_B": 64, "BLOCK_D": 64, "SPLIT_D": 1, "num_warps": 8, "num_stages": 8},
    {"BLOCK_B": 1024, "BLOCK_D": 8, "SPLIT_D": 64, "num_warps": 4, "num_stages": 3},
    {"BLOCK_B": 1024, "BLOCK_D": 4, "SPLIT_D": 128, "num_warps": 4, "num_stages": 3},
    {"BLOCK_B": 2048, "BLOCK_D": 4, "SPLIT_D": 128, "num_warps": 8, "num_stages": 1},
    {"BLOCK_B": 256, "BLOCK_D": 16, "SPLIT_D": 128, "num_warps": 2, "num_stages": 1},
    {"BLOCK_B": 256, "BLOCK_D": 32, "SPLIT_D": 64, "num_warps": 4, "num_stages": 1},
    {"BLOCK_B": 128, "BLOCK_D": 32, "SPLIT_D": 16, "num_warps": 4, "num_stages": 3},
]


# rows layout: one or a few rows per program in 1K to 8K chunks, pipelined or not; long rows split.
ROWS_CONFIGS = [
    {"BLOCK_R": 1, "BLOCK_D": 2048, "SPLIT_D": 1, "num_warps": 4, "num_stages": 3},
    {"BLOCK_R": 1, "BLOCK_D": 2048, "SPLIT_D": 1, "num_warps": 4, "num_stages": 1},
    {"BLOCK_R": 2, "BLOCK_D": 4096, "SPLIT_D": 1, "num_warps": 8, "num_stages": 1},
    {"BLOCK_R": 4, "BLOCK_D": 2048, "SPLIT_D": 1, "num_warps": 8, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_D": 1024, "SPLIT_D": 1, "num_warps": 4, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_D": 8192, "SPLIT_D": 1, "num_warps": 8, "num_stages": 1},
    {"BLOCK_R": 16, "BLOCK_D": 128, "SPLIT_D": 1, "num_warps": 4, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_D": 4096, "SPLIT_D": 16, "num_warps": 8, "num_stages": 1},
]



# ---------------------------------------------------------------- Triton's sum, mean, max and min

# What sum/mean/max/min start from, and masked lanes hold: they change no result.
REDUCE_FILL = {"sum": "0.0", "mean": "0.0", "max": NEG_INF, "min": POS_INF}


def reduce_call(op: str, x: str, axis: int, keep_dims: bool = False) -> str:
    """Triton for sum/mean/max/min of x over axis (mean is left to divide); max/min keep NaN."""
    keep = ", keep_dims=True" if keep_dims else ""
    if op in ("sum", "mean"):
        return f"tl.sum({x}, axis={axis}{keep})"
    return f"tl.reduce({x}, {axis}, _{op}_nan{keep})"


def fold_line(op: str, x: str) -> str:
    """acc folded with x for sum/mean/max/min; max/min keep NaN."""
    if op in ("sum", "mean"):
        return f"acc += {x}"
    return f"acc = tl.{op}imum(acc, {x}, {NAN_WINS})"


def reduction(op: str) -> Reduction:
    """op's math for the dim template: its fill, its combine over an axis, its running fold."""
    return Reduction(REDUCE_FILL[op], lambda x, axis, keep_dims=False: reduce_call(op, x, axis, keep_dims),
                     lambda x: fold_line(op, x))


# ---------------------------------------------------------------- IR rule

def convert(c: Call) -> Node | None:
    """sum/mean/max/min/any/all(x, dim=d); max/min of two tensors is the elementwise maximum/minimum."""
    if c.fname not in OPS:
        return None
    kept = keepdim(c)
    # several dims: the fused family's (any and all take one)
    dim = over_dim(c, all_by_default=True, several=c.fname not in LOGICAL)
    if c.fname in ("max", "min") and len(c.args) == 2 and dim is None:
        return call({"max": "maximum", "min": "minimum"}[c.fname], c.expr(c.args[0]), c.expr(c.args[1]))
    return dim_call(c, dim, kept)


prints(*OPS)(dim_text)


def check(node: Node) -> None:
    """Nothing beyond the root rule: the body is pointwise."""


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    return reduced_shape(node, broadcast_shapes([shapes[n] for n in input_names(node.args[0])]))


def torch_result(node: Node, names: dict[str, str], body: str, lines: list[str]) -> str:
    return torch_reduction(_TORCH[node.op], node, body)


def torch_reduction(fn: str, node: Node, body: str) -> str:
    """fn(body, dim=d) (keepdim=True when kept), or fn(body) over every element."""
    if node.attr("dim") == ALL:
        return f"{fn}({body})"
    return f"{fn}({body}, dim={node.attr('dim', -1)}{', keepdim=True' if node.attr('keepdim') else ''})"


def as_extreme(spec: dict, node: Node) -> tuple[dict, Node]:
    """any/all as the max/min of their body's truth (a comparison, or the body being nonzero, as
    torch.any reads a float tensor), the 1 or 0 stored as a bool output (spec "bool_out")."""
    if node.op not in LOGICAL:
        return spec, node
    body = node.args[0]
    truth = body if body.op in pointwise.COMPARE else call("ne", body, const(0.0))
    return {**spec, "bool_out": True}, call(LOGICAL[node.op], truth, **dict(node.attrs))


def kernel_source(spec: dict, node: Node, options: dict) -> str:
    """Over the last dim (in every case): the row template; over another dim: the dim template."""
    spec, node = as_extreme(spec, node)
    if node.attr("keepdim"):
        return kept_dim(kernel_source, spec, node, options)
    if over_last_dim(spec, node):
        return RowKernel.render(spec, node, options, row_plan, pointwise.triton_body)
    return dim_kernel_source(spec, node, options)


def kept_dim(source: Callable[[dict, Node, dict], str], spec: dict, node: Node, options: dict) -> str:
    """kernel.py of a reduction with keepdim=True: source's file for the reduction without it, its
    launcher renamed, and a launcher of the spec's name that gives the result its kept size-1 dim
    (a view)."""
    inner = f"{spec['name']}_reduced"
    params = ", ".join(i["name"] for i in spec["inputs"])
    plain = call(node.op, *node.args, **{k: v for k, v in node.attrs if k != "keepdim"})
    kept = (f"    return tuple(t.unsqueeze({node.attr('dim')}) for t in {inner}({params}, config=config))\n"
            if node.op in WITH_INDICES else
            f"    return {inner}({params}, config=config).unsqueeze({node.attr('dim')})\n")
    return source({**spec, "name": inner}, plain, options) + (
        f"\n\ndef {spec['name']}({params}, *, config=None):\n"
        "    # keepdim=True: the reduced dim stays, as size 1 (the output is a view of the reduced one).\n" + kept)


def dim_kernel_source(spec: dict, node: Node, options: dict) -> str:
    """kernel.py from the dim template, over any dim (the last included: its rows kernel)."""
    spec, node = as_extreme(spec, node)
    if node.attr("keepdim"):
        return kept_dim(dim_kernel_source, spec, node, options)
    return DimKernel.render(spec, node, options, pointwise.triton_body, (COLS_CONFIGS, ROWS_CONFIGS), False,
                            reduction(node.op))


def over_last_dim(spec: dict, node: Node) -> bool:
    dim = node.attr("dim", -1)
    if dim == ALL:
        return False
    body = input_names(node.args[0])
    ranks = {len(broadcast_shapes([case.shapes[n] for n in body])) for case in protocol.cases(spec)}
    return all(dim in (-1, rank - 1) for rank in ranks)


def row_plan(node: Node, weight: str | None, bias: str | None) -> RowPlan:
    """A row's sum/mean/max/min: reduced in one tile, or folded chunk by chunk into acc."""
    op = node.op
    fill = REDUCE_FILL[op]
    scale = " / N" if op == "mean" else ""
    edge = (f"edge = {reduce_call(op, 'val', 1, keep_dims=True)}",
            fold_line(op, f"tl.where(tl.arange(0, BLOCK_N)[None, :] == 0, edge, {fill})"))
    return RowPlan(fill, [f"result = {reduce_call(op, 'val', 1)}{scale}"],
                   [f"acc = tl.full([BLOCK_M, BLOCK_N], {fill}, tl.float32)"], [fold_line(op, "val")],
                   [f"result = {reduce_call(op, 'acc', 1)}{scale}"], "result", reduces=True, edge=edge,
                   guard=refuse_empty_dim(op, "N", "-1") if op in ("max", "min") else "", wide_warps=16)


def reference_property(node: Node) -> tuple[str, bool]:
    """The generated reference test's check_property body (max and min: the result bounds every
    element it reduces and is one of them), and whether it calls body()."""
    op = node.op
    if op not in ("max", "min"):
        return "", False
    cmp, dim = ">=" if op == "max" else "<=", node.attr("dim", -1)
    kept = "got" if node.attr("keepdim") else f"got.unsqueeze({dim})"
    if dim == ALL:
        return f'''    """{op}: the result is {"at least" if op == "max" else "at most"} every element and equals one of them."""
    values = body(*inputs)          # in the dtype, as the reference saw them
    assert bool((got {cmp} values).all()), "{op} is {"below" if op == "max" else "above"} an element"
    assert bool((got == values).any()), "{op} is none of the elements"
''', True
    return f'''    """{op}: the result is {"at least" if op == "max" else "at most"} every element it reduces (dim {dim}) and equals one of them."""
    values = body(*inputs)          # in the dtype, as the reference saw them
    assert bool(({kept} {cmp} values).all()), "{op} is {"below" if op == "max" else "above"} an element it reduces"
    assert bool(({kept} == values).any({dim}).all()), "{op} is none of the elements it reduces"
''', True


ENTRIES = (
    Entry("sum", "sum over the last dim on {shapes}, each in {dtypes}", "sum(x)", small=SMALL_LONG_ODD),
    Entry("mean_dim0", "mean over dim 0 on {shapes}, each in {dtypes}", "mean(x, dim=0)"),
    Entry("max", "max over the last dim on {shapes}, each in {dtypes}", "max(x)", small=SMALL_LONG_ODD),
    Entry("min_dim0", "min over dim 0 on {shapes}, each in {dtypes}", "min(x, dim=0)"),
    Entry("sum_all", "sum over all elements on {shapes}, each in {dtypes}", "sum(x, dim=None)"),
)
