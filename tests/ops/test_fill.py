"""Constant tensors made inside an expression (bot.ops.fill): how torch.ones, zeros, full and eye are
read, what is refused and why, and the pasted module whose forward makes its causal mask. Their
chains' kernels run against torch in tests/ops/test_chain.py."""
from __future__ import annotations

import pytest

from bot import ir
from bot.request import parse_request
from bot.spec import parse_expression


@pytest.mark.parametrize("written, read", [
    ("x + torch.ones(4, 5)", "(x + full((4, 5), 1.0))"),
    ("x * torch.zeros((5,), device=x.device)", "(x * full((5,), 0.0))"),
    ("x - torch.full((1, 5), -2.5, dtype=torch.float16)", "(x - full((1, 5), -2.5))"),
    ("x + torch.full(size=(4, 5), fill_value=3)", "(x + full((4, 5), 3.0))"),
    ("where(torch.ones(4, 5, dtype=torch.bool), x, 0.0)", "where((full((4, 5), 1.0) != 0.0), x, 0.0)"),
    ("x @ torch.eye(5, 3)", "matmul(x, torch.triu(torch.tril(full((5, 3), 1.0), diagonal=0), diagonal=0))"),
    ("x + x.new_full((1, 5), 2)", "(x + full((1, 5), 2.0))"),
    ("x * torch.arange(1, 7, 2)", "(x * ((cumsum(full((3,), 1.0), dim=0, exclusive=True) * 2.0) + 1.0))"),
    ("x * torch.linspace(0, 1, 3)", "(x * where((cumsum(full((3,), 1.0), dim=0, exclusive=True) < 1.0), "
     "(cumsum(full((3,), 1.0), dim=0, exclusive=True) * 0.5), (1.0 - ((2.0 - cumsum(full((3,), 1.0), dim=0, "
     "exclusive=True)) * 0.5))))"),
    ("x + torch.tensor(2.5)", "(x + 2.5)"),
    ("x * torch.zeros(5, dtype=x.dtype, device=x.device)", "(x * full((5,), 0.0))"),
    ("x * torch.tensor([2, 3])", "(x * where((cumsum(full((2,), 1.0), dim=0, exclusive=True) == 0.0), 2.0, "
     "((cumsum(full((2,), 1.0), dim=0, exclusive=True) * 0.0) + 3.0)).reshape(2))"),
])
def test_a_constant_is_a_fill_of_fixed_sizes(written, read):
    assert ir.to_text(ir.parse(written)) == read
    assert ir.to_text(ir.parse(read)) == read          # its text reads back as itself


def test_a_constant_is_a_stage_no_kernel_computes():
    node = ir.parse("relu(x + torch.ones(4, 5))")
    first, last = ir.stages(node)
    assert first.node.op == "full" and ir.output_shape(first.node, {}) == [4, 5]
    assert ir.output_shape(node, {"x": [3, 4, 5]}) == [3, 4, 5]
    assert ir.size_rules(node, [{"x": [3, 4, 5]}])[0] >= {4, 5}


@pytest.mark.parametrize("written, message", [
    ("x + torch.ones(4, 5, dtype=torch.complex64)", "dtype=torch.complex64 is not supported: a float, whole-number"),
    ("x + torch.full((4, 5), 0.5, dtype=torch.long)", "int dtype truncates its values"),
    ("x + torch.tensor([[1.0, 2.0], [3.0]])", "the lists must be non-empty and of one shape"),
    ("x + torch.tensor(list(range(100)))", "expected a number"),
    ("x + torch.arange(0, 4, 0)", "a step other than 0"),
    ("x + torch.arange(5, 1)", "a range of -4 values"),
    ("x + torch.ones(n, 5)", "sizes as whole numbers"),
    ("x + torch.ones(0, 5)", "sizes as whole numbers of at least 1"),
    ("x + torch.full((4, 5))", "torch.full takes its sizes and a number"),
    ("torch.ones(4, 5) * 2.0", "no inputs"),
    ("x + torch.ones(4, 5, out=y)", "out=y is not supported"),
    ("x + ~torch.ones(4, 5)", "~ is the logical not of a mask"),
])
def test_what_a_constant_cannot_be_is_refused_by_name(written, message):
    with pytest.raises(ir.IRError, match=message):
        ir.check(ir.parse(written))


CAUSAL = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q, k):
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * self.scale
        mask = torch.triu(torch.ones(T, T, device=q.device), diagonal=1).bool()
        return torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)

def get_inputs():
    return [torch.randn(2, 4, 32, 16), torch.randn(2, 4, 32, 16)]

def get_init_inputs():
    return [0.25]
'''


def test_a_pasted_forward_making_its_causal_mask_is_read_with_its_sizes_kept():
    spec, _ = parse_request(CAUSAL)
    assert "full((32, 32), 1.0)" in spec["expression"]
    assert 32 in spec["fixed_sizes"]
    stages = ir.stages(parse_expression(spec))
    assert [s.node.op for s in stages][0] == "full" and len(stages) >= 3
