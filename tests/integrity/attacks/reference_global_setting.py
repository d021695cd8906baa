# expect: uses torch.set_float32_matmul_precision
import torch


def op(x, y):
    torch.set_float32_matmul_precision("highest")
    return x @ y
