"""The argreduce family: argmax and argmin over any one dim of a tensor input, int64 indices (the
first index of the extreme, NaN the extreme wherever one occurs, as in torch); and torch.max(x, dim)
/ torch.min(x, dim) whole, written max_with_indices(x, dim=d): two outputs, the values (the input's
dtype) and those indices, from one kernel. Lowered by the dim
template with this family's config spaces (one accumulator and index per lane of a tile: small
tiles, few warps); owns its words, IR rule, reference and catalog entries.
"""
from __future__ import annotations

import re

from bot.codegen.dim_kernel import DimKernel
from bot.ops import pointwise, reduce
from bot.ops.entry import SMALL_LONG_ODD, Entry
from bot.ops.node import ALL, WITH_INDICES, Call, IRError, Node, dim_call, dim_text, keepdim, over_dim, prints
from bot.ops.text import FLAGS as _F

NAME = "argreduce"
OPS = {"argmax", "argmin", *WITH_INDICES}
ROOT = True
SUPPORTED = ("over any one dim", "argmax, argmin, and torch.max(x, dim) / torch.min(x, dim) as (values, indices)")
ALIASES: dict[str, str] = {}
KEYWORDS = dict.fromkeys(OPS, {"dim", "axis", "keepdim"})
WORDS = [(re.compile(p, _F), kind, op) for p, kind, op in [
    (r"\barg[\s_-]?max\b|\bindex\s+of\s+(?:the\s+)?max\w*|最大值?(?:的)?(?:索引|下标|位置)", "row", "argmax"),
    (r"\barg[\s_-]?min\b|\bindex\s+of\s+(?:the\s+)?min\w*|最小值?(?:的)?(?:索引|下标|位置)", "row", "argmin"),
]]
_TORCH = {"argmax": "torch.argmax", "argmin": "torch.argmin", "max_with_indices": "torch.max",
          "min_with_indices": "torch.min"}

# argmax/argmin keep one accumulator per lane of the tile (16-32 per thread here): small tiles,
# few warps, many programs in flight (8192x8192 fp16 argmax on an H200: 512 x w1 38 us, 2048 x w4
# 43 us, 8192 x w8 82 us).
ARG_COLS_CONFIGS = [
    {"BLOCK_B": 512, "BLOCK_D": 4, "SPLIT_D": 64, "num_warps": 2, "num_stages": 3},
    {"BLOCK_B": 1024, "BLOCK_D": 4, "SPLIT_D": 64, "num_warps": 4, "num_stages": 3},
    {"BLOCK_B": 2048, "BLOCK_D": 2, "SPLIT_D": 64, "num_warps": 8, "num_stages": 3},
    {"BLOCK_B": 1024, "BLOCK_D": 2, "SPLIT_D": 128, "num_warps": 4, "num_stages": 1},
    {"BLOCK_B": 256, "BLOCK_D": 8, "SPLIT_D": 128, "num_warps": 2, "num_stages": 1},
    {"BLOCK_B": 128, "BLOCK_D": 16, "SPLIT_D": 16, "num_warps": 2, "num_stages": 3},
    {"BLOCK_B": 128, "BLOCK_D": 32, "SPLIT_D": 8, "num_warps": 4, "num_stages": 1},
]


# Rows: one row per one-warp program in pipelined 256-512 chunks (the running extreme; 8192x8192
# fp16 argmax on an H200: 512 x w1 s3 35.0 us, s1 36.8, 1024 x w2 s3 35.8, 8192 x w8 59.7).
ARG_ROWS_CONFIGS = [
    {"BLOCK_R": 1, "BLOCK_D": 512, "SPLIT_D": 1, "num_warps": 1, "num_stages": 3},
    {"BLOCK_R": 1, "BLOCK_D": 512, "SPLIT_D": 1, "num_warps": 1, "num_stages": 4},
    {"BLOCK_R": 1, "BLOCK_D": 256, "SPLIT_D": 1, "num_warps": 1, "num_stages": 4},
    {"BLOCK_R": 1, "BLOCK_D": 1024, "SPLIT_D": 1, "num_warps": 2, "num_stages": 3},
    {"BLOCK_R": 1, "BLOCK_D": 1024, "SPLIT_D": 1, "num_warps": 2, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_D": 512, "SPLIT_D": 1, "num_warps": 1, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_D": 2048, "SPLIT_D": 1, "num_warps": 4, "num_stages": 1},
    {"BLOCK_R": 2, "BLOCK_D": 1024, "SPLIT_D": 1, "num_warps": 2, "num_stages": 1},
    {"BLOCK_R": 8, "BLOCK_D": 128, "SPLIT_D": 1, "num_warps": 2, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_D": 2048, "SPLIT_D": 16, "num_warps": 4, "num_stages": 1},
]



def convert(c: Call) -> Node | None:
    if c.fname not in OPS:
        return None
    kept = keepdim(c)
    dim = over_dim(c, all_by_default=True)
    if c.fname in WITH_INDICES and dim == ALL:         # None: the caller settles the dim, as for a reduction
        raise IRError(f"{c.fname} is torch.{c.fname[:3]}(x, dim) whole, over one dim: name it, e.g. "
                      f"torch.{c.fname[:3]}(x, dim=-1)")
    return dim_call(c, dim, kept)


prints(*OPS)(dim_text)


def check(node: Node) -> None:
    if node.args[0].op != "input":
        raise IRError(f"{node.op} takes a tensor input, e.g. {node.op}(x, dim=-1); compute the expression in a "
                      "separate kernel")


output_shape = reduce.output_shape      # the reduced dim dropped, as for sum
OUTPUT_DTYPES = dict.fromkeys(("argmax", "argmin"), "int64")


def torch_result(node: Node, names: dict[str, str], body: str, lines: list[str]) -> str:
    result = reduce.torch_reduction(_TORCH[node.op], node, body)    # over every element: the flat index
    return f"tuple({result})" if node.op in WITH_INDICES else result


def outputs(node: Node, dtypes: list[str], shapes: list[list[int]]) -> list[dict] | None:
    """max_with_indices' two outputs, values then indices; None for one output."""
    if node.op not in WITH_INDICES:
        return None
    return [{"name": "values", "dtypes": dtypes, "shapes": shapes},
            {"name": "indices", "dtypes": ["int64"] * len(dtypes), "shapes": shapes}]


def kernel_source(spec: dict, node: Node, options: dict) -> str:
    # The running extreme is max's (min's), masked lanes holding -inf (inf): they never win.
    if node.attr("keepdim"):
        return reduce.kept_dim(kernel_source, spec, node, options)
    op = WITH_INDICES.get(node.op, node.op)
    return DimKernel.render(spec, node, options, pointwise.triton_body, (ARG_COLS_CONFIGS, ARG_ROWS_CONFIGS), True,
                            reduce.reduction(op[3:]))


def reference_property(node: Node) -> tuple[str, bool]:
    """The generated reference test's check_property body for this op, and whether it calls
    body(): none here."""
    return "", False


ENTRIES = (
    Entry("argmax", "argmax over the last dim on {shapes}, each in {dtypes}", "argmax(x, dim=-1)",
          small=SMALL_LONG_ODD),
    Entry("argmin_dim0", "argmin over dim 0 on {shapes}, each in {dtypes}", "argmin(x, dim=0)"),
    Entry("max_with_indices", "max and argmax over the last dim on {shapes}, each in {dtypes}",
          "max_with_indices(x, dim=-1)", small=SMALL_LONG_ODD),
)
