"""The submodules a pasted module's __init__ sets (nn.ReLU(), nn.Softmax(dim=1), nn.Linear(64, 32),
nn.LayerNorm(64)), each call written as the torch function it computes. A layer's learned tensors
become inputs of that function (Param: `fc_weight` for self.fc.weight), which the judge makes and
binds into the pasted module it runs as the reference (runner.module_call). Classes the reader does
not know, or whose op no family lowers yet, are refused naming what they are.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Callable

from bot.generators.interface import GenerationError
from bot.request import pasted_cells
from bot.request.pasted_constants import literal


@dataclass(frozen=True)
class Sub:
    """A submodule set in __init__: its nn class and constructor arguments (constants), and its mode
    (False once __init__ calls its eval() or train(False): batch norm's running statistics, dropout off)."""
    cls: str
    args: tuple
    kwargs: dict
    line: int
    training: bool = True


@dataclass(frozen=True)
class Seq:
    """An nn.Sequential (callable) or nn.ModuleList (indexed, looped over) set in __init__: its layers,
    in order (each a Sub, a Seq or a Nested)."""
    layers: tuple[Sub | Seq | Nested, ...]
    line: int
    callable: bool = True


@dataclass(frozen=True)
class Nested:
    """An instance of a module class the paste defines (a residual block): its forward, read with
    the attributes its own __init__ set for the arguments it was made with."""
    cls: str
    forward: ast.FunctionDef
    attrs: dict = field(compare=False)
    line: int = 0


@dataclass(frozen=True)
class Learned:
    """A tensor __init__ makes a Parameter of (self.bias = nn.Parameter(torch.randn(c, 1, 1))): its shape."""
    shape: list[int]
    line: int


@dataclass(frozen=True)
class Param:
    """A learned tensor of a submodule, as an input of the function: its name there, its path in
    the pasted module ('fc.weight') and its shape."""
    name: str
    path: str
    shape: list[int]


# Parameter-free nn classes -> the torch function each computes, and the constructor's positional
# parameters in PyTorch's order (passed on as keywords).
_FUNCTIONAL = {
    "ReLU": ("torch.relu", ()), "Sigmoid": ("torch.sigmoid", ()), "Tanh": ("torch.tanh", ()),
    "SiLU": ("F.silu", ()), "GELU": ("F.gelu", ("approximate",)), "Identity": ("", ()),
    "Softmax": ("torch.softmax", ("dim",)), "LogSoftmax": ("torch.log_softmax", ("dim",)),
    "Unflatten": ("torch.unflatten", ("dim", "sizes")), "Softmax2d": ("torch.softmax", ()), "Softmin": ("F.softmin", ("dim",)), "GLU": ("F.glu", ("dim",)), "Threshold": ("F.threshold", ("threshold", "value")),
    "LeakyReLU": ("F.leaky_relu", ("negative_slope",)), "ELU": ("F.elu", ("alpha",)), "SELU": ("F.selu", ()),
    "CELU": ("F.celu", ("alpha",)), "ReLU6": ("F.relu6", ()), "Hardtanh": ("F.hardtanh", ("min_val", "max_val")),
    "Hardsigmoid": ("F.hardsigmoid", ()), "Hardswish": ("F.hardswish", ()), "Softplus": ("F.softplus", ("beta", "threshold")),
    "Softsign": ("F.softsign", ()), "Mish": ("F.mish", ()), "Tanhshrink": ("F.tanhshrink", ()),
    "LogSigmoid": ("F.logsigmoid", ()), "Softshrink": ("F.softshrink", ("lambd",)), "Hardshrink": ("F.hardshrink", ("lambd",)),
    "CosineSimilarity": ("F.cosine_similarity", ("dim", "eps")),
    "Dropout": ("F.dropout", ("p", "inplace")),         # the input itself where p is 0, else refused: random
    # the channel-wise and self-normalizing dropouts differ only where p > 0 (random: refused as dropout's)
    **{cls: ("F.dropout", ("p", "inplace")) for cls in ("Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
                                                          "FeatureAlphaDropout")},
    "Upsample": ("F.interpolate", ("size", "scale_factor", "mode", "align_corners", "recompute_scale_factor")),
    "UpsamplingNearest2d": ("F.interpolate", ("size", "scale_factor")),
    "PixelShuffle": ("F.pixel_shuffle", ("upscale_factor",)), "PixelUnshuffle": ("F.pixel_unshuffle", ("downscale_factor",)),
    **{f"{cls}Loss": (f"F.{fn}", ("weight", "size_average", "ignore_index", "reduce", "reduction", *extra))
       for cls, fn, extra in (("CrossEntropy", "cross_entropy", ("label_smoothing",)), ("NLL", "nll_loss", ()))},
    **{f"{cls}Loss": (f"F.{fn}", ("margin", "size_average", "reduce", "reduction")) for cls, fn in (
        ("HingeEmbedding", "hinge_embedding_loss"), ("CosineEmbedding", "cosine_embedding_loss"),
        ("MarginRanking", "margin_ranking_loss"))},
    **{f"{cls}Loss": (f"F.{fn}", ("size_average", "reduce", "reduction", *extra)) for cls, fn, extra in (
        ("MSE", "mse_loss", ()), ("L1", "l1_loss", ()), ("SmoothL1", "smooth_l1_loss", ("beta",)),
        ("SoftMargin", "soft_margin_loss", ()), ("KLDiv", "kl_div", ("log_target",)))},
    "HuberLoss": ("F.huber_loss", ("reduction", "delta")),
    **{f"{cls}Loss": (f"F.{fn}", ("weight", "size_average", "reduce", "reduction")) for cls, fn in (
        ("BCE", "binary_cross_entropy"), ("MultiLabelSoftMargin", "multilabel_soft_margin_loss"))},
    "PoissonNLLLoss": ("F.poisson_nll_loss", ("log_input", "full", "size_average", "eps", "reduce", "reduction")),
    "BCEWithLogitsLoss": ("F.binary_cross_entropy_with_logits", ("weight", "size_average", "reduce", "reduction",
                                                                  "pos_weight")),
    "TripletMarginLoss": ("F.triplet_margin_loss", ("margin", "p", "eps", "swap", "size_average", "reduce",
                                                    "reduction")),
    **{f"MaxPool{n}d": (f"F.max_pool{n}d", ("kernel_size", "stride", "padding", "dilation", "return_indices",
                                              "ceil_mode")) for n in (1, 2, 3)},
    **{f"AvgPool{n}d": (f"F.avg_pool{n}d", ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                                              "divisor_override")) for n in (1, 2, 3)},
    **{f"LPPool{n}d": (f"F.lp_pool{n}d", ("norm_type", "kernel_size", "stride", "ceil_mode")) for n in (1, 2, 3)},
    **{f"Adaptive{k}Pool{n}d": (f"F.adaptive_{k.lower()}_pool{n}d", ("output_size", "return_indices"))
       for k in ("Avg", "Max") for n in (1, 2, 3)},
}
_OTHER = {"Bilinear": "a bilinear layer", "MultiheadAttention": "attention",
          "RReLU": "random in training mode, as a pasted module runs (F.rrelu(x) is not: training=False)"}
_FAMILIES = [(r"Conv", "a convolution"), (r"ConvTranspose", "a transposed convolution"), (r"BatchNorm", "batch norm"),
             (r"InstanceNorm", "instance norm"), (r"GroupNorm", "group norm"), (r"Pool", "pooling"),
             (r"LSTM|GRU|RNN", "a recurrent layer over a whole sequence (its cell, nn.LSTMCell, nn.GRUCell or "
                               "nn.RNNCell, is read)"), (r"Loss$", "a loss"), (r"Transformer", "a transformer block")]


def functional(sub: Sub, attr: str, args: list[ast.expr], keywords: list[ast.keyword], line: int,
               name_of: Callable[[str], str]) -> tuple[ast.expr, list[Param]]:
    """The call of the function nn.<cls>(...) computes on args, and the learned tensors it takes
    (self.<attr>'s; name_of gives each path, 'fc.weight', its input name)."""
    if sub.cls in _LAYERS:
        return _LAYERS[sub.cls](sub, attr, args, keywords, line, name_of)
    if sub.cls == "RReLU" and not sub.training:       # eval mode: the mean of its slopes, not random
        kw = [ast.keyword(k, literal(v, ast.Constant(0))) for k, v in _options(sub, ("lower", "upper")).items()]
        return ast.Call(_path("F.rrelu"), args, [*kw, ast.keyword("training", ast.Constant(False))]), []
    if sub.cls not in _FUNCTIONAL:
        raise GenerationError(f"line {line}: nn.{sub.cls} (set on line {sub.line}) is {_what(sub.cls)}, which the "
                              "offline generator does not lower")
    path, params = _FUNCTIONAL[sub.cls]
    if not path or not sub.training and path == "F.dropout":      # dropout in eval mode is its input
        return args[0], []
    if _in_place(sub, params):          # its tensor changed in place: the function reader follows that
        keywords = [*keywords, ast.keyword("inplace", ast.Constant(True))]
    if sub.cls == "Softmax2d":           # over the channels of [N, C, H, W] or [C, H, W]: dim -3
        return ast.Call(_path(path), args, [ast.keyword("dim", ast.Constant(-3))]), []
    kw = [ast.keyword(k, literal(v, ast.Constant(0))) for k, v in _options(sub, params).items()]
    return ast.Call(_path(path), args, kw + keywords), []


# Activation layers that take inplace=, as their last constructor parameter (nn.ReLU(True), nn.LeakyReLU(0.1, True)).
_IN_PLACE = {"ReLU", "ReLU6", "SELU", "SiLU", "Hardswish", "Hardsigmoid", "Mish", "LeakyReLU", "ELU", "CELU",
             "Hardtanh", "Threshold", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
             "FeatureAlphaDropout"}


def _in_place(sub: Sub, params: tuple[str, ...]) -> bool:
    """Whether the layer was made with inplace=True (by keyword, or positionally after its other parameters)."""
    if sub.cls not in _IN_PLACE:
        return False
    at = len([p for p in params if p != "inplace"])
    return bool(sub.kwargs.get("inplace", sub.args[at] if len(sub.args) > at else False))


def _options(sub: Sub, params: tuple[str, ...], defaults: dict | None = None) -> dict:
    """The constructor's arguments by name (positional ones named in PyTorch's order), with
    defaults for those not given; None and inplace dropped."""
    given = {**(defaults or {}), **dict(zip(params, sub.args)), **sub.kwargs}
    return {k: v for k, v in given.items() if v is not None and k != "inplace"}


def _param(attr: str, leaf: str, shape: list[int], name_of: Callable[[str], str]) -> Param:
    return Param(name_of(f"{attr}.{leaf}"), f"{attr}.{leaf}", [int(d) for d in shape])


def _names(params: list[Param | None]) -> list[ast.expr]:
    return [ast.Name(p.name, ast.Load()) if p else ast.Constant(None) for p in params]


def _linear(sub: Sub, attr: str, args: list[ast.expr], keywords: list, line: int, name_of: Callable[[str], str]):
    """nn.Linear(in, out, bias=True): F.linear(x, weight [out, in], bias [out])."""
    o = _options(sub, ("in_features", "out_features", "bias"), {"bias": True})
    weight = _param(attr, "weight", [o["out_features"], o["in_features"]], name_of)
    bias = _param(attr, "bias", [o["out_features"]], name_of) if o["bias"] else None
    return ast.Call(_path("F.linear"), [*args, *_names([weight, bias])], keywords), [p for p in (weight, bias) if p]


def _norm(sub: Sub, attr: str, args: list[ast.expr], keywords: list, line: int, name_of: Callable[[str], str]):
    """nn.LayerNorm(shape, eps=1e-5, elementwise_affine=True, bias=True) and nn.RMSNorm(shape,
    eps=None, elementwise_affine=True): F.layer_norm / F.rms_norm with the weight (and bias) over
    the normalized shape. RMSNorm's eps=None is torch's: the input dtype's machine epsilon."""
    layer = sub.cls == "LayerNorm"
    o = _options(sub, ("normalized_shape", "eps", "elementwise_affine", "bias"),
                 {"elementwise_affine": True, "bias": layer})
    shape = o["normalized_shape"]
    shape = list(shape) if isinstance(shape, (tuple, list)) else [shape]
    if not layer and "eps" not in o:
        raise GenerationError(f"line {line}: nn.RMSNorm (set on line {sub.line}) without eps uses the input dtype's "
                              "machine epsilon, which differs per dtype; give eps, e.g. nn.RMSNorm(dim, eps=1e-6)")
    affine = o["elementwise_affine"]
    weight = _param(attr, "weight", shape, name_of) if affine else None
    bias = _param(attr, "bias", shape, name_of) if affine and o["bias"] else None
    tensors = [weight, bias] if layer else [weight]
    call_args = [args[0], literal(tuple(shape), ast.Constant(0)), *_names(tensors)]
    eps = [ast.keyword("eps", literal(o["eps"], ast.Constant(0)))] if "eps" in o else []
    return (ast.Call(_path("F.layer_norm" if layer else "F.rms_norm"), call_args, eps + keywords),
            [p for p in tensors if p])


def _conv(sub: Sub, attr: str, args: list[ast.expr], keywords: list, line: int, name_of: Callable[[str], str]):
    """nn.Conv1d/2d/3d(in, out, kernel_size, stride, padding, dilation, groups, bias) and
    nn.ConvTranspose1d/2d/3d(in, out, kernel_size, stride, padding, output_padding, groups, bias,
    dilation): F.conv<n>d / F.conv_transpose<n>d with weight [out, in / groups, *kernel] (transposed:
    [in, out / groups, *kernel]) and bias [out]."""
    transposed, nd = sub.cls.startswith("ConvTranspose"), int(sub.cls[-2])
    order = ("in_channels", "out_channels", "kernel_size", "stride", "padding") + (
        ("output_padding", "groups", "bias", "dilation") if transposed else ("dilation", "groups", "bias"))
    o = _options(sub, order, {"stride": 1, "padding": 0, "dilation": 1, "groups": 1, "bias": True,
                              "output_padding": 0, "padding_mode": "zeros"})
    kernel = o["kernel_size"]
    kernel = list(kernel) if isinstance(kernel, (tuple, list)) else [kernel] * nd
    if o["padding_mode"] != "zeros":
        if transposed or o["padding_mode"] not in ("reflect", "replicate", "circular"):
            raise GenerationError(f"line {line}: nn.{sub.cls} (set on line {sub.line}) pads with "
                                  f"{o['padding_mode']!r}, which torch takes for convolutions (not transposed ones) "
                                  "as 'zeros', 'reflect', 'replicate' or 'circular'")
        args = [_mode_padded(args[0], o, kernel, nd)] + args[1:]
        o["padding"] = 0
    groups, c_in, c_out = o["groups"], o["in_channels"], o["out_channels"]
    if c_in % groups or c_out % groups:
        raise GenerationError(f"line {line}: nn.{sub.cls} (set on line {sub.line}) has {groups} groups, which do not "
                              f"divide its {c_in} input and {c_out} output channels")
    shape = [c_in, c_out // groups, *kernel] if transposed else [c_out, c_in // groups, *kernel]
    weight = _param(attr, "weight", shape, name_of)
    bias = _param(attr, "bias", [c_out], name_of) if o["bias"] else None
    keys = ("stride", "padding") + (("output_padding", "groups", "dilation") if transposed else ("dilation", "groups"))
    kw = [ast.keyword(k, literal(o[k], ast.Constant(0))) for k in keys]
    fn = f"F.conv_transpose{nd}d" if transposed else f"F.conv{nd}d"
    return ast.Call(_path(fn), [*args, *_names([weight, bias])], kw + keywords), [p for p in (weight, bias) if p]


def _mode_padded(x: ast.expr, o: dict, kernel: list[int], nd: int) -> ast.expr:
    """A convolution's input padded as torch pads it for a padding_mode other than zeros: F.pad in that
    mode by the padding ('same': the taps' reach split, the extra one after), the last dim's first."""
    padding, dilation = o["padding"], o["dilation"]
    if padding == "valid":
        return x
    dilation = list(dilation) if isinstance(dilation, (tuple, list)) else [dilation] * nd
    if padding == "same":
        reach = [d * (k - 1) for d, k in zip(dilation, kernel)]
        pairs = [(r // 2, r - r // 2) for r in reach]
    else:
        pairs = [(p, p) for p in (list(padding) if isinstance(padding, (tuple, list)) else [padding] * nd)]
    pads = tuple(v for pair in reversed(pairs) for v in pair)
    return ast.Call(_path("F.pad"), [x, literal(pads, ast.Constant(0))],
                    [ast.keyword("mode", ast.Constant(o["padding_mode"]))])


def _channel_norm(sub: Sub, attr: str, args: list[ast.expr], keywords: list, line: int,
                  name_of: Callable[[str], str]):
    """nn.BatchNorm1d/2d/3d(num_features, eps, momentum, affine, track_running_stats) in training mode
    (as a pasted module is built and run: the batch's statistics), nn.GroupNorm(num_groups,
    num_channels, eps, affine), nn.InstanceNorm1d/2d/3d(num_features, eps, momentum, affine,
    track_running_stats): F.batch_norm / F.group_norm / F.instance_norm with weight and bias of the
    channels when affine."""
    group = sub.cls == "GroupNorm"
    order = ("num_groups", "num_channels", "eps", "affine") if group else (
        "num_features", "eps", "momentum", "affine", "track_running_stats")
    o = _options(sub, order, {"eps": 1e-5, "affine": not sub.cls.startswith("Instance")})
    channels = o["num_channels" if group else "num_features"]
    weight = _param(attr, "weight", [channels], name_of) if o["affine"] else None
    bias = _param(attr, "bias", [channels], name_of) if o["affine"] else None
    eps = ast.keyword("eps", literal(o["eps"], ast.Constant(0)))
    w, b = _names([weight, bias])
    if group:
        call = ast.Call(_path("F.group_norm"), [args[0], literal(o["num_groups"], ast.Constant(0)), w, b], [eps])
    elif sub.cls.startswith("Batch") and not sub.training and o.get("track_running_stats", True):
        # eval mode: the running statistics, buffers the judge draws (the variance positive) and binds
        stats = [_param(attr, leaf, [channels], name_of) for leaf in ("running_mean", "running_var")]
        call = ast.Call(_path("F.batch_norm"), [args[0], *_names(stats), w, b],
                        [ast.keyword("training", ast.Constant(False)), eps])
        return call, [p for p in (*stats, weight, bias) if p]
    elif sub.cls.startswith("Batch"):
        call = ast.Call(_path("F.batch_norm"), [args[0], ast.Constant(None), ast.Constant(None), w, b],
                        [ast.keyword("training", ast.Constant(True)), eps])
    else:
        if not sub.training and o.get("track_running_stats"):
            raise GenerationError(f"line {line}: nn.{sub.cls} with track_running_stats=True in eval mode (set on "
                                  f"line {sub.line}) normalizes by running statistics, which is not read; "
                                  "track_running_stats=False or training mode is")
        call = ast.Call(_path("F.instance_norm"), [args[0]], [ast.keyword("weight", w), ast.keyword("bias", b), eps])
    return call, [p for p in (weight, bias) if p]


def _embedding(sub: Sub, attr: str, args: list[ast.expr], keywords: list, line: int,
               name_of: Callable[[str], str]):
    """nn.Embedding(num_embeddings, embedding_dim, padding_idx, max_norm, ...): F.embedding(ids,
    weight [num, dim]); the keywords beside the sizes go to F.embedding, which reads them."""
    o = _options(sub, ("num_embeddings", "embedding_dim", "padding_idx", "max_norm", "norm_type",
                       "scale_grad_by_freq", "sparse"))
    weight = _param(attr, "weight", [o.pop("num_embeddings"), o.pop("embedding_dim")], name_of)
    kw = [ast.keyword(k, literal(v, ast.Constant(0))) for k, v in o.items()]
    return ast.Call(_path("F.embedding"), [*args, *_names([weight])], kw + keywords), [weight]


def _embedding_bag(sub: Sub, attr: str, args: list[ast.expr], keywords: list, line: int,
                   name_of: Callable[[str], str]):
    """nn.EmbeddingBag(num_embeddings, embedding_dim, ..., mode) on [bags, ids] ids: each row's lookups
    reduced by mode ('mean', 'sum', 'max') over the row, torch.mean(F.embedding(ids, weight), dim=1)
    and alike. Offsets (1-D ids), per-sample weights, max_norm and padding_idx are refused."""
    o = _options(sub, ("num_embeddings", "embedding_dim", "max_norm", "norm_type", "scale_grad_by_freq", "mode",
                       "sparse", "_weight", "include_last_offset", "padding_idx"), {"mode": "mean"})
    extra = sorted(k for k, v in o.items() if k in ("max_norm", "_weight", "padding_idx") or
                   (k in ("scale_grad_by_freq", "sparse", "include_last_offset") and v))
    if len(args) != 1 or keywords or extra or o["mode"] not in ("mean", "sum", "max"):
        said = ", ".join(extra) or ("offsets or per_sample_weights" if len(args) != 1 or keywords else
                                   f"mode={o['mode']!r}")
        raise GenerationError(f"line {line}: nn.EmbeddingBag (set on line {sub.line}) is read over 2-D ids (a bag a "
                              f"row) with mode 'mean', 'sum' or 'max', not with {said}")
    weight = _param(attr, "weight", [o["num_embeddings"], o["embedding_dim"]], name_of)
    looked = ast.Call(_path("F.embedding"), [*args, *_names([weight])], [])
    reduce = {"mean": "torch.mean", "sum": "torch.sum", "max": "torch.amax"}[o["mode"]]
    return ast.Call(_path(reduce), [looked], [ast.keyword("dim", ast.Constant(1))]), [weight]


def _prelu(sub: Sub, attr: str, args: list[ast.expr], keywords: list, line: int, name_of: Callable[[str], str]):
    """nn.PReLU(num_parameters=1, init=0.25): F.prelu(x, weight [num_parameters])."""
    weight = _param(attr, "weight", [_options(sub, ("num_parameters", "init"), {"num_parameters": 1})["num_parameters"]],
                    name_of)
    return ast.Call(_path("F.prelu"), [*args, *_names([weight])], keywords), [weight]


def _pad(sub: Sub, attr: str, args: list[ast.expr], keywords: list, line: int, name_of: Callable[[str], str]):
    """nn.ZeroPad1d/2d/3d(padding), nn.ConstantPad1d/2d/3d(padding, value), nn.ReflectionPad/ReplicationPad/
    CircularPad: F.pad(x, padding as F.pad takes it (an int: every side of the last n dims), mode, value),
    which a convolution reading it folds in (bot.ops.conv)."""
    nd = int(sub.cls[-2])
    o = _options(sub, ("padding", "value"))
    padding = o["padding"]
    padding = tuple(padding) if isinstance(padding, (tuple, list)) else (padding,) * (2 * nd)
    mode = next((m for m, word in (("reflect", "Reflection"), ("replicate", "Replication"), ("circular", "Circular"))
                 if sub.cls.startswith(word)), "constant")
    kw = [ast.keyword("mode", ast.Constant(mode))] + ([ast.keyword("value", literal(o["value"], ast.Constant(0)))]
                                                      if "value" in o else [])
    return ast.Call(_path("F.pad"), [*args, literal(padding, ast.Constant(0))], kw + keywords), []


def _flatten(sub: Sub, attr: str, args: list[ast.expr], keywords: list, line: int, name_of: Callable[[str], str]):
    # nn.Flatten keeps dim 0 (start_dim=1), where torch.flatten starts at 0
    o = _options(sub, ("start_dim", "end_dim"), {"start_dim": 1, "end_dim": -1})
    return ast.Call(_path("torch.flatten"), args, [ast.keyword(k, ast.Constant(v)) for k, v in o.items()]), []


def _multihead_attention(sub: Sub, attr: str, args: list[ast.expr], keywords: list, line: int,
                         name_of: Callable[[str], str]):
    """nn.MultiheadAttention(embed_dim, num_heads, bias=True, batch_first=False)(query, key, value): the
    three projections by in_proj_weight's thirds, heads split off the last dim, scaled dot-product
    attention, heads joined, out_proj; as (output, None): the attention weights are not computed (their
    use is refused as an unknown name). Masks, dropout in training, extra key/value biases and other
    key or value widths are refused."""
    o = _options(sub, ("embed_dim", "num_heads", "dropout", "bias", "add_bias_kv", "add_zero_attn", "kdim", "vdim",
                       "batch_first"), {"dropout": 0.0, "bias": True, "add_bias_kv": False, "add_zero_attn": False,
                                        "batch_first": False})
    e, heads = o["embed_dim"], o["num_heads"]
    given = dict(zip(("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask"), args)) | \
        {k.arg: k.value for k in keywords if k.arg}
    masked = [k for k in ("key_padding_mask", "attn_mask") if k in given and not _is_none(given[k])]
    extra = [k for k in ("add_bias_kv", "add_zero_attn") if o[k]] + [k for k in ("kdim", "vdim") if o.get(k, e) != e]
    if masked or extra or (o["dropout"] and sub.training) or not all(k in given for k in ("query", "key", "value")) \
            or type(e) is not int or type(heads) is not int or e % heads:
        raise GenerationError(f"line {line}: nn.MultiheadAttention (set on line {sub.line}) is read with query, key and "
                              "value alone, embed_dim divisible by num_heads, no dropout in training and no "
                              f"{', '.join(masked + extra) or 'masks or extra biases'}")
    weight = _param(attr, "in_proj_weight", [3 * e, e], name_of)
    bias = _param(attr, "in_proj_bias", [3 * e], name_of) if o["bias"] else None
    out_w = _param(attr, "out_proj.weight", [e, e], name_of)
    out_b = _param(attr, "out_proj.bias", [e], name_of) if o["bias"] else None
    # [N, L, H, d] or [L, N, H, d] to [N, H, L, d] and back; a permute of four dims, so an unbatched
    # [L, E] query (torch's 2-D form) is refused rather than read along the wrong dims
    to_heads, from_heads = (".permute(0, 2, 1, 3)", ".permute(0, 2, 1, 3)") if o["batch_first"] else \
        (".permute(1, 2, 0, 3)", ".permute(2, 0, 1, 3)")

    def projected(k: int, x: ast.expr) -> str:
        b = f"{bias.name}[{k * e}:{(k + 1) * e}]" if bias else "None"
        return f"F.linear({ast.unparse(x)}, {weight.name}[{k * e}:{(k + 1) * e}], {b}).unflatten(-1, ({heads}, {e // heads}))" \
               f"{to_heads}"
    q, k, v = (projected(n, given[x]) for n, x in enumerate(("query", "key", "value")))
    text = (f"(F.linear(F.scaled_dot_product_attention({q}, {k}, {v}){from_heads}.flatten(-2), {out_w.name}, "
            f"{out_b.name if out_b else 'None'}), multihead_attention_weights_are_not_computed)")
    return ast.parse(text, mode="eval").body, [p for p in (weight, bias, out_w, out_b) if p]


def _recurrent_cell(sub: Sub, attr: str, args: list[ast.expr], keywords: list, line: int,
                    name_of: Callable[[str], str]):
    """nn.RNNCell, nn.GRUCell, nn.LSTMCell(input_size, hidden_size, bias=True): bot.request.pasted_cells."""
    o = _options(sub, ("input_size", "hidden_size", "bias", "nonlinearity"), {"bias": True})
    return pasted_cells.cell(sub.cls, o, args, keywords, line, lambda leaf, shape: _param(attr, leaf, shape, name_of))


def _is_none(e: ast.expr) -> bool:
    return isinstance(e, ast.Constant) and e.value is None


def _local_response_norm(sub: Sub, attr: str, args: list[ast.expr], keywords: list, line: int,
                         name_of: Callable[[str], str]):
    """nn.LocalResponseNorm(size, alpha=1e-4, beta=0.75, k=1.0): x / (k + alpha * mean of x**2 over a
    window of `size` channels, zeros past the ends) ** beta. Torch averages a zero-padded window with
    avg_pool; here the window's squares are summed from the channels shifted by each offset (dim 1, any
    rank), then divided by size as that average is."""
    o = _options(sub, ("size", "alpha", "beta", "k"), {"alpha": 1e-4, "beta": 0.75, "k": 1.0})
    size, alpha, beta, k = (literal(o.get(n), ast.Constant(0)).value for n in ("size", "alpha", "beta", "k"))
    if type(size) is not int or size < 1:
        raise GenerationError(f"line {line}: nn.LocalResponseNorm's size must be a whole number of channels")
    x = f"({ast.unparse(args[0])})"
    terms = []
    for j in range(-(size // 2), (size - 1) // 2 + 1):      # channel c reads c + j, zero outside
        sq = f"({x} * {x})"
        if j > 0:
            terms.append(f"torch.cat([{sq}[:, {j}:], torch.zeros_like({sq}[:, -{j}:])], dim=1)")
        elif j < 0:
            terms.append(f"torch.cat([torch.zeros_like({sq}[:, :{-j}]), {sq}[:, :{j}]], dim=1)")
        else:
            terms.append(sq)
    text = f"{x} / ({k!r} + {alpha!r} * ({' + '.join(terms)}) / {size}) ** {beta!r}"
    return ast.parse(text, mode="eval").body, []


# nn classes holding learned tensors, or with defaults unlike their function's -> what writes their call.
_LAYERS = {"Linear": _linear, "LayerNorm": _norm, "RMSNorm": _norm, "Flatten": _flatten,
           **{f"Conv{n}d": _conv for n in (1, 2, 3)}, **{f"ConvTranspose{n}d": _conv for n in (1, 2, 3)},
           **{f"{kind}Norm{n}d": _channel_norm for kind in ("Batch", "Instance") for n in (1, 2, 3)},
           "GroupNorm": _channel_norm, "Embedding": _embedding, "EmbeddingBag": _embedding_bag, "PReLU": _prelu,
           "LocalResponseNorm": _local_response_norm, "MultiheadAttention": _multihead_attention,
           **dict.fromkeys(pasted_cells.GATES, _recurrent_cell),
           **{f"{kind}Pad{n}d": _pad for kind in ("Zero", "Constant", "Reflection", "Replication", "Circular")
              for n in (1, 2, 3)}}


def _what(cls: str) -> str:
    if cls in _OTHER:
        return _OTHER[cls]
    return next((what for pattern, what in _FAMILIES if re.search(pattern, cls)), "a module the reader does not know")


def _path(dotted: str) -> ast.expr:
    parts = dotted.split(".")
    node: ast.expr = ast.Name(parts[0], ast.Load())
    for p in parts[1:]:
        node = ast.Attribute(node, p, ast.Load())
    return node
