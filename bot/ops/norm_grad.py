"""Training (issue 26): the fused backward of a layernorm or rmsnorm of an input over its last dim,
with its weight and bias, as one pass over x and the upstream gradient (bot/ops/norm_grad_kernels.py)
that returns every gradient at once. bot.training takes it instead of one kernel per gradient (which
reads x and the upstream once for dx and again for dw) wherever the operator is such a norm of inputs
alone; anything else around the norm keeps the gradient expressions.
"""
from __future__ import annotations

import inspect
from pathlib import Path

from bot.codegen import fixed
from bot.codegen.code import launch
from bot.codegen.expr import fmt_const
from bot.codegen.kernel_file import _cdiv
from bot.codegen.row_kernel import sm_count_line
from bot.ops.node import Node

KERNELS = Path(__file__).with_name("norm_grad_kernels.py")
MAX_N = 32768       # a row lives in registers whole: 16 warps hold 32K elements at 64 a thread


def fused_backward(spec: dict, node: Node, cases: list[dict[str, list[int]]], name: str,
                   upstream: str) -> tuple[str, list[str]] | None:
    """For a training kernel: (a kernel.py part defining name(x[, w][, b], upstream) -> the tuple
    (dx[, dw][, db]), its tensor arguments) where node is layernorm/rmsnorm of distinct inputs with
    rows of at most MAX_N; else None."""
    names = [a.name for a in node.args]
    if node.op not in ("layernorm", "rmsnorm") or any(a.op != "input" for a in node.args) or \
            len(set(names)) < len(names) or not all(0 < c[names[0]][-1] <= MAX_N for c in cases):
        return None
    return kernel_source(node, name), [*names, upstream]


def kernel_source(node: Node, name: str) -> str:
    """The part fused_backward gives."""
    # Parameters of the launcher's own naming: an input's name (N, R, ...) cannot clash with its locals.
    has_w, has_b = bool(node.attr("has_weight")), bool(node.attr("has_bias"))
    x, upstream = "x", "up"
    w, b = "w" if has_w else None, "b" if has_b else None
    extras = [t for t in (w, b) if t]
    lines = [f"def {name}({', '.join([x, *extras, upstream])}):",
             "    # The kernels index contiguous memory; inputs may arrive as views.",
             *[f"    {t} = {t}.contiguous()" for t in (x, *extras, upstream)],
             f"    N = {x}.shape[-1]",
             f"    if N > {MAX_N}:",
             f'        raise ValueError(f"rows of {{N}}: this fused backward holds a row of at most {MAX_N} in registers; "',
             '                         "regenerate the kernel for these shapes")',
             f"    d_{x} = torch.empty_like({x})",
             f"    if {x}.numel() == 0:      # no rows: the weight's and bias's gradients are sums of nothing",
             f"        return {', '.join([f'd_{x}', *(f'torch.zeros_like({t})' for t in extras)])}{',' * (not extras)}",
             f"    R = {x}.numel() // N",
             "    BLOCK_M, BLOCK_N, num_warps, per_sm = _norm_grad_tile(N)",
             sm_count_line("sms", x).rstrip("\n"),
             "    # per_sm programs an SM, each walking its share of the rows",
             "    rows_per_program = _cdiv(_cdiv(R, min(per_sm * sms, _cdiv(R, BLOCK_M))), BLOCK_M) * BLOCK_M",
             "    programs = _cdiv(R, rows_per_program)",
             *[f"    {t}_part = torch.empty((programs, N), dtype=torch.float32, device={x}.device)" for t in extras]]
    args = [x, w or x, upstream, f"d_{x}", f"{w}_part" if w else f"d_{x}", f"{b}_part" if b else f"d_{x}", "R", "N",
            "rows_per_program", fmt_const(node.attr("eps")), f"CENTRED={node.op == 'layernorm'}", f"HAS_W={has_w}",
            f"HAS_B={has_b}", "BLOCK_M=BLOCK_M", "BLOCK_N=BLOCK_N", "num_warps=num_warps"]
    text = "\n".join(lines) + "\n" + launch("_norm_grad", "(programs,)", args, "    ") + "\n"
    for t in extras:
        text += (f"    d_{t} = torch.empty(N, dtype={t}.dtype, device={x}.device)\n"
                 + launch("_column_sums", "(_cdiv(N, 128),)", [f"{t}_part", f"d_{t}", "programs", "N", "BLOCK_P=16",
                                                               "BLOCK_N=128", "num_warps=4"], "    ") + "\n")
    text += f"    return {', '.join(f'd_{t}' for t in (x, *extras))}{',' * (not extras)}\n"
    helpers = "".join(s + "\n\n" for s in fixed.sources(KERNELS, {"_norm_grad", "_column_sums", "_norm_grad_tile"}))
    return ("import torch\nimport triton\nimport triton.language as tl\n\n\n" + helpers +
            inspect.getsource(_cdiv) + "\n\n" + text)
