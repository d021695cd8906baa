# expect: launched none of its @triton.jit kernels
# backend: cuda
import triton
import triton.language as tl


@triton.jit
def _never_launched(out_ptr):
    tl.store(out_ptr, 0.0)


def add(x, y):
    # torch computes the answer and the Triton kernel is never launched (the static check, which
    # would refuse this, is off in these tests).
    return x + y
