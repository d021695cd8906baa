"""The pooling family: max and average pooling in 1-D, 2-D and 3-D with kernel size, stride, padding,
dilation (max), ceil_mode, count_include_pad and divisor_override (average) as torch.nn.functional
defines them, and adaptive average and max pooling to an output size, over a pointwise body
(max_pool2d(relu(x), 2)); and the gradient of a windowed pooling (pool_grad, which bot.autodiff
writes for training kernels).

One kernel: each program computes neighbouring outputs of a few consecutive output rows, walking its
window's rows and loading each as a tile of (outputs, the taps across) at once: contiguous in memory where the
stride is the window's width, so every element is read once, in full lines. The body is applied to
each value loaded and the padding left out (max: -inf, average: not counted unless count_include_pad
says so, as torch divides). Adaptive pooling walks the widest window any output has, each output
masking the taps past its own. The leading dims (batch, channels, or channels alone for unbatched
input) are planes; index arithmetic is per row, not per element.

Where consecutive output rows' windows overlap (stride 1 down the rows, no dilation there: 3x3 stride-1
pooling), a second kernel reads each input row once instead of once per window it falls in: a
program walks a chunk of output rows down the input, reduces each input row's window taps across,
and folds that row into the KH - 1 partial outputs it keeps in registers, storing each output
when its window's last row arrives. A tile is several chunks side by side (different planes or
row chunks), so each step has several rows' loads in flight.

The gradient kernel walks the inputs instead: for each tap, the one output whose window takes the
input there (where the stride lands), and that output's gradient, divided as the average divided it,
or, for max, where that output's window picks this tap (its max recomputed: no indices are stored).

Owns its IR rule (the functions, their arguments as torch reads them), the output shape as torch
computes it (ceil_mode's last window included only where it starts inside the input or the left
padding), the torch call, the kernel with its config space and default rule, and what the runner
may not shrink (no spatial size below the window's reach).
"""
from __future__ import annotations

import ast
import math
import re

from bot.codegen.code import jit_source, launch
from bot.codegen.kernel_file import NEG_INF, KernelFile, _as_3d, _expanded_strides
from bot.ops import pointwise
from bot.ops.entry import Entry
from bot.ops.node import (Call, IRError, Node, arguments, broadcast_shapes, call, input_names, is_none,
                          keywords_text, literal_keywords, number, prints)
from bot.ops.text import FLAGS as _F, SIZES, WINDOW_PARAMS, blank as _blank, param, sizes_arg, taken, window_sizes

NAME = "pool"
POOL, ADAPTIVE, POOL_GRAD = "pool", "adaptive_pool", "pool_grad"
OPS = {POOL, ADAPTIVE, POOL_GRAD}
ROOT = True
MAX_RANK = 5                        # x [N, C, D, H, W] of a 3-d pooling
MAX_NUMEL = 2**34                   # the kernel indexes with int64 past 2**31 elements (WIDE)
SUPPORTED = ("", "max_pool1d/2d/3d and avg_pool1d/2d/3d (kernel_size, stride, padding, dilation, ceil_mode, "
             "count_include_pad), adaptive_avg_pool and adaptive_max_pool (output_size), lp_pool1d/2d/3d")
ALIASES: dict[str, str] = {}
# torch.nn.functional's names -> (kind, spatial dims) and their parameters in torch's order
FUNCTIONS = {f"{kind}_pool{n}d": (kind, n) for kind in ("max", "avg") for n in (1, 2, 3)}
ADAPTIVE_FUNCTIONS = {f"adaptive_{kind}_pool{n}d": (kind, n) for kind in ("max", "avg") for n in (1, 2, 3)}
LP_FUNCTIONS = {f"lp_pool{n}d": n for n in (1, 2, 3)}        # power-average pooling, read as an average pooling
_ORDER = {"max": ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
          "avg": ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")}
# pool_grad(x, up, kind=..., nd=..., kernel=..., ...): a training kernel's part (bot.autodiff writes it),
# the gradient of a pooling of x given its output's, up
_GRAD_ATTRS = {"kind", "nd", "kernel", "stride", "padding", "dilation", "ceil_mode", "count_include_pad", "divisor",
               "output"}
ADAPTIVE_MAX_GRAD_WINDOW = 256      # an adaptive max's gradient rescans its window per input: at most this
KEYWORDS = {**{fn: set(_ORDER[kind][1:]) for fn, (kind, _) in FUNCTIONS.items()},
            **{fn: {"output_size", "return_indices"} for fn in ADAPTIVE_FUNCTIONS},
            **{fn: {"norm_type", "kernel_size", "stride", "ceil_mode"} for fn in LP_FUNCTIONS}, POOL_GRAD: _GRAD_ATTRS}
OUTPUT_DTYPES: dict[str, str] = {}
WORDS: list = []

# The space the benchmark sweeps: a tile's elements (outputs x the window's taps across), warps, and
# whether a window row's taps are loaded one after another ([rows, outputs] tiles, taps unrolled at
# compile time: no padded tap lanes, no reduction across lanes) or side by side as a tap axis.
_TILES = [(256, 2), (512, 4), (1024, 4), (1024, 8), (2048, 8), (128, 1)]
CONFIGS = [{"BLOCK": b, "num_warps": w, "UNROLL": u} for u in (1, 0) for b, w in _TILES]
UNROLL_MAX = 8          # the widest window row unrolled
# The rolled kernel's space: a tile's elements (chunks x a row's outputs), warps, output rows a chunk.
ROLL_MAX = 8            # the tallest window whose partial outputs are kept in registers
ROLL_CONFIGS = [{"BLOCK": b, "num_warps": w, "ROWS": r}
                for b, w, r in ((512, 4, 8), (512, 4, 4), (256, 2, 8), (256, 1, 16), (1024, 8, 8), (512, 4, 16),
                                (1024, 4, 8), (128, 1, 8))]


# No shape named: a CNN's feature map [N, C, *spatial] and an odd one, per pooled rank (1-d: [N, C, L]).
DEFAULT_SHAPES = {1: [[32, 64, 4096], [7, 37, 997]], 2: [[32, 64, 112, 112], [7, 37, 97, 89]],
                  3: [[8, 32, 16, 56, 56], [3, 5, 9, 29, 31]]}


def default_shapes(node: Node) -> list[list[int]] | None:
    """The cases for a pooling that names no shape (None: the root is no pooling)."""
    return [list(s) for s in DEFAULT_SHAPES[node.attr("nd")]] if node.op in (POOL, ADAPTIVE) else None


# ---------------------------------------------------------------- words

# "2x2 max pooling", "avg pool 3d", "global average pooling", "adaptive max pool to 7x7", "最大池化"
POOL_WORD = re.compile(r"\b(global\s+)?(adaptive\s+)?(max|avg|average|mean)[\s_-]*pool(?:ing|s)?(?:[\s_-]*([123])[\s_-]?d)?\b"
                       r"|(全局)?(自适应)?(最大|平均)池化", _F)
# "2x2 max pooling", "kernel size 3", "3x3 window", "窗口 2"; and just after the words: "average pooling
# 2x2", "avg pool 3d 2x2x2" (not a shape there: sizes of one to three dims only)
_WINDOW = window_sizes(r"(?:global\s+|adaptive\s+)?(?:max|avg|average|mean)[\s_-]*pool|(?:最大|平均)池化",
                       "(?:window|kernel)", "(?:窗口|核)",
                       rf"(?<!adaptive )(?<!global )\b(?:max|avg|average|mean)[\s_-]*pool(?:ing|s)?(?:[\s_-]*[123][\s_-]?d)?\s+"
                       rf"(?:of\s+|with\s+)?{SIZES}(?![\dx×\w])|(?:最大|平均)池化\s*{SIZES}(?![\dx×\w])")
_OUTPUT = param("(?:to|output[\\s_-]?size)", "输出(?:大小)?")
_CEIL = re.compile(r"\bceil[\s_-]?mode\b|向上取整", _F)
_EXCLUDE_PAD = re.compile(r"\b(?:exclud\w*|not\s+count\w*|without\s+counting)\s+(?:the\s+)?padding\b|不计填充|"
                          r"\bcount[\s_-]?include[\s_-]?pad\s*(?:=|:|is)?\s*false\b", _F)


def pool_words(text: str, shapes: list[tuple[str | None, list[int]]]) -> tuple[str, str, list[str]]:
    """(expression, text without the words read, notes) for '2x2 max pooling with stride 2 on
    8x64x56x56'. The spatial dims: as said (2d), else the window's, else the input's rank less two."""
    m = POOL_WORD.search(text)
    glob, adaptive, kind = m.group(1) or m.group(5), m.group(2) or m.group(6), m.group(3) or m.group(7)
    kind = "max" if kind in ("max", "最大") else "avg"
    params = {}
    for key, pattern in WINDOW_PARAMS.items():      # before the window: "stride 2 kernel 3" has no 2 kernel
        value, text = taken(pattern, text)
        if value is not None:
            params[key] = value
    if "dilation" in params and kind == "avg":
        raise IRError("average pooling has no dilation in torch (F.avg_pool2d takes none); max pooling does")
    window, text = taken(_WINDOW, text)
    output, text = taken(_OUTPUT, text) if adaptive else (None, text)
    if (glob or adaptive) and (window or params):
        raise IRError("adaptive pooling takes an output size alone (no window, stride, padding or dilation): say "
                      "'adaptive max pool to 7x7'")
    if adaptive and not glob and output is None:
        raise IRError("adaptive pooling needs its output size: say 'adaptive avg pool to 7x7' or 'global average "
                      "pooling' (output size 1)")
    if not (glob or adaptive) and window is None:
        raise IRError("pooling needs its window: say '2x2 max pooling' or 'max pool with kernel size 3'")
    said = [v for v in (window, output) if v and len(v) > 1]
    nd = int(m.group(4)) if m.group(4) else len(said[0]) if said else (len(shapes[0][1]) - 2 if shapes else 2)
    notes = [] if m.group(4) or said or shapes else ["no rank named: 2-d pooling over [N, C, H, W] (say '1d' or '3d' "
                                                     "for another)"]
    if nd not in (1, 2, 3):
        raise IRError("which pooling: 1-d, 2-d or 3-d? Say '2x2 max pooling' or 'max pool 2d', or give the input's "
                      "shape, e.g. 'on 8x64x56x56' (batch, channels, then the pooled dims)")
    if glob or adaptive:
        return f"adaptive_{kind}_pool{nd}d(x, {sizes_arg(output or (1,))})", POOL_WORD.sub(_blank, text), notes
    args = [f"kernel_size={sizes_arg(window)}"] + [f"{key}={sizes_arg(value)}" for key, value in params.items()]
    if _CEIL.search(text):
        args.append("ceil_mode=True")
    if kind == "avg" and _EXCLUDE_PAD.search(text):
        args.append("count_include_pad=False")
    for pattern in (POOL_WORD, _CEIL, _EXCLUDE_PAD):
        text = pattern.sub(_blank, text)
    return f"{kind}_pool{nd}d(x, {', '.join(args)})", text, notes


# ---------------------------------------------------------------- IR rule

def convert(c: Call) -> Node | None:
    if c.fname == POOL_GRAD:
        usage = "pool_grad takes (x, up) and the pooling's attributes, as bot.autodiff writes it"
        if len(c.args) != 2 or not set(c.kw) <= _GRAD_ATTRS:
            raise IRError(usage)
        return call(POOL_GRAD, *map(c.expr, c.args), **literal_keywords(c, usage))
    if c.fname in ADAPTIVE_FUNCTIONS:
        return _adaptive(c)
    if c.fname in LP_FUNCTIONS:
        return _lp_pool(c)
    if c.fname not in FUNCTIONS:
        return None
    kind, nd = FUNCTIONS[c.fname]
    given = _arguments(c, _ORDER[kind])
    if _true(given.get("return_indices")):
        raise IRError(f"{c.fname} with return_indices=True returns two tensors; the offline kernel returns the "
                      "pooled values only")
    kernel = _ints(c.fname, "kernel_size", given.get("kernel_size"), nd, None, 1)
    attrs = {"kind": kind, "nd": nd, "kernel": kernel,
             "stride": _ints(c.fname, "stride", given.get("stride"), nd, kernel, 1),
             "padding": _ints(c.fname, "padding", given.get("padding"), nd, (0,) * nd, 0),
             "ceil_mode": _true(given.get("ceil_mode"))}
    if kind == "max":
        attrs["dilation"] = _ints(c.fname, "dilation", given.get("dilation"), nd, (1,) * nd, 1)
    else:
        attrs["count_include_pad"] = not _false(given.get("count_include_pad"))
        if not is_none(given.get("divisor_override")):
            attrs["divisor"] = int(_ints(c.fname, "divisor_override", given["divisor_override"], 1, None, 1)[0])
    if any(p * 2 > k for p, k in zip(attrs["padding"], kernel)):
        raise IRError(f"{c.fname}: padding {list(attrs['padding'])} must be at most half the kernel size "
                      f"{list(kernel)}, as torch requires")
    return call(POOL, c.expr(given["input"]), **attrs)


def _lp_pool(c: Call) -> Node:
    """F.lp_pool{n}d(x, p, kernel_size, stride, ceil_mode) as torch defines it: the average pooling of x ** p
    (no padding) times the window's size, to the power 1 / p (torch's sign(a) * relu(abs(a)) is a)."""
    nd = LP_FUNCTIONS[c.fname]
    given = _arguments(c, ("input", "norm_type", "kernel_size", "stride", "ceil_mode"))
    p = given.get("norm_type")
    if p is None or not isinstance(p, ast.Constant) or isinstance(p.value, bool) or not p.value:
        raise IRError(f"{c.fname} takes norm_type as a nonzero number written out, e.g. F.{c.fname}(x, 2, 3)")
    kernel = _ints(c.fname, "kernel_size", given.get("kernel_size"), nd, None, 1)
    pooled = ast.Call(ast.Name(f"avg_pool{nd}d"), [ast.BinOp(given["input"], ast.Pow(), p)], [
        ast.keyword("kernel_size", given["kernel_size"]), ast.keyword("stride", given.get("stride", ast.Constant(None))),
        ast.keyword("ceil_mode", given.get("ceil_mode", ast.Constant(False)))])
    scaled = ast.BinOp(pooled, ast.Mult(), ast.Constant(float(math.prod(kernel))))
    return c.expr(ast.BinOp(scaled, ast.Pow(), ast.Constant(1.0 / p.value)))


def _adaptive(c: Call) -> Node:
    kind, nd = ADAPTIVE_FUNCTIONS[c.fname]
    given = _arguments(c, ("input", "output_size", "return_indices"))
    if _true(given.get("return_indices")):
        raise IRError(f"{c.fname} with return_indices=True returns two tensors; the offline kernel returns the "
                      "pooled values only")
    size = given.get("output_size")
    elts = size.elts if isinstance(size, (ast.Tuple, ast.List)) else [size]
    if size is None or len(elts) not in (1, nd) or any(not is_none(e) and _int(e) is None for e in elts):
        raise IRError(f"{c.fname} takes output_size as an integer or {nd} integers (None keeps that size), got "
                      f"{ast.unparse(size) if size is not None else 'nothing'}")
    out = tuple(None if is_none(e) else _int(e) for e in elts) * (nd if len(elts) == 1 else 1)
    if any(o is not None and o < 1 for o in out):
        raise IRError(f"{c.fname}: output_size must be at least 1, got {ast.unparse(size)}")
    return call(ADAPTIVE, c.expr(given["input"]), kind=kind, nd=nd, output=out)


def _arguments(c: Call, order: tuple[str, ...]) -> dict:
    given = arguments(c, order)
    if "input" not in given:
        raise IRError(f"{c.fname} needs an input")
    return given


def _int(e: ast.expr) -> int | None:
    try:
        v = number(e)
    except IRError:
        return None
    return int(v) if v == int(v) else None


def _ints(fname: str, what: str, value, n: int, default, least: int) -> tuple[int, ...]:
    if is_none(value):
        if default is None:
            raise IRError(f"{fname} needs {what}, e.g. {what}=2")
        return tuple(default)
    elts = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
    numbers = [_int(e) for e in elts]
    if not numbers or None in numbers or len(numbers) not in (1, n):
        raise IRError(f"{fname} takes {what} as an integer or {n} integers, got {ast.unparse(value)!r}")
    if any(v < least for v in numbers):
        raise IRError(f"{fname}: {what} must be at least {least}, got {ast.unparse(value)!r}")
    return tuple(numbers) * (n if len(numbers) == 1 else 1)


def _true(value) -> bool:
    if is_none(value):
        return False
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        return value.value
    raise IRError(f"expected True or False, got {ast.unparse(value)!r}")


def _false(value) -> bool:
    return value is not None and not is_none(value) and not _true(value)


def function_name(node: Node) -> str:
    if node.op == ADAPTIVE:
        return f"adaptive_{node.attr('kind')}_pool{node.attr('nd')}d"
    return f"{node.attr('kind')}_pool{node.attr('nd')}d"


def _keywords(node: Node) -> list[tuple[str, object]]:
    """The node's arguments as torch's keywords, each written out."""
    if node.op == ADAPTIVE:
        return [("output_size", node.attr("output"))]
    keys = [("kernel_size", "kernel"), ("stride", "stride"), ("padding", "padding")]
    keys += [("dilation", "dilation")] if node.attr("kind") == "max" else []
    keys += [("ceil_mode", "ceil_mode")]
    keys += [("count_include_pad", "count_include_pad")] if node.attr("kind") == "avg" else []
    keys += [("divisor_override", "divisor")] if node.attr("divisor") else []
    return [(k, node.attr(a)) for k, a in keys]


@prints(POOL, ADAPTIVE)
def _print(node: Node, text) -> str:
    """What differs from torch's defaults (the kernel size always), so the text reads as the call people write."""
    parts = [text(node.args[0])]
    defaults = {"stride": node.attr("kernel"), "padding": 0, "dilation": 1, "ceil_mode": False,
                "count_include_pad": True}
    for key, value in _keywords(node):
        values = value if isinstance(value, tuple) else (value,)
        default = defaults.get(key)
        if key in ("kernel_size", "output_size", "divisor_override") or (
                values != default and set(values) != {default}):
            shown = values[0] if len(set(values)) == 1 and key != "output_size" else value
            parts.append(f"{key}={shown}")
    return f"{function_name(node)}({', '.join(parts)})"


prints(POOL_GRAD)(keywords_text)


def check(node: Node) -> None:
    """A pooling's body is pointwise (the root rule); its gradient reads two tensors."""
    if node.op == POOL_GRAD and any(a.op != "input" for a in node.args):
        raise IRError("pool_grad reads x and its output's gradient as tensors; compute them in kernels before it")


def _spatial(node: Node, full: list[int]) -> tuple[list[int], list[int]]:
    """(leading dims, spatial dims) of the body's shape, as torch reads nd-d pooling's input."""
    nd = node.attr("nd")
    if len(full) not in (nd + 1, nd + 2):
        raise IRError(f"{function_name(node)} takes x [N, C, {', '.join('DHW'[3 - nd:])}] or [C, "
                      f"{', '.join('DHW'[3 - nd:])}]; got {full}")
    return full[:-nd], full[-nd:]


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    full = broadcast_shapes([shapes[n] for n in input_names(node.args[0])])
    if node.op == POOL_GRAD:
        _adaptive_max_window(node, full, shapes[node.args[1].name])
        return full
    lead, spatial = _spatial(node, full)
    if node.op == ADAPTIVE:
        return [*lead, *(s if o is None else o for o, s in zip(node.attr("output"), spatial))]
    try:
        return [*lead, *pooled_sizes(spatial, node.attr("kernel"), node.attr("stride"), node.attr("padding"),
                                     node.attr("dilation") or (1,) * len(spatial), node.attr("ceil_mode"))]
    except ValueError as e:
        raise IRError(f"{function_name(node)}: {e}") from None


def _adaptive_max_window(node: Node, x: list[int], up: list[int]) -> None:
    """An adaptive max pooling's gradient finds each window's max again for every input it holds:
    windows past ADAPTIVE_MAX_GRAD_WINDOW elements are refused rather than run that slowly."""
    if node.attr("output") is None or node.attr("kind") != "max":
        return
    nd = node.attr("nd")
    window = math.prod(_adaptive_window(i, o) for i, o in zip(x[-nd:], up[-nd:]))
    if window > ADAPTIVE_MAX_GRAD_WINDOW:
        raise IRError(f"adaptive max pooling's gradient here takes windows of at most {ADAPTIVE_MAX_GRAD_WINDOW} "
                      f"elements (it finds each window's max again per input); {x[-nd:]} to {up[-nd:]} has "
                      f"{window}: use a larger output size, or adaptive average pooling")


def size_rules(node: Node, cases: list[dict[str, list[int]]]) -> tuple[set[int], int]:
    """No spatial size below the window's reach less both paddings (the output keeps a position)."""
    if node.op != POOL:
        return set(), 1
    dilation = node.attr("dilation") or (1,) * node.attr("nd")
    reach = [d * (k - 1) + 1 - 2 * p for k, d, p in zip(node.attr("kernel"), dilation, node.attr("padding"))]
    return set(), max([1, *reach])


def torch_result(node: Node, names: dict[str, str], body: str, lines: list[str]) -> str:
    if node.op == POOL_GRAD:
        raise IRError("pool_grad is a part of a training kernel: the judge checks it through the forward's autograd")
    kw = ", ".join(f"{k}={v}" for k, v in _keywords(node))
    return f"torch.nn.functional.{function_name(node)}({body}, {kw})"


def over_text(node: Node) -> str:
    return ""


def reference_property(node: Node) -> tuple[str, bool]:
    return "", False


# ---------------------------------------------------------------- launcher helpers (copied into kernel.py)

def pooled_sizes(sizes, kernel, stride, padding, dilation, ceil_mode):
    # Each spatial output size as torch computes it: windows of the dilated kernel every stride
    # over the padded input; with ceil_mode a last partial window counts if it starts inside the
    # input or its left padding.
    out = []
    for size, k, s, p, d in zip(sizes, kernel, stride, padding, dilation):
        span = size + 2 * p - d * (k - 1) - 1
        if span < 0:
            raise ValueError(f"the input's size {size} is smaller than the window's reach {d * (k - 1) + 1} "
                             f"less the padding {2 * p}")
        o = (span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (o - 1) * s >= size + p:
            o -= 1
        out.append(o)
    return out


def _adaptive_window(size, out):
    # The widest window adaptive pooling of `size` to `out` positions takes: output o covers
    # [o * size // out, ceil((o + 1) * size / out)).
    return max(-(-(o + 1) * size // out) - o * size // out for o in range(out))


def _rolled_config(n):
    # The rolled kernel's default: under 8M outputs, one-warp programs of 128 (more programs, each
    # walking its chunk with its loads' latency exposed); else 512 in 4 warps. The best of the space on
    # an H200 for 3x3 stride-1 average pooling at 2.2M and 3.2M outputs, and within 3% of it at 25M.
    if n < 8 * 1024 * 1024:
        return {"BLOCK": 128, "num_warps": 1, "ROWS": 8}
    return {"BLOCK": 512, "num_warps": 4, "ROWS": 8}


def _pool_config(n, overlapping=False):
    # The default: windows that overlap (stride under the window) and fewer than a million outputs
    # take 256-element tiles in 2 warps, the window's row unrolled; else 1024 in 4 warps, the taps
    # side by side (the best of the space on an H200 for 3x3 stride-1 average pooling and for 2x2
    # max pooling, at 25M and at 2M/0.5M outputs).
    if overlapping or n < 1024 * 1024:
        return {"BLOCK": 256, "num_warps": 2, "UNROLL": 1}
    return {"BLOCK": 1024, "num_warps": 4, "UNROLL": 0}


# ---------------------------------------------------------------- kernel.py

def kernel_source(spec: dict, node: Node, options: dict | None = None) -> str:
    """kernel.py for pooling of a pointwise body, or for its gradient."""
    if node.op == POOL_GRAD:
        return (_PoolGradKernel if node.attr("output") is None else _AdaptiveGradKernel).render(spec, node, options)
    return (_RolledPoolKernel if _rolls(node) else _PoolKernel).render(spec, node, options)


class _PoolKernel(KernelFile):
    block_key = "BLOCK"
    description = ("One program computes BLOCK_W neighbouring outputs of BLOCK_R output rows: for each row of the\n"
                   "window it loads each tap's outputs in turn (UNROLL: a small fixed window), or a (outputs x\n"
                   "taps) tile (an adaptive pooling's widest window, masking the taps past its own; ABUT: windows\n"
                   "side by side, the row's span loaded as one run and split into taps after), applies\n"
                   "the body to the values it loads, keeps padding out, and divides an average as torch does.\n"
                   "The leading dims are planes; 1-d and 2-d run as 3-d with unit dims.")

    def __init__(self, spec, node, inputs, options):
        if node.op not in OPS:
            raise ValueError(f"{node.op} is not pooling")
        self.node = node
        body_names = input_names(node.args[0])
        body_inputs = [i for i in inputs if i.name in body_names]
        super().__init__(spec, pointwise.triton_body(node.args[0], body_inputs), inputs, body_inputs, options)
        self.first = body_inputs[0]

    def source(self) -> str:
        launcher = self._launcher()
        helpers = [h for h in (pooled_sizes, _adaptive_window, _pool_config, _rolled_config, _as_3d, _expanded_strides)
                   if f"{h.__name__}(" in launcher]
        counts = [_window_share()] if self.node.attr("kind") == "avg" else []
        return self._file([*counts, self._kernel()], helpers, launcher)

    def configs(self) -> list[dict]:
        unrolled = self._unrolled()
        return self._space(CONFIGS, lambda config: {**config, "UNROLL": unrolled and config["UNROLL"]})

    def _kernel(self) -> str:
        node = self.node
        is_max = node.attr("kind") == "max"
        params = [*(f"{i.local}_ptr" for i in self.body_inputs), "out_ptr", "ROWS", "P1", "D", "H", "W", "OD", "OH", "OW",
                  *(f"{i.local}_s{k}" for i in self.body_inputs for k in ("p0", "p1", "d", "h", "w"))]
        constexprs = ["KD", "KH", "KW", "SD", "SH", "SW", "PD", "PH", "PW", "DD", "DH", "DW", "ADAPTIVE",
                      "COUNT_PAD", "DIVISOR", "UNROLL", "ABUT", "WIDE", "BLOCK_R", "BLOCK_W", "BLOCK_K"]
        params += [f"{c}: tl.constexpr" for c in constexprs]
        fill = NEG_INF if is_max else "0.0"
        # Rows of a small window unrolled; an adaptive window can span the whole input (global pooling:
        # thousands of rows), whose unrolling would not compile in time.
        rows = math.prod(node.attr("kernel")[:-1]) if node.op != ADAPTIVE else None
        loop = "tl.static_range" if rows is not None and rows <= 64 else "tl.range"
        lines = [
            "# one program: BLOCK_W neighbouring outputs of each of BLOCK_R consecutive output rows",
            "# (plane, od, oh); index arithmetic per row, not per element",
            "pid = tl.program_id(0)",
            "if WIDE:        # int32 indices unless a tensor holds 2**31 elements or more",
            "    pid = pid.to(tl.int64)",
            "n_wb = tl.cdiv(OW, BLOCK_W)",
            "row = (pid // n_wb) * BLOCK_R + tl.arange(0, BLOCK_R)",
            "ow = (pid % n_wb) * BLOCK_W + tl.arange(0, BLOCK_W)",
            "r_ok = row < ROWS",
            "w_ok = ow < OW",
            "oh = row % OH",
            "od = (row // OH) % OD",
            "plane = row // (OH * OD)",
            "# the leading dims as (p0, p1): a body input broadcast over some of them steps by 0 there",
            "p0 = plane // P1",
            "p1 = plane % P1",
            "if ADAPTIVE:",
            "    # output o covers [o * size // out, ceil((o + 1) * size / out)) of each dim",
            *("    " + line for line in _ADAPTIVE_BOUNDS),
            "else:",
            "    d0, h0, w0 = od * SD - PD, oh * SH - PH, ow * SW - PW",
            "taps = tl.arange(0, BLOCK_K)",
            f"acc = tl.full([BLOCK_R, BLOCK_W], {fill}, tl.float32)",
            f"for kd in {loop}(KD):",
            f"    for kh in {loop}(KH):",
            "        i_d, i_h = d0 + kd * DD, h0 + kh * DH",
            "        row_ok = r_ok & (i_d >= 0) & (i_d < D) & (i_h >= 0) & (i_h < H)",
            "        if ADAPTIVE:",
            "            row_ok = row_ok & (i_d < d1) & (i_h < h1)",
            "        if UNROLL:",
            "            # the row's taps one after another, each a [BLOCK_R, BLOCK_W] tile",
            "            for kw in tl.static_range(KW):",
            "                i_w = w0 + kw * DW",
            "                inside = row_ok[:, None] & (w_ok & (i_w >= 0) & (i_w < W))[None, :]",
            *self._tap_loads("                ", "[:, None]", "[None, :]"),
            "                acc = _max_nan(acc, val)" if is_max else "                acc += val",
            "        elif ABUT:",
            "            # windows side by side (stride = width = BLOCK_K): the row's span loads as one run,",
            "            # in whole vectors, and is split into each output's taps after",
            "            i_w = (pid % n_wb) * (BLOCK_W * BLOCK_K) + tl.arange(0, BLOCK_W * BLOCK_K)",
            "            inside = row_ok[:, None] & (i_w < W)[None, :]",
            *self._tap_loads("            ", "[:, None]", "[None, :]"),
            "            val = tl.reshape(val, [BLOCK_R, BLOCK_W, BLOCK_K])",
            "            acc = _max_nan(acc, tl.reduce(val, 2, _max_nan))" if is_max
            else "            acc += tl.sum(val, axis=2)",
            "        else:",
            "            # a [BLOCK_R, BLOCK_W, BLOCK_K] tile: each output's taps side by side (contiguous",
            "            # in memory where the stride is the window's width)",
            "            for k0 in tl.range(0, KW, BLOCK_K):",
            "                kw = k0 + taps",
            "                i_w = w0[:, None] + kw[None, :] * DW",
            "                in_w = w_ok[:, None] & (kw[None, :] < KW) & (i_w >= 0) & (i_w < W)",
            "                if ADAPTIVE:",
            "                    in_w = in_w & (i_w < w1[:, None])",
            "                inside = row_ok[:, None, None] & in_w[None, :, :]",
            *self._tap_loads("                ", "[:, None, None]", "[None, :, :]"),
            "                acc = _max_nan(acc, tl.reduce(val, 2, _max_nan))" if is_max
            else "                acc += tl.sum(val, axis=2)",
        ]
        if not is_max:
            lines += [
                "if DIVISOR:",
                "    acc = acc / DIVISOR",
                "elif ADAPTIVE:",
                "    acc = acc / (((d1 - d0) * (h1 - h0))[:, None] * (w1 - w0)[None, :]).to(tl.float32)",
                "else:",
                f"    acc = acc * _window_share(d0, h0, w0, D, H, W, {_COUNT_ARGS})",
            ]
        lines.append("tl.store(out_ptr + row[:, None] * OW + ow[None, :], acc.to(out_ptr.dtype.element_ty), "
                     "mask=r_ok[:, None] & w_ok[None, :])")
        return jit_source(f"{self.name}_kernel", params, lines)

    def _tap_loads(self, pad: str, rows: str, cols: str) -> list[str]:
        """Lines loading each body input at (i_d, i_h) of each row, i_w across (`rows`, `cols`: how
        they broadcast), and applying the body there (`val`; padding and masked taps `fill`)."""
        fill = NEG_INF if self.node.attr("kind") == "max" else "0.0"
        return [*(f"{pad}{i.local} = tl.load({i.local}_ptr + (p0 * {i.local}_sp0 + p1 * {i.local}_sp1 + i_d * "
                  f"{i.local}_sd + i_h * {i.local}_sh){rows} + (i_w * {i.local}_sw){cols}, mask=inside, "
                  "other=0.0).to(tl.float32)" for i in self.body_inputs),
                f"{pad}val = tl.where(inside, {self.body_call()}, {fill})"]

    def _abut(self) -> bool:
        """Whether windows lie side by side across (stride = width, a power of two; no dilation or
        padding there): a row's span then loads as one contiguous run."""
        node = self.node
        if node.op == ADAPTIVE:
            return False
        k, s, p = (node.attr(a)[-1] for a in ("kernel", "stride", "padding"))
        d = (node.attr("dilation") or (1,))[-1]
        return k == s and k & (k - 1) == 0 and p == 0 and d == 1

    def _unrolled(self) -> bool:
        """Whether a window row's taps can be unrolled at compile time (a fixed window, not too wide)."""
        return self.node.op != ADAPTIVE and self.node.attr("kernel")[-1] <= UNROLL_MAX

    def _launcher_head(self) -> str:
        """The launcher to the output's sizes: each body input's strides, the window, the output."""
        node, first = self.node, self.inputs[0].local
        nd = node.attr("nd")
        text = self._signature_and_prologue()
        body = [i.local for i in self.body_inputs]
        text += (f"    full = list(_broadcast_shape({', '.join(b + '.shape' for b in body)}))\n"
                 f"    lead, spatial = full[:-{nd}], full[-{nd}:]\n"
                 "    # Each body input's strides over (p0, p1, d, h, w), 0 where it broadcasts.\n")
        for b in body:
            text += (f"    {b}_strides = _expanded_strides({b}.shape, full)\n"
                     f"    {b}_strides = [*([0, 0] + {b}_strides[:-{nd}])[-2:], *_as_3d({b}_strides[-{nd}:], 0)]\n")
        if node.op == ADAPTIVE:
            text += (f"    # adaptive: output {list(node.attr('output'))} (None keeps that size)\n"
                     f"    out_sizes = [s if o is None else o for o, s in zip({node.attr('output')}, spatial)]\n"
                     "    window = [_adaptive_window(s, o) for s, o in zip(spatial, out_sizes)]\n"
                     "    KD, KH, KW = _as_3d(window, 1)\n"
                     "    SD = SH = SW = PD = PH = PW = 0\n    DD = DH = DW = 1\n")
        else:
            dilation = node.attr("dilation") or (1,) * nd
            text += (f"    out_sizes = pooled_sizes(spatial, {node.attr('kernel')}, {node.attr('stride')}, "
                     f"{node.attr('padding')}, {dilation}, {node.attr('ceil_mode')})\n"
                     f"    KD, KH, KW = _as_3d({node.attr('kernel')}, 1)\n"
                     f"    SD, SH, SW = _as_3d({node.attr('stride')}, 1)\n"
                     f"    PD, PH, PW = _as_3d({node.attr('padding')}, 0)\n"
                     f"    DD, DH, DW = _as_3d({dilation}, 1)\n")
        text += (f"    out = torch.empty([*lead, *out_sizes], dtype={self.out_dtype(first)}, device={first}.device)\n"
                 "    if out.numel() == 0:\n        return out\n"
                 f"    D, H, W = _as_3d(spatial, 1)\n"
                 "    OD, OH, OW = _as_3d(out_sizes, 1)\n")
        return text

    def _launch_args(self, rows: str, *runtime: str) -> list[str]:
        """The kernel's arguments both kernels share: tensors, sizes, strides, `runtime` (more
        arguments the kernel's parameters list after the strides), the window."""
        node = self.node
        args = [i.local for i in self.body_inputs] + ["out", rows, "lead[-1]", "D", "H", "W", "OD", "OH", "OW"]
        args += [*(f"*{i.local}_strides" for i in self.body_inputs), *runtime]
        return args + ["KD=KD", "KH=KH", "KW=KW", "SD=SD", "SH=SH", "SW=SW", "PD=PD", "PH=PH", "PW=PW", "DD=DD",
                       "DH=DH", "DW=DW", f"COUNT_PAD={node.attr('count_include_pad') is not False}",
                       f"DIVISOR={node.attr('divisor') or 0}", "WIDE=wide"]

    def _wide(self) -> str:
        return f"    wide = max(out.numel(), {', '.join(f'{i.local}.numel()' for i in self.body_inputs)}) >= 2**31\n"

    def _launcher(self) -> str:
        node = self.node
        text = self._launcher_head()
        overlapping = node.op != ADAPTIVE and node.attr("stride")[-1] < node.attr("kernel")[-1]
        text += self._config_line(f"_pool_config(out.numel(), {overlapping})")
        text += ("    # a tile of BLOCK elements: the window's taps across (a chunk of at most 1024; one where the\n"
                 "    # taps are unrolled), a row's outputs down, and as many rows as fill it\n"
                 "    rows = out.numel() // OW\n"
                 + ("    unroll = bool(config.get(\"UNROLL\", 1))\n" if self._unrolled() else
                    f"    unroll = False      # {'an adaptive window' if node.op == ADAPTIVE else 'a wide window row'}\n")
                 +
                 "    block_k = 1 if unroll else min(triton.next_power_of_2(KW), 1024)\n"
                 "    block_w = max(1, min(config[\"BLOCK\"] // block_k, triton.next_power_of_2(OW)))\n"
                 "    block_r = max(1, min(config[\"BLOCK\"] // (block_k * block_w), triton.next_power_of_2(rows)))\n"
                 "    grid = (_cdiv(OW, block_w) * _cdiv(rows, block_r),)\n") + self._wide()
        args = [*self._launch_args("rows"), f"ADAPTIVE={node.op == ADAPTIVE}", "UNROLL=unroll",
                f"ABUT=not unroll and {self._abut()}", "BLOCK_R=block_r",
                "BLOCK_W=block_w", "BLOCK_K=block_k", 'num_warps=config["num_warps"]']
        text += launch(f"{self.name}_kernel", "grid", args, "    ") + "\n"
        return text + "    return out\n"


class _RolledPoolKernel(_PoolKernel):
    description = ("Windows that overlap down the rows (stride 1 there): one program walks R output rows of\n"
                   "BLOCK_C chunks (a plane's rows, or part of them) side by side, BLOCK_W outputs across, down\n"
                   "the input, so each input row is read once a chunk: it reduces the row's taps across, folds\n"
                   "that into the KH - 1 partial outputs it keeps, and stores the output whose window the row\n"
                   "completes. The body is applied to the values it loads, padding kept out, an average divided\n"
                   "as torch does. The leading dims are planes; 2-d runs as 3-d with a unit depth.")

    def configs(self) -> list[dict]:
        return self._space(ROLL_CONFIGS)

    def _kernel(self) -> str:
        is_max = self.node.attr("kind") == "max"
        kh = self.node.attr("kernel")[-2]
        params = [*(f"{i.local}_ptr" for i in self.body_inputs), "out_ptr", "CHUNKS", "P1", "D", "H", "W", "OD", "OH",
                  "OW", *(f"{i.local}_s{k}" for i in self.body_inputs for k in ("p0", "p1", "d", "h", "w")), "R"]
        params += [f"{c}: tl.constexpr" for c in (*_GEOMETRY, "COUNT_PAD", "DIVISOR", "WIDE", "BLOCK_C", "BLOCK_W")]
        fill = NEG_INF if is_max else "0.0"
        fold = "_max_nan({}, hs)" if is_max else "{} + hs"
        partials = [f"a{j}" for j in range(kh - 1)]        # a{j}: the output KH - 1 - j rows on, so far
        taps = "tl.static_range" if self.node.attr("kernel")[-1] <= UNROLL_MAX else "tl.range"
        lines = [
            "# one program: BLOCK_W neighbouring outputs of R output rows of each of BLOCK_C chunks;",
            "# a chunk is (plane, od, a run of R rows)",
            "pid = tl.program_id(0)",
            "if WIDE:        # int32 indices unless a tensor holds 2**31 elements or more",
            "    pid = pid.to(tl.int64)",
            "n_wb = tl.cdiv(OW, BLOCK_W)",
            "n_rb = tl.cdiv(OH, R)",
            "chunk = (pid // n_wb) * BLOCK_C + tl.arange(0, BLOCK_C)",
            "ow = (pid % n_wb) * BLOCK_W + tl.arange(0, BLOCK_W)",
            "c_ok = chunk < CHUNKS",
            "w_ok = ow < OW",
            "oh0 = (chunk % n_rb) * R",
            "od = (chunk // n_rb) % OD",
            "plane = chunk // (n_rb * OD)",
            "p0 = plane // P1",
            "p1 = plane % P1",
            "d0, w0 = od * SD - PD, ow * SW - PW",
            *(f"{a} = tl.full([BLOCK_C, BLOCK_W], {fill}, tl.float32)" for a in partials),
            "for i in tl.range(R + KH - 1):",
            "    i_h = oh0 - PH + i",
            "    h_ok = c_ok & (i_h >= 0) & (i_h < H)",
            f"    hs = tl.full([BLOCK_C, BLOCK_W], {fill}, tl.float32)",
            f"    for kd in {'tl.static_range' if self.node.attr('kernel')[0] <= UNROLL_MAX else 'tl.range'}(KD):",
            "        i_d = d0 + kd * DD",
            "        row_ok = h_ok & (i_d >= 0) & (i_d < D)",
            f"        for kw in {taps}(KW):",
            "            i_w = w0 + kw * DW",
            "            inside = row_ok[:, None] & (w_ok & (i_w >= 0) & (i_w < W))[None, :]",
            *self._tap_loads("            ", "[:, None]", "[None, :]"),
            "            hs = _max_nan(hs, val)" if is_max else "            hs += val",
            "    # this input row completes the output KH - 1 rows above it and joins the partial ones",
            f"    done = {fold.format('a0')}",
            *(f"    {a} = {fold.format(b)}" for a, b in zip(partials, partials[1:])),
            f"    {partials[-1]} = hs",
            "    oh = i_h + PH - (KH - 1)",
        ]
        if not is_max:
            lines += ["    if DIVISOR:",
                      "        done = done / DIVISOR",
                      "    else:",
                      f"        done = done * _window_share(d0, oh - PH, w0, D, H, W, {_COUNT_ARGS})"]
        lines.append("    tl.store(out_ptr + ((plane * OD + od) * OH + oh)[:, None] * OW + ow[None, :], "
                     "done.to(out_ptr.dtype.element_ty), mask=(c_ok & (oh >= oh0) & (oh < OH))[:, None] & w_ok[None, :])")
        return jit_source(f"{self.name}_kernel", params, lines)

    def _launcher(self) -> str:
        text = self._launcher_head() + self._config_line("_rolled_config(out.numel())")
        text += ("    # a tile of BLOCK elements: a row's outputs across, as many chunks (a plane's R output rows\n"
                 "    # at a time) as fill it\n"
                 "    chunk_rows = min(config[\"ROWS\"], OH)\n"
                 "    chunks = out.numel() // (OH * OW) * _cdiv(OH, chunk_rows)\n"
                 "    block_w = max(1, min(config[\"BLOCK\"], triton.next_power_of_2(OW)))\n"
                 "    block_c = max(1, min(config[\"BLOCK\"] // block_w, triton.next_power_of_2(chunks)))\n"
                 "    grid = (_cdiv(OW, block_w) * _cdiv(chunks, block_c),)\n") + self._wide()
        args = [*self._launch_args("chunks", "chunk_rows"), "BLOCK_C=block_c", "BLOCK_W=block_w",
                'num_warps=config["num_warps"]']
        return text + launch(f"{self.name}_kernel", "grid", args, "    ") + "\n    return out\n"


def _rolls(node: Node) -> bool:
    """Whether a pooling's windows overlap down the rows so that the rolled kernel reads less: a
    fixed window of 2 to ROLL_MAX rows at stride 1, not dilated there (2-d and 3-d)."""
    if node.op != POOL or node.attr("nd") == 1:
        return False
    kh = node.attr("kernel")[-2]
    return 2 <= kh <= ROLL_MAX and node.attr("stride")[-2] == 1 and (node.attr("dilation") or (1, 1))[-2] == 1


class _PoolGradKernel(pointwise.TensorArgsFile):
    block_key = "BLOCK"
    description = ("The gradient of a pooling of x, from its output's (up). One program computes BLOCK_W\n"
                   "neighbouring inputs of BLOCK_R input rows: for each tap of the window, the output whose\n"
                   "window takes this input at that tap (where the stride lands), and up there: divided as the\n"
                   "average divides it, or, for max, where that output's window picks this tap (its first\n"
                   "largest value; a NaN wins, the last one, as torch picks).")

    def __init__(self, spec, node, inputs, options):
        super().__init__(spec, node, inputs, options)
        self.x, self.up = self.tensors

    def source(self) -> str:
        helper = self._window_argmax() if self.node.attr("kind") == "max" else _window_share()
        return self._file([helper, self._kernel()], [_pool_config, _as_3d], self._launcher())

    def configs(self) -> list[dict]:
        return self._space(CONFIGS, lambda config: {**config, "UNROLL": 0})

    def _loop(self) -> str:
        # small windows unrolled; a large one (and max's taps x taps scan) in runtime loops
        return "tl.static_range" if math.prod(self.node.attr("kernel")) <= 16 else "tl.range"

    def _window_argmax(self) -> str:
        params = ["x_ptr", "plane", "od", "oh", "ow", "ok", "D", "H", "W", *(f"{c}: tl.constexpr" for c in _GEOMETRY)]
        loop = self._loop()
        lines = ["# The tap each output (od, oh, ow) takes its max from: the first in-bounds one unless a later",
                 "# value is larger, or NaN (torch's rule); taps numbered (jd * KH + jh) * KW + jw.",
                 *_ARGMAX_START,
                 f"for jd in {loop}(KD):",
                 f"    for jh in {loop}(KH):",
                 "        i_d, i_h = od * SD - PD + jd * DD, oh * SH - PH + jh * DH",
                 "        row_in = (i_d >= 0) & (i_d < D) & (i_h >= 0) & (i_h < H)",
                 f"        for jw in {loop}(KW):",
                 "            i_w = ow * SW - PW + jw * DW",
                 "            inside = ok & row_in[:, None] & ((i_w >= 0) & (i_w < W))[None, :]",
                 *_argmax_tail("(jd * KH + jh) * KW + jw")]
        return jit_source("_window_argmax", params, lines)

    def _kernel(self) -> str:
        loop = self._loop()
        params = ["x_ptr", "up_ptr", "out_ptr", "ROWS", "D", "H", "W", "OD", "OH", "OW",
                  *(f"{c}: tl.constexpr" for c in (*_GEOMETRY, "COUNT_PAD", "DIVISOR", "BLOCK_R", "BLOCK_W"))]
        lines = [
            *_INPUT_ROWS,
            f"for kd in {loop}(KD):",
            f"    for kh in {loop}(KH):",
            "        # the output whose window takes this input at tap (kd, kh, kw): where the stride lands",
            "        td, th = i_d + PD - kd * DD, ih + PH - kh * DH",
            "        od, oh = td // SD, th // SH",
            "        row_ok = r_ok & (td >= 0) & (td % SD == 0) & (od < OD) & (th >= 0) & (th % SH == 0) & (oh < OH)",
            f"        for kw in {loop}(KW):",
            "            tw = iw + PW - kw * DW",
            "            ow = tw // SW",
            "            ok = row_ok[:, None] & (w_ok & (tw >= 0) & (tw % SW == 0) & (ow < OW))[None, :]",
            "            u = tl.load(up_ptr + ((plane * OD + od) * OH + oh)[:, None] * OW + ow[None, :], mask=ok,",
            "                        other=0.0).to(tl.float32)",
            *self._tap_share(),
            "tl.store(out_ptr + row[:, None] * W + iw[None, :], acc.to(out_ptr.dtype.element_ty),",
            "         mask=r_ok[:, None] & w_ok[None, :])",
        ]
        return jit_source(f"{self.name}_kernel", params, lines)

    def _tap_share(self) -> list[str]:
        """What of up (the output's gradient there, u) this input gets at this tap: all of it where
        the output's max is here, or u over the average's divisor."""
        if self.node.attr("kind") == "max":
            return ["            sel = _window_argmax(x_ptr, plane, od, oh, ow, ok, D, H, W, "
                    + ", ".join(f"{c}={c}" for c in _GEOMETRY) + ")",
                    "            acc += tl.where(ok & (sel == (kd * KH + kh) * KW + kw), u, 0.0)"]
        if self.node.attr("divisor"):
            return ["            acc += tl.where(ok, u / DIVISOR, 0.0)"]
        return [f"            share = _window_share(od * SD - PD, oh * SH - PH, ow * SW - PW, D, H, W, {_COUNT_ARGS})",
                "            acc += tl.where(ok, u * share, 0.0)"]

    def _launcher(self) -> str:
        node, x, up = self.node, self.x.local, self.up.local
        nd = node.attr("nd")
        dilation = node.attr("dilation") or (1,) * nd
        text = self._signature_and_prologue()
        text += (f"    out = torch.empty_like({x}, dtype={self.out_dtype(up)})\n"
                 "    if out.numel() == 0:\n        return out\n"
                 f"    D, H, W = _as_3d({x}.shape[-{nd}:], 1)\n"
                 f"    OD, OH, OW = _as_3d({up}.shape[-{nd}:], 1)\n"
                 f"    KD, KH, KW = _as_3d({node.attr('kernel')}, 1)\n"
                 f"    SD, SH, SW = _as_3d({node.attr('stride')}, 1)\n"
                 f"    PD, PH, PW = _as_3d({node.attr('padding')}, 0)\n"
                 f"    DD, DH, DW = _as_3d({dilation}, 1)\n")
        text += self._config_line("_pool_config(out.numel())")
        text += _GRAD_TILES
        args = [x, up, "out", "rows", "D", "H", "W", "OD", "OH", "OW", *(f"{c}={c}" for c in _GEOMETRY),
                f"COUNT_PAD={node.attr('count_include_pad') is not False}",
                f"DIVISOR={node.attr('divisor') or 0}", "BLOCK_R=block_r", "BLOCK_W=block_w",
                'num_warps=config["num_warps"]']
        text += launch(f"{self.name}_kernel", "grid", args, "    ") + "\n"
        return text + "    return out\n"


class _AdaptiveGradKernel(_PoolGradKernel):
    description = ("The gradient of an adaptive pooling of x, from its output's (up). One program computes\n"
                   "BLOCK_W neighbouring inputs of BLOCK_R input rows: the outputs whose windows hold an input\n"
                   "are a run, o from i * O // I to ((i + 1) * O - 1) // I a dim; each gives up there over its\n"
                   "window's size (average), or all of it where its window's max is this input (max: its first\n"
                   "largest value; a NaN wins, the last one, as torch picks).")

    def source(self) -> str:
        helper = self._window_argmax() if self.node.attr("kind") == "max" else _reciprocal_area()
        return self._file([helper, self._kernel()], [_pool_config, _as_3d, _adaptive_reach, _adaptive_window],
                          self._launcher())

    def _window_argmax(self) -> str:
        params = ["x_ptr", "plane", "od", "oh", "ow", "ok", "D", "H", "W", "OD", "OH", "OW",
                  *(f"{c}: tl.constexpr" for c in ("WD", "WH", "WW"))]
        lines = ["# The element of each output's window [start, end) that its max is: the first unless a later",
                 "# one is larger, or NaN (torch's rule); numbered (jd * WH + jh) * WW + jw from the window's start.",
                 *_ADAPTIVE_BOUNDS,
                 *_ARGMAX_START,
                 "for jd in tl.range(WD):",
                 "    for jh in tl.range(WH):",
                 "        i_d, i_h = d0 + jd, h0 + jh",
                 "        row_in = (i_d < d1) & (i_h < h1)",
                 "        for jw in tl.range(WW):",
                 "            i_w = w0 + jw",
                 "            inside = ok & row_in[:, None] & (i_w < w1)[None, :]",
                 *_argmax_tail("(jd * WH + jh) * WW + jw")]
        return jit_source("_window_argmax", params, lines)

    def _kernel(self) -> str:
        params = ["x_ptr", "up_ptr", "out_ptr", "ROWS", "D", "H", "W", "OD", "OH", "OW",
                  *(f"{c}: tl.constexpr" for c in ("KD", "KH", "KW", "WD", "WH", "WW", "BLOCK_R", "BLOCK_W"))]
        if self.node.attr("kind") == "max":
            share = ["            sel = _window_argmax(x_ptr, plane, od, oh, ow, ok, D, H, W, OD, OH, OW, WD=WD, WH=WH, "
                     "WW=WW)",
                     "            mine = ((i_d - d0) * WH + (ih - h0))[:, None] * WW + (iw - w0)[None, :]",
                     "            acc += tl.where(ok & (sel == mine), u, 0.0)"]
        else:
            share = ["            acc += tl.where(ok, u * _reciprocal_area(d0, h0, w0, d1, h1, w1), 0.0)"]
        lines = [
            *_INPUT_ROWS,
            "# the outputs whose windows hold each input: o from i * O // I to ((i + 1) * O - 1) // I, at most",
            "# KD x KH x KW of them",
            "od_lo, oh_lo, ow_lo = (i_d * OD) // D, (ih * OH) // H, (iw * OW) // W",
            "od_hi, oh_hi, ow_hi = ((i_d + 1) * OD - 1) // D, ((ih + 1) * OH - 1) // H, ((iw + 1) * OW - 1) // W",
            "for kd in tl.static_range(KD):",
            "    for kh in tl.static_range(KH):",
            "        od, oh = od_lo + kd, oh_lo + kh",
            "        row_ok = r_ok & (od <= od_hi) & (oh <= oh_hi)",
            "        for kw in tl.static_range(KW):",
            "            ow = ow_lo + kw",
            "            ok = row_ok[:, None] & (w_ok & (ow <= ow_hi))[None, :]",
            "            u = tl.load(up_ptr + ((plane * OD + od) * OH + oh)[:, None] * OW + ow[None, :], mask=ok,",
            "                        other=0.0).to(tl.float32)",
            *("            " + line for line in _ADAPTIVE_BOUNDS),
            *share,
            "tl.store(out_ptr + row[:, None] * W + iw[None, :], acc.to(out_ptr.dtype.element_ty),",
            "         mask=r_ok[:, None] & w_ok[None, :])",
        ]
        return jit_source(f"{self.name}_kernel", params, lines)

    def _launcher(self) -> str:
        node, x, up = self.node, self.x.local, self.up.local
        nd = node.attr("nd")
        text = self._signature_and_prologue()
        text += (f"    out = torch.empty_like({x}, dtype={self.out_dtype(up)})\n"
                 "    if out.numel() == 0:\n        return out\n"
                 f"    D, H, W = _as_3d({x}.shape[-{nd}:], 1)\n"
                 f"    OD, OH, OW = _as_3d({up}.shape[-{nd}:], 1)\n"
                 "    # the most outputs an input feeds, and the widest window, a dim\n"
                 "    KD, KH, KW = (_adaptive_reach(i, o) for i, o in ((D, OD), (H, OH), (W, OW)))\n"
                 "    WD, WH, WW = (_adaptive_window(i, o) for i, o in ((D, OD), (H, OH), (W, OW)))\n")
        text += self._config_line("_pool_config(out.numel())")
        text += _GRAD_TILES
        args = [x, up, "out", "rows", "D", "H", "W", "OD", "OH", "OW", "KD=KD", "KH=KH", "KW=KW", "WD=WD", "WH=WH",
                "WW=WW", "BLOCK_R=block_r", "BLOCK_W=block_w", 'num_warps=config["num_warps"]']
        text += launch(f"{self.name}_kernel", "grid", args, "    ") + "\n"
        return text + "    return out\n"


def _adaptive_reach(size, out):
    # The most outputs of an adaptive pooling of `size` to `out` whose windows hold one input:
    # input i is in the windows of o from i * out // size to ((i + 1) * out - 1) // size.
    return max(((i + 1) * out - 1) // size - i * out // size + 1 for i in range(size))


# the gradient kernels' first lines: a program's inputs, BLOCK_W of a row across, BLOCK_R rows down
_INPUT_ROWS = [
    "# one program: BLOCK_W neighbouring inputs of each of BLOCK_R input rows (plane, d, h)",
    "pid = tl.program_id(0).to(tl.int64)",
    "n_wb = tl.cdiv(W, BLOCK_W)",
    "row = (pid // n_wb) * BLOCK_R + tl.arange(0, BLOCK_R)",
    "iw = (pid % n_wb) * BLOCK_W + tl.arange(0, BLOCK_W)",
    "r_ok = row < ROWS",
    "w_ok = iw < W",
    "ih = row % H",
    "i_d = (row // H) % D",
    "plane = row // (H * D)",
    "acc = tl.zeros([BLOCK_R, BLOCK_W], tl.float32)",
]
# an adaptive output (od, oh, ow)'s window, [d0, d1) x [h0, h1) x [w0, w1) of the input
_ADAPTIVE_BOUNDS = [
    "d0, h0, w0 = (od * D) // OD, (oh * H) // OH, (ow * W) // OW",
    "d1, h1, w1 = ((od + 1) * D + OD - 1) // OD, ((oh + 1) * H + OH - 1) // OH, ((ow + 1) * W + OW - 1) // OW",
]
# the gradient launchers' tiles
_GRAD_TILES = ("    # a tile of BLOCK inputs: a row's across, as many rows as fill it\n"
               "    rows = out.numel() // W\n"
               "    block_w = min(config[\"BLOCK\"], triton.next_power_of_2(W))\n"
               "    block_r = max(1, min(config[\"BLOCK\"] // block_w, triton.next_power_of_2(rows)))\n"
               "    grid = (_cdiv(W, block_w) * _cdiv(rows, block_r),)\n")
_GEOMETRY = ("KD", "KH", "KW", "SD", "SH", "SW", "PD", "PH", "PW", "DD", "DH", "DW")
_COUNT_ARGS = "KD=KD, KH=KH, KW=KW, PD=PD, PH=PH, PW=PW, COUNT_PAD=COUNT_PAD"


def _window_share() -> str:
    """The jit helpers both kernels scale an average by, as torch divides it: one over each window
    (starting at rows' d0, h0 and columns' w0) clipped to the padded input (count_include_pad), or to
    the input (_reciprocal_area's)."""
    params = ["d0", "h0", "w0", "D", "H", "W", *(f"{c}: tl.constexpr" for c in
                                                    ("KD", "KH", "KW", "PD", "PH", "PW", "COUNT_PAD"))]
    return _reciprocal_area() + "\n\n" + jit_source("_window_share", params, [
        "d1, h1, w1 = tl.minimum(d0 + KD, D + PD), tl.minimum(h0 + KH, H + PH), tl.minimum(w0 + KW, W + PW)",
        "if not COUNT_PAD:",
        "    d0, h0, w0 = tl.maximum(d0, 0), tl.maximum(h0, 0), tl.maximum(w0, 0)",
        "    d1, h1, w1 = tl.minimum(d1, D), tl.minimum(h1, H), tl.minimum(w1, W)",
        "return _reciprocal_area(d0, h0, w0, d1, h1, w1)"])


def _reciprocal_area() -> str:
    """One over the windows [d0, d1) x [h0, h1) (rows) by [w0, w1) (columns): an outer product of the
    rows' and the columns' reciprocals (no division an element; at least 1 each where an output is
    masked off)."""
    return jit_source("_reciprocal_area", ["d0", "h0", "w0", "d1", "h1", "w1"], [
        "rows = 1.0 / tl.maximum((d1 - d0) * (h1 - h0), 1).to(tl.float32)",
        "return rows[:, None] * (1.0 / tl.maximum(w1 - w0, 1).to(tl.float32))[None, :]"])


def _argmax_tail(tap: str) -> list[str]:
    """The max-gradient helpers' innermost lines and their return: load x at the window element
    (i_d, i_h, i_w) where inside, and keep it as the window's pick (numbered `tap`) unless an earlier
    one is at least as large and not NaN (torch's first-max rule; a NaN wins, the last one)."""
    return ["            v = tl.load(x_ptr + (plane * D * H * W + i_d * (H * W) + i_h * W)[:, None] + i_w[None, :],",
            "                        mask=inside, other=float(\"-inf\")).to(tl.float32)",
            "            take = inside & ((v > best) | (v != v) | (sel < 0))",
            "            best = tl.where(take, v, best)",
            f"            sel = tl.where(take, {tap}, sel)",
            "return sel"]


_ARGMAX_START = ["best = tl.full(ok.shape, float(\"-inf\"), tl.float32)", "sel = tl.full(ok.shape, -1, tl.int32)"]


# images as a CNN pools them (batch, channels, height, width), and an odd size
POOL_BIG, POOL_SMALL = "32x64x112x112, 7x37x97x89", "1x2x6x7, 2x1x5x9"
ENTRIES = (
    Entry("max_pool2d", "2x2 max pooling on {shapes}, each in {dtypes}", "max_pool2d(x, kernel_size=2)",
          big=POOL_BIG, small=POOL_SMALL),
    Entry("avg_pool2d_3x3", "3x3 average pooling with stride 1 and padding 1 on {shapes}, each in {dtypes}",
          "avg_pool2d(x, kernel_size=3, stride=1, padding=1)", big=POOL_BIG, small=POOL_SMALL),
)
