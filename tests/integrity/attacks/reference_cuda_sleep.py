# expect: _sleep
import torch


def op(x, y):
    torch.cuda._sleep(1_000_000)
    return x + y
