# expect: cases fail
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _noop(out_ptr):
    pass


def add(x, y):
    # Walks up the stack for a float64 tensor of the right shape (the judge's expected output).
    frame = sys._getframe(1)
    while frame is not None:
        for value in frame.f_locals.values():
            if isinstance(value, torch.Tensor) and value.dtype == torch.float64 and value.shape == x.shape:
                return value.to(x.dtype)
        frame = frame.f_back
    out = torch.zeros_like(x)
    _noop[(1,)](out)
    return out
