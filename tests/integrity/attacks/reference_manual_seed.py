# expect: uses torch.manual_seed
import torch


def op(x, y):
    torch.manual_seed(0)
    return x + y
