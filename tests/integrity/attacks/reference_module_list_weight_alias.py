# expect: .add_() changes w
# entry: Model
"""A reference that changes a layer's weights through what it read from self (weight alias), so
calls would depend on the ones before."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8)])

    def forward(self, x):
        w = self.layers[0].weight
        w.add_(1.0)
        return self.layers[0](x)
