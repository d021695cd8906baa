# expect: disagree far beyond rounding
# file: reference.py
# job: reference_test
import torch


def add(x, y):
    if x.dtype == torch.float64:
        return torch.zeros_like(x)
    return x + y
