# expect: uses torch.nn.functional.np
import torch


def op(x, y):
    return torch.nn.functional.np.add(x, y)
