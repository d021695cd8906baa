"""The submodules a pasted module's __init__ sets (nn.ReLU(), nn.Softmax(dim=1),
nn.LayerNorm(..., elementwise_affine=False)), each call written as the torch function it computes;
classes holding learned weights, and those the reader does not know, are refused naming what they
are.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from bot.generators.interface import GenerationError
from bot.request.pasted_constants import literal


@dataclass(frozen=True)
class Sub:
    """A submodule set in __init__: its nn class and constructor arguments (constants)."""
    cls: str
    args: tuple
    kwargs: dict
    line: int


# Parameter-free nn classes -> the torch function each computes, and the constructor's positional
# parameters in PyTorch's order (passed on as keywords). Classes holding learned weights (Linear,
# Conv*, BatchNorm, affine LayerNorm) are refused: their kernel takes the weights as inputs.
_FUNCTIONAL = {
    "ReLU": ("torch.relu", ()), "Sigmoid": ("torch.sigmoid", ()), "Tanh": ("torch.tanh", ()),
    "SiLU": ("F.silu", ()), "GELU": ("F.gelu", ("approximate",)), "Identity": ("", ()),
    "Softmax": ("torch.softmax", ("dim",)), "LogSoftmax": ("torch.log_softmax", ("dim",)),
    "LeakyReLU": ("F.leaky_relu", ("negative_slope",)), "ELU": ("F.elu", ("alpha",)), "SELU": ("F.selu", ()),
    "CELU": ("F.celu", ("alpha",)), "ReLU6": ("F.relu6", ()), "Hardtanh": ("F.hardtanh", ("min_val", "max_val")),
    "Hardsigmoid": ("F.hardsigmoid", ()), "Hardswish": ("F.hardswish", ()), "Softplus": ("F.softplus", ("beta", "threshold")),
    "Softsign": ("F.softsign", ()), "Mish": ("F.mish", ()), "Tanhshrink": ("F.tanhshrink", ()),
    "LogSigmoid": ("F.logsigmoid", ()), "Softshrink": ("F.softshrink", ("lambd",)), "Hardshrink": ("F.hardshrink", ("lambd",)),
    "CrossEntropyLoss": ("F.cross_entropy", ("weight", "size_average", "ignore_index", "reduce", "reduction")),
    "LayerNorm": ("F.layer_norm", ("normalized_shape", "eps", "elementwise_affine", "bias")),
    "RMSNorm": ("F.rms_norm", ("normalized_shape", "eps", "elementwise_affine")),
}
_WEIGHTED = {"Linear": "a linear layer (x @ W.T + b) with learned weights", "Bilinear": "a bilinear layer",
             "Embedding": "an embedding lookup", "MultiheadAttention": "attention",
             "Dropout": "dropout (random in training mode)"}
_FAMILIES = [(r"Conv", "a convolution"), (r"ConvTranspose", "a transposed convolution"), (r"BatchNorm", "batch norm"),
             (r"InstanceNorm", "instance norm"), (r"GroupNorm", "group norm"), (r"Pool", "pooling"),
             (r"LSTM|GRU|RNN", "a recurrent layer"), (r"Loss$", "a loss"), (r"Transformer", "a transformer block")]


def functional(sub: Sub, args: list[ast.expr], keywords: list[ast.keyword], line: int) -> ast.expr:
    """The call of the function nn.<cls>(...) computes on args."""
    if sub.cls not in _FUNCTIONAL:
        raise GenerationError(f"line {line}: nn.{sub.cls} (set on line {sub.line}) is {_what(sub.cls)}, which the "
                              "offline generator does not lower")
    path, params = _FUNCTIONAL[sub.cls]
    options = {k: v for k, v in {**dict(zip(params, sub.args)), **sub.kwargs}.items()
               if v is not None and k != "inplace"}
    if sub.cls in ("LayerNorm", "RMSNorm"):
        if options.pop("elementwise_affine", True) or options.pop("bias", False):
            raise GenerationError(f"line {line}: nn.{sub.cls} (set on line {sub.line}) holds a learned weight"
                                  f"{' and bias' if sub.cls == 'LayerNorm' else ''}, which the offline generator "
                                  "takes as kernel inputs: write F.layer_norm(x, shape, weight, bias, eps=...) "
                                  "in a function taking them, or give elementwise_affine=False")
        shape = options.pop("normalized_shape", ())
        args = [args[0], literal(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,), ast.Constant(0))]
    if not path:
        return args[0]
    kw = [ast.keyword(k, literal(v, ast.Constant(0))) for k, v in options.items()]
    return ast.Call(_path(path), args, kw + keywords)


def _what(cls: str) -> str:
    if cls in _WEIGHTED:
        return _WEIGHTED[cls]
    return next((what for pattern, what in _FAMILIES if re.search(pattern, cls)), "a module the reader does not know")


def _path(dotted: str) -> ast.expr:
    parts = dotted.split(".")
    node: ast.expr = ast.Name(parts[0], ast.Load())
    for p in parts[1:]:
        node = ast.Attribute(node, p, ast.Load())
    return node
