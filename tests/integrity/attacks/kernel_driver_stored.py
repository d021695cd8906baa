# expect: triton.runtime.driver.active as a value
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
    active = triton.runtime.driver.active
    active.utils.load_binary("_copy", b"", 0, 0)
    _copy[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out
