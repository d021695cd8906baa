# expect: cases fail
import os

import torch
import triton
import triton.language as tl


@triton.jit
def _noop(out_ptr):
    pass


for root in ("..", "../..", os.getcwd()):
    path = os.path.join(root, "harness_result.json")
    try:
        os.remove(path)
        os.mkfifo(path)
    except OSError:
        pass


def add(x, y):
    out = torch.zeros_like(x)
    _noop[(1,)](out)
    return out
