"""The channel-norm family: norms whose statistics span more than one dim, as torch.nn.functional
computes them over a pointwise body: batch_norm (training mode: each channel's mean and variance
over the batch and spatial dims; eval mode: the running statistics given), group_norm (each
sample's groups of channels), instance_norm (each sample's channels), and layer norm over several
trailing dims; each with optional per-channel (or per-element) weight and bias.

The input is viewed as [P, R, Q]: the statistics of row r cover its P x Q elements (batch norm: P
the batch, R the channels, Q the spatial size; group and instance norm and layer norm: P = 1, R
the rows of contiguous elements). Where the rows fill the GPU's SMs, one kernel (FUSED): a program
a row computes its statistics, then reads the row again (mostly from L2) to write it normalised,
scaled and shifted. On fewer rows, two kernels, as the dependency allows no fewer without leaving
SMs idle: the first computes partial statistics of each row's chunks (mean and squared deviations,
merged by Chan et al.'s formula), the second merges a row's partials (the same formula over all of
them at once) and writes its chunk. Eval-mode batch norm needs only the second.

Owns its IR rule (the functions and their arguments as torch reads them), shape checks, the torch
call, both kernels with their config space and default rule, and what the runner may not change
(the channels a weight is sized by, the normalized dims).
"""
from __future__ import annotations

import ast
import math
import re

from bot.codegen.code import indented, jit_source, launch
from bot.codegen.expr import fmt_const
from bot.codegen.kernel_file import KernelFile
from bot.codegen.row_kernel import sm_count_line
from bot.ops import pointwise
from bot.ops.entry import Entry
from bot.ops.node import Call, IRError, Node, arguments, broadcast_shapes, call, input_names, is_none, number, prints
from bot.ops.text import FLAGS as _F, blank as _blank, taken

NAME = "channel_norm"
OPS = {"batch_norm", "group_norm", "instance_norm", "layer_norm_nd"}
ROOT = True
MAX_RANK = 5
MAX_NUMEL = 2**34                   # the kernels index with int64
SUPPORTED = ("", "batch_norm (training or eval), group_norm, instance_norm, layer_norm over several trailing dims")
ALIASES: dict[str, str] = {}
_ORDER = {"batch_norm": ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"),
          "group_norm": ("input", "num_groups", "weight", "bias", "eps"),
          "instance_norm": ("input", "running_mean", "running_var", "weight", "bias", "use_input_stats", "momentum",
                            "eps")}
KEYWORDS = {**{fn: set(order[1:]) for fn, order in _ORDER.items()}, "layer_norm_nd": {"weight", "bias", "dims", "eps"}}
OUTPUT_DTYPES: dict[str, str] = {}
WORDS: list = []
DEFAULT_EPS = 1e-5

# The space the benchmark sweeps: elements a tile and warps (both kernels), and whether one program
# computes a row's statistics and normalises it (FUSED 1: in BLOCK tiles, reading the row twice; 2:
# the whole row in one tile, read once, where it holds at most ONE_TILE elements) or several share
# each row in two kernels (0).
ONE_TILE = 16384
CONFIGS = [{"BLOCK": b, "num_warps": w, "FUSED": f} for f in (0, 1)
           for b, w in [(2048, 8), (1024, 4), (4096, 8), (512, 4), (256, 2)]] + \
    [{"BLOCK": 4096, "num_warps": w, "FUSED": 2} for w in (4, 8, 16, 32)]


# ---------------------------------------------------------------- words

# "batch norm", "group norm with 32 groups", "instance norm 2d", "批归一化", "(分)组归一化", "实例归一化"
CHANNEL_NORM_WORD = re.compile(r"\b(batch|group|instance)[\s_-]?norm(?:ali[sz]ation)?(?:[\s_-]*[123][\s_-]?d)?\b|"
                               r"(批|分?组|实例)(?:归一化|标准化)", _F)
_GROUPS = re.compile(r"\b(\d+)\s+groups\b|\bgroups?\s*(?:of|=|:|is)?\s*(\d+)\b|(\d+)\s*(?:个)?组(?!归一化|标准化)|"
                     r"分组(?:数)?\s*(?:为|是|=|:)?\s*(\d+)", _F)
_EVAL = re.compile(r"\b(?:inference|eval(?:uation)?(?:[\s_-]mode)?|running[\s_-](?:stats|statistics|mean))\b|推理|推断", _F)
_TRAINING = re.compile(r"\btraining(?:[\s_-]mode)?\b|\bbatch[\s_-]stat(?:s|istics)\b|(?:用于)?训练(?:模式)?", _F)
_AFFINE = re.compile(r"\bwith\s+(?:an?\s+)?affine\b|\baffine\b|带仿射", _F)
_NO_AFFINE = re.compile(r"\b(?:no|without)\s+(?:an?\s+)?affine\b|\baffine\s*=\s*false\b|无仿射|不带仿射", _F)


def norm_words(text: str, shapes: list[tuple[str | None, list[int]]],
               eps: float | None) -> tuple[str, str, list[str], list]:
    """(expression, text without the words read, notes, the per-channel tensors' shapes as (name,
    shape) per case) for 'group norm with 8 groups on 8x64x32x32', 'batch norm for inference'."""
    m = CHANNEL_NORM_WORD.search(text)
    kind = (m.group(1) or {"批": "batch", "组": "group", "分组": "group", "实例": "instance"}[m.group(2)]).lower()
    inputs = [s for label, s in shapes if label not in _PER_CHANNEL]
    if not inputs or any(len(s) < 2 for s in inputs) or len({s[1] for s in inputs}) > 1:
        raise IRError(f"{kind} norm in words needs the input's shape, batch x channels x ..., one channel count for "
                      "every case, e.g. 'group norm with 8 groups on 8x64x32x32'")
    notes = []
    affine = kind != "instance"         # torch's modules' defaults: BatchNorm/GroupNorm affine, InstanceNorm not
    if _NO_AFFINE.search(text):
        affine = False
    elif _AFFINE.search(text):
        affine = True
    else:
        notes.append(f"no affine named: {kind} norm {'with' if affine else 'without'} weight and bias, as "
                     f"nn.{kind.capitalize()}Norm's default")
    tensors = ["weight", "bias"] if affine else []
    eps_text = f"eps={DEFAULT_EPS if eps is None else eps!r}"
    if kind == "group":
        groups, text = taken(_GROUPS, text)
        if groups is None:
            raise IRError("group norm needs its number of groups: say e.g. 'group norm with 8 groups'")
        body = f"group_norm(x, {groups[0]}, {', '.join(tensors + [eps_text])})"
    elif kind == "batch":
        inference = bool(_EVAL.search(text)) and not _TRAINING.search(text)
        if not _EVAL.search(text) and not _TRAINING.search(text):
            notes.append("no mode named: batch norm in training mode (each channel's batch statistics); say "
                         "'for inference' to normalise by running statistics")
        stats = ["running_mean", "running_var"] if inference else ["None", "None"]
        tensors = (["running_mean", "running_var"] if inference else []) + tensors
        body = (f"batch_norm(x, {', '.join(stats + (tensors[-2:] if affine else ['None', 'None']))}, "
                f"training={not inference}, {eps_text})")
    else:
        body = f"instance_norm(x, None, None, {', '.join((tensors or ['None', 'None']) + [eps_text])})"
    for pattern in (CHANNEL_NORM_WORD, _EVAL, _TRAINING, _NO_AFFINE, _AFFINE):
        text = pattern.sub(_blank, text)
    channels = inputs[0][1]
    return body, text, notes, [(t, [channels]) for t in tensors for _ in inputs]


_PER_CHANNEL = ("weight", "bias", "running_mean", "running_var")


def domains(node: Node, mark) -> None:
    """An eval batch norm's running variance is drawn positive, as a variance is."""
    if node.op == "batch_norm" and not node.attr("training"):
        mark(node.args[2], "positive")


# ---------------------------------------------------------------- IR rule

def convert(c: Call) -> Node | None:
    if c.fname == "layer_norm_nd":             # as its text prints: layer_norm_nd(x, weight, bias, dims=2, eps=...)
        given = dict(zip(("input", "weight", "bias"), c.args)) | c.kw
        dims = given.get("dims")
        if not (isinstance(dims, ast.Constant) and isinstance(dims.value, int) and dims.value >= 1):
            raise IRError("layer_norm_nd takes dims=<the number of trailing dims>, e.g. dims=2")
        tensors = [None if is_none(given.get(k)) else c.expr(given[k]) for k in ("weight", "bias")]
        eps = number(given["eps"]) if not is_none(given.get("eps")) else DEFAULT_EPS
        c.kw.clear()
        return layer_norm_nd(c.expr(given["input"]), dims.value, *tensors, eps)
    if c.fname not in _ORDER:
        return None
    given = arguments(c, _ORDER[c.fname])
    if "input" not in given:
        raise IRError(f"{c.fname} needs an input")
    eps = number(given["eps"]) if not is_none(given.get("eps")) else DEFAULT_EPS
    tensors = {k: None if is_none(given.get(k)) else c.expr(given[k]) for k in ("running_mean", "running_var",
                                                                                 "weight", "bias")}
    attrs = {"eps": eps, "has_weight": tensors["weight"] is not None, "has_bias": tensors["bias"] is not None}
    if c.fname == "group_norm":
        groups = given.get("num_groups")
        if groups is None or not (isinstance(groups, ast.Constant) and isinstance(groups.value, int)) or groups.value < 1:
            raise IRError(f"group_norm takes num_groups as a positive integer, got "
                          f"{ast.unparse(groups) if groups is not None else 'nothing'}")
        attrs["groups"] = groups.value
    stats = []
    if c.fname == "batch_norm":
        training = _flag(given.get("training"), False)
        attrs["training"] = training
        if not training:
            if tensors["running_mean"] is None or tensors["running_var"] is None:
                raise IRError("batch_norm in eval mode (training=False) normalises by running_mean and running_var; "
                              "give both, or training=True")
            stats = [tensors["running_mean"], tensors["running_var"]]
    if c.fname == "instance_norm" and not _flag(given.get("use_input_stats"), True):
        raise IRError("instance_norm with use_input_stats=False (running statistics) is not supported; the offline "
                      "kernel normalises each instance by its own statistics")
    extras = [t for t in (tensors["weight"], tensors["bias"]) if t is not None]
    return call(c.fname, c.expr(given["input"]), *stats, *extras, **attrs)


def layer_norm_nd(x: Node, dims: int, weight: Node | None, bias: Node | None, eps: float) -> Node:
    """layer norm over the last `dims` dims (bot.ops.norm reads F.layer_norm; one dim stays its)."""
    return call("layer_norm_nd", x, *(t for t in (weight, bias) if t is not None), eps=eps, dims=dims,
                has_weight=weight is not None, has_bias=bias is not None)


def _flag(value, default: bool) -> bool:
    if is_none(value):
        return default
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        return value.value
    raise IRError(f"expected True or False, got {ast.unparse(value)!r}")


def parameter_shapes(node: Node, shape: list[int]) -> dict[str, list[int]]:
    """The shape of each input a channel norm reads as a parameter, for its input's shape: a batch,
    group or instance norm's running statistics, weight and bias are [C], a layer norm's weight and
    bias its normalized dims; none for other ops."""
    if node.op not in OPS or len(shape) < 2:
        return {}
    own = shape[-node.attr("dims"):] if node.op == "layer_norm_nd" else [shape[1]]
    return {a.name: list(own) for a in roles(node).values() if a.op == "input"}


def roles(node: Node) -> dict[str, Node]:
    """The node's tensor arguments by role: running_mean, running_var (eval batch norm), weight, bias."""
    roles = (["running_mean", "running_var"] if node.op == "batch_norm" and not node.attr("training") else [])
    roles += ["weight"] * bool(node.attr("has_weight")) + ["bias"] * bool(node.attr("has_bias"))
    return dict(zip(roles, node.args[1:]))


def _eval_batch_norm(node: Node, x: str, t: dict[str, str], lines: list[str]) -> str:
    """Eval-mode batch norm: F.batch_norm(training=False) where no running statistic needs a gradient
    (the eager baseline as a person writes it), else its formula written out (F.batch_norm refuses
    the running statistics a gradient, which a training kernel's check needs), computed in float32
    at least as F.batch_norm does, so both give the same values."""
    eps = fmt_const(node.attr("eps"))
    stats = [t[k] for k in ("running_mean", "running_var")]
    # the normalized value, a name of its own (what the expression does with it follows)
    out = f"_batch_normed_{len(lines)}"
    per_channel = {k: f"{v}.to(wide).view(per_channel)" for k, v in t.items()}
    result = f"({x}.to(wide) - {per_channel['running_mean']}) * torch.rsqrt({per_channel['running_var']} + {eps})"
    if "weight" in t:
        result += f" * {per_channel['weight']}"
    if "bias" in t:
        result += f" + {per_channel['bias']}"
    lines += [f"if not ({stats[0]}.requires_grad or {stats[1]}.requires_grad):",
              f"    {out} = torch.nn.functional.batch_norm({x}, {stats[0]}, {stats[1]}, {t.get('weight', 'None')}, "
              f"{t.get('bias', 'None')}, training=False, eps={eps})",
              "else:",
              f"    wide = torch.promote_types({x}.dtype, torch.float32)",
              f"    per_channel = [-1] + [1] * ({x}.dim() - 2)     # a [C] tensor against [N, C, ...]",
              f"    {out} = ({result}).to({x}.dtype)"]
    return out


def _call(node: Node, x: str, t: dict[str, str]) -> str:
    """group_norm, instance_norm or batch_norm of x, as torch.nn.functional takes it (t: the tensors' texts)."""
    w, b, eps = t.get("weight", "None"), t.get("bias", "None"), f"eps={fmt_const(node.attr('eps'))}"
    if node.op == "group_norm":
        return f"group_norm({x}, {node.attr('groups')}, {w}, {b}, {eps})"
    if node.op == "instance_norm":
        return f"instance_norm({x}, weight={w}, bias={b}, {eps})"
    return (f"batch_norm({x}, {t.get('running_mean', 'None')}, {t.get('running_var', 'None')}, {w}, {b}, "
            f"training={node.attr('training')}, {eps})")


@prints(*OPS)
def _print(node: Node, text) -> str:
    """As torch.nn.functional's call, but layer norm's: layer_norm_nd(x, w, b, dims=k, eps=...)."""
    t = {k: text(v) for k, v in roles(node).items()}
    x = text(node.args[0])
    if node.op == "layer_norm_nd":
        tensors = ", ".join([x, t.get("weight", "None"), t.get("bias", "None")])
        return f"layer_norm_nd({tensors}, dims={node.attr('dims')}, eps={fmt_const(node.attr('eps'))})"
    return _call(node, x, t)


def check(node: Node) -> None:
    for extra in node.args[1:]:
        if extra.op != "input":
            raise IRError(f"{node.op}'s statistics, weight and bias must be inputs")


def _view(node: Node, shape: list[int]) -> tuple[int, int, int, int]:
    """(P, R, Q, channels): the [P, R, Q] view of the body's shape and the per-row tensors' length."""
    if node.op == "layer_norm_nd":
        k = node.attr("dims")
        if len(shape) < k:
            raise IRError(f"layer norm over the last {k} dims of a {len(shape)}-d input")
        q = math.prod(shape[-k:])
        return 1, math.prod(shape) // q, q, q
    if len(shape) < 2:
        raise IRError(f"{node.op} takes x [N, C, ...] with a channel dim, got {shape}")
    n, c, s = shape[0], shape[1], math.prod(shape[2:])
    if node.op == "batch_norm":
        return n, c, s, c
    if node.op == "instance_norm":
        return 1, n * c, s, c
    groups = node.attr("groups")
    if c % groups:
        raise IRError(f"group_norm: {groups} groups do not divide the {c} channels")
    return 1, n * groups, c // groups * s, c


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    full = broadcast_shapes([shapes[n] for n in input_names(node.args[0])])
    _, _, _, length = _view(node, full)
    if node.op == "batch_norm" and node.attr("training") and full[0] * math.prod(full[2:]) < 2:
        raise IRError("batch_norm in training mode needs more than one value per channel (torch refuses one)")
    want = list(full[-node.attr("dims"):]) if node.op == "layer_norm_nd" else [length]
    for role, extra in roles(node).items():
        if list(shapes[extra.name]) != want:
            raise IRError(f"{node.op}'s {role} {extra.name} must have shape {want}, got {shapes[extra.name]}")
    return full


def size_rules(node: Node, cases: list[dict[str, list[int]]]) -> tuple[set[int], int]:
    """The channels (and a layer norm's normalized dims) stay: weights and groups are sized by them."""
    x = input_names(node.args[0])[0]
    if node.op == "layer_norm_nd":
        return {d for case in cases for d in case[x][-node.attr("dims"):]}, 1
    return {case[x][1] for case in cases}, 1


def torch_result(node: Node, names: dict[str, str], body: str, lines: list[str]) -> str:
    t = {k: names[v.name] for k, v in roles(node).items()}
    eval_norm = node.op == "batch_norm" and not node.attr("training")
    if node.op != "layer_norm_nd" and not eval_norm:
        return "torch.nn.functional." + _call(node, body, t)
    if not body.isidentifier():
        lines.append(f"h = {body}")
        body = "h"
    if eval_norm:
        return _eval_batch_norm(node, body, t, lines)
    return (f"torch.nn.functional.layer_norm({body}, {body}.shape[-{node.attr('dims')}:], {t.get('weight', 'None')}, "
            f"{t.get('bias', 'None')}, eps={fmt_const(node.attr('eps'))})")


def reduced_dims(node: Node, rank: int) -> list[int]:
    """The dims each statistic spans, for the tolerance (a group's share of the channels counted whole)."""
    if node.op == "layer_norm_nd":
        return list(range(rank - node.attr("dims"), rank))
    if node.op == "batch_norm":
        return [0, *range(2, rank)] if node.attr("training") else []
    return list(range(1 if node.op == "group_norm" else 2, rank))


def reference_property(node: Node) -> tuple[str, bool]:
    return "", False


def over_text(node: Node) -> str:
    return ""


# ---------------------------------------------------------------- launcher helpers (copied into kernel.py)

def _norm_view(op, shape, groups, dims):
    # (P, R, Q, WR, WM, WQ): x as [P, R, Q], each row r's statistics over its P x Q elements; and
    # the weight index of element (r, q), (r % WR) * WM + q // WQ: the channel, or q itself.
    n, c = shape[0], shape[1] if len(shape) > 1 else 1
    s = math.prod(shape[2:])
    if op == "layer_norm_nd":
        q = math.prod(shape[len(shape) - dims:])
        return 1, math.prod(shape) // q, q, 1, 0, 1
    if op == "batch_norm":
        return n, c, s, c, 1, n * c * s + 1
    if op == "instance_norm":
        return 1, n * c, s, c, 1, s + 1
    return 1, n * groups, c // groups * s, groups, c // groups, s


def _apply_view(op, shape, groups, view, block, fused):
    # (R, Q, RG, WR, WM, WQ, PER_ROW) of the normalising pass: its rows of P x Q elements, row r's
    # statistics those of row r // RG of the statistics' view, the weight index as _norm_view's, and
    # whether a row has one weight. Two-kernel group norm over channels of a quarter tile or more
    # runs over a sample's channels as rows (RG of them share a group's statistics): one weight and
    # bias a row, no division an element to find its channel; smaller channels, and a fused kernel
    # (which computes its row's statistics itself), keep the group's rows.
    P, R, Q, WR, WM, WQ = view
    if op == "group_norm" and not fused and math.prod(shape[2:]) * 4 >= block:
        c = shape[1]
        return shape[0] * c, math.prod(shape[2:]), c // groups, c, 1, Q + 1, True
    return R, Q, 1, WR, WM, WQ, op not in ("layer_norm_nd", "group_norm")


def _norm_split(rows, per_row, block, sms):
    # How many programs share one row's statistics: enough that about four waves of programs run
    # on the GPU's SMs, none taking less than one tile.
    return max(1, min(-(-4 * sms // rows), -(-per_row // block)))


def _norm_config(numel, rows, sms):
    # The default: fused (a program a row) where the rows alone fill the GPU's SMs: the row in one
    # tile (read once) where it fits one, on 4 warps up to 8K elements (512 group-norm rows of 6272
    # on an H100: 4 warps the space's best, 8 warps 11% slower) and 16 past that; longer rows in
    # 4096-element tiles on 8 warps (read a second time, from L2). Else two kernels, in such tiles
    # on large inputs and 1024 on 4 warps on small ones (the space's best on group norms of 56 to
    # 512 rows of 7K to 100K elements).
    if rows >= sms:
        per_row = -(-numel // rows)
        if per_row <= 16384:
            return {"BLOCK": 4096, "num_warps": 4 if per_row <= 8192 else 16, "FUSED": 2}
        return {"BLOCK": 4096, "num_warps": 8, "FUSED": 1}
    if numel >= 1 << 22:
        return {"BLOCK": 4096, "num_warps": 8, "FUSED": 0}
    return {"BLOCK": 1024, "num_warps": 4, "FUSED": 0}


# ---------------------------------------------------------------- kernel.py

def kernel_source(spec: dict, node: Node, options: dict | None = None) -> str:
    return _ChannelNormKernel.render(spec, node, options)


class _ChannelNormKernel(KernelFile):
    block_key = "BLOCK"
    description = ("x as [P, R, Q], row r's statistics over its P x Q elements. Kernel 1: each program's chunk\n"
                   "of a row, in tiles, gives its count, mean and squared deviations (Chan et al.'s merge).\n"
                   "Kernel 2: each program merges its row's partials at once, then writes its chunk\n"
                   "normalised, scaled and shifted. FUSED: kernel 2 alone, a program a row computing its\n"
                   "statistics as kernel 1 does. Eval-mode batch norm takes the running statistics.")

    def __init__(self, spec, node, inputs, options):
        if node.op not in OPS:
            raise ValueError(f"{node.op} is not a channel norm")
        self.node = node
        body_names = input_names(node.args[0])
        body_inputs = [i for i in inputs if i.name in body_names]
        super().__init__(spec, pointwise.triton_body(node.args[0], body_inputs), inputs, body_inputs, options)
        by_name = {i.name: i for i in inputs}
        self.tensors = {role: by_name[n.name] for role, n in roles(node).items()}
        full = broadcast_shapes([i.shapes[0] for i in body_inputs])
        for i in body_inputs:
            if list(i.shapes[0]) != list(full):
                raise IRError(f"{node.op} reads its body's inputs at the same positions: {i.name} {i.shapes[0]} must "
                              f"have the full shape {full}")
        self.first = body_inputs[0]
        self.training = not (node.op == "batch_norm" and not node.attr("training"))

    def source(self) -> str:
        kernels = [self._stats_kernel()] if self.training else []
        return self._file(kernels + [self._norm_kernel()], [_norm_view, _apply_view, _norm_split, _norm_config],
                          self._launcher())

    def configs(self) -> list[dict]:
        return self._space(CONFIGS)

    def _row_offsets(self) -> list[str]:
        # e: int32 unless a row's P x Q elements pass it (N's type); a division per element only
        # where the row is strided (batch norm's P samples)
        where = (["    p = e // Q", "    q = e - p * Q", "    at = (p.to(tl.int64) * R + r) * Q + q"]
                 if self.node.op == "batch_norm" else ["    q = e", "    at = r.to(tl.int64) * Q + e"])
        return ["    e = start + first + tl.arange(0, BLOCK)",
                "    mask = e < stop",
                *where,
                *(f"    {i.local} = tl.load({i.local}_ptr + at, mask=mask, other=0.0).to(tl.float32)"
                  for i in self.body_inputs),
                f"    val = {self.body_call()}"]

    def _chunk(self) -> list[str]:
        return ["r = tl.program_id(0)",
                "part = tl.program_id(1)",
                "CHUNK = tl.cdiv(tl.cdiv(N, SPLIT), BLOCK) * BLOCK",
                "start = part * CHUNK",
                "stop = tl.minimum(start + CHUNK, N)"]

    def _chunk_stats(self) -> list[str]:
        """count, mean and m2 (the squared deviations' sum) of the program's chunk of its row."""
        return ["count = tl.full([], 0.0, tl.float32)",
                "mean = tl.full([], 0.0, tl.float32)",
                "m2 = tl.full([], 0.0, tl.float32)",
                "for first in range(0, CHUNK, BLOCK):",
                *self._row_offsets(),
                "    # Chan et al.: the tile's own mean and squared deviations, merged into the running ones",
                "    n_tile = tl.sum(mask.to(tl.float32), axis=0)",
                "    tile_mean = tl.sum(tl.where(mask, val, 0.0), axis=0) / tl.maximum(n_tile, 1.0)",
                "    dev = tl.where(mask, val - tile_mean, 0.0)",
                "    delta = tile_mean - mean",
                "    total = count + n_tile",
                "    mean += delta * (n_tile / tl.maximum(total, 1.0))",
                "    m2 += tl.sum(dev * dev, axis=0) + delta * delta * (count * n_tile / tl.maximum(total, 1.0))",
                "    count = total"]

    def _stats_kernel(self) -> str:
        params = [*(f"{i.local}_ptr" for i in self.body_inputs), "stats_ptr", "N", "R", "Q", "SPLIT",
                  "BLOCK: tl.constexpr"]
        lines = [*self._chunk(), *self._chunk_stats(),
                 "at = (r * SPLIT + part) * 3",
                 "tl.store(stats_ptr + at, count)",
                 "tl.store(stats_ptr + at + 1, mean)",
                 "tl.store(stats_ptr + at + 2, m2)"]
        return jit_source(f"{self.name}_stats_kernel", params, lines)

    _MERGED_STATS = [
        "# The partials of the row's statistics (row r // RG of theirs) merged at once:",
        "# n = sum n_j, mean = sum n_j mean_j / n, m2 = sum m2_j + sum n_j (mean_j - mean)^2.",
        "j = tl.arange(0, SPLIT_P2)",
        "have = j < STATS_SPLIT",
        "at_j = ((r // RG) * STATS_SPLIT + j) * 3",
        "n_j = tl.load(stats_ptr + at_j, mask=have, other=0.0)",
        "mean_j = tl.load(stats_ptr + at_j + 1, mask=have, other=0.0)",
        "m2_j = tl.load(stats_ptr + at_j + 2, mask=have, other=0.0)",
        "n = tl.sum(n_j, axis=0)",
        "mean = tl.sum(n_j * mean_j, axis=0) / n",
        "var = (tl.sum(m2_j, axis=0) + tl.sum(n_j * (mean_j - mean) * (mean_j - mean), axis=0)) / n"]

    def _norm_kernel(self) -> str:
        t = self.tensors
        params = [*(f"{i.local}_ptr" for i in self.body_inputs), "stats_ptr",
                  *(f"{local}_ptr" for local in self._extras()),
                  "out_ptr", "N", "R", "Q", "SPLIT", "RG", "STATS_SPLIT", "WR", "WM", "WQ", "PER_ROW: tl.constexpr",
                  "SPLIT_P2: tl.constexpr", "FUSED: tl.constexpr", "BLOCK: tl.constexpr"]
        eps = fmt_const(self.node.attr("eps"))
        if self.training:
            stats = ["if FUSED:",
                     "    # one program a row (SPLIT is 1): its statistics, then the row again (mostly from L2)",
                     *indented(self._chunk_stats()),
                     "    var = m2 / count",
                     "else:",
                     *indented(self._MERGED_STATS)]
        else:
            stats = [f"mean = tl.load({t['running_mean'].local}_ptr + r).to(tl.float32)",
                     f"var = tl.load({t['running_var'].local}_ptr + r).to(tl.float32)"]
        rest = [*stats, *self._normalised(eps, loop=True)]
        if self.training:      # the whole row in one tile: its values stay in registers between the passes
            rest = ["if ONE_TILE:", "    first = 0", *self._row_offsets(),
                    *indented(self._tile_stats() + self._normalised(eps, loop=False)), "else:", *indented(rest)]
        return jit_source(f"{self.name}_kernel", params + ["ONE_TILE: tl.constexpr"], [*self._chunk(), *rest])

    @staticmethod
    def _tile_stats() -> list[str]:
        """mean and var of the row's one tile (val, mask)."""
        return ["count = tl.sum(mask.to(tl.float32), axis=0)",
                "mean = tl.sum(tl.where(mask, val, 0.0), axis=0) / count",
                "dev = tl.where(mask, val - mean, 0.0)",
                "var = tl.sum(dev * dev, axis=0) / count"]

    def _normalised(self, eps: str, loop: bool) -> list[str]:
        """The row written normalised, scaled and shifted: chunk by chunk (loop), or the tile in hand."""
        pad = "    " if loop else ""
        return [f"rstd = 1.0 / tl.sqrt(var + {eps})",
                *self._either("", self._affine(), []),
                *(["for first in range(0, CHUNK, BLOCK):", *self._row_offsets()] if loop else []),
                *self._either(pad, ["y = (val - mean) * scale + shift"],
                              ["y = (val - mean) * rstd", *self._affine_per_element()]),
                f"{pad}tl.store(out_ptr + at, y.to(out_ptr.dtype.element_ty), mask=mask)"]

    def _extras(self) -> list[str]:
        """The per-channel tensors' locals, each once (batch_norm(x, m, m, w, w) passes m and w once)."""
        t = self.tensors
        return list(dict.fromkeys(t[role].local for role in ("running_mean", "running_var", "weight", "bias") if role in t))

    def _either(self, pad: str, per_row: list[str], per_element: list[str]) -> list[str]:
        """Lines for rows of one weight, or of weights per element: group norm's choice is its
        launcher's (PER_ROW), batch and instance norm's always per row, layer norm's per element."""
        if self.node.op == "group_norm":
            return [f"{pad}if PER_ROW:", *(f"{pad}    {line}" for line in per_row),
                    *([f"{pad}else:", *(f"{pad}    {line}" for line in per_element)] if per_element else [])]
        return [pad + line for line in (per_element if self.node.op == "layer_norm_nd" else per_row)]

    def _affine(self) -> list[str]:
        """Per-row weights folded into one scale and shift before the loop."""
        t = self.tensors
        return ["scale = rstd" + (f" * tl.load({t['weight'].local}_ptr + r % WR).to(tl.float32)" if "weight" in t else ""),
                # (val - mean) * scale, not val * scale - mean * scale: a large mean cancels exactly
                "shift = " + (f"tl.load({t['bias'].local}_ptr + r % WR).to(tl.float32)" if "bias" in t else "0.0")]

    def _affine_per_element(self) -> list[str]:
        """Weights indexed by the element (layer norm) or its channel in the group (group norm)."""
        t = self.tensors
        if not ("weight" in t or "bias" in t):
            return []
        at = "q" if self.node.op == "layer_norm_nd" else "(r % WR) * WM + q // WQ"
        return [f"w_at = {at}",
                *([f"y = y * tl.load({t['weight'].local}_ptr + w_at, mask=mask, other=0.0).to(tl.float32)"]
                  if "weight" in t else []),
                *([f"y = y + tl.load({t['bias'].local}_ptr + w_at, mask=mask, other=0.0).to(tl.float32)"]
                  if "bias" in t else [])]

    def _launcher(self) -> str:
        node, x, first = self.node, self.first.local, self.inputs[0].local
        text = self._signature_and_prologue()
        text += (f"    out = torch.empty_like({x}, dtype={self.out_dtype(x)})\n"
                 "    if out.numel() == 0:\n        return out\n"
                 f'    view = _norm_view("{node.op}", list({x}.shape), {node.attr("groups") or 0}, {node.attr("dims") or 0})\n'
                 "    P, R, Q, WR, WM, WQ = view\n")
        text += sm_count_line("sms", first)
        text += self._config_line("_norm_config(out.numel(), R, sms)")
        body = [i.local for i in self.body_inputs]
        if self.training:
            text += ('    fused = bool(config.get("FUSED"))\n'
                     "    # The row in one tile, read once, where it fits one\n"
                     f'    one_tile = config.get("FUSED") == 2 and P * Q <= {ONE_TILE}\n'
                     '    block = triton.next_power_of_2(P * Q) if one_tile else config["BLOCK"]\n'
                     "    # Programs per row: one (fused), else enough to fill the GPU however few rows there are.\n"
                     '    split = 1 if fused else _norm_split(R, P * Q, config["BLOCK"], sms)\n'
                     f"    stats = {x}     # unread by a fused kernel\n"
                     "    if not fused:\n"
                     f"        stats = torch.empty((R, split, 3), dtype=torch.float32, device={first}.device)\n"
                     + launch(f"{self.name}_stats_kernel", "(R, split)",
                              body + ["stats", "P * Q", "R", "Q", "split", 'BLOCK=config["BLOCK"]',
                                      'num_warps=config["num_warps"]'], "        ") + "\n")
        else:
            text += (f"    fused, split, stats = False, 1, {x}     # the running statistics instead\n"
                     '    one_tile, block = False, config["BLOCK"]\n')
        extras = self._extras()
        text += (f'    R2, Q2, RG, WR2, WM2, WQ2, per_row = _apply_view("{node.op}", list({x}.shape), '
                 f'{node.attr("groups") or 0}, view, config["BLOCK"], fused)\n'
                 '    split2 = 1 if fused else _norm_split(R2, P * Q2, config["BLOCK"], sms)\n')
        args = body + ["stats", *extras, "out", "P * Q2", "R2", "Q2", "split2", "RG", "split", "WR2", "WM2", "WQ2",
                       "PER_ROW=per_row", "SPLIT_P2=triton.next_power_of_2(split)", "FUSED=fused",
                       'BLOCK=block', 'num_warps=config["num_warps"]', "ONE_TILE=one_tile"]
        text += launch(f"{self.name}_kernel", "(R2, split2)", args, "    ") + "\n"
        return text + "    return out\n"


# a CNN's feature map (batch, channels, height, width), and an odd size of the same channels
ENTRIES = (
    Entry("group_norm", "group norm with 8 groups on {shapes}, each in {dtypes}",
          "group_norm(x, 8, weight, bias, eps=1e-05)", big="32x64x56x56, 7x64x29x31", small="2x8x3x4, 1x8x5x3"),
)
