# expect: imports os
import os

import torch


def op(x, y):
    os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
    return x + y
