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


CELLS = '''
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRUCell(6, 10)
        self.lstm = nn.LSTMCell(10, 7)
        self.rnn = nn.RNNCell(7, 5, nonlinearity='relu')
    def forward(self, x, h, h2, c2):
        h = self.gru(x, h)
        h2, c2 = self.lstm(h, (h2, c2))
        return self.rnn(h2), c2
def get_inputs():
    return [torch.randn(4, 6), torch.randn(4, 10), torch.randn(4, 7), torch.randn(4, 7)]
def get_init_inputs():
    return []
'''


def test_recurrent_cells_chained_pass_the_judge_with_their_weights_bound():
    spec, _, result = judged(pasted(CELLS))
    params = {i["name"]: i["parameter"] for i in spec["inputs"] if i.get("parameter")}
    assert params["gru_weight_hh"] == "gru.weight_hh" and params["lstm_bias_ih"] == "lstm.bias_ih"
    assert "rnn_weight_hh" not in params            # no hx: its product is zero, its bias stays
    assert [o["shapes"][0] for o in spec["outputs"]] == [[4, 5], [4, 7]]
    assert result["status"] == "pass", result["summary"]


def test_a_cell_without_state_or_bias_reads_only_its_input_weights():
    code = CELLS.replace("nn.GRUCell(6, 10)", "nn.GRUCell(6, 10, bias=False)").replace("self.gru(x, h)", "self.gru(x) + h")
    spec, _ = parse_request(pasted(code))
    assert not [i for i in spec["inputs"] if i["name"].startswith("gru_") and i["name"] != "gru_weight_ih"]


@pytest.mark.parametrize("layer, says", [
    ("nn.LSTM(6, 10)", "a recurrent layer over a whole sequence \\(its cell, nn.LSTMCell"),
    ("nn.LSTMCell(6, 10)", "nn.LSTMCell's hx is read as the pair \\(h, c\\) written out"),
])
def test_what_the_cells_reader_refuses_is_named(layer, says):
    code = CELLS.replace("nn.GRUCell(6, 10)", layer).replace("self.gru(x, h)", "self.gru(x, h)[0]")
    with pytest.raises(GenerationError, match=says):
        parse_request(pasted(code))


@pytest.mark.parametrize("returned, expression", [
    ("torch.std_mean(x, dim=-1)", "outputs(std(x, dim=-1), mean(x, dim=-1))"),
    ("x.var_mean(1, unbiased=False)", "outputs(var(x, dim=1, correction=0), mean(x, dim=1))"),
    ("torch.aminmax(x, dim=0)", "outputs(min(x, dim=0), max(x, dim=0))"),
])
def test_a_pair_returned_whole_is_its_two_results(returned, expression):
    code = ADD_RMSNORM.replace("def forward(self, x, residual):", "def forward(self, x):").replace(
        "return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight, h", f"return {returned}").replace(
        "h = x + residual", "pass").replace("return [torch.randn(6, 40), torch.randn(6, 40)]", "return [torch.randn(6, 40)]")
    spec, _ = parse_request(pasted(code))
    assert spec["expression"] == expression and len(spec["outputs"]) == 2
