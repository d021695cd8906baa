"""Pasted code returning several tensors (a residual beside its norm, an LSTM cell's h and c): read as
outputs(...), each result a stage of one kernel file, judged on the CPU runner against the paste."""
from __future__ import annotations

import pytest
from test_request_nested import judged

from bot.generators.interface import GenerationError
from bot.request import parse_request

ADD_RMSNORM = '''
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
    def forward(self, x, residual):
        h = x + residual
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight, h
def get_inputs():
    return [torch.randn(6, 40), torch.randn(6, 40)]
def get_init_inputs():
    return [40]
'''

LSTM_CELL = '''
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self, i, h):
        super().__init__()
        self.ih = nn.Linear(i, 4 * h)
        self.hh = nn.Linear(h, 4 * h)
    def forward(self, x, h, c):
        i, f, g, o = (self.ih(x) + self.hh(h)).chunk(4, 1)
        c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c2), c2
def get_inputs():
    return [torch.randn(5, 12), torch.randn(5, 8), torch.randn(5, 8)]
def get_init_inputs():
    return [12, 8]
'''


def pasted(code: str) -> str:
    return f"```python\n{code}```\nin fp16 and fp32"


@pytest.mark.parametrize("code, shapes", [(ADD_RMSNORM, [[6, 40], [6, 40]]), (LSTM_CELL, [[5, 8], [5, 8]])],
                         ids=["add_rmsnorm", "lstm_cell"])
def test_several_results_pass_the_judge_each_in_its_shape(code, shapes):
    spec, files, result = judged(pasted(code))
    assert spec["expression"].startswith("outputs(")
    assert [o["name"] for o in spec["outputs"]] == ["out0", "out1"]
    assert [o["shapes"][0] for o in spec["outputs"]] == shapes
    assert result["status"] == "pass", result["summary"]
    assert "return stage" in files["kernel.py"] and ".to(" in files["kernel.py"].rsplit("return", 1)[1]


def test_a_residual_returned_beside_its_norm_is_computed_once():
    spec, _ = parse_request(pasted(ADD_RMSNORM))
    assert spec["chain"] == 3 and spec["description"].startswith("2 outputs: (0) ")


def test_a_tuple_of_one_tensor_is_refused_naming_the_fix():
    code = ADD_RMSNORM.replace("return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight, h",
                               "return (h * 2.0,)")
    with pytest.raises(GenerationError, match=r"returns a tuple of 1 tensors.*return the tensor itself"):
        parse_request(pasted(code))


def test_several_results_for_training_are_refused_naming_the_way():
    with pytest.raises(GenerationError, match="a training kernel has one output; .* returns 2"):
        parse_request("outputs(x * 2.0, relu(x + y)) for fp16 64x128, forward and backward for training")
