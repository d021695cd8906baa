# expect: .mul_() changes layer
# entry: Model
"""A reference that changes a layer's weights through what it read from self (loop variable), so
calls would depend on the ones before."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8)])

    def forward(self, x):
        for layer in self.layers:
            layer.weight.mul_(0.5)
        return self.layers[0](x)
