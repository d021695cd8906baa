# expect: uses torch.os
import torch


def op(x, y):
    torch.os.system("sleep 0")
    return x + y
