# expect: uses ._dynamo
import torch


def op(x, y):
    torch._dynamo.reset()
    return x + y
