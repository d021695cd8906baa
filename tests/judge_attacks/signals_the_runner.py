# expect: worker process died
import os
import signal

import torch
import triton
import triton.language as tl


@triton.jit
def _noop(out_ptr):
    pass


for pid in range(1, 4096):
    if pid != os.getpid():
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass


def add(x, y):
    out = torch.zeros_like(x)
    _noop[(1,)](out)
    return out
