"""The scan family: cumsum, cumprod, cummax, cummin and logcumsumexp over any one dim of a pointwise body, forward
or reversed, inclusive or exclusive; the output has the body's shape and dtype.

PyTorch writes a reversed scan as x.flip(d).cumsum(d).flip(d) (torch has no reverse flag): the IR
reads that pattern as one reversed scan, and a flip anywhere else is refused. Lowered by the scan
template (bot.codegen.scan_kernel) with this family's config spaces; owns its words, IR rule,
reference and catalog entries.
"""
from __future__ import annotations

import ast
import re

from bot.codegen.code import indented, jit_source, launch
from bot.codegen.dim_kernel import _fit, _fit_stages
from bot.codegen.scan_kernel import ScanKernel, ScanMath, _scan_config, _scan_tiles
from bot.ops import pointwise
from bot.ops.entry import Entry
from bot.ops.node import (Call, IRError, Node, arity, broadcast_shapes, call, flag, input_names, is_int_literal,
                          keywords_text, literal_keywords, number, prints)
from bot.ops.text import FLAGS as _F

NAME = "scan"
SCANS = {"cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"}
# scans whose first step cannot be an identity a person would want (-inf, inf): inclusive only
_INCLUSIVE_ONLY = {"cummax": "-inf", "cummin": "inf", "logcumsumexp": "-inf"}
# cumext_grad(x, y, up, scan=..., dim=..., reverse=...): a training kernel's part (bot.autodiff writes it),
# the gradient of y = cummax (cummin) of x given the output's gradient, up
GRAD = "cumext_grad"
OPS = SCANS | {GRAD}
ROOT = True
SUPPORTED = ("over any one dim", "cumsum, cumprod, cummax, cummin, logcumsumexp (also reversed: x.flip(d).cumsum(d).flip(d); "
             "cumsum and cumprod also exclusive=True)")
# torch.cummax(x, d).values, as the request reader writes it (bot.request.torch_code)
ALIASES = {"cummax_values": "cummax", "cummin_values": "cummin"}
FLIP = "flip"
KEYWORDS = {**dict.fromkeys(SCANS, {"dim", "reverse", "exclusive"}), GRAD: {"scan", "dim", "reverse"}}
OUTPUT_DTYPES: dict[str, str] = {}
# Looked for before the reduce family's words, which these hold ("sum", "max").
WORDS = [(re.compile(p, _F), kind, op) for p, kind, op in [
    (r"\blog[\s_-]?cum(?:ulative)?[\s_-]?sum[\s_-]?exp\b|\brunning\s+log[\s_-]?sum[\s_-]?exp\b", "row", "logcumsumexp"),
    (r"\bcum(?:ulative)?[\s_-]?sums?\b|\bprefix[\s-]sums?\b|\brunning\s+(?:sum|total)s?\b|\bscan\b|前缀和|累[积加]和",
     "row", "cumsum"),
    (r"\bcum(?:ulative)?[\s_-]?prod(?:uct)?s?\b|\bprefix[\s-]products?\b|\brunning\s+products?\b|累积乘积|累乘",
     "row", "cumprod"),
    (r"\bcum(?:ulative)?[\s_-]?max(?:imum)?\b|\brunning\s+max(?:imum)?\b|累积最大值?", "row", "cummax"),
    (r"\bcum(?:ulative)?[\s_-]?min(?:imum)?\b|\brunning\s+min(?:imum)?\b|累积最小值?", "row", "cummin"),
]]
# Flags in words: "reverse cumsum", "exclusive prefix sum" (suffix sums are reversed prefix sums).
REVERSE_WORD = re.compile(r"\brevers(?:e|ed)\b|\bbackwards?\b|\bfrom\s+the\s+(?:end|right)\b|反向|逆序", _F)
EXCLUSIVE_WORD = re.compile(r"\bexclusive\b|不含当前|不包含当前|排他", _F)
FLAG_WORDS = re.compile(f"{REVERSE_WORD.pattern}|{EXCLUSIVE_WORD.pattern}", _F)
# "masked cumsum": the sum of the elements a bool mask input keeps (KernelBench's cumsum(x * mask))
MASKED_WORD = re.compile(r"\bmasked\b|掩码", _F)

_IDENTITY = {"cumsum": "0.0", "cumprod": "1.0", "cummax": 'float("-inf")', "cummin": 'float("inf")',
             "logcumsumexp": 'float("-inf")'}

# Config spaces, after the default's pick for each case (_scan_config). cols: one tile a program,
# chained by look-back (LOOKBACK), or a program walking all of D in tiles 16-128 columns wide and
# 32-256 deep, their loads pipelined up to 6 chunks ahead (pipelining keeps loads in flight where
# each program carries its running value alone); rows: one to 16 rows per program in 64-4096-wide
# chunks.
COLS_CONFIGS = [
    {"BLOCK_B": 64, "BLOCK_D": 128, "num_warps": 4, "num_stages": 1, "LOOKBACK": 1},
    {"BLOCK_B": 64, "BLOCK_D": 64, "num_warps": 4, "num_stages": 1, "LOOKBACK": 1},
    {"BLOCK_B": 128, "BLOCK_D": 64, "num_warps": 4, "num_stages": 1, "LOOKBACK": 1},
    {"BLOCK_B": 32, "BLOCK_D": 256, "num_warps": 4, "num_stages": 1, "LOOKBACK": 1},
    {"BLOCK_B": 128, "BLOCK_D": 128, "num_warps": 8, "num_stages": 1, "LOOKBACK": 1},
    {"BLOCK_B": 16, "BLOCK_D": 256, "num_warps": 4, "num_stages": 1, "LOOKBACK": 0},
    {"BLOCK_B": 16, "BLOCK_D": 128, "num_warps": 4, "num_stages": 3, "LOOKBACK": 0},
    {"BLOCK_B": 64, "BLOCK_D": 64, "num_warps": 4, "num_stages": 6, "LOOKBACK": 0},
    {"BLOCK_B": 128, "BLOCK_D": 32, "num_warps": 4, "num_stages": 4, "LOOKBACK": 0},
    {"BLOCK_B": 32, "BLOCK_D": 64, "num_warps": 4, "num_stages": 4, "LOOKBACK": 0},
]
ROWS_CONFIGS = [
    {"BLOCK_R": 1, "BLOCK_D": 1024, "num_warps": 4, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_D": 1024, "num_warps": 4, "num_stages": 3},
    {"BLOCK_R": 1, "BLOCK_D": 2048, "num_warps": 8, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_D": 2048, "num_warps": 8, "num_stages": 2},
    {"BLOCK_R": 1, "BLOCK_D": 4096, "num_warps": 8, "num_stages": 1},
    {"BLOCK_R": 2, "BLOCK_D": 1024, "num_warps": 4, "num_stages": 2},
    {"BLOCK_R": 1, "BLOCK_D": 512, "num_warps": 2, "num_stages": 4},
    {"BLOCK_R": 4, "BLOCK_D": 256, "num_warps": 2, "num_stages": 1},
    {"BLOCK_R": 16, "BLOCK_D": 64, "num_warps": 2, "num_stages": 1},
]


def scan_math(op: str) -> ScanMath:
    """op's identity, tile scan and combine in Triton (max/min keep NaN, as torch's do; logcumsumexp
    combines by log(exp(a) + exp(b)))."""
    if op == "cumsum":
        return ScanMath("0.0", lambda x, axis: f"tl.cumsum({x}, axis={axis})", lambda a, b: f"{a} + {b}")
    if op == "cumprod":
        return ScanMath("1.0", lambda x, axis: f"tl.cumprod({x}, axis={axis})", lambda a, b: f"{a} * {b}")
    helper = "_logaddexp" if op == "logcumsumexp" else f"_{op[3:]}_nan"
    return ScanMath(_IDENTITY[op], lambda x, axis: f"tl.associative_scan({x}, {axis}, {helper})",
                    lambda a, b: f"{helper}({a}, {b})")


def flags_in_words(prose: str, op: str) -> str:
    """The flags the words give a scan, as its keyword arguments (', reverse=True')."""
    flags = [k for k, pattern in (("reverse", REVERSE_WORD), ("exclusive", EXCLUSIVE_WORD)) if pattern.search(prose)]
    return "".join(f", {k}=True" for k in flags)


# ---------------------------------------------------------------- IR rule

def _dim(c: Call) -> int:
    """The one integer dim of a scan (torch requires it)."""
    given = c.kw.pop("dim", None)
    if given is None and len(c.args) == 2:
        given = c.args.pop()
    if isinstance(given, (ast.List, ast.Tuple)) and len(given.elts) == 1:
        given = given.elts[0]
    if given is None or not is_int_literal(given):
        shown = "nothing" if given is None else repr(ast.unparse(given))
        raise IRError(f"{c.fname} takes one integer dim, e.g. {c.fname}(x, dim=1); got {shown}")
    return int(number(given))


def convert(c: Call) -> Node | None:
    """cumsum(x, dim=d) (also x.cumsum(d)), reverse= and exclusive= flags; a scan of x.flip(d) (which
    flipped_back reads)."""
    if c.fname == GRAD:
        return _grad(c)
    if c.fname not in SCANS:
        return None
    reverse, exclusive = flag(c.kw.pop("reverse", None)), flag(c.kw.pop("exclusive", None))
    if exclusive and c.fname in _INCLUSIVE_ONLY:
        raise IRError(f"{c.fname} with exclusive=True is not supported: its first step would be the identity, "
                      f"{_INCLUSIVE_ONLY[c.fname]}; exclusive scans are cumsum's and cumprod's")
    dim = _dim(c) if len(c.args) == 2 or "dim" in c.kw else None       # words leave it to the reader
    arity(c.fname, c.args, 1)
    body = c.expr(c.args[0])
    if body.op == FLIP and body.attr("dims") is not None:    # x.flip(d).cumsum(d): flipped back by an outer flip
        if body.attr("dims") != (dim,):
            raise IRError(f"{c.fname} over dim {dim} of a tensor flipped over dims {list(body.attr('dims'))}: flip and "
                          "scan over the same dim (x.flip(d).cumsum(d).flip(d) is a reversed cumsum)")
        return call(c.fname, body.args[0], dim=dim, reverse=not reverse, exclusive=exclusive, unflipped=True)
    return call(c.fname, body, dim=dim, reverse=reverse, exclusive=exclusive)


def _grad(c: Call) -> Node:
    usage = (f"{GRAD} takes (x, y, up), scan='cummax' or 'cummin', an integer dim and reverse=True or False, as "
             "bot.autodiff writes it")
    attrs = literal_keywords(c, usage)
    if (len(c.args) != 3 or set(attrs) != KEYWORDS[GRAD] or attrs["scan"] not in ("cummax", "cummin")
            or not isinstance(attrs["dim"], int) or not isinstance(attrs["reverse"], bool)):
        raise IRError(usage)
    return call(GRAD, *map(c.expr, c.args), **attrs)


def flipped_back(inner: Node, dims: tuple[int, ...]) -> Node | None:
    """flip(scan(x.flip(d)), d): the reversed scan; None where inner is no scan of a flipped tensor."""
    if not (inner.op in OPS and inner.attr("unflipped")):
        return None
    if dims != (inner.attr("dim"),):
        raise IRError(f"a scan over dim {inner.attr('dim')} flipped back over dims {list(dims)}: flip over the same dim")
    return call(inner.op, *inner.args, **{k: v for k, v in inner.attrs if k != "unflipped"})


prints(GRAD)(keywords_text)


@prints(*SCANS)
def _text(node: Node, text) -> str:
    flags = "".join(f", {k}=True" for k in ("reverse", "exclusive") if node.attr(k))
    dim = node.attr("dim")
    return f"{node.op}({text(node.args[0])}{'' if dim is None else f', dim={dim}'}{flags})"


def check(node: Node) -> None:
    """A scan of a flipped tensor must be flipped back (else it is a reversed scan, reordered); the
    gradient reads three tensors."""
    if node.op == GRAD and any(a.op != "input" for a in node.args):
        raise IRError(f"{GRAD} reads x, the scan's output and its gradient as tensors; compute them in kernels "
                      "before it")
    if node.attr("unflipped"):
        raise IRError(f"{node.op} of a flipped tensor is returned in flipped order: flip it back "
                      f"(x.flip(d).{node.op}(d).flip(d) is a reversed {node.op}), or flip the result yourself")


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    if node.op == GRAD:
        given = [shapes[a.name] for a in node.args]
        if any(g != given[0] for g in given):
            raise IRError(f"{GRAD} takes x, the scan's output and its gradient of one shape; got {given}")
        return given[0]
    return broadcast_shapes([shapes[n] for n in input_names(node.args[0])])


def torch_result(node: Node, names: dict[str, str], body: str, lines: list[str]) -> str:
    """torch's scan over the body; reversed between flips, exclusive as the inclusive result moved
    one step along the dim, the first step the op's identity."""
    dim, op = node.attr("dim"), node.op
    if op == GRAD:
        raise IRError(f"{GRAD} is a part of a training kernel: the judge checks it through the forward's autograd")
    if not body.isidentifier():
        lines.append(f"h = {body}")
        body = "h"
    anchor = body           # the body's dtype is the float inputs' (a bool mask in it promotes to theirs)
    if node.attr("reverse"):
        body = f"torch.flip({body}, [{dim}])"
    # torch's float16/bfloat16 scans add in that dtype: these add in float32 (float64 stays), as the kernel
    wide = f"torch.promote_types({anchor}.dtype, torch.float32)"
    if op in ("cummax", "cummin"):
        result = f"torch.{op}({body}, dim={dim}).values"
    elif op == "logcumsumexp":      # takes no dtype=
        result = f"torch.logcumsumexp({body}.to({wide}), {dim}).to({anchor}.dtype)"
    else:
        result = f"torch.{op}({body}, dim={dim}, dtype={wide}).to({anchor}.dtype)"
    if node.attr("exclusive"):
        first = f"torch.zeros(1, dtype=torch.long, device={anchor}.device)"
        result = f"torch.roll({result}, 1, {dim}).index_fill({dim}, {first}, {_IDENTITY[op]})"
    return f"torch.flip({result}, [{dim}])" if node.attr("reverse") else result


def kernel_source(spec: dict, node: Node, options: dict) -> str:
    if node.op == GRAD:
        return _ExtremeGradKernel.render(spec, node, options)
    return ScanKernel.render(spec, node, options, pointwise.triton_body, (COLS_CONFIGS, ROWS_CONFIGS),
                             scan_math(node.op))


class _ExtremeGradKernel(pointwise.TensorArgsFile):
    block_key = "BLOCK_D"
    description = ("The gradient of y = cummax (cummin) of x from y's, up: each up_i goes to the element y_i came\n"
                   "from, the latest j <= i (>= i reversed) where x_j equals y_j or is NaN (torch's choice).\n"
                   "Such a j takes the sum of up over its run, up to the next such element: a segmented\n"
                   "sum, scanned from the row's far end (the scan's own direction reversed) in BLOCK_D\n"
                   "chunks, the open run's sum carried between chunks. The scanned dim is moved last.")

    def source(self) -> str:
        return self._file([_SEGMENT_SUM, self._kernel()], [_fit, _fit_stages, _scan_config, _scan_tiles],
                          self._launcher())

    def configs(self) -> list[dict]:
        return self._space(ROWS_CONFIGS)

    def _kernel(self) -> str:
        params = ["x_ptr", "y_ptr", "up_ptr", "out_ptr", "ROWS", "N", "REVERSE: tl.constexpr", "BLOCK_R: tl.constexpr",
                  "BLOCK_D: tl.constexpr", "NUM_STAGES: tl.constexpr"]
        step = [
            "# step s of this walk is position d; the forward scan's next position is the step before",
            "s = start + lane",
            "d = s if REVERSE else N - 1 - s",
            "nd = d - 1 if REVERSE else d + 1",
            "ok = r_ok[:, None] & (s < N)[None, :]",
            "at = base[:, None] + d[None, :]",
            "x = tl.load(x_ptr + at, mask=ok, other=0.0)",
            "y = tl.load(y_ptr + at, mask=ok, other=0.0)",
            "g = tl.load(up_ptr + at, mask=ok, other=0.0).to(tl.float32)",
            "# where the forward scan's next position takes over, this run ends: a cut before this step",
            "nxt = ok & ((nd >= 0) & (nd < N))[None, :]",
            "x1 = tl.load(x_ptr + base[:, None] + nd[None, :], mask=nxt, other=0.0)",
            "y1 = tl.load(y_ptr + base[:, None] + nd[None, :], mask=nxt, other=0.0)",
            "cut = (nxt & ((x1 == y1) | (x1 != x1))).to(tl.int32)",
            "run, cuts = tl.associative_scan((g, cut), 1, _segment_sum)",
            "run += tl.where(cuts == 0, carry[:, None], 0.0)",
            "takes = (x == y) | (x != x)",
            "tl.store(out_ptr + at, tl.where(takes, run, 0.0).to(out_ptr.dtype.element_ty), mask=ok)",
            "# the run still open at this chunk's last step",
            "carry = tl.sum(tl.where((lane == BLOCK_D - 1)[None, :], run, 0.0), axis=1)",
        ]
        lines = ["# BLOCK_R rows of N (the scanned dim), walked from the forward scan's far end",
                 "pid = tl.program_id(0)",
                 "rows = pid * BLOCK_R + tl.arange(0, BLOCK_R)",
                 "r_ok = rows < ROWS",
                 "base = rows.to(tl.int64) * N",
                 "lane = tl.arange(0, BLOCK_D)",
                 "carry = tl.zeros([BLOCK_R], tl.float32)",
                 "for start in tl.range(0, N, BLOCK_D, num_stages=NUM_STAGES):", *indented(step)]
        return jit_source(f"{self.name}_kernel", params, lines)

    def _launcher(self) -> str:
        x, y, up = (t.local for t in self.tensors)
        text = self._signature_and_prologue()
        text += (f"    # the scanned dim moved last, each row contiguous\n"
                 f"    dim = {self.node.attr('dim')} % {x}.dim()\n"
                 f"    {x}, {y}, {up} = (t.movedim(dim, -1).contiguous() for t in ({x}, {y}, {up}))\n"
                 f"    out = torch.empty({x}.shape, dtype={self.out_dtype(self.tensors[2])}, device={x}.device)\n"
                 "    if out.numel() == 0:\n        return out.movedim(-1, dim)\n"
                 f"    N = {x}.shape[-1]\n"
                 "    rows = out.numel() // N\n")
        text += self._config_line("_scan_config(rows, N, 1)")
        text += ("    # a step loads x and y twice and up once\n"
                 "    block_r, BLOCK_D, num_warps, num_stages, _ = _scan_tiles(config, rows, N, 1, "
                 f"5 * {x}.element_size())\n"
                 + launch(f"{self.name}_kernel", "(_cdiv(rows, block_r),)",
                          [x, y, up, "out", "rows", "N", f"REVERSE={bool(self.node.attr('reverse'))}",
                           "BLOCK_R=block_r", "BLOCK_D=BLOCK_D", "NUM_STAGES=num_stages", "num_warps=num_warps"],
                          "    ") + "\n")
        return text + "    return out.movedim(-1, dim).contiguous()\n"


# the segmented sum the gradient scans with (a the steps before b)
_SEGMENT_SUM = jit_source("_segment_sum", ["a_sum", "a_cut", "b_sum", "b_cut"], [
    "# a step holding a cut starts a new run: the sum of the steps before it stops there",
    "return tl.where(b_cut != 0, b_sum, a_sum + b_sum), a_cut | b_cut"])


def reference_property(node: Node) -> tuple[str, bool]:
    """cumsum: the last step (first, reversed) is the sum over the dim; cummax/cummin never go down
    (up) along it. Checked on the reference's own output, in its dtype."""
    dim, op = node.attr("dim"), node.op
    if node.attr("exclusive") or op in ("cumprod", "logcumsumexp", GRAD):
        return "", False
    end = 0 if node.attr("reverse") else -1
    if op == "cumsum":
        return f'''    """cumsum: its {"first" if end == 0 else "last"} step along dim {dim} is the sum over the dim."""
    total = body(*inputs64).sum({dim})
    step = got.double().select({dim}, {end})
    assert torch.allclose(step, total, rtol=1e-2, atol=1e-2 * max(1.0, got.shape[{dim}] ** 0.5)), \\
        "cumsum's {"first" if end == 0 else "last"} step is not the sum over the dim"
''', True
    rising = (op == "cummax") != bool(node.attr("reverse"))
    cmp = ">=" if rising else "<="
    return f'''    """{op}: it never {"falls" if rising else "rises"} along dim {dim} (NaN aside)."""
    ahead, behind = got.narrow({dim}, 1, got.shape[{dim}] - 1), got.narrow({dim}, 0, got.shape[{dim}] - 1)
    assert bool(((ahead {cmp} behind) | ahead.isnan() | behind.isnan()).all()), "{op} is not monotone along dim {dim}"
''', False


ENTRIES = (
    Entry("cumsum", "cumsum over the last dim on {shapes}, each in {dtypes}", "cumsum(x, dim=-1)"),
    Entry("cumsum_dim0_reverse", "reversed cumsum over dim 0 on {shapes}, each in {dtypes}",
          "cumsum(x, dim=0, reverse=True)"),
    Entry("cummax", "cummax over the last dim on {shapes}, each in {dtypes}", "cummax(x, dim=-1)"),
)
