# entry: Model
"""A pasted module that stacks layers in nn.ModuleList and calls them in loops (enumerate, zip,
reversed), by index and through a local name: calling what __init__ stored is honest."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])
        self.b = nn.ModuleList([nn.ReLU(), nn.Tanh()])

    def forward(self, x):
        for f, g in zip(self.a, reversed(self.b)):
            x = g(f(x))
        for i, layer in enumerate(self.a):
            x = layer(x) + i
        h = self.b[0]
        return h(self.a[-1](x))
