# entry: halve
"""x / 2, unmasked when the size is a multiple of the block (a compile-time flag from
triton.heuristics)."""
import torch
import triton
import triton.language as tl


@triton.heuristics({"BLOCK": lambda args: min(4096, triton.next_power_of_2(args["n"])),
                    "EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def _halve_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 0.5)
    else:
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 0.5, mask=mask)


def halve(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    _halve_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out
