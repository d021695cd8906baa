"""The convolution family: conv1d/2d/3d and their transposed forms, with stride, padding, dilation,
groups (depthwise and pointwise included), bias and output padding as torch.nn.functional defines
them, inside a pointwise epilogue (relu(conv2d(x, w, b) + residual)), as one implicit-GEMM kernel.

The kernel reads NC[D]HW tensors as they lie, but for a float16 or bfloat16 convolution over several
taps with 16 or more channels a group: two small kernels first copy x channels-last and the weight
taps-first ([taps, C_in / groups, C_out]), so that both tl.dot operands of a K step (a tap's run of
input channels) load 16 bytes at a time; read as they lie, each operand's loads go element by element
(measured: either copy alone gains little, both together make 3x3 convolutions of many channels on
small images 2-3x faster). Per group, the output is a GEMM: M output positions
(N x OD x OH x OW) by N output channels, over K = input channels x kernel taps. A program computes a
BLOCK_M x BLOCK_N tile: each K step gathers a tile of input values (the taps of BLOCK_M positions,
zero outside the padding; for a transposed convolution, the inputs whose stride lands on the
position) and a tile of weights, multiplies them with tl.dot into a float32 accumulator, then adds
the bias, applies the epilogue and stores. Where a group has fewer than 16 output channels or taps
(depthwise), tl.dot's least tile would be mostly padding: the kernel then accumulates one tap at a
time with multiply-adds instead. 1-D and 2-D convolutions run as 3-D ones with unit dims.

Owns its IR rule (the functions, their arguments as torch reads them), shape check, the torch call,
the kernel with its config space and default rule, the sizes the runner may not change (channels
and kernel) and its catalog entries.
"""
from __future__ import annotations

import ast
import math
import re
from pathlib import Path

from bot.codegen import fixed
from bot.codegen.code import indented, jit_source, launch
from bot.codegen.kernel_file import KernelFile, KernelInput, _as_3d, _expanded_strides
from bot.ops import pointwise
from bot.ops.entry import Entry
from bot.ops.node import (Call, IRError, Node, arguments, call, flag, inp, input_names, inputs_outside, is_none,
                          number, prints, substitute, to_text)
from bot.ops.text import FLAGS as _F, SIZES, WINDOW_PARAMS, blank as _blank, param, sizes_arg, taken, window_sizes

NAME = "conv"
CONV = "conv"                       # one per expression; the rest is its epilogue
OPS = {CONV}
ROOT = False
SUPPORTED = ("", "conv1d/conv2d/conv3d and conv_transpose1d/2d/3d(x, weight, bias, stride, padding, dilation, "
             "groups) with a pointwise epilogue")
# torch.nn.functional's names -> (spatial dims, transposed)
FUNCTIONS = {f"conv{n}d": (n, False) for n in (1, 2, 3)} | {f"conv_transpose{n}d": (n, True) for n in (1, 2, 3)}
_ORDER = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
SAME = "same"
_ORDER_T = ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation")
ALIASES: dict[str, str] = {}
# padding_end: the padding after each dim where it differs from the padding before it (the IR's own
# keyword: F.pad folded in, or 'same' of an even kernel); not for transposed convolutions
PAD = "pad"
KEYWORDS = {fn: set(_ORDER_T[1:]) | {"tf32", "padding_end"} for fn in FUNCTIONS}
OUTPUT_DTYPES: dict[str, str] = {}
MAX_RANK = 5                        # x [N, C, D, H, W] of a 3-d convolution
WORDS: list = []
DTYPES = ["float16", "bfloat16", "float32"]
GATHER = Path(__file__).with_name("conv_gather.py")

# The space the benchmark sweeps. tl.dot tiles: output positions x output channels x K step, from
# Triton's and Inductor's convolution templates; BLOCK_N follows the channels (the launcher caps it
# at the group's), so one config serves 32 to 256 channels. The multiply-add path (fewer than 16
# channels or taps a group: depthwise) takes BLOCK_M positions of up to 16 channels.
CONFIGS = [
    {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w, "num_stages": s}
    for bm, bn, bk, w, s in [(128, 256, 32, 8, 3), (128, 128, 32, 8, 3), (128, 64, 32, 4, 3), (64, 128, 32, 4, 3), (128, 128, 64, 8, 2),
                             (128, 128, 64, 8, 3), (64, 128, 64, 4, 3), (64, 64, 64, 4, 3), (64, 64, 32, 4, 4),
                             (256, 64, 32, 8, 3), (32, 32, 32, 2, 3), (512, 16, 16, 4, 1), (1024, 16, 16, 8, 1)]
]


# ---------------------------------------------------------------- words

# "conv2d 3x3", "depthwise convolution", "transposed conv 2d", "conv transpose 2d", "conv_transpose2d",
# "1x1 pointwise conv", "卷积", "转置卷积"
CONV_WORD = re.compile(r"\b(depthwise\s+|pointwise\s+|grouped\s+)?(transposed?\s+)?conv(?:olution)?(?:[\s_-]*([123])[\s_-]?d)?\b"
                       r"(?![\s_-]*transpose)|\b(conv(?:olution)?[\s_-]?transposed?)(?:[\s_-]*([123])[\s_-]?d)?\b|"
                       r"\b(deconv)(?:olution)?\b|(深度|逐点)?(转置)?卷积", _F)
_KERNEL = window_sizes(r"(?:(?:depthwise|pointwise|grouped|transposed?)\s+)*conv|(?:深度|逐点|转置)?卷积", "kernel",
                      "卷积核", rf"(?:(?:(?<=\dd)|(?<=conv)|(?<=olution))\s+|(?<=卷积)\s*){SIZES}(?![\w.]|\s*[x×]\s*\d)")
_OUT_CHANNELS = re.compile(r"\b(\d+)\s+(?:output|out)[\s_-]?channels\b|\b(\d+)\s+filters\b|"
                           r"\b(?:out(?:put)?[\s_-]?channels|filters)\s*(?:of|=|:|is)?\s*(\d+)\b|输出通道(?:数)?\s*(?:为|是|=|:)?\s*(\d+)|输出\s*(\d+)\s*(?:个)?通道", _F)
# "64 to 128 channels", "from 64 to 128 channels", "64->128", "64 in, 128 out (channels)", "64通道到128通道"
# (a first number other than the input's channels is refused, so "2 to 4" is never quietly channels)
_IN_TO_OUT = re.compile(r"\b(?:from\s+)?(\d+)\s*(?:->|→|to)\s*(\d+)(?:\s+channels\b|(?![\w.]|\s*[x×]))|"
                        r"\b(\d+)\s+in(?:put)?(?:[\s_-]+channels)?\s*,?\s*(?:and\s+)?(\d+)\s+out(?:put)?(?:[\s_-]+channels)?\b|"
                        r"(\d+)\s*通道\s*(?:到|->|→)\s*(\d+)\s*通道", _F)
_CONV_PARAMS = {**WINDOW_PARAMS, "groups": param("groups?", "分组")}
_WITH_BIAS = re.compile(r"\bwith\s+(?:a\s+)?bias\b|\bplus\s+bias\b|带偏置|加偏置", _F)
# The names of the parameters whose shapes were said ("with weight 64x32x3x3", "bias b 64"): the shape
# reader blanked the shape to a ';'.
_PARAM_NAME = re.compile(r"\b(?:weights?|kernel|filter|bias)(?:\s+[wb])?(?=[\s,]*;)|\b[wb](?=\s*;)", _F)
_BIAS_SIZE = re.compile(r"\bbias(?:\s+b)?\s+(?:of\s+(?:size\s+)?)?(\d+)\b(?!\s*[x×]\s*\d)", _F)
_NO_BIAS = re.compile(r"\b(?:no|without)\s+bias\b|\bbias[\s_-]?free\b|无偏置|不带偏置", _F)
# a causal convolution: each output sees its position and the ones before it (dilation * (k - 1) zeros
# before the dim, none after), as Mamba's and WaveNet's conv1d
_CAUSAL = re.compile(r"\b(?:dilated[\s_-]+)?causal\b|因果", _F)


def conv_words(text: str, shapes: list[tuple[str | None, list[int]]]) -> tuple[str, str, list[str], list]:
    """(expression, text without the words read, notes, the weight's and bias's shapes as (name, shape)
    per case) for 'conv2d 3x3 with 64 output channels, stride 2, padding 1 on 8x32x56x56'."""
    m = CONV_WORD.search(text)
    depthwise = bool(m.group(1) and m.group(1).startswith("depthwise") or m.group(7) == "深度")
    pointwise_ = bool(m.group(1) and m.group(1).startswith("pointwise") or m.group(7) == "逐点")
    transposed = bool(m.group(2) or m.group(4) or m.group(6) or m.group(8))
    inputs = [s for label, s in shapes if label not in PARAM_LABELS]      # "on 8x32x56x56": x
    given_w, given_b = _given(shapes, ("w", "weight")), _given(shapes, ("b", "bias"))
    bias_size, text = taken(_BIAS_SIZE, text)       # "bias 64": a 1-D shape said as one number
    given_b = given_b or (list(bias_size) if bias_size else None)
    if not inputs or any(len(s) not in (3, 4, 5) for s in inputs):
        raise IRError("a convolution in words needs the input's shape, batch x channels x the convolved dims, e.g. "
                      "'conv2d 3x3 with 64 output channels on 8x32x56x56'")
    said_in, text = taken(_IN_TO_OUT, text)     # first: "conv1d 64 to 128 channels" has no kernel size 64
    sizes = {}
    for key, pattern in _CONV_PARAMS.items():        # before the kernel: "stride 2 kernel 3" has no 2 kernel
        value, text = taken(pattern, text)
        if value is not None:
            sizes[key] = value
    kernel, text = taken(_KERNEL, text)
    kernel = kernel or (tuple(given_w[2:]) if given_w else (1,) if pointwise_ else None)
    said = m.group(3) or m.group(5)
    nd = int(said) if said else len(kernel) if kernel and len(kernel) > 1 else len(inputs[0]) - 2
    if kernel is None:
        raise IRError("a convolution needs its kernel size: say 'conv2d 3x3' or 'kernel size 3'")
    out, text = taken(_OUT_CHANNELS, text)
    bias = bool(given_b or _WITH_BIAS.search(text)) and not _NO_BIAS.search(text)
    notes = [] if given_b or _WITH_BIAS.search(text) or _NO_BIAS.search(text) else ["no bias named: a convolution without bias"]
    channels = {s[1] for s in inputs}
    if len(channels) > 1:
        raise IRError(f"the cases' inputs have different channels {sorted(channels)}: one weight serves every case")
    c_in = channels.pop()
    if said_in:
        if said_in[0] != c_in or out:
            raise IRError(f"you said {said_in[0]} to {said_in[1]} channels{' and ' + str(out[0]) + ' output channels' if out else ''}, "
                          f"but the input {inputs[0]} has {c_in} channels (dim 1): say the input's channels first, once")
        out = (said_in[1],)
    groups = c_in if depthwise else sizes.get("groups", (1,))[0]
    if given_w and not transposed and "groups" not in sizes and not depthwise and given_w[1] and c_in % given_w[1] == 0:
        groups = c_in // given_w[1]         # a weight [C_out, C_in / groups, ...] says its groups
        notes += [f"groups={groups}: the weight {'x'.join(map(str, given_w))} takes {given_w[1]} of the input's "
                  f"{c_in} channels"] * (groups > 1)
    if given_w and not out:
        out = (given_w[1] * groups,) if transposed else (given_w[0],)
    c_out = out[0] if out else c_in if depthwise or transposed else None
    if c_out is None:
        raise IRError("how many output channels does the convolution have? Say e.g. 'conv2d 3x3 with 64 output "
                      "channels'")
    if c_in % groups or c_out % groups:
        raise IRError(f"groups={groups} must divide the input's {c_in} and the output's {c_out} channels")
    taps = list(kernel) * (nd if len(kernel) == 1 else 1)
    weight = [c_in, c_out // groups, *taps] if transposed else [c_out, c_in // groups, *taps]
    args = ["x", "w", *(["b"] if bias else [])]
    args += [f"{k}={sizes_arg(v)}" for k, v in sizes.items() if k != "groups"] + ([f"groups={groups}"] * (groups > 1))
    if _CAUSAL.search(text):
        args += _causal(nd, transposed, taps, sizes)
        text = _CAUSAL.sub(_blank, text)
    fn = f"conv_transpose{nd}d" if transposed else f"conv{nd}d"
    for what, given, want in (("weight", given_w, weight), ("bias", given_b, [c_out])):
        if given and given != want:
            raise IRError(f"the {what} you gave, {'x'.join(map(str, given))}, does not fit {fn} of the input "
                          f"{'x'.join(map(str, inputs[0]))}{' in ' + str(groups) + ' groups' if groups > 1 else ''} with "
                          f"{c_out} output channels: its {what} is {'x'.join(map(str, want))}")
    for pattern in (CONV_WORD, _WITH_BIAS, _NO_BIAS, _PARAM_NAME):
        text = pattern.sub(_blank, text)
    extra = [("w", weight) for _ in inputs] + [("b", [c_out]) for _ in inputs if bias]
    return f"{fn}({', '.join(args)})", text, notes, extra


def _causal(nd: int, transposed: bool, taps: list[int], sizes: dict) -> list[str]:
    """The padding arguments of a causal conv1d: dilation * (k - 1) before, none after."""
    if nd != 1 or transposed or "padding" in sizes:
        raise IRError("a causal convolution is a conv1d padded by dilation * (kernel - 1) before the sequence and "
                      "not after: say 'causal conv1d with kernel 4' without a padding, or give F.pad(x, (k - 1, 0))")
    dilation = sizes.get("dilation", (1,))[0]
    return [f"padding={dilation * (taps[0] - 1)}", "padding_end=0"]


PARAM_LABELS = ("w", "b", "weight", "bias")   # shapes said of the convolution's own parameters, not its input


def _given(shapes: list[tuple[str | None, list[int]]], labels: tuple[str, ...]) -> list[int] | None:
    """The shape said of a parameter by name ('with weight 64x32x3x3'), if one was."""
    return next((s for label, s in shapes if label in labels), None)


# ---------------------------------------------------------------- IR rule

def convert(c: Call) -> Node | None:
    if c.fname not in FUNCTIONS:
        return None
    nd, transposed = FUNCTIONS[c.fname]
    given = arguments(c, _ORDER_T if transposed else _ORDER)
    if "weight" not in given:
        raise IRError(f"{c.fname} needs an input and a weight, e.g. {c.fname}(x, weight, bias)")
    attrs = {"nd": nd, "stride": _ints(c.fname, "stride", given.get("stride"), nd, 1),
             "padding": _padding(c.fname, given.get("padding"), nd, transposed),
             "dilation": _ints(c.fname, "dilation", given.get("dilation"), nd, 1),
             "groups": int(_ints(c.fname, "groups", given.get("groups"), 1, 1)[0])}
    if attrs["padding"] == SAME and set(attrs["stride"]) != {1}:
        raise IRError(f"{c.fname} with padding='same' takes stride 1 (as torch does); give the padding as numbers")
    x = given["input"]
    if "padding_end" in given:
        attrs["padding_end"] = _ints(c.fname, "padding_end", given["padding_end"], nd, 0)
    elif _is_pad(x):
        x, attrs = _folded_pad(x, attrs, transposed)
    if attrs.get("padding_end") == attrs["padding"]:
        del attrs["padding_end"]
    if transposed and "padding_end" in attrs:
        raise IRError(f"{c.fname} takes one padding a dim (as torch's); a padding only before or after is for "
                      "convolutions, not transposed ones")
    if transposed:
        attrs["transposed"] = True
        attrs["output_padding"] = _ints(c.fname, "output_padding", given.get("output_padding"), nd, 0)
    if flag(given.get("tf32")):
        attrs["tf32"] = True
    args = [c.expr(x), c.expr(given["weight"])]
    if not is_none(given.get("bias")):
        args.append(c.expr(given["bias"]))
    return call(CONV, *args, **attrs)


def _is_pad(x: ast.expr) -> bool:
    return isinstance(x, ast.Call) and ast.unparse(x.func).split(".")[-1] == PAD


def _folded_pad(x: ast.Call, attrs: dict, transposed: bool) -> tuple[ast.expr, dict]:
    """conv(F.pad(x, pads), w, ...): x, with the zeros F.pad adds (pads: the last dim's before and
    after, then the one before it's, ...) added to the convolution's own padding, before and after
    apart (a causal conv1d: F.pad(x, (k - 1, 0))). Not a transposed convolution's: its padding crops
    the output, where F.pad's zeros widen the input. Any other F.pad (another mode or value, a
    crop) is left as it is: a kernel of the remap family before the convolution's."""
    nd = attrs["nd"]
    given = dict(zip(("input", "pad", "mode", "value"), x.args)) | {k.arg: k.value for k in x.keywords}
    pads = given.get("pad")
    try:
        amounts = [int(number(e)) for e in pads.elts] if isinstance(pads, (ast.Tuple, ast.List)) else None
        mode = given["mode"].value if "mode" in given else "constant"
        value = number(given["value"]) if not is_none(given.get("value")) else 0.0
    except (IRError, AttributeError):
        amounts, mode, value = None, None, None
    if not amounts or len(amounts) % 2 or len(amounts) > 2 * nd or mode != "constant" or value != 0 \
            or min(amounts) < 0 or attrs["padding"] == SAME or transposed:
        return x, attrs
    before, after = list(attrs["padding"]), list(attrs["padding"])
    for k in range(len(amounts) // 2):            # pads name the last dim first
        before[nd - 1 - k] += amounts[2 * k]
        after[nd - 1 - k] += amounts[2 * k + 1]
    return given["input"], {**attrs, "padding": tuple(before), "padding_end": tuple(after)}


def _ints(fname: str, what: str, value: ast.expr | None, n: int, default: int) -> tuple[int, ...]:
    """An int or a tuple of n ints, as torch takes stride, padding and dilation."""
    if is_none(value):
        return (default,) * n
    elts = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
    try:
        numbers = [number(e) for e in elts]
    except IRError:
        numbers = []
    if not numbers or any(v != int(v) for v in numbers) or len(numbers) not in (1, n):
        raise IRError(f"{fname} takes {what} as an integer or {n} integers, got {ast.unparse(value)!r}")
    least = 1 if what in ("stride", "dilation", "groups") else 0
    if any(v < least for v in numbers):
        raise IRError(f"{fname}: {what} must be at least {least}, got {ast.unparse(value)!r}")
    return tuple(int(v) for v in numbers) * (n if len(numbers) == 1 else 1)


def _padding(fname: str, value: ast.expr | None, nd: int, transposed: bool) -> tuple[int, ...] | str:
    """Numbers, or SAME until the weight's shape says how much (same_settled)."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str) and not transposed:
        if value.value in ("valid", SAME):
            return (0,) * nd if value.value == "valid" else SAME
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        raise IRError(f"{fname} takes padding as numbers, 'valid' or 'same' (not transposed); got {value.value!r}")
    return _ints(fname, "padding", value, nd, 0)


def _same(conv: Node, weight: list[int]) -> dict:
    """padding='same' for this weight, as torch pads: each dim's dilation * (kernel - 1) split in two,
    the odd one (an even kernel's) after."""
    totals = [d * (k - 1) for k, d in zip(weight[2:], conv.attr("dilation"))]
    before, after = tuple(t // 2 for t in totals), tuple(t - t // 2 for t in totals)
    return {"padding": before, **({"padding_end": after} if after != before else {})}


def same_settled(node: Node, shapes: dict[str, list[int]]) -> Node:
    """node with each padding='same' written as the numbers its weight's shape gives."""
    for conv in [sub for sub in node.walk() if sub.op == CONV and sub.attr("padding") == SAME]:
        attrs = {**dict(conv.attrs), **_same(conv, shapes[conv.args[1].name])}
        node = substitute(node, conv, call(CONV, *conv.args, **attrs))
    return node


def function_name(node: Node) -> str:
    return f"conv{'_transpose' * bool(node.attr('transposed'))}{node.attr('nd')}d"


def _keywords(node: Node) -> list[tuple[str, object]]:
    """The node's arguments as torch's keywords, in torch's order, each written out."""
    keys = ["stride", "padding", "output_padding", "groups", "dilation"] if node.attr("transposed") else \
        ["stride", "padding", "dilation", "groups"]
    return [(k, node.attr(k)) for k in keys]


@prints(CONV)
def _print(node: Node, text) -> str:
    """Only what differs from torch's defaults, so the text reads as the call people write."""
    defaults = {"stride": 1, "padding": 0, "dilation": 1, "groups": 1, "output_padding": 0}
    args = [text(a) for a in node.args]
    for key, value in _keywords(node):
        if value == SAME:
            args.append(f"{key}={SAME!r}")
            continue
        values = value if isinstance(value, tuple) else (value,)
        if set(values) != {defaults[key]}:
            args.append(f"{key}={values[0] if len(set(values)) == 1 else values}")
    if node.attr("padding_end"):
        args.append(f"padding_end={node.attr('padding_end')}")
    if node.attr("tf32"):
        args.append("tf32=True")
    return f"{function_name(node)}({', '.join(args)})"


def _torch_conv(node: Node, a: list[str]) -> str:
    bias, x = a[2] if len(a) > 2 else "None", a[0]
    keywords = _keywords(node)
    if node.attr("padding_end"):        # torch's convolution pads alike: F.pad's zeros first, last dim first
        pads = [p for d in reversed(range(node.attr("nd"))) for p in (node.attr("padding")[d], node.attr("padding_end")[d])]
        x = f"torch.nn.functional.pad({x}, {tuple(pads)})"
        keywords = [(k, (0,) * node.attr("nd") if k == "padding" else v) for k, v in keywords]
    kw = ", ".join(f"{k}={v}" for k, v in keywords)
    return f"torch.nn.functional.{function_name(node)}({x}, {a[1]}, {bias}, {kw})"


TORCH_OPS = {CONV: _torch_conv}


def batchless(node: Node, shapes: dict[str, list[int]]) -> Node:
    """node with each convolution of an unbatched input (x [C, *spatial], as torch takes it) written as
    the batch of one it is: conv(x.unsqueeze(0), ...).squeeze(0)."""
    for conv in [sub for sub in node.walk() if sub.op == CONV]:
        x = conv.args[0]
        if x.op == "input" and len(shapes.get(x.name, ())) == conv.attr("nd") + 1:
            batched = Node(CONV, (call("unsqueeze", x, dim=0), *conv.args[1:]), conv.name, conv.value, conv.attrs)
            node = substitute(node, conv, call("squeeze", batched, dim=0))
    return node


def conv_node(node: Node) -> Node | None:
    return next((sub for sub in node.walk() if sub.op == CONV), None)


def check(node: Node) -> None:
    """One convolution of plain inputs, the root of its tree or inside a pointwise epilogue."""
    convs = {sub for sub in node.walk() if sub.op == CONV}
    if not convs:
        return
    if node.op != CONV and node.op not in pointwise.OPS:
        raise IRError(f"a convolution inside {node.op} is not supported; a convolution takes a pointwise epilogue, "
                      "e.g. relu(conv2d(x, w, b) + residual)")
    if len(convs) > 1:
        raise IRError("one convolution per kernel; chain them as separate operators")
    conv = convs.pop()
    if any(a.op != "input" for a in conv.args):
        raise IRError(f"{function_name(conv)}'s input, weight and bias must be inputs; compute a prologue in a "
                      "separate kernel")
    outside = inputs_outside(node, conv)
    if any(a.name in outside for a in conv.args):
        raise IRError(f"{function_name(conv)}'s operands cannot also be used in the epilogue")


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    conv = conv_node(node)
    names = [a.name for a in conv.args]
    conv = same_settled(conv, shapes)
    try:
        out = conv_shape(shapes[names[0]], shapes[names[1]], shapes[names[2]] if len(names) > 2 else None,
                         **_geometry(conv))
    except ValueError as e:
        raise IRError(str(e)) from None
    others = [shapes[n] for n in input_names(node) if n not in names]
    for name, shape in zip([n for n in input_names(node) if n not in names], others):
        if len(shape) > len(out) or any(d not in (1, o) for d, o in zip(reversed(shape), reversed(out))):
            raise IRError(f"the epilogue's input {name} {shape} does not broadcast to the convolution's output {out}")
    return out


def _geometry(conv: Node) -> dict:
    return {"nd": conv.attr("nd"), "transposed": bool(conv.attr("transposed")), "stride": conv.attr("stride"),
            "padding": conv.attr("padding"), "dilation": conv.attr("dilation"), "groups": conv.attr("groups"),
            "output_padding": conv.attr("output_padding") or (0,) * conv.attr("nd"),
            "padding_end": conv.attr("padding_end") or conv.attr("padding")}


def size_rules(node: Node, cases: list[dict[str, list[int]]]) -> tuple[set[int], int]:
    """The runner keeps the channels and the kernel's sizes (a weight is built with them) and no
    spatial size goes below the kernel's reach (dilated extent less both paddings)."""
    conv = same_settled(conv_node(node), cases[0])
    x, w = (a.name for a in conv.args[:2])
    fixed = {d for case in cases for d in [*case[w], case[x][1]]}
    if conv.attr("transposed"):
        return fixed, 1
    reach = [d * (k - 1) + 1 - p - e for case in cases
             for k, d, p, e in zip(case[w][2:], conv.attr("dilation"), conv.attr("padding"),
                                   conv.attr("padding_end") or conv.attr("padding"))]
    return fixed, max([1, *reach])


# ---------------------------------------------------------------- launcher helpers (copied into kernel.py)

def conv_shape(x_shape, w_shape, b_shape, nd, transposed, stride, padding, dilation, groups, output_padding,
               padding_end):
    # The output shape [N, C_out, *spatial] of this convolution of x by w, as torch computes it
    # (padding before each dim, padding_end after it).
    x_shape, w_shape = list(x_shape), list(w_shape)
    if len(x_shape) != nd + 2 or len(w_shape) != nd + 2:
        raise ValueError(f"a {nd}-d convolution takes x [N, C, {', '.join('DHW'[3 - nd:])}] and a weight of "
                         f"{nd + 2} dims; got x {x_shape} and weight {w_shape}")
    c_in = x_shape[1]
    if c_in % groups:
        raise ValueError(f"x has {c_in} channels, which {groups} groups do not divide")
    if transposed:
        c_out = w_shape[1] * groups
        if w_shape[0] != c_in:
            raise ValueError(f"a transposed convolution's weight is [C_in, C_out / groups, ...]: {w_shape} does not "
                             f"take x's {c_in} channels")
        if any(p >= max(s, d) for p, s, d in zip(output_padding, stride, dilation)):
            raise ValueError(f"output_padding {list(output_padding)} must be smaller than the stride or the dilation")
        spatial = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1 for i, s, p, d, k, op in
                   zip(x_shape[2:], stride, padding, dilation, w_shape[2:], output_padding)]
    else:
        c_out = w_shape[0]
        if w_shape[1] * groups != c_in or c_out % groups:
            raise ValueError(f"weight {w_shape} with {groups} groups takes {w_shape[1] * groups} input channels and "
                             f"{groups} groups of output channels; x has {c_in} channels")
        spatial = [(i + p + e - d * (k - 1) - 1) // s + 1 for i, s, p, e, d, k in
                   zip(x_shape[2:], stride, padding, padding_end, dilation, w_shape[2:])]
    if b_shape is not None and list(b_shape) != [c_out]:
        raise ValueError(f"the bias must have shape [{c_out}] (one per output channel), got {list(b_shape)}")
    if any(o < 1 for o in spatial):
        raise ValueError(f"x {x_shape} is smaller than the kernel's reach: the output would be {spatial}")
    return [x_shape[0], c_out, *spatial]


def _conv_config(positions, out_channels, in_channels, taps, channels_last):
    # The default config, for one group's channels: 512 positions x up to 16 channels a
    # multiply-add tile where tl.dot's 16-wide tiles would be mostly padding (under 16 output
    # channels, or under 16 products a sum); else 128 positions by 64 channels 32 deep in 4 warps
    # while two waves of programs run on an H200's 132 SMs; with fewer positions, 64 x 64 tiles 64
    # deep (the best of the space on an H100 and an H200 for 3x3 convolutions of 64 channels at 100K
    # and 6K positions, and for 1x1 ones to 256 channels at 6K); 1x1 ones to 128 channels or more at
    # 64 x 128 (the best of the space on an H100 at 100K positions). The channels-last path (16-bit,
    # several taps): 128 x 128 x 64 in 8 warps while two waves of those tiles run, else 64 x 128 x 64
    # in 4 (the best measured on an H100 for 3x3 convolutions of 64 to 512 channels on 7x7 to 56x56
    # images, stride 1 and 2, and level 1's 56).
    if out_channels < 16 or in_channels * taps < 16:
        return {"BLOCK_M": 512, "BLOCK_N": 16, "BLOCK_K": 16, "num_warps": 4, "num_stages": 1}
    if channels_last:
        if -(-positions // 128) * -(-out_channels // 128) >= 264:
            return {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
        return {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3}
    if taps == 1 and out_channels >= 128 and -(-positions // 64) * -(-out_channels // 128) >= 264:
        # a 1x1 convolution's GEMM is memory-bound: 64 positions x 128 channels
        return {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3}
    if -(-positions // 128) * -(-out_channels // 64) >= 264:
        return {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3}
    return {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3}


def _fit_conv_config(config, out_channels, in_channels, taps, itemsize):
    # (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, dot, tap_outer) of config for one group's channels:
    # the multiply-add path (dot False) takes up to 16 channels a tile; tl.dot tiles are no wider
    # than the channels need. With 16 or more input channels K runs tap by tap, BLOCK_K channels
    # a step (tap_outer), else over (channel, tap) flattened; BLOCK_K halves until the stages fit
    # in 200 KB of shared memory.
    dot = out_channels >= 16 and in_channels * taps >= 16
    bn = min(config["BLOCK_N"], max(16 if dot else 1, 1 << (out_channels - 1).bit_length()))
    if not dot:
        return config["BLOCK_M"], min(bn, 16), 1, 1, False, False
    tap_outer = in_channels >= 16
    k = in_channels if tap_outer else in_channels * taps
    bm, bk, stages = config["BLOCK_M"], min(config["BLOCK_K"], max(16, 1 << (k - 1).bit_length())), config["num_stages"]
    while (bm + bn) * bk * stages * itemsize > 200 * 1024 and bk > 16:
        bk //= 2
    return bm, bn, bk, stages, True, tap_outer


# ---------------------------------------------------------------- kernel.py

# The tap-outer K loop's pieces, shared by the flat loop and the transposed one's loop per tap: tap
# `tap`'s offsets, its input rows, then one step of BLOCK_K input channels from c0.
_TAP = ["kd = 0 if KD == 1 else tap // (KH * KW)", "kh = 0 if KH == 1 else (tap // KW) % KH", "kw = tap % KW"]
_TAP_ROWS = [
    "if POINTWISE:    # a 1x1 convolution, stride 1, no padding: x's positions are the output's",
    "    tap_offs = pos",
    "    valid = row_ok",
    "else:",
    "    tap_offs, valid = _tap_rows(od, oh, ow, row_ok, kd, kh, kw, C_in, D, H, W, SD, SH, SW, PD, PH, PW,",
    "                                DD, DH, DW, TRANSPOSED, CHANNELS_LAST, WIDE_C)",
]
_CHANNEL_STEP = [
    "cs = c0 + tl.arange(0, BLOCK_K)",
    "c_ok = cs < CIN_G",
    "c_offs = cs * P_IN",
    "if WIDE_C:   # a sample's channels span 2**31 elements or more; else int32, cheaper in the loop",
    "    c_offs = cs.to(tl.int64) * P_IN",
    "a = tl.load(x_rows[:, None] + (tap_offs[:, None] + c_offs[None, :]), mask=valid[:, None] & c_ok[None, :],",
    "            other=0.0)",
    "if TRANSPOSED:",
    "    w_rows = (ci0 + cs) * (COUT_G * TAPS) + tap",
    "else:",
    "    w_rows = cs * TAPS + tap",
    "b = tl.load(w_ptr + w_rows[:, None] + w_cols[None, :], mask=c_ok[:, None] & col_ok[None, :], other=0.0)",
    "acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)",
]


def kernel_source(spec: dict, node: Node, options: dict | None = None) -> str:
    """kernel.py for a tree holding one convolution inside a pointwise epilogue."""
    return _ConvKernel.render(spec, node, options)


class _ConvKernel(KernelFile):
    block_key = "BLOCK_M"
    description = ("Implicit GEMM, per group: BLOCK_M output positions x BLOCK_N output channels a program,\n"
                   "over K = input channels x kernel taps: each K step gathers the taps of the positions from\n"
                   "x (zero in the padding) and the weights, multiplied by tl.dot into a float32 tile; then\n"
                   "the bias, the epilogue and one store. Groups of under 16 channels or taps (depthwise)\n"
                   "accumulate tap by tap with multiply-adds instead. NC[D]HW as it lies, but float16 and\n"
                   "bfloat16 over several taps, which read x channels-last and the weight taps-first (each\n"
                   "copied so by a small kernel first); 1-d and 2-d run as 3-d with unit dims.")

    def __init__(self, spec, node, inputs, options):
        check(node)
        conv = conv_node(node)
        if conv is None:
            raise ValueError(f"{to_text(node)} has no convolution; lower it with bot.ops.pointwise")
        by_name = {i.name: i for i in inputs}
        self.x, self.w = by_name[conv.args[0].name], by_name[conv.args[1].name]
        self.bias = by_name[conv.args[2].name] if len(conv.args) > 2 else None
        self.geometry = _geometry(conv)
        self.tf32 = bool(conv.attr("tf32"))
        placeholder = f"conv({self.x.name})"       # no identifier: cannot clash with an input's name
        epilogue = substitute(node, conv, inp(placeholder))
        names = input_names(epilogue)
        self.epilogue_inputs = [i for i in inputs if i.name in names]
        acc = KernelInput(placeholder, "acc", [])
        super().__init__(spec, pointwise.triton_body(epilogue, [acc] + self.epilogue_inputs), inputs,
                         [acc] + self.epilogue_inputs, options)
        self.cases = []     # (output channels, input channels, taps) of a group, per case
        for case in range(len(self.x.shapes)):
            out = conv_shape(self.x.shapes[case], self.w.shapes[case], None, **self.geometry)
            groups = self.geometry["groups"]
            self.cases.append((out[1] // groups, self.x.shapes[case][1] // groups, math.prod(self.w.shapes[case][2:])))

    def source(self) -> str:
        helpers = [conv_shape, _conv_config, _fit_conv_config, _as_3d]
        if self.epilogue_inputs:
            helpers.append(_expanded_strides)
        return self._file([self._kernel()], helpers, self._launcher())

    def configs(self) -> list[dict]:
        return self._space(CONFIGS, lambda config: [_fit_conv_config(config, *case, 2) + (config["num_warps"],)
                                                    for case in self.cases])

    def _kernel(self) -> str:
        e_ptrs = [f"{e.local}_ptr" for e in self.epilogue_inputs]
        e_strides = [f"{e.local}_s{d}" for e in self.epilogue_inputs for d in "ncdhw"]
        params = ["x_ptr", "w_ptr", "b_ptr", *e_ptrs, "out_ptr", "N", "C_in", "D", "H", "W", "C_out", "OD", "OH", "OW", "P", "P_IN",
                  *e_strides]
        constexprs = ["CIN_G", "COUT_G", "KD", "KH", "KW", "SD", "SH", "SW", "PD", "PH", "PW", "DD", "DH", "DW",
                      "TRANSPOSED", "HAS_BIAS", "DOT", "TAP_OUTER", "PER_IMAGE", "POINTWISE", "WIDE_C", "CHANNELS_LAST",
                      "INPUT_PRECISION", "BLOCK_M", "BLOCK_N", "BLOCK_K"]
        params += [f"{c}: tl.constexpr" for c in constexprs]
        lines = [
            "# Program (position tile x channel block, group x phase): BLOCK_M output positions x BLOCK_N of a",
            "# group's output channels.",
            "# A transposed convolution's outputs are split by phase (position mod stride, per dim): every",
            "# output of a phase takes input from the same taps, so a program skips the other taps whole.",
            "# The output channel blocks of a position tile run next to each other, so the tile's input",
            "# is still in L2 for all but the first.",
            "channel_blocks = tl.cdiv(COUT_G, BLOCK_N)",
            "pid_m = tl.program_id(0) // channel_blocks",
            "pid_n = tl.program_id(0) % channel_blocks",
            "PHASES = SD * SH * SW if TRANSPOSED else 1",
            "group = tl.program_id(2) // PHASES",
            "phase = tl.program_id(2) % PHASES",
            "rd = phase // (SH * SW) if TRANSPOSED else 0",
            "rh = (phase // SW) % SH if TRANSPOSED else 0",
            "rw = phase % SW if TRANSPOSED else 0",
            "# The grid of this phase's positions: every position, or one in `stride` of a transposed one's.",
            "QD = tl.cdiv(OD - rd, SD) if TRANSPOSED else OD",
            "QH = tl.cdiv(OH - rh, SH) if TRANSPOSED else OH",
            "QW = tl.cdiv(OW - rw, SW) if TRANSPOSED else OW",
            "cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
            "col_ok = cols < COUT_G",
            "if PER_IMAGE:",
            "    # A tile of one sample's positions (P of them, not transposed): they lie contiguous in x",
            "    # and out, which lets the compiler vectorize the stores (and a 1x1 convolution's loads).",
            "    tiles = tl.cdiv(P, BLOCK_M)",
            "    pos = (pid_m % tiles) * BLOCK_M + tl.arange(0, BLOCK_M)",
            "    row_ok = pos < P",
            "    n = tl.zeros((BLOCK_M,), dtype=tl.int32) + pid_m // tiles",
            "else:",
            "    # Positions of all samples flattened, so that small images still fill a tile.",
            "    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
            "    row_ok = rows < N * QD * QH * QW",
            "    # (a phase with no outputs has an empty grid: its divisors stay 1)",
            "    QD = tl.maximum(QD, 1)",
            "    QH = tl.maximum(QH, 1)",
            "    QW = tl.maximum(QW, 1)",
            "    n = rows // (QD * QH * QW)",
            "    pos = rows % (QD * QH * QW)",
            "ow = rw + (pos % QW) * (SW if TRANSPOSED else 1)",
            "oh = rh + ((pos // QW) % QH) * (SH if TRANSPOSED else 1)",
            "od = rd + (pos // (QW * QH)) * (SD if TRANSPOSED else 1)",
            "# Output channels of this group, and the first input channel it reads.",
            "co = group * COUT_G + cols",
            "ci0 = group * CIN_G",
            "TAPS = KD * KH * KW",
            "K = CIN_G * TAPS",
            "# Weight columns: output channel co of [C_out, C_in / groups, taps], or channel j of the",
            "# group in a transposed convolution's [C_in, C_out / groups, taps].",
            "if TRANSPOSED:",
            "    w_cols = cols * TAPS",
            "else:",
            "    w_cols = co * (CIN_G * TAPS)",
            "# x at this group's first input channel in each row's sample (int64: the batch may span 2**31",
            "# elements); the loops add int32 offsets inside the sample.",
            "if CHANNELS_LAST:",
            "    x_rows = x_ptr + n.to(tl.int64) * C_in * P_IN + ci0",
            "else:",
            "    x_rows = x_ptr + (n.to(tl.int64) * C_in + ci0) * P_IN",
            "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
            "if DOT and TAP_OUTER and TAPS > 1 and (not TRANSPOSED or SD * SH * SW == 1):",
            "    # One loop over (tap, channel block) steps, BLOCK_K input channels a step: the compiler",
            "    # pipelines the loads of the next steps across taps (a loop per tap holds a step or two).",
            "    # (Every tap of a stride-1 transposed convolution lands on every output; a 1x1 convolution's",
            "    # one tap takes the loop below, whose channel steps alone pipeline better.)",
            "    CHANNEL_STEPS = tl.cdiv(CIN_G, BLOCK_K)",
            "    for step in range(0, TAPS * CHANNEL_STEPS):",
            "        tap = step // CHANNEL_STEPS",
            "        c0 = (step % CHANNEL_STEPS) * BLOCK_K",
            *indented(_TAP, 2),
            "        if CHANNELS_LAST:",
            "            # x channels-last [N, D, H, W, C_in] and the weight taps-first [taps, C_in / groups, C_out]:",
            "            # a step's channels and its output channels lie contiguous, and both tl.dot operands",
            "            # load 16 bytes at a time",
            *indented(_TAP_ROWS, 3),
            "            cs = c0 + tl.arange(0, BLOCK_K)",
            "            c_ok = cs < CIN_G",
            "            a = tl.load(x_rows[:, None] + (tap_offs[:, None] + cs[None, :]), mask=valid[:, None] & c_ok[None, :],",
            "                        other=0.0)",
            "            b = tl.load(w_ptr + ((tap * CIN_G + cs) * C_out)[:, None] + co[None, :],",
            "                        mask=c_ok[:, None] & col_ok[None, :], other=0.0)",
            "            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)",
            "        else:",
            *indented(_TAP_ROWS + _CHANNEL_STEP, 3),
            "elif DOT and TAP_OUTER:",
            "    # A 1x1 convolution, or a strided transposed one's phase: tap by tap (skipping the taps that",
            "    # miss the phase), BLOCK_K input channels a step.",
            "    for tap in range(0, TAPS):",
            *indented(_TAP, 2),
            "        lands = True",
            "        if TRANSPOSED:       # this tap reaches this phase's outputs only where the stride lands",
            "            lands = ((rd + PD - kd * DD) % SD == 0) & ((rh + PH - kh * DH) % SH == 0) & "
            "((rw + PW - kw * DW) % SW == 0)",
            "        if lands:",
            *indented(_TAP_ROWS, 3),
            "            for c0 in range(0, CIN_G, BLOCK_K):",
            *indented(_CHANNEL_STEP, 4),
            "elif DOT:",
            "    # Few input channels a group: K = (channel, tap) flattened, BLOCK_K of them a step.",
            "    for k0 in range(0, K, BLOCK_K):",
            "        ks = k0 + tl.arange(0, BLOCK_K)",
            "        a, w_offs, k_ok = _gather(x_ptr, ks, n, od, oh, ow, row_ok, ci0, C_in, D, H, W, CIN_G, COUT_G,",
            "                                  KD, KH, KW, SD, SH, SW, PD, PH, PW, DD, DH, DW, TRANSPOSED)",
            "        b = tl.load(w_ptr + w_offs[:, None] + w_cols[None, :], mask=k_ok[:, None] & col_ok[None, :], other=0.0)",
            "        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)",
            "else:",
            "    # Few channels or taps a group (depthwise): one tap at a time, a multiply-add per output.",
            "    for k in range(0, K):",
            "        ks = k + tl.arange(0, 1)",
            "        a, w_offs, k_ok = _gather(x_ptr, ks, n, od, oh, ow, row_ok, ci0, C_in, D, H, W, CIN_G, COUT_G,",
            "                                  KD, KH, KW, SD, SH, SW, PD, PH, PW, DD, DH, DW, TRANSPOSED)",
            "        b = tl.load(w_ptr + w_offs[:, None] + w_cols[None, :], mask=col_ok[None, :], other=0.0)",
            "        acc += a.to(tl.float32) * b.to(tl.float32)",
            "if HAS_BIAS:",
            "    acc += tl.load(b_ptr + co, mask=col_ok, other=0.0).to(tl.float32)[None, :]",
            "mask = row_ok[:, None] & col_ok[None, :]",
        ]
        for e in self.epilogue_inputs:
            s = [f"{e.local}_s{d}" for d in "ncdhw"]
            lines += [f"{e.local}_offs = (n.to(tl.int64) * {s[0]} + od * {s[2]} + oh * {s[3]} + ow * {s[4]})[:, None] + "
                      f"co[None, :] * {s[1]}",
                      f"{e.local} = tl.load({e.local}_ptr + {e.local}_offs, mask=mask, other=0.0).to(tl.float32)"]
        if not self.is_bare_input:
            lines.append(f"acc = {self.body_call()}")
        lines += [
            "# NC[D]HW output: position (od, oh, ow) of sample n, channel co.",
            "out_pos = pos if PER_IMAGE else (od * OH + oh) * OW + ow",
            "out_offs = (n.to(tl.int64) * C_out * P + out_pos)[:, None] + co.to(tl.int64)[None, :] * P",
            "tl.store(out_ptr + out_offs, acc.to(out_ptr.dtype.element_ty), mask=mask)",
        ]
        return "\n\n".join([*fixed.sources(GATHER, {"_gather", "_tap_rows", "_channels_last", "_taps_first"}),
                             jit_source(f"{self.name}_kernel", params, lines)])

    def _launcher(self) -> str:
        g = self.geometry
        x, w, first = self.x.local, self.w.local, self.inputs[0].local
        b = self.bias.local if self.bias else "None"
        text = self._signature_and_prologue()
        after = "" if g["padding_end"] == g["padding"] else f" before, {list(g['padding_end'])} after"
        text += (f"    # This kernel's convolution: {function_name_of(g)}, stride {list(g['stride'])}, padding "
                 f"{list(g['padding'])}{after}, dilation {list(g['dilation'])}, groups {g['groups']}"
                 + (f", output padding {list(g['output_padding'])}" if g["transposed"] else "") + ".\n"
                 f"    shape = conv_shape({x}.shape, {w}.shape, {'None' if b == 'None' else b + '.shape'}, "
                 f"{g['nd']}, {g['transposed']}, {g['stride']}, {g['padding']}, {g['dilation']}, {g['groups']}, "
                 f"{g['output_padding']}, {g['padding_end']})\n"
                 f"    out = torch.empty(shape, dtype={self.out_dtype(first)}, device={first}.device)\n"
                 "    if out.numel() == 0:\n        return out\n"
                 f"    groups = {g['groups']}\n"
                 f"    c_in_g = {x}.shape[1] // groups\n"
                 "    c_out_g = shape[1] // groups\n"
                 f"    taps = math.prod({w}.shape[2:])\n"
                 "    # 1-d and 2-d convolutions run as 3-d ones with unit dims in front.\n"
                 f"    D, H, W = _as_3d({x}.shape[2:], 1)\n"
                 "    OD, OH, OW = _as_3d(shape[2:], 1)\n"
                 f"    KD, KH, KW = _as_3d({w}.shape[2:], 1)\n"
                 f"    SD, SH, SW = _as_3d({g['stride']}, 1)\n"
                 f"    PD, PH, PW = _as_3d({g['padding']}, 0)\n"
                 f"    DD, DH, DW = _as_3d({g['dilation']}, 1)\n")
        if g["transposed"]:
            text += ("    # Outputs by phase (position mod stride): the programs of a phase walk every stride-th\n"
                     "    # position of it, and there are stride phases a dim.\n"
                     "    phases = SD * SH * SW\n"
                     "    positions = shape[0] * _cdiv(OD, SD) * _cdiv(OH, SH) * _cdiv(OW, SW)\n")
        else:
            text += "    phases = 1\n    positions = shape[0] * OD * OH * OW\n"
        text += ("    # The flat tl.dot loop over taps reads float16 and bfloat16 x channels-last and the weight\n"
                 "    # taps-first, copied so by two small kernels below.\n"
                 f"    channels_last = {not g['transposed']} and c_out_g >= 16 and c_in_g >= 16 and taps > 1 and "
                 f"{x}.element_size() == 2\n")
        text += self._config_line("_conv_config(positions, c_out_g, c_in_g, taps, channels_last)")
        text += (f"    BLOCK_M, BLOCK_N, BLOCK_K, num_stages, dot, tap_outer = _fit_conv_config(config, c_out_g, c_in_g, "
                 f"taps, {x}.element_size())\n")
        if self.tf32:
            text += ("    # float32 rounds to TF32 on the tensor cores (the spec allows it).\n"
                     f'    precision = "tf32" if {x}.dtype == torch.float32 else None\n')
        else:
            text += ("    # float32 multiplies in exact IEEE float32 (the spec does not allow TF32).\n"
                     f'    precision = "ieee" if {x}.dtype == torch.float32 else None\n')
        for e in self.epilogue_inputs:
            text += (f"    # {e.local} broadcast over the output: its strides over [N, C, D, H, W], 0 where it broadcasts.\n"
                     f"    {e.local}_strides = _expanded_strides({e.local}.shape, shape)\n"
                     f"    {e.local}_strides = [*{e.local}_strides[:2], *_as_3d({e.local}_strides[2:], 0)]\n")
        text += ("    # A sample's positions get tiles of their own where that wastes little of the last tile: the\n"
                 "    # kernel then knows they lie contiguous (the stores vectorize).\n"
                 f"    per_image = {not g['transposed']} and _cdiv(OD * OH * OW, BLOCK_M) * BLOCK_M * 8 <= OD * OH * OW * 9\n"
                 "    tiles = shape[0] * _cdiv(OD * OH * OW, BLOCK_M) if per_image else _cdiv(positions, BLOCK_M)\n"
                 f"    pointwise = {not g['transposed']} and taps == 1 and (SD, SH, SW, PD, PH, PW) == (1, 1, 1, 0, 0, 0) "
                 f"and {not any(g['padding_end'])}\n"
                 "    grid = (tiles * _cdiv(c_out_g, BLOCK_N), 1, groups * phases)\n"
                 f"    x_read, w_read = {x}, {w}\n"
                 "    if channels_last:\n"
                 f"        x_read = torch.empty(({x}.shape[0], *{x}.shape[2:], {x}.shape[1]), dtype={x}.dtype, device={x}.device)\n"
                 f"        _launch(_channels_last, (_cdiv(D * H * W, 64) * {x}.shape[0], _cdiv({x}.shape[1], 64)), {x}, x_read,\n"
                 f"                {x}.shape[1], D * H * W, BLOCK_C=64, BLOCK_S=64, num_warps=4)\n"
                 f"        w_read = torch.empty((*{w}.shape[2:], c_in_g, shape[1]), dtype={w}.dtype, device={w}.device)\n"
                 f"        _launch(_taps_first, (_cdiv(shape[1], 64), _cdiv(c_in_g * taps, 64)), {w}, w_read, shape[1], c_in_g,\n"
                 "                TAPS=taps, BLOCK_R=64, BLOCK_K=64, num_warps=4)\n")
        args = ["x_read", "w_read", b if b != "None" else x] + [e.local for e in self.epilogue_inputs]
        args += ["out", "shape[0]", f"{x}.shape[1]", "D", "H", "W", "shape[1]", "OD", "OH", "OW", "OD * OH * OW", "D * H * W"]
        args += [f"*{e.local}_strides" for e in self.epilogue_inputs]
        args += ["CIN_G=c_in_g", "COUT_G=c_out_g", "KD=KD", "KH=KH", "KW=KW", "SD=SD", "SH=SH", "SW=SW", "PD=PD",
                 "PH=PH", "PW=PW", "DD=DD", "DH=DH", "DW=DW", f"TRANSPOSED={g['transposed']}",
                 f"HAS_BIAS={self.bias is not None}", "DOT=dot", "TAP_OUTER=tap_outer", "PER_IMAGE=per_image", "POINTWISE=pointwise", f"WIDE_C={x}.shape[1] * D * H * W >= 2**31", "CHANNELS_LAST=channels_last", "INPUT_PRECISION=precision", "BLOCK_M=BLOCK_M",
                 "BLOCK_N=BLOCK_N", "BLOCK_K=BLOCK_K", 'num_warps=config["num_warps"]', "num_stages=num_stages"]
        text += launch(f"{self.name}_kernel", "grid", args, "    ") + "\n"
        return text + "    return out\n"


def function_name_of(geometry: dict) -> str:
    return f"conv{'_transpose' * geometry['transposed']}{geometry['nd']}d"


def reference_property(node: Node) -> tuple[str, bool]:
    return "", False


# ResNet-like 3x3 and 1x1 (expanding) layers, and an odd size of the same channels
ENTRIES = (
    Entry("conv2d_3x3", "conv2d 3x3 with 64 output channels and padding 1 on {shapes}, each in {dtypes}",
          "conv2d(x, w, padding=1)", "matmul", big="32x64x56x56, 7x64x29x31", small="1x2x3x4, 1x2x5x3"),
    Entry("conv2d_1x1", "conv2d 1x1 with 256 output channels on {shapes}, each in {dtypes}",
          "conv2d(x, w)", "matmul", big="32x64x56x56, 7x64x29x31", small="1x2x3x4, 1x2x5x3"),
)
