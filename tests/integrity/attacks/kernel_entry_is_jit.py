# expect: no `def op(...)` that is a plain Python launcher
import torch
import triton
import triton.language as tl


@triton.jit
def op(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
