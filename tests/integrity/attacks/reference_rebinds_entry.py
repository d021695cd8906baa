# expect: binds op 2 times
import torch


def op(x, y):
    return x + y


op = torch.add
