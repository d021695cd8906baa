# expect: in class Model
import torch


class Model(torch.nn.Module):
    def __init_subclass__(cls):
        pass

    def forward(self, x, y):
        return x + y


def op(x, y):
    return Model()(x, y)
