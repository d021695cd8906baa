# expect: declares global
import torch

_CALLS = 0


def op(x, y):
    global _CALLS
    _CALLS += 1
    return x + y
