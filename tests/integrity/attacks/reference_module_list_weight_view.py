# expect: .zero_() changes v
# entry: Model
"""A reference that changes a layer's weights through what it read from self (weight view), so
calls would depend on the ones before."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8)])

    def forward(self, x):
        v = self.layers[0].bias.view(-1)
        v.zero_()
        return self.layers[0](x)
