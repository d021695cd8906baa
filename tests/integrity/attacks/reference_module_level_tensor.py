# expect: at import time
import torch


_ZERO = torch.zeros(1)


def op(x, y):
    return x + y + _ZERO
