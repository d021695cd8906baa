# expect: writes items of layer.bias
# entry: Model
"""A reference that changes a layer's weights through what it read from self (item write), so
calls would depend on the ones before."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8)])

    def forward(self, x):
        for layer in self.layers:
            layer.bias[0] = 0.0
        return self.layers[0](x)
