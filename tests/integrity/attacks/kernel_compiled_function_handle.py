# expect: uses compiled.function
import torch
import triton
import triton.language as tl
from triton.runtime import driver


@triton.jit
def _copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)



def op(x, y):
    out = torch.empty_like(x)
    compiled = _copy.warmup(x, out, x.numel(), BLOCK=1024, grid=(1,))
    compiled._init_handles()
    handle = compiled.function
    compiled[(triton.cdiv(x.numel(), 1024), 1, 1)](x, out, x.numel(), 1024)
    return out
