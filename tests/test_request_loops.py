"""A pasted module's loops and branches (bot.request.pasted_loops): layers built in __init__ loops and
stacked in nn.ModuleList / nn.Sequential, forward's loops over them or over constant ranges unrolled,
branches on constants taken; loops and branches on tensor values refused by line."""
from __future__ import annotations

import ast
import textwrap

import pytest

from bot.generators.interface import GenerationError
from bot.request import pasted_module


def read(init: str, forward: str, init_inputs: str = "[]", params: str = "") -> pasted_module.Pasted:
    code = (f"class Model(nn.Module):\n    def __init__(self{params}):\n        super().__init__()\n"
            f"{textwrap.indent(textwrap.dedent(init), ' ' * 8)}\n"
            f"    def forward(self, x):\n{textwrap.indent(textwrap.dedent(forward), ' ' * 8)}\n\n"
            f"def get_inputs():\n    return [torch.randn(4, 8)]\n\ndef get_init_inputs():\n    return {init_inputs}\n")
    return pasted_module.read(ast.parse(code))


def body(p: pasted_module.Pasted) -> list[str]:
    return [ast.unparse(s) for s in ast.parse(p.function).body[0].body]


def test_a_module_list_made_by_a_comprehension_is_unrolled_with_its_branches():
    p = read("self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])\nself.res = True\nself.norm = None",
             "for i, layer in enumerate(self.layers):\n"
             "    if self.res and i > 0:\n        x = x + torch.relu(layer(x))\n"
             "    else:\n        x = torch.relu(layer(x))\n"
             "if self.norm is not None:\n    x = self.norm(x)\nreturn x")
    assert body(p) == ["x = torch.relu(F.linear(x, layers_0_weight, layers_0_bias))",
                       "x = x + torch.relu(F.linear(x, layers_1_weight, layers_1_bias))",
                       "x = x + torch.relu(F.linear(x, layers_2_weight, layers_2_bias))", "return x"]
    assert p.parameters["layers_2_bias"] == "layers.2.bias" and p.shapes["layers_1_weight"] == [8, 8]


def test_layers_appended_in_init_loops_local_lists_and_nested_sequentials():
    p = read("layers = []\n"
             "for i in range(len(sizes) - 1):\n"
             "    layers.append(nn.Linear(sizes[i], sizes[i + 1]))\n"
             "    if i < len(sizes) - 2:\n        layers.append(nn.GELU())\n"
             "self.mlp = nn.Sequential(*layers)\nself.heads = nn.ModuleList()\n"
             "for _ in range(2):\n    self.heads.append(nn.Sequential(nn.Linear(sizes[-1], 4), nn.Tanh()))\n"
             "nn.init.zeros_(self.mlp[0].bias)",
             "h = self.mlp(x)\nreturn self.heads[0](h) * self.heads[-1](h)", "[[8, 16, 6]]", ", sizes")
    assert body(p) == ["h = F.linear(F.gelu(F.linear(x, mlp_0_weight, mlp_0_bias)), mlp_2_weight, mlp_2_bias)",
                       "return torch.tanh(F.linear(h, heads_0_0_weight, heads_0_0_bias)) * "
                       "torch.tanh(F.linear(h, heads_1_0_weight, heads_1_0_bias))"]
    assert p.shapes["mlp_2_weight"] == [6, 16] and p.parameters["heads_1_0_bias"] == "heads.1.0.bias"


def test_self_training_is_true_as_the_judge_runs_the_module_as_made():
    p = read("self.p = 0.0", "if self.training:\n    x = x * 2.0\nreturn x")
    assert body(p) == ["x = x * 2.0", "return x"]


def test_a_slice_of_a_module_list():
    p = read("self.layers = nn.ModuleList([nn.ReLU(), nn.Tanh(), nn.Sigmoid()])",
             "x = self.layers[0](x)\nfor layer in self.layers[1:]:\n    x = layer(x) * 2.0\nreturn x")
    assert body(p) == ["x = torch.relu(x)", "x = torch.tanh(x) * 2.0", "x = torch.sigmoid(x) * 2.0", "return x"]


def test_constant_ranges_zips_and_reversed_lists():
    p = read("self.a = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])\nself.b = nn.ModuleList([nn.ReLU(), nn.Tanh()])",
             "for f, g in zip(self.a, reversed(self.b)):\n    x = g(f(x))\nfor s in (2.0, 3.0):\n    x = x * s\n"
             "for _ in range(1, 3):\n    x = x + 1.0\nreturn x")
    assert body(p)[:2] == ["x = torch.tanh(F.linear(x, a_0_weight, a_0_bias))",
                           "x = torch.relu(F.linear(x, a_1_weight, a_1_bias))"]
    assert body(p)[2:] == ["x = x * 2.0", "x = x * 3.0", "x = x + 1.0", "x = x + 1.0", "return x"]


@pytest.mark.parametrize("init, forward, says", [
    ("", "for row in x:\n    x = x + row\nreturn x", "the loop runs over 'x', which is not a range of constants"),
    ("", "while x.sum() > 0:\n    x = x - 1\nreturn x", "line 6: while is not read here"),
    ("", "if x.sum() > 0:\n    x = x * 2\nreturn x", "line 6: `if x.sum() > 0` depends on what is not a constant"),
    ("", "for i in range(3):\n    if i == 1:\n        break\n    x = x * 2\nreturn x", "break is not read here"),
    ("", "for i in range(3):\n    x = x * 2\nelse:\n    x = x + 1\nreturn x", "`for ... else` is not read here"),
    ("", "for i in range(3):\n    i = i + 1\n    x = x * i\nreturn x", "the loop assigns its own variable i"),
    ("", "for i in range(10 ** 6):\n    x = x + 1.0\nreturn x", "is not a range of constants"),
    ("self.layers = nn.ModuleList([nn.ReLU()])", "return self.layers(x)", "is an nn.ModuleList (set on line 4), which is not called"),
    ("self.layers = nn.ModuleList([nn.ReLU()])", "return self.layers[1](x)", "is not one of the 1 layers of self.layers"),
    ("self.layers = nn.ModuleList()\nfor i in range(torch.randint(1, 3, ())):\n    self.layers.append(nn.ReLU())",
     "for layer in self.layers:\n    x = layer(x)\nreturn x", "which is not a constant I can evaluate"),
])
def test_loops_and_branches_on_what_is_not_known_are_refused_by_line(init, forward, says):
    with pytest.raises(GenerationError, match=None) as e:
        read(init, forward)
    assert says in str(e.value)


def test_forward_parameters_get_inputs_leaves_out_take_their_defaults():
    code = ("class Model(nn.Module):\n    def forward(self, x, mask=None, scale=2.0):\n"
            "        if mask is not None:\n            x = x.masked_fill(mask, 0.0)\n        return x * scale\n\n"
            "def get_inputs():\n    return [torch.randn(4, 8)]\n\ndef get_init_inputs():\n    return []\n")
    p = pasted_module.read(ast.parse(code))
    assert p.function.startswith("def forward(x):") and "* 2.0" in p.function and list(p.shapes) == ["x"]
    assert pasted_module.buildable(ast.parse(code)) == ("Model", ["x"])
