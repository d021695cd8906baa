# expect: calls .copy_() on args['out_ptr']
import torch
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def op(x, y):
    out = torch.empty_like(x)
    _hooked[(1,)](x, out, x.numel())
    _copy[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out


def _block(args):
    args["out_ptr"].copy_(args["x_ptr"])
    return 1024


@triton.heuristics({"BLOCK": _block})
@triton.jit
def _hooked(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
