"""The norm family: layernorm and rmsnorm over the last dim of a pointwise body (so also fused
add + rmsnorm, rmsnorm(x + residual, weight)), with an optional weight (and bias), as
torch.nn.functional computes them. The row template computes it: mean and variance (Welford's
merge, Chan et al., over chunks of long rows) or the mean square, then the normalised, scaled row.
Owns its words (the op and its weight and bias), IR rule, shape check, reference, row plan and
catalog entries.
"""
from __future__ import annotations

import ast
import re

from bot.codegen.expr import fmt_const
from bot.codegen.row_kernel import RowKernel, RowPlan
from bot.generators.interface import GenerationError
from bot.ops import channel_norm, pointwise
from bot.ops.entry import SMALL_LONG_ODD, Entry
from bot.ops.node import (Call, IRError, Node, broadcast_shapes, call, input_names, is_int_literal, is_none, number,
                          prints, to_text)
from bot.ops.text import FLAGS as _F

NAME = "norm"
OPS = {"layernorm", "rmsnorm"}
ROOT = True
SUPPORTED = ("over the last dim", "layernorm(x, weight, bias, eps=...), rmsnorm(x, weight, eps=...) (also of a "
             "sum, e.g. rmsnorm(x + residual, weight))")
ALIASES = {"layer_norm": "layernorm", "rms_norm": "rmsnorm"}
KEYWORDS = dict.fromkeys(OPS, {"eps", "weight", "bias", "normalized_shape"})
OUTPUT_DTYPES: dict[str, str] = {}
DEFAULT_EPS = {"layernorm": 1e-5, "rmsnorm": 1e-6}
WORDS = [(re.compile(p, _F), kind, op) for p, kind, op in [
    (r"\blayer[\s_-]?norm(?:ali[sz]ation)?\b|层归一化", "row", "layernorm"),
    (r"\brms[\s_-]?norm(?:ali[sz]ation)?\b|\broot[\s-]mean[\s-]square[\s-]norm\w*|\brms\s*归一化|均方根归一化",
     "row", "rmsnorm"),
]]
WEIGHT_WORD = re.compile(r"\bweights?\b|\bgamma\b|权重", _F)


BIAS_WORD = re.compile(r"\bbias\b|\bbeta\b|偏置", _F)


NO_WEIGHT = re.compile(r"\b(?:without|no|w/o)\s+(?:[\w/-]+\s+){0,3}?(?:weights?|gamma|affine)\b|"
                        r"(?:无|不带|没有)权重", _F)


NO_BIAS = re.compile(r"\b(?:without|no|w/o)\s+(?:[\w/-]+\s+){0,3}?(?:bias|beta|affine)\b|"
                      r"\b(?:weights?|gamma)\s+only\b|\bonly\s+(?:an?\s+)?(?:weights?|gamma)\b|"
                      r"(?:无|不带|没有)(?:权重和)?偏置", _F)


# ---------------------------------------------------------------- IR rule

def convert(c: Call) -> Node | None:
    if c.fname not in OPS:
        return None
    fname, args, kw = c.fname, c.args, c.kw
    # layernorm(x, weight, bias, eps=..); F.layer_norm(x, shape, weight, bias, eps)
    shape = None
    if args and len(args) > 1 and isinstance(args[1], (ast.Tuple, ast.List, ast.Subscript, ast.Attribute)):
        shape = args[1]
        args = [args[0]] + args[2:]
    if "normalized_shape" in kw:
        shape = kw.pop("normalized_shape")
    dims = _normalized_dims(shape)
    if dims > 1 and fname == "layernorm":             # over several trailing dims: the channel-norm family's
        return _layer_norm_nd(c, args, dims)
    if shape is not None:
        _last_dim_only(fname, shape)
    eps_node = kw.pop("eps", None)
    max_args = 3 if fname == "layernorm" else 2
    if len(args) > max_args + 1:
        raise IRError(f"{fname} takes at most {max_args + 1} arguments (x, weight{', bias' * (max_args == 3)}, eps), "
                      f"got {len(args)}")
    if len(args) > max_args:
        eps_node = args[max_args]
        args = args[:max_args]
    if not args:
        raise IRError(f"{fname} needs an input, e.g. {fname}(x, weight, eps=1e-6)")
    slots = args[1:] + [None] * (max_args - len(args))         # weight (and bias) by position
    for i, key in enumerate(("weight", "bias")[:max_args - 1]):
        if key in kw:
            slots[i] = kw.pop(key)
    args = args[:1] + slots
    eps = number(eps_node) if eps_node is not None else DEFAULT_EPS[fname]
    conv = [None if is_none(a) else c.expr(a) for a in args]
    weight = conv[1] if len(conv) > 1 else None
    bias = conv[2] if len(conv) > 2 else None
    # a normalized shape written as a number without a weight (nn.LayerNorm(24, elementwise_affine=False)):
    # the module normalizes that size only, so the runner keeps it (size_rules), as a weight's shape would
    size = int(number(shape.elts[0])) if isinstance(shape, (ast.Tuple, ast.List)) and shape.elts \
        and is_int_literal(shape.elts[0]) and weight is None else None
    return call(fname, conv[0], *(a for a in (weight, bias) if a is not None), eps=eps, has_weight=weight is not None,
                has_bias=bias is not None, **({"size": size} if size else {}))


def size_rules(node: Node, cases: list[dict[str, list[int]]]) -> tuple[set[int], int]:
    """The size a normalized shape written as a number names stays that size in every case."""
    return ({node.attr("size")} if node.attr("size") else set()), 1


def _normalized_dims(shape: ast.expr | None) -> int:
    """How many trailing dims a normalized_shape names: a tuple or list's length, x.shape[-k:]'s k (1 otherwise)."""
    if isinstance(shape, (ast.Tuple, ast.List)) and shape.elts:
        return len(shape.elts)
    index = shape.slice if isinstance(shape, ast.Subscript) else None
    if isinstance(index, ast.Slice) and index.upper is None and index.step is None and index.lower is not None \
            and is_int_literal(index.lower) and number(index.lower) < 0:
        return -int(number(index.lower))
    return 1


def _layer_norm_nd(c: Call, args: list, dims: int) -> Node:
    """F.layer_norm(x, (D1, D2, ...), weight, bias, eps): layer norm over the last dims."""
    slots = args[1:] + [None] * (3 - len(args[1:]))
    weight, bias = (c.kw.pop(k, slots[i]) for i, k in enumerate(("weight", "bias")))
    eps = c.kw.pop("eps", slots[2])
    return channel_norm.layer_norm_nd(c.expr(args[0]), dims, None if is_none(weight) else c.expr(weight),
                                      None if is_none(bias) else c.expr(bias),
                                      number(eps) if not is_none(eps) else DEFAULT_EPS["layernorm"])


def _last_dim_only(fname: str, shape: ast.expr) -> None:
    """A norm's normalized_shape must name the last dim alone: (N,), [N], x.shape[-1:], x.shape[-1]."""
    one = isinstance(shape, (ast.Tuple, ast.List)) and len(shape.elts) <= 1
    index = shape.slice if isinstance(shape, ast.Subscript) else None
    last = isinstance(index, ast.Slice) and index.upper is None and index.step is None and \
        index.lower is not None and is_int_literal(index.lower) and number(index.lower) == -1
    last = last or (index is not None and is_int_literal(index) and number(index) == -1)
    if not (one or last):
        raise IRError(f"{fname} over normalized_shape {ast.unparse(shape)!r} is not supported: the offline generator "
                      "normalizes over the last dim only, e.g. x.shape[-1:]")


@prints(*OPS)
def _print(node: Node, text) -> str:
    args = [text(a) for a in node.args]
    if node.attr("has_bias") and not node.attr("has_weight"):
        args.insert(1, "None")            # keep the bias in the bias slot
    size = f", normalized_shape=({node.attr('size')},)" if node.attr("size") else ""
    return f"{node.op}({', '.join(args)}{size}, eps={node.attr('eps')!r})"


def check(node: Node) -> None:
    """The weight and bias are inputs."""
    for extra in node.args[1:]:
        if extra.op != "input":
            raise IRError(f"{node.op} weight and bias must be inputs, got {to_text(extra)!r}")


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    x = broadcast_shapes([shapes[n] for n in input_names(node.args[0])])
    for extra in node.args[1:]:
        if list(shapes[extra.name]) != [x[-1]]:
            raise IRError(f"{node.op} {extra.name} must have shape [{x[-1]}] (the last dim), got {shapes[extra.name]}")
    return x


# ---------------------------------------------------------------- words

def extras_in_words(op: str, prose: str, notes: list[str]) -> list[str]:
    """Weight and bias of a norm named in words; both (layernorm) or a weight (rmsnorm) unless told.
    Defaults taken are noted."""
    no_w, no_b = bool(NO_WEIGHT.search(prose)), bool(NO_BIAS.search(prose))
    said_w, said_b = bool(WEIGHT_WORD.search(prose)), bool(BIAS_WORD.search(prose))
    if op == "rmsnorm":
        if said_b and not no_b:
            raise GenerationError("rmsnorm has no bias: rmsnorm(x, weight) scales by a weight only. Drop the bias, or "
                                  "write the expression, e.g. 'rmsnorm(x, weight) + bias'.")
        if not (said_w or no_w):
            notes.append("no weight named for rmsnorm: using one of shape [N] (like torch.nn.RMSNorm)")
        return [] if no_w else ["weight"]
    if not (said_w or said_b or no_w or no_b):
        notes.append("no weight or bias named for layernorm: using both, shape [N] (like torch.nn.LayerNorm)")
        return ["weight", "bias"]
    weight, bias = not no_w, said_b and not no_b
    if bias and not weight:
        raise GenerationError("layernorm with a bias but no weight cannot be written in the operator language; "
                              "use 'layernorm with weight and bias' or 'layernorm without weight or bias'")
    return [n for n, on in (("weight", weight), ("bias", bias)) if on]


def eps_given(tree: ast.AST) -> bool:
    """Whether a norm call spells its eps (else the norm's usual default applies and is noted)."""
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        fname = (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")).lower()
        if fname not in ("layernorm", "layer_norm", "rmsnorm", "rms_norm"):
            continue
        args = n.args
        if len(args) > 1 and isinstance(args[1], (ast.Tuple, ast.List, ast.Subscript, ast.Attribute)):
            args = [args[0], *args[2:]]                      # F.layer_norm(x, shape, ...)
        if any(k.arg == "eps" for k in n.keywords) or len(args) > (3 if fname.startswith("layer") else 2):
            return True
    return False


# ---------------------------------------------------------------- reference and kernel

def torch_result(node: Node, names: dict[str, str], body: str, lines: list[str]) -> str:
    if not body.isidentifier():
        lines.append(f"h = {body}")
        body = "h"
    extras = iter(names[a.name] for a in node.args[1:])
    weight = next(extras) if node.attr("has_weight") else None
    eps = fmt_const(node.attr("eps"))
    if node.op == "rmsnorm":
        return f"torch.nn.functional.rms_norm({body}, {body}.shape[-1:], weight={weight}, eps={eps})"
    bias = next(extras) if node.attr("has_bias") else None
    return f"torch.nn.functional.layer_norm({body}, {body}.shape[-1:], weight={weight}, bias={bias}, eps={eps})"


def kernel_source(spec: dict, node: Node, options: dict) -> str:
    return RowKernel.render(spec, node, options, row_plan, pointwise.triton_body)


def row_plan(node: Node, weight: str | None, bias: str | None) -> RowPlan:
    eps = fmt_const(node.attr("eps"))
    affine = (f" * {weight}" if weight else "") + (f" + {bias}" if bias else "")
    if node.op == "rmsnorm":
        return RowPlan("0.0", [f"rstd = tl.rsqrt(tl.sum(val * val, axis=1) / N + {eps})"],
                       ["acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)"], ["acc += val * val"],
                       [f"rstd = tl.rsqrt(tl.sum(acc, axis=1) / N + {eps})"], f"val * rstd[:, None]{affine}")
    return RowPlan("0.0",
                   ["mean = tl.sum(val, axis=1) / N",
                    "dev = tl.where(mask, val - mean[:, None], 0.0)",
                    f"rstd = tl.rsqrt(tl.sum(dev * dev, axis=1) / N + {eps})"],
                   ["mean = tl.zeros([BLOCK_M], tl.float32)", "m2 = tl.zeros([BLOCK_M], tl.float32)",
                    "count = tl.zeros([BLOCK_M], tl.float32)"],
                   ["# Chan et al.: merge the chunk's mean and squared deviations into the running ones",
                    "n_chunk = tl.sum(mask.to(tl.float32), axis=1)",
                    "chunk_mean = tl.sum(val, axis=1) / n_chunk",
                    "dev = tl.where(mask, val - chunk_mean[:, None], 0.0)",
                    "delta = chunk_mean - mean",
                    "total = count + n_chunk",
                    "mean += delta * (n_chunk / total)",
                    "m2 += tl.sum(dev * dev, axis=1) + delta * delta * (count * n_chunk / total)",
                    "count = total"],
                   [f"rstd = tl.rsqrt(m2 / N + {eps})"], f"(val - mean[:, None]) * rstd[:, None]{affine}",
                   # 4 warps on whole rows past 4096: the best of the space on rows of 6007 and 8192
                   wide_warps=4)


def reference_property(node: Node) -> tuple[str, bool]:
    """The generated reference test's check_property body (without weights: each row's mean 0 and
    variance, or mean square, v / (v + eps)), and whether it calls body()."""
    op = node.op
    if node.args[1:]:
        return "", False
    eps = repr(float(node.attr("eps")))
    if op == "layernorm":
        stat, spread, what = "out.var(-1, correction=0)", "h.var(-1, correction=0)", "variance"
        lead = '''    check_close(out.mean(-1), torch.zeros(out.shape[:-1], dtype=out.dtype, device=out.device), dtype,
                out.shape[-1], RTOL[dtype] * out.abs().mean(-1), "layernorm row means vs 0")
'''
        doc = ("layernorm without weight or bias: every row has mean 0 and variance v / (v + eps),\n"
               "    v the variance of the values normalised (so 1, less eps's share).")
    else:
        stat, spread, what, lead = "out.pow(2).mean(-1)", "h.pow(2).mean(-1)", "mean square", ""
        doc = ("rmsnorm without weight: every row has mean square m / (m + eps), m the mean square\n"
               "    of the values normalised (so 1, less eps's share).")
    return f'''    """{doc}"""
    out = got.double()
    h = body(*inputs64)
{lead}    spread = {spread}
    check_close({stat}, spread / (spread + {eps}), dtype, out.shape[-1],
                2 * RTOL[dtype] * out.pow(2).mean(-1), "{op} row {what}s")
''', True


ENTRIES = (
    Entry("layernorm", "layernorm with weight and bias on {shapes}, each in {dtypes}",
          "layernorm(x, weight, bias, eps=1e-05)", small=SMALL_LONG_ODD),
    Entry("rmsnorm", "rmsnorm with weight on {shapes}, each in {dtypes}", "rmsnorm(x, weight, eps=1e-06)",
          small=SMALL_LONG_ODD),
    Entry("add_rmsnorm", "fused add + rmsnorm with weight on {shapes}, each in {dtypes}",
          "rmsnorm(x + residual, weight, eps=1e-06)", small=SMALL_LONG_ODD),
)
