# entry: op
"""A reference that computes under torch.no_grad() and torch.inference_mode(): grad modes around
computation are honest in reference.py."""
import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def __init__(self, dim: int = 64):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, x):
        with torch.inference_mode():
            y = self.norm(x)
        return F.gelu(y)


def op(x, w):
    with torch.no_grad():
        scaled = x * w
    with torch.no_grad(), torch.inference_mode():
        shifted = scaled - scaled.mean(dim=-1, keepdim=True)
    return Model(x.shape[-1])(shifted)
