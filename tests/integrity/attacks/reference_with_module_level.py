# expect: uses a with block at module level
import torch

with torch.no_grad():
    SCALE = 2.0


def op(x, y):
    return x * SCALE + y
