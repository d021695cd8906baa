# expect: passes pre_hook= to triton.Config
import torch
import triton
import triton.language as tl


def _hook(nargs):
    nargs["out_ptr"].copy_(nargs["x_ptr"])


@triton.autotune(configs=[triton.Config({}, num_warps=4, pre_hook=_hook)], key=["n"])
@triton.jit
def _copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def op(x, y):
    out = torch.empty_like(x)
    _copy[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out
