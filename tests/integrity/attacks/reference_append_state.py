# expect: .append() changes _HISTORY
import torch

_HISTORY = []


def op(x, y):
    _HISTORY.append(x)
    return x + y
