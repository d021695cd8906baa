# expect: .add_() changes x
import torch


def op(x, y):
    return x.add_(y)
