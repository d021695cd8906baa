# expect: Assign in class Model
# entry: Model
"""A reference that keeps state across calls in a mutable class attribute."""
import torch
import torch.nn as nn


class Model(nn.Module):
    seen = []

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2
