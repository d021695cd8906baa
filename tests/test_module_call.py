"""runner.module_call: a pasted nn.Module called with the judge's learned tensors bound in, as the
untrusted worker and the generated tests call it."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from runner.module_call import module_call


class ConvNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x))


def expected(x, w, b, g, beta):
    return F.batch_norm(F.conv2d(x, w, b), None, None, g, beta, training=True)


def tensors(dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    shapes = ([2, 3, 8, 8], [4, 3, 3, 3], [4], [4], [4])
    return [torch.randn(s, generator=gen, dtype=dtype) for s in shapes]


def test_the_module_computes_with_the_tensors_given_not_its_own():
    call = module_call(ConvNorm(), ["conv.weight", "conv.bias", "bn.weight", "bn.bias"])
    args = tensors()
    out = call(*args)
    assert torch.equal(out, expected(*args)) and not out.requires_grad


def test_a_refilled_tensor_is_seen_and_new_tensors_are_bound():
    call = module_call(ConvNorm(), ["conv.weight", "conv.bias", "bn.weight", "bn.bias"])
    args = tensors()
    call(*args)
    args[1].mul_(3)                         # the judge refills its tensors in place
    assert torch.equal(call(*args), expected(*args))
    other = [t.clone() * 2 for t in args]   # and sends new ones
    assert torch.equal(call(*other), expected(*other))


def test_the_module_runs_in_the_calls_dtype_buffers_too():
    module = ConvNorm()
    call = module_call(module, ["conv.weight", "conv.bias", "bn.weight", "bn.bias"])
    out = call(*tensors(torch.float64))
    assert out.dtype == torch.float64 and module.bn.running_mean.dtype == torch.float64
    assert call(*tensors()).dtype == torch.float32


def test_a_name_the_module_does_not_hold_is_refused():
    with pytest.raises(KeyError, match="conv.scale"):
        module_call(ConvNorm(), ["conv.scale"])
