# expect: assigns torch.backends.cuda.matmul.allow_tf32
import torch


def op(x, y):
    torch.backends.cuda.matmul.allow_tf32 = False
    return x @ y
