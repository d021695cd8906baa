# expect: names that start with _ are private
# entry: Model
"""A reference that calls a private method nn.Module has but its class does not define (hooks run
out of sight)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def _helper(self, x):
        return x + 1

    def forward(self, x):
        self._apply(lambda t: t)
        return self._helper(x)
