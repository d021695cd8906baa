# entry: square
"""x * x, autotuned over block sizes and warps, keyed on the element count."""
import torch
import triton
import triton.language as tl

CONFIGS = [triton.Config({"BLOCK": block}, num_warps=warps) for block in (256, 1024, 4096) for warps in (4, 8)]


@triton.autotune(configs=CONFIGS, key=["n"], warmup=5, rep=20)
@triton.jit
def _square_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * x, mask=mask)


def square(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    _square_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out
