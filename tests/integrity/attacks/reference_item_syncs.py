# expect: copies to the host
import torch


def op(x, y):
    scale = x.abs().max().item()
    return (x + y) * scale / scale
