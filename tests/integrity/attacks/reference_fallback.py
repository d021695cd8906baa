# expect: catches exceptions
import torch


def op(x, y):
    try:
        return x + y
    except RuntimeError:
        return y
