# expect: imports numpy
import numpy as np

import torch


def op(x, y):
    return torch.from_numpy(np.add(x.numpy(), y.numpy()))
