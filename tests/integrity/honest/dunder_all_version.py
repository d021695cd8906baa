# entry: negate
"""-x, with the module's public name and version declared."""
import torch
import triton
import triton.language as tl

__all__ = ["negate"]
__version__ = "0.3.1"


@triton.jit
def _negate_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, -tl.load(x_ptr + offs, mask=mask), mask=mask)


def negate(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    _negate_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out
