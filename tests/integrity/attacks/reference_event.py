# expect: uses torch.Event
import torch


def op(x, y):
    torch.Event().record()
    return x + y
