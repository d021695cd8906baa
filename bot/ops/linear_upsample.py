"""F.interpolate's linear modes ('linear', 'bilinear', 'trilinear') by whole scale factors, without
align_corners, written in the IR's own ops (nn.Upsample(scale_factor=2, mode='bilinear'): a U-Net's or
an FPN's upsampling).

Torch reads output index o of a dim from source position (o + 0.5) / s - 0.5, clamped at 0, between
the two inputs around it (the last input repeated past the end). For a whole factor s that position
is i + (r + 0.5) / s - 0.5 for o = s * i + r: output r of every group of s is the same mix of input i
with its neighbour before (r below the middle) or after. So each dim is s mixes of the input and its
neighbours shifted by one (a cat of the edge and a slice: the edge repeats, as torch's clamp does),
stacked next to the dim and joined into it. Several dims are done one after another, as bilinear
weights are products of one weight a dim.
"""
from __future__ import annotations

import ast
from typing import Callable

from bot.ops.node import IRError, Node, inp, substitute

_MODES = {"linear": 1, "bilinear": 2, "trilinear": 3}
_HERE = "upsampled_input"           # the placeholder the written ops read x through


def spatial_dims(mode: str) -> int | None:
    """How many trailing dims a linear mode interpolates; None for another mode."""
    return _MODES.get(mode)


def linear_upsampled(x: Node, factors: tuple[int, ...], expr: Callable[[ast.expr], Node]) -> Node:
    """x upsampled by a whole factor along each of its last len(factors) dims."""
    if any(f < 1 for f in factors):
        raise IRError(f"F.interpolate's scale_factor {factors}: whole factors of 1 or more are read")
    text = _HERE
    for k, s in enumerate(factors):
        if s > 1:
            text = _one_dim(text, k - len(factors), s)
    return substitute(expr(ast.parse(text, mode="eval").body), inp(_HERE), x)


def _one_dim(t: str, d: int, s: int) -> str:
    """t upsampled by s along dim d (negative): s mixes of t and its shifted neighbours, interleaved."""
    def cut(piece: str) -> str:
        return f"({t})[..., {piece}{', :' * (-d - 1)}]"
    before = f"torch.cat([{cut('0:1')}, {cut(':-1')}], dim={d})"        # input i - 1, the first repeated
    after = f"torch.cat([{cut('1:')}, {cut('-1:')}], dim={d})"           # input i + 1, the last repeated
    mixes = []
    for r in range(s):
        offset = (r + 0.5) / s - 0.5
        other = before if offset < 0 else after
        mixes.append(f"({1 - abs(offset)!r} * ({t}) + {abs(offset)!r} * {other})" if offset else f"({t})")
    return f"torch.stack([{', '.join(mixes)}], dim={d}).flatten({d - 1}, {d})"
