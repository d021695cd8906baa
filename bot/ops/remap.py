"""The remap family: ops whose every output element is one input element (or a constant), found by
index arithmetic per dim. torch.flip, torch.roll, x.repeat and torch.tile, torch.repeat_interleave by
a whole number, torch.tril / torch.triu of a tensor (a product's triangle is the matmul family's
epilogue), F.pad in its four modes (zeros a convolution reads are folded into its padding), and
F.interpolate's nearest upsampling by powers of two (nn.Upsample), F.pixel_shuffle / pixel_unshuffle
(a permutation of the input read as [*, C, r, r, H, W]), and torch.diagonal over two neighbouring dims
(those two read as one, stepping the row length plus one).

One kernel for them all: a program takes BLOCK output elements, splits each flat index into the
output's per-dim indices o, and reads the input at ((o * a + b) // d) % m in each dim (flip: a = -1,
b = n - 1; roll by s: b = n - s, m = n; repeat: m = n; interleave by r: d = r); a triangle keeps the
elements whose last two indices pass it and writes zero elsewhere. F.pad reads index o - before, and
where that leaves the input writes the value (constant), mirrors it (reflect), clamps it (replicate)
or wraps it (circular). A pixel shuffle is a permutation of a view with two dims more: each output
dim reads one of the view's dims with that dim's stride. The stores are contiguous; the
loads follow the op (a flip's read backwards, a repeat's rereads hit L2).

Owns its IR rule, the output shape, the torch call and the kernel with its config space and default.
"""
from __future__ import annotations

import ast
import math
import re

from bot.codegen.code import Code, jit_source, launch
from bot.codegen.kernel_file import KernelFile
from bot.ops import linear_upsample, pointwise, scan
from bot.ops.entry import Entry
from bot.ops.node import MOVERS, Call, IRError, Node, arguments, call, is_int_literal, is_none, number, prints
from bot.ops.text import FLAGS as _F, blank as _blank, blank_span
from bot.ops.view import operand_text

NAME = "remap"
FLIP = scan.FLIP                    # the scan family reads a flip around a scan as a reversed scan
ROLL, REPEAT, TILE, INTERLEAVE, TRIL, TRIU, PAD, UPSAMPLE = (
    "roll", "repeat", "tile", "repeat_interleave", "tril", "triu", "pad", "interpolate")
SHUFFLE = {"pixel_shuffle": "upscale_factor", "pixel_unshuffle": "downscale_factor"}     # ... and its factor's name
DIAGONAL = "diagonal"
OPS = {FLIP, ROLL, REPEAT, TILE, INTERLEAVE, TRIL, TRIU, PAD, UPSAMPLE, DIAGONAL, *SHUFFLE}
ROOT = True
MAX_RANK = 5
MAX_NUMEL = 2**34                   # the kernel indexes with int64 where the output needs it
SUPPORTED = ("", "flip(x, dims), fliplr, flipud, roll(x, shifts, dims), x.repeat(sizes), tile, "
             "repeat_interleave(x, n, dim), tril/triu of a tensor, F.pad (constant, reflect, replicate, circular), "
             "F.interpolate mode 'nearest' by powers of two, and 'linear', 'bilinear', 'trilinear' by whole "
             "scale factors (align_corners off), pixel_shuffle, pixel_unshuffle, "
             "torch.diagonal(x, offset, dim1, dim2) over neighbouring dims")
ALIASES = {"upsample": UPSAMPLE, "upsample_nearest": UPSAMPLE}
KEYWORDS = {FLIP: {"dims"}, "fliplr": set(), "flipud": set(), ROLL: {"shifts", "dims"}, REPEAT: {"repeats"},
            TILE: {"dims"}, INTERLEAVE: {"repeats", "dim"}, PAD: {"pad", "mode", "value"},
            DIAGONAL: {"offset", "dim1", "dim2"},
            UPSAMPLE: {"size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias"},
            **{op: {factor} for op, factor in SHUFFLE.items()}}
OUTPUT_DTYPES: dict[str, str] = {}
WORDS: list = []
TRIANGLE = {TRIL: 1, TRIU: 2}       # the kernel's TRI flag
MOVERS.update(OPS - {PAD, UPSAMPLE})  # a pad's value and an upsampling's interpolation make values of their own
PAD_MODES = {"constant": 1, "reflect": 2, "replicate": 3, "circular": 4}      # ... and its PAD flag

# elements a program and warps; the default: _remap_config
CONFIGS = [{"BLOCK": b, "num_warps": w} for b, w in [(1024, 4), (2048, 8), (4096, 8), (512, 4), (256, 2)]]


# ---------------------------------------------------------------- words

# "flip x along dim 1", "roll by 3 along dim 0", "nearest upsample by 2", "reflect pad by 2",
# "lower triangle of x", "pixel shuffle by 2", "tile x 2 times along dim 0", "翻转", "循环移位", "上采样", "反射填充", "下三角", "像素重排"
FLIP_WORD = re.compile(r"\bflip(?:s|ped|ping)?\b|翻转", _F)
ROLL_WORD = re.compile(r"\broll(?:s|ed|ing)?\b|\bcircular(?:ly)?\s+shift\w*|循环移位", _F)
UPSAMPLE_WORD = re.compile(r"\b(?:nearest[\s-]+(?:neighbou?r[\s-]+)?)?up[\s-]?sampl\w*|(?:最近邻)?上采样", _F)
# said apart from the upsampling word: "upsample 2x nearest", "upsample by 2 (bilinear)"
_NEAREST = re.compile(r"\b(?:mode\s*[=:]?\s*['\"]?)?nearest(?:[\s-]+neighbou?rs?)?\b['\"]?|最近邻", _F)
_INTERPOLATING = re.compile(r"\b(?:bi|tri)?linear\b|\bbicubic\b|\barea\b|双线性|三线性|双三次", _F)
PAD_WORD = re.compile(r"\b(?:(reflect|replicat|circular|zero|constant)\w*[\s-]+)?pad(?:s|ded|ding)?\b|"
                      r"(反射|复制|循环|零|常数)?填充", _F)
TRIANGLE_WORD = re.compile(r"\b(lower|upper)[\s-]+triang(?:le|ular)(?:\s+(?:part|half)(?:\s+of)?)?\b|([上下])三角|"
                           r"\b(tril|triu)\b(?!\s*\()", _F)
# "tile x 2 times along dim 0", "repeat each element 3 times along dim 1", "重复"
REPEAT_WORD = re.compile(r"\b(?:repeat(?:s|ed|ing)?(?:[\s_-]interleave[sd]?)?|tile[sd]?|tiling)\b(?!\s*\()|重复|平铺", _F)
_TIMES = re.compile(r"\b(\d+)\s*(?:times|x)\b(?!\s*\d)|(\d+)\s*(?:次|遍|倍)", _F)
_EACH = re.compile(r"interleav\w*|\beach\s+(?:element|value|entry|row|column)\b|逐元素|每个元素", _F)
SHUFFLE_WORD = re.compile(r"\bpixel[\s_-]*(un)?shuffl\w*|(逆)?像素重排", _F)
REMAP_WORD = re.compile("|".join(p.pattern for p in (FLIP_WORD, ROLL_WORD, UPSAMPLE_WORD, PAD_WORD, TRIANGLE_WORD,
                                                      SHUFFLE_WORD, REPEAT_WORD)),
                        _F)
_BY = re.compile(r"\b(?:(?:up|down)[\s_-]?scal\w*[\s_-]+)?factor\s*(?:=|:|is)?\s*(\d+)\b|"
                 r"\b(?:by|of)\s+(?:a\s+(?:factor|shift)\s+of\s+)?(-?\d+)\b(?!\s*[x×*]\s*\d)|(-?\d+)\s*(?:倍|位)|"
                 r"\b(\d+)\s*x\b(?!\s*\d)|(?<=填充)\s*(\d+)(?!\s*[x×*]\s*\d)", _F)
_DIAGONAL = re.compile(r"\b(?:diagonal|offset)\s*(?:of|=|:)?\s*(-?\d+)\b|对角线\s*(-?\d+)", _F)
_MODES = {"reflect": "reflect", "replicat": "replicate", "circular": "circular", "zero": "constant",
          "constant": "constant", "反射": "reflect", "复制": "replicate", "循环": "circular", "零": "constant",
          "常数": "constant"}


def remap_words(text: str, names: list[str], dims: list[int], ranks: set[int]) -> tuple[str, str]:
    """(expression, text without the words read) for a flip, roll, repeat, upsampling, pad, pixel shuffle
    or triangle said in words of one tensor (x where none is named); dims: the dims the words name
    ('along dim 1'); ranks: those of the shapes said."""
    if len(set(names)) > 1:
        raise IRError(f"a {REMAP_WORD.search(text).group(0)} moves one tensor, but the words name "
                      f"{', '.join(dict.fromkeys(names))}; write it as code, e.g. 'torch.flip(x, [1]) + y'")
    x = names[0] if names else "x"
    if REPEAT_WORD.search(text) and not PAD_WORD.search(text):
        return _repeat_words(text, x, dims, ranks)
    by = _BY.search(text)
    amount = int(next(g for g in by.groups() if g)) if by else None
    if by:
        text = blank_span(text, by)
    if m := TRIANGLE_WORD.search(text):
        tri = "tril" if (m.group(1) or m.group(2) or m.group(3)).lower() in ("lower", "下", "tril") else "triu"
        d = _DIAGONAL.search(text)
        diagonal = int(next(g for g in d.groups() if g)) if d else 0
        return f"torch.{tri}({x}, diagonal={diagonal})", _DIAGONAL.sub(_blank, REMAP_WORD.sub(_blank, text))
    if m := SHUFFLE_WORD.search(text):
        if amount is None:
            raise IRError("a pixel shuffle takes its factor: say e.g. 'pixel shuffle x by 2'")
        op = "pixel_unshuffle" if m.group(1) or m.group(2) else "pixel_shuffle"
        return f"F.{op}({x}, {amount})", REMAP_WORD.sub(_blank, text)
    if FLIP_WORD.search(text):
        if not dims:
            raise IRError("a flip reverses the dims it is given: say which, e.g. 'flip x along dim 1'")
        return f"torch.flip({x}, dims={list(dims)})", REMAP_WORD.sub(_blank, text)
    if ROLL_WORD.search(text):
        if amount is None or len(dims) > 1:
            raise IRError("a roll shifts by a number along at most one dim in words, e.g. 'roll x by 3 along dim 1' "
                          "(several dims: torch.roll(x, (1, 2), (0, 1)))")
        return f"torch.roll({x}, {amount}{f', {dims[0]}' if dims else ''})", REMAP_WORD.sub(_blank, text)
    if UPSAMPLE_WORD.search(text):
        if m := _INTERPOLATING.search(text):
            raise IRError(f"upsampling is read as nearest (each output takes its nearest input); {m.group(0)!r} "
                          "interpolates between values, which the offline generator does not lower")
        if amount is None:
            raise IRError("nearest upsampling takes a factor: say e.g. 'nearest upsample x by 2'")
        return (f"F.interpolate({x}, scale_factor={amount}, mode='nearest')",
                _NEAREST.sub(_blank, REMAP_WORD.sub(_blank, text)))
    m = PAD_WORD.search(text)
    if amount is None or amount < 0:
        raise IRError("a pad takes its amount, each side of the last dim: say e.g. 'reflect pad x by 2'")
    mode = _MODES.get((m.group(1) or m.group(2) or "constant").lower(), "constant")
    return f"F.pad({x}, ({amount}, {amount}), mode='{mode}')", REMAP_WORD.sub(_blank, text)


def _repeat_words(text: str, x: str, dims: list[int], ranks: set[int]) -> tuple[str, str]:
    """'repeat each element 3 times along dim 1' (repeat_interleave) or 'tile x 2 times along dim 0'
    (x.repeat: copies one after another); a bare 'repeat' could be either, so it is asked."""
    times = _TIMES.search(text)
    if not times:
        raise IRError("a repeat takes its count: say e.g. 'tile x 2 times along dim 0' or 'repeat each element 2 "
                      "times along dim 1'")
    n = int(next(g for g in times.groups() if g))
    d = dims[0] if len(dims) == 1 else None
    rest = _EACH.sub(_blank, REPEAT_WORD.sub(_blank, blank_span(text, times)))
    if _EACH.search(text):
        return f"torch.repeat_interleave({x}, {n}{'' if d is None else f', dim={d}'})", rest
    if not re.search(r"\btil|平铺", text, re.I):
        raise IRError("'repeat' in words can mean copies of the whole tensor one after another (torch's x.repeat) "
                      "or each element repeated in place (repeat_interleave, numpy's repeat): say 'tile x 2 times "
                      "along dim 0' or 'repeat each element 2 times along dim 0'")
    if d is None or len(ranks) != 1:
        raise IRError("a tile in words takes one dim and one shape, e.g. 'tile x 2 times along dim 0 for 64x128'")
    rank = ranks.pop()
    return f"{x}.repeat({tuple(n if k == d % rank else 1 for k in range(rank))})", rest


# ---------------------------------------------------------------- IR rule

def convert(c: Call) -> Node | None:
    if c.fname not in OPS | {"fliplr", "flipud"} or c.fname in TRIANGLE:
        return None                 # tril/triu are read by the matmul family, which hands a tensor's here
    if not c.args:
        raise IRError(f"{c.fname} needs a tensor, e.g. torch.{c.fname}(x, ...)")
    x = c.expr(c.args[0])
    rest = Call(c.fname, c.written, c.args[1:], c.kw, c.expr)
    if c.fname in (FLIP, "fliplr", "flipud"):
        dims = {"fliplr": (1,), "flipud": (0,)}.get(c.fname) or _ints(rest, "dims", required=True)
        if len(set(dims)) != len(dims):
            raise IRError(f"flip names a dim twice in {list(dims)}; torch refuses that: name each dim once")
        return scan.flipped_back(x, dims) or call(FLIP, x, dims=dims)
    if c.fname == ROLL:
        given = arguments(rest, ("shifts", "dims"))
        shifts = _int_tuple(given.get("shifts"), "roll's shifts")
        dims = None if is_none(given.get("dims")) else _int_tuple(given["dims"], "roll's dims")
        if dims is not None and len(dims) != len(shifts):
            raise IRError(f"roll takes a shift per dim: {len(shifts)} shifts for {len(dims)} dims")
        if dims is None and len(shifts) != 1:
            raise IRError("roll without dims shifts the flattened tensor by one amount; name the dims for several")
        return call(ROLL, x, dims=dims, amounts=shifts)
    if c.fname in (REPEAT, TILE):
        return call(c.fname, x, amounts=_ints(rest, "repeats" if c.fname == REPEAT else "dims", required=True))
    if c.fname == PAD:
        return _pad(rest, x)
    if c.fname == UPSAMPLE:
        return _upsample(rest, x)
    if c.fname == DIAGONAL:
        given = arguments(rest, ("offset", "dim1", "dim2"))
        offset, *dims = (_int(given.get(k, ast.Constant(v)), f"diagonal's {k}")
                         for k, v in (("offset", 0), ("dim1", 0), ("dim2", 1)))
        return call(DIAGONAL, x, dims=tuple(dims), amounts=(offset,))
    if c.fname in SHUFFLE:
        given = arguments(rest, (SHUFFLE[c.fname],))
        r = _int(given.get(SHUFFLE[c.fname]), f"{c.fname}'s {SHUFFLE[c.fname]}")
        if r < 1:
            raise IRError(f"{c.fname}'s {SHUFFLE[c.fname]} must be 1 or more, got {r}")
        return call(c.fname, x, amounts=(r,))
    given = arguments(rest, ("repeats", "dim"))
    repeats = given.get("repeats")
    if repeats is None or not is_int_literal(repeats) or int(number(repeats)) < 0:
        raise IRError("repeat_interleave takes a whole number of repeats, e.g. x.repeat_interleave(2, dim=1) "
                      "(a tensor of counts is not supported)")
    dim = None if is_none(given.get("dim")) else _int(given["dim"], "repeat_interleave's dim")
    return call(INTERLEAVE, x, dims=None if dim is None else (dim,), amounts=(int(number(repeats)),))


def _pad(c: Call, x: Node) -> Node:
    """F.pad(x, pad, mode='constant', value=None): pad names the last dim's before and after first."""
    given = arguments(c, ("pad", "mode", "value"))
    pads = _int_tuple(given.get("pad"), "F.pad's pad") if "pad" in given else ()
    mode = given["mode"].value if isinstance(given.get("mode"), ast.Constant) else "constant" if "mode" not in given \
        else None
    if not pads or len(pads) % 2 or mode not in PAD_MODES:
        raise IRError("F.pad takes pad as pairs of whole numbers (the last dim's before and after first) and mode "
                      "'constant', 'reflect', 'replicate' or 'circular', e.g. F.pad(x, (1, 1), mode='reflect')")
    value = 0.0 if is_none(given.get("value")) else number(given["value"])
    if value and mode != "constant":
        raise IRError(f"F.pad's value is for mode 'constant'; mode {mode!r} pads with the input's own values")
    return call(PAD, x, amounts=pads, mode=mode, value=value)


def _upsample(c: Call, x: Node) -> Node:
    """F.interpolate(x, size or scale_factor, mode='nearest'): each output index o of a spatial dim reads
    o // f, f a whole power of two, where torch's floor(o * (1 / f)) in float32 is that exactly."""
    given = arguments(c, ("size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias"))
    mode = given["mode"].value if isinstance(given.get("mode"), ast.Constant) else "nearest" if "mode" not in given \
        else None
    extra = [k for k in ("align_corners", "recompute_scale_factor", "antialias")
             if not is_none(given.get(k)) and not (isinstance(given[k], ast.Constant) and given[k].value is False)]
    if linear_upsample.spatial_dims(mode) and not extra:
        return _linear(c, x, given, linear_upsample.spatial_dims(mode))
    if mode != "nearest" or extra:
        raise IRError(f"F.interpolate is read with mode 'nearest' (no {', '.join(extra) or 'other mode'}); "
                      f"{mode or ast.unparse(given['mode'])!r} interpolates between values, which the offline "
                      "generator does not lower")
    size, scale = given.get("size"), given.get("scale_factor")
    if is_none(size) == is_none(scale):
        raise IRError("F.interpolate takes size or scale_factor, one of them")
    if is_none(size):
        factors = _whole(scale)
        if not factors or any(f < 1 or f & (f - 1) for f in factors):
            raise IRError(f"F.interpolate's scale_factor {ast.unparse(scale)}: nearest upsampling is read by whole "
                          "powers of two (2, 4, (2, 2)), where torch's float index math is exact")
        return call(UPSAMPLE, x, amounts=factors, mode="scale_factor")
    return call(UPSAMPLE, x, amounts=_int_tuple(size, "F.interpolate's size"), mode="size")


def _linear(c: Call, x: Node, given: dict, dims: int) -> Node:
    """F.interpolate's linear modes by whole scale factors (bot.ops.linear_upsample)."""
    scale = given.get("scale_factor")
    factors = _whole(scale) if not is_none(scale) and is_none(given.get("size")) else ()
    if len(factors) == 1:
        factors *= dims
    if len(factors) != dims:
        raise IRError(f"F.interpolate mode {given['mode'].value!r} is read by a whole scale_factor (2, or one a "
                      f"dim), not {'size' if not is_none(given.get('size')) else ast.unparse(scale)}, without align_corners")
    return linear_upsample.linear_upsampled(x, factors, c.expr)


def _whole(e: ast.expr) -> tuple[int, ...]:
    """A number or tuple of numbers, each whole (2.0 as 2); () where one is not."""
    elts = e.elts if isinstance(e, (ast.Tuple, ast.List)) else [e]
    try:
        values = [number(v) for v in elts]
    except IRError:
        return ()
    return tuple(int(v) for v in values) if all(v == int(v) for v in values) else ()


def triangle(x: Node, tri: str, diagonal: int) -> Node:
    """torch.tril / torch.triu of a tensor that is not a matmul's product."""
    return call(tri, x, amounts=(diagonal,))


def _ints(c: Call, key: str, required: bool = False) -> tuple[int, ...]:
    """Integers given as a tuple or list, as the keyword key, or one by one (x.flip(0, 1), x.repeat(2, 3))."""
    if key in c.kw:
        if c.args:
            raise IRError(f"{c.fname} takes its {key} once: as {key}=... or in order, not both")
        return _int_tuple(c.kw.pop(key), f"{c.fname}'s {key}")
    if len(c.args) == 1 and isinstance(c.args[0], (ast.Tuple, ast.List)):
        return _int_tuple(c.args[0], f"{c.fname}'s {key}")
    if not c.args and required:
        raise IRError(f"{c.fname} needs its {key}, e.g. torch.{c.fname}(x, (0,))")
    return tuple(_int(a, f"{c.fname}'s {key}") for a in c.args)


def _int_tuple(e: ast.expr | None, what: str) -> tuple[int, ...]:
    if isinstance(e, (ast.Tuple, ast.List)):
        return tuple(_int(v, what) for v in e.elts)
    return (_int(e, what),)


def _int(e: ast.expr | None, what: str) -> int:
    if e is None or not is_int_literal(e):
        raise IRError(f"{what} must be whole numbers written out, got {'nothing' if e is None else ast.unparse(e)!r}")
    return int(number(e))


def check(node: Node) -> None:
    if node.args[0].op != "input":
        raise IRError(f"{node.op} moves a tensor's elements: its operand is an input or a kernel's output")


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    try:
        return _remap_plan(shapes[node.args[0].name], node.op, node.attr("dims"), node.attr("amounts"),
                           node.attr("mode"))[3]
    except ValueError as e:
        raise IRError(str(e)) from None


def size_rules(node: Node, cases: list[dict[str, list[int]]]) -> tuple[set[int], int]:
    """Sizes the odd cases keep: a pixel shuffle's channels and an unshuffle's height and width (multiples
    of the factor), upsampling's sizes given as numbers and the spatial sizes they are multiples of; in
    a chain (other tensors in the case), every size the op changes and what it is made from, since the
    tensors the output meets carry those sizes."""
    x, fixed = node.args[0].name, set()
    for case in cases:
        shape = case[x]
        if node.op in SHUFFLE and len(shape) >= 3:
            fixed |= {shape[-3]} if node.op == "pixel_shuffle" else {shape[-2], shape[-1]}
        if node.op == UPSAMPLE and node.attr("mode") == "size":
            fixed |= set(node.attr("amounts")) | set(shape[2:])
        if len(case) > 1:
            out = output_shape(node, case)
            if len(out) != len(shape):
                fixed |= set(shape) | set(out)
            else:
                fixed |= {v for a, b in zip(shape, out) if a != b for v in (a, b)}
    return fixed, 1


def torch_text(node: Node, a: list[str]) -> str:
    """The op in PyTorch over its operand's text: the reference's, and the expression's own text (it
    reads back as the same op)."""
    dims, amounts = node.attr("dims"), node.attr("amounts")
    if node.op == FLIP:
        return f"torch.flip({a[0]}, dims={dims})"
    if node.op == ROLL:
        return f"torch.roll({a[0]}, shifts={amounts}{'' if dims is None else f', dims={dims}'})"
    if node.op == REPEAT:
        return f"{operand_text(a[0])}.repeat({amounts})"
    if node.op == TILE:
        return f"torch.tile({a[0]}, {amounts})"
    if node.op == INTERLEAVE:
        return f"torch.repeat_interleave({a[0]}, {amounts[0]}{'' if dims is None else f', dim={dims[0]}'})"
    if node.op == PAD:
        value = f", value={node.attr('value')!r}" if node.attr("mode") == "constant" else ""
        return f"torch.nn.functional.pad({a[0]}, {amounts}, mode={node.attr('mode')!r}{value})"
    if node.op in SHUFFLE:
        return f"torch.nn.functional.{node.op}({a[0]}, {amounts[0]})"
    if node.op == DIAGONAL:
        return f"torch.diagonal({a[0]}, offset={amounts[0]}, dim1={dims[0]}, dim2={dims[1]})"
    if node.op == UPSAMPLE:          # one value stands for every spatial dim as a number, not a 1-tuple
        values = tuple(float(f) for f in amounts) if node.attr("mode") == "scale_factor" else amounts
        return (f"torch.nn.functional.interpolate({a[0]}, {node.attr('mode')}="
                f"{values[0] if len(values) == 1 else values}, mode='nearest')")
    return f"torch.{node.op}({a[0]}, diagonal={amounts[0]})"


TORCH_OPS = {op: torch_text for op in OPS}


@prints(*OPS)
def _text(node: Node, text) -> str:
    return torch_text(node, [text(node.args[0])])


def reference_property(node: Node) -> tuple[str, bool]:
    return "", False


# ---------------------------------------------------------------- launcher helpers (copied into kernel.py)

def _remap_plan(shape, kind, dims, amounts, mode=None):
    # (the input's shape as the op reads it, the output's, per output dim k (a, b, d, m, order): output
    # index o reads index ((o * a + b) // d) % m of input dim order[k], and the shape torch returns). No dims for roll or
    # repeat_interleave: the flattened tensor (rolled back into shape); a repeat's input takes unit dims
    # first up to the repeats' count. F.pad's mode: mode.
    if kind in ("pixel_shuffle", "pixel_unshuffle"):
        return _shuffle_plan(shape, amounts[0], kind == "pixel_shuffle")
    if kind == "diagonal":
        return _diagonal_plan(shape, dims, amounts[0])
    shape = returned = list(shape)
    if dims is None and kind in ("roll", "repeat_interleave"):
        shape, dims = [math.prod(shape)], (0,)
    if kind in ("repeat", "tile"):
        if kind == "tile":
            amounts = (1,) * (len(shape) - len(amounts)) + tuple(amounts)
        if len(amounts) < len(shape):
            raise ValueError(f"repeat{tuple(amounts)} gives fewer repeats than the tensor's {len(shape)} dims")
        shape = [1] * (len(amounts) - len(shape)) + shape
    rank = len(shape)
    if kind in ("tril", "triu") and rank < 2:
        raise ValueError(f"{kind} takes a tensor of 2 dims or more, got {rank}")
    if any(not -max(rank, 1) <= k < max(rank, 1) for k in dims or ()):
        raise ValueError(f"{kind} over dims {tuple(dims)}, but the tensor has {rank}")
    sizes, a, b, d, m = list(shape), [1] * rank, [0] * rank, [1] * rank, [max(n, 1) for n in shape]
    if kind == "pad":
        grown, before = _pad_plan(shape, amounts, mode)
        sizes, b = list(grown), [-v for v in before]
    if kind == "interpolate":
        grown, factors = _upsample_plan(shape, amounts, mode == "size")
        sizes, d = list(grown), list(factors)
    for i, k in enumerate(dims or ()):
        k %= max(rank, 1)
        if kind == "flip":
            a[k], b[k] = -1, shape[k] - 1
        elif kind == "roll":                    # a dim named twice is rolled by both shifts
            b[k] = (b[k] - amounts[i]) % m[k]
        elif kind == "repeat_interleave":
            sizes[k], d[k] = shape[k] * amounts[0], max(amounts[0], 1)
    if kind in ("repeat", "tile"):
        sizes = [n * r for n, r in zip(shape, amounts)]
    return shape, sizes, (a, b, d, m, list(range(rank))), returned if kind == "roll" else sizes


def _pad_plan(shape, pads, mode):
    # (sizes, before): F.pad's pairs, the last dim's first: each padded dim's output grows by both (a
    # negative one crops) and its index o reads o - before; reflect mirrors, circular wraps once.
    sizes, before = list(shape), [0] * len(shape)
    if len(pads) > 2 * len(shape):
        raise ValueError(f"F.pad pads {len(pads) // 2} dims of a tensor of {len(shape)}")
    for j in range(len(pads) // 2):
        k, lo, hi = len(shape) - 1 - j, pads[2 * j], pads[2 * j + 1]
        sizes[k], before[k] = shape[k] + lo + hi, lo
        if sizes[k] < 0 or (mode == "reflect" and max(lo, hi) >= shape[k]) or \
                (mode in ("replicate", "circular") and (shape[k] == 0 or max(lo, hi) > shape[k])):
            raise ValueError(f"F.pad by {(lo, hi)} in mode {mode!r} over a dim of {shape[k]}: torch takes "
                             "paddings that leave a size of 0 or more, below the size for reflect, at most it "
                             "for circular")
    return sizes, before


def _shuffle_plan(shape, r, up):
    # A pixel shuffle as _remap_plan gives it: the input read as [*, C, r, r, H, W] (up) or [*, C, H, r,
    # W, r], the output [*, C, H, r, W, r] (or [*, C, r, r, H, W]) whose dim k is the view's order[k],
    # the steps' fifth entry (other ops' is the identity); torch returns [*, C, H*r, W*r] (or [*, C*r*r, H, W]).
    if len(shape) < 3:
        raise ValueError(f"pixel_{'' if up else 'un'}shuffle takes [*, C, H, W], got a {len(shape)}-D tensor")
    *lead, c, h, w = shape
    n = len(lead)
    if up and c % (r * r):
        raise ValueError(f"pixel_shuffle by {r} needs channels divisible by {r * r}, got {c}")
    if not up and (h % r or w % r):
        raise ValueError(f"pixel_unshuffle by {r} needs height and width divisible by {r}, got {h} x {w}")
    if up:
        view, order, returned = [*lead, c // (r * r), r, r, h, w], [0, 3, 1, 4, 2], [*lead, c // (r * r), h * r, w * r]
    else:
        view, order, returned = [*lead, c, h // r, r, w // r, r], [0, 2, 4, 1, 3], [*lead, c * r * r, h // r, w // r]
    order = [*range(n), *(n + k for k in order)]
    sizes = [view[k] for k in order]
    steps = ([1] * len(view), [0] * len(view), [1] * len(view), [max(v, 1) for v in sizes], order)
    return view, sizes, steps, returned


def _diagonal_plan(shape, dims, offset):
    # torch.diagonal as _remap_plan gives it: its two dims (neighbours) read as one of their sizes'
    # product, whose element k of the diagonal is k * (the second's size + 1) past the first's; the
    # output is the other dims, then the diagonal's (dim order[-1] of the view).
    rank = len(shape)
    if any(not -rank <= k < rank for k in dims):
        raise ValueError(f"diagonal over dims {tuple(dims)}, but the tensor has {rank}")
    d1, d2 = (k % rank for k in dims)
    if abs(d1 - d2) != 1:
        raise ValueError(f"diagonal over dims {tuple(dims)}: two neighbouring dims are read (e.g. the last two); "
                         "permute the tensor first for others")
    lo = min(d1, d2)
    first = [max(-offset, 0), max(offset, 0)]           # where the diagonal starts in dim1 and dim2
    length = min(shape[d1] - first[0], shape[d2] - first[1])
    if length < 1:
        raise ValueError(f"diagonal with offset {offset} of a {shape[d1]} x {shape[d2]} matrix is empty")
    start_lo, start_hi = first if d1 == lo else first[::-1]
    view = [*shape[:lo], shape[lo] * shape[lo + 1], *shape[lo + 2:]]
    order = [k for k in range(len(view)) if k != lo] + [lo]
    sizes = [view[k] for k in order[:-1]] + [length]
    n = len(order)
    steps = ([1] * (n - 1) + [shape[lo + 1] + 1], [0] * (n - 1) + [start_lo * shape[lo + 1] + start_hi], [1] * n,
             [max(view[k], 1) for k in order], order)
    return view, sizes, steps, sizes


def _upsample_plan(shape, wanted, by_size):
    # (sizes, d): nearest upsampling of the spatial dims (those after batch and channels) to sizes
    # (by_size) or by factors, whole powers of two, each output index reading index // factor.
    spatial = len(shape) - 2
    if spatial < 1 or len(wanted) not in (1, spatial):
        raise ValueError(f"F.interpolate of a {len(shape)}-D tensor by {tuple(wanted)}: it takes [N, C, ...] and "
                         f"one value or one per spatial dim ({max(spatial, 0)})")
    wanted = list(wanted) * (spatial if len(wanted) == 1 else 1)
    f = [(w // n if n and w % n == 0 else 0) if by_size else w for w, n in zip(wanted, shape[2:])]
    if any(v < 1 or v & (v - 1) for v in f):
        raise ValueError(f"F.interpolate to {tuple(wanted)} from {tuple(shape[2:])}: nearest upsampling is read by "
                         "whole powers of two")
    return list(shape[:2]) + [n * v for n, v in zip(shape[2:], f)], [1, 1] + f


def _remap_padded(rank, shape, sizes, steps):
    # Everything as a rank-dim op: unit dims first, read with stride 0. Output dim k reads the input's
    # dim order[k], the steps' fifth entry (a pixel shuffle's permutation; else k itself).
    *steps, order = steps
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step if n != 1 else 0)
        step *= n
    lead = rank - len(shape)
    fills = (1, 0, 1, 1)
    return ([1] * lead + list(sizes), [0] * lead + [strides[k] for k in order],
            [[fill] * lead + list(s) for fill, s in zip(fills, steps)])


def _remap_config(n):
    # Small outputs: smaller programs, so the grid fills the SMs.
    return {"BLOCK": 1024, "num_warps": 4} if n >= 1 << 20 else {"BLOCK": 256, "num_warps": 2}


# ---------------------------------------------------------------- kernel

def kernel_source(spec: dict, node: Node, options: dict | None = None) -> str:
    return _RemapKernel.render(spec, node, options)


class _RemapKernel(KernelFile):
    block_key = "BLOCK"
    description = ("One program writes BLOCK output elements, each read from the input element its per-dim\n"
                   "indices map to: flip, roll, repeat and repeat_interleave are that map; a triangle zeroes\n"
                   "what it leaves out.")

    def __init__(self, spec, node, inputs, options):
        self.x = next(i for i in inputs if i.name == node.args[0].name)
        super().__init__(spec, pointwise.triton_body(node.args[0], [self.x]), inputs, [], options)
        self.op, self.dims, self.amounts = node.op, node.attr("dims"), node.attr("amounts")
        self.mode, self.value = node.attr("mode"), node.attr("value")
        self.rank = max(max(len(_remap_plan(s, self.op, self.dims, self.amounts, self.mode)[0]) for s in self.x.shapes),
                        1)

    def configs(self) -> list[dict]:
        return self._space(CONFIGS)

    def source(self) -> str:
        helpers = [_remap_plan, _pad_plan, _shuffle_plan, _diagonal_plan, _upsample_plan, _remap_padded, _remap_config]
        return self._file([self._kernel()], helpers, self._launcher())

    def _kernel(self) -> str:
        r = range(self.rank)
        params = ["x_ptr", "out_ptr", "numel", *(f"{p}{k}" for k in r for p in "nsabdm"), "DIAG",
                  "TRI: tl.constexpr", "INT64: tl.constexpr", "BLOCK: tl.constexpr"]
        code = Code()("pid = tl.program_id(0)")
        with code.block("if INT64:"):
            code("offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)")
        with code.block("else:"):
            code("offs = pid * BLOCK + tl.arange(0, BLOCK)")
        constant = self.op == PAD and self.mode == "constant"
        code("mask = offs < numel", "rest = offs", "src = offs * 0", *(["inside = mask"] if constant else []))
        code("# each dim's output index o reads the input's " +
             ("o + b (m: the input's size)" if self.op == PAD else "((o * a + b) // d) % m"))
        for k in reversed(r):
            code(f"o{k} = rest % n{k}", f"rest = rest // n{k}")
            if self.op == PAD:
                code(*self._pad_index(k))
            else:
                code(f"i{k} = (o{k} * a{k} + b{k}) // d{k} % m{k}")
            code(f"src += i{k} * s{k}")
        code(f"val = tl.load(x_ptr + src, mask=inside, other={self.value!r})" if constant else
             "val = tl.load(x_ptr + src, mask=mask)")
        if self.op in TRIANGLE:
            row, col = f"o{self.rank - 2}", f"o{self.rank - 1}"
            with code.block("if TRI == 1:"):
                code(f"val = tl.where({col} - {row} <= DIAG, val, 0)")
            with code.block("else:"):
                code(f"val = tl.where({col} - {row} >= DIAG, val, 0)")
        code("tl.store(out_ptr + offs, val.to(out_ptr.dtype.element_ty), mask=mask)")
        return jit_source(f"{self.name}_kernel", params, code.lines)

    def _pad_index(self, k: int) -> list[str]:
        """Dim k's input index under F.pad's mode (the input's size is m{k})."""
        i, m = f"i{k}", f"m{k}"
        return [f"{i} = o{k} + b{k}", *{
            "constant": [f"inside = inside & ({i} >= 0) & ({i} < {m})"],
            "reflect": [f"{i} = tl.abs({i})", f"{i} = tl.where({i} >= {m}, 2 * {m} - 2 - {i}, {i})"],
            "replicate": [f"{i} = tl.minimum(tl.maximum({i}, 0), {m} - 1)"],
            "circular": [f"{i} = ({i} % {m} + {m}) % {m}"]}[self.mode]]

    def _launcher(self) -> str:
        x = self.x.local
        text = self._signature_and_prologue()
        text += (f"    shape, sizes, steps, returned = _remap_plan({x}.shape, {self.op!r}, {self.dims}, {self.amounts}, "
                 f"{self.mode!r})\n"
                 f"    out = torch.empty(returned, dtype={self.out_dtype(x)}, device={x}.device)\n"
                 "    if out.numel() == 0:\n        return out\n"
                 f"    sizes, strides, (a, b, d, m) = _remap_padded({self.rank}, shape, sizes, steps)\n")
        text += self._config_line("_remap_config(out.numel())")
        text += '    grid = (_cdiv(out.numel(), config["BLOCK"]),)\n'
        per_dim = "*[v for k in range(" + str(self.rank) + ") for v in (sizes[k], strides[k], a[k], b[k], d[k], m[k])]"
        args = [x, "out", "out.numel()", per_dim, f"{self.amounts[0] if self.op in TRIANGLE else 0}",
                f"TRI={TRIANGLE.get(self.op, 0)}", f"INT64=max(out.numel(), {x}.numel()) >= 2**31",   # a crop reads more
                'BLOCK=config["BLOCK"]',
                'num_warps=config["num_warps"]']
        text += launch(f"{self.name}_kernel", "grid", args, "    ") + "\n"
        return text + "    return out\n"


ENTRIES = (
    Entry("flip", "torch.flip(x, dims=[-1]) on {shapes}, each in {dtypes}", "flip(x, dims=[-1])"),
)
