# entry: gelu
"""Exact GELU, 0.5 * x * (1 + erf(x / sqrt(2))), with libdevice's erf."""
import math

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

INV_SQRT2 = 1.0 / math.sqrt(2.0)


@triton.jit
def _gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = 0.5 * x * (1.0 + libdevice.erf(x * INV_SQRT2))
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def gelu(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    _gelu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out
