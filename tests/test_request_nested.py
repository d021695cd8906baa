"""Pasted models of blocks (bot.request.pasted_init, bot.request.pasted_forward): module classes the
paste defines, made in __init__ (directly, in lists, by helper methods and by functions __init__
defines, with class constants and attributes set earlier) and inlined where forward calls them, their
weights named by their path in the whole model; a forward too large to inline refused saying so."""
from __future__ import annotations

import ast
import json
import textwrap

import pytest

from bot.generators.interface import GenerationError
from bot.request import pasted_module
from bot.request.torch_code import MAX_INLINED

RESNET_BLOCKS = '''
class Block(nn.Module):
    expansion = 2

    def __init__(self, c_in, c, stride=1, down=None):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c, 3, stride=stride, padding=1, bias=False)
        self.conv2 = nn.Conv2d(c, c * self.expansion, 1, bias=False)
        self.down = down

    def forward(self, x):
        identity = x
        out = torch.relu(self.conv1(x))
        out = self.conv2(out)
        if self.down is not None:
            identity = self.down(x)
        out += identity
        return torch.relu(out)


class Model(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.c = 4
        self.stage1 = self._make_stage(width, 2)
        self.head = nn.Linear(width * Block.expansion, 3)

    def _make_stage(self, c, n, stride=2):
        down = None
        if stride != 1 or self.c != c * Block.expansion:
            down = nn.Conv2d(self.c, c * Block.expansion, 1, stride=stride)
        layers = [Block(self.c, c, stride, down)]
        self.c = c * Block.expansion
        for _ in range(1, n):
            layers.append(Block(self.c, c))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.stage1(x)
        return self.head(x.mean(dim=(2, 3)))


def get_inputs():
    return [torch.randn(2, 4, 8, 8)]


def get_init_inputs():
    return [3]
'''


def read(code: str) -> pasted_module.Pasted:
    return pasted_module.read(ast.parse(textwrap.dedent(code)))


def judged(request: str) -> tuple[dict, dict, dict]:
    """(spec, generated files, the CPU runner's kernel_test result) of a request."""
    from bot.generators.interface import GenRequest
    from bot.generators.offline import OfflineGenerator
    from bot.request import parse_request
    from runner import worker

    spec, _ = parse_request(request)
    gen, approved = OfflineGenerator(), {"spec": json.dumps(spec)}
    files = {"spec.json": approved["spec"], **{name: gen.generate(GenRequest(kind, request, approved)).content
                                                for name, kind in (("reference.py", "reference"), ("kernel.py", "kernel"),
                                                                   ("test_kernel.py", "kernel_test"))}}
    result = worker.execute_job({"job_id": "t-judged", "kind": "kernel_test", "backend": "cpu", "attempt": 1,
                                 "timeout_s": 600, "files": files}, lambda line: None)
    return spec, files, result


def test_blocks_from_a_helper_method_are_inlined_with_their_weights_at_their_paths():
    p = read(RESNET_BLOCKS)
    assert p.parameters == {
        "stage1_0_conv1_weight": "stage1.0.conv1.weight", "stage1_0_conv2_weight": "stage1.0.conv2.weight",
        "stage1_0_down_weight": "stage1.0.down.weight", "stage1_0_down_bias": "stage1.0.down.bias",
        "stage1_1_conv1_weight": "stage1.1.conv1.weight", "stage1_1_conv2_weight": "stage1.1.conv2.weight",
        "head_weight": "head.weight", "head_bias": "head.bias"}
    # the first block's shortcut is the downsampling conv (stride 2, 4 -> 6 channels); the second's the input
    assert p.shapes["stage1_0_down_weight"] == [6, 4, 1, 1] and p.shapes["stage1_1_conv1_weight"] == [3, 6, 3, 3]
    assert p.shapes["head_weight"] == [3, 6]
    text = p.function
    assert "F.conv2d(x__1, stage1_0_down_weight, stage1_0_down_bias, stride=2," in text
    assert text.count("identity__") >= 4 and "self" not in text


def test_functions_defined_in_init_hasattr_and_len_of_a_module_list():
    p = read('''
    class Model(nn.Module):
        def __init__(self, c):
            super().__init__()
            def conv_bn(i, o):
                return nn.Sequential(nn.Conv2d(i, o, 1), nn.BatchNorm2d(o), nn.ReLU())
            self.blocks = nn.ModuleList([conv_bn(c, c) for _ in range(3)])
            if c > 2:
                self.extra = nn.Tanh()

        def forward(self, x):
            for i, b in enumerate(self.blocks):
                if i != len(self.blocks) - 1:
                    x = b(x)
            if hasattr(self, "extra"):
                x = self.extra(x)
            if hasattr(self, "missing"):
                x = x * 2
            return x

    def get_inputs():
        return [torch.randn(2, 4, 5, 5)]

    def get_init_inputs():
        return [4]
    ''')
    assert set(p.parameters.values()) == {f"blocks.{k}.{n}" for k in (0, 1) for n in (
        "0.weight", "0.bias", "1.weight", "1.bias")}
    assert "torch.tanh(" in p.function and "* 2" not in p.function


def test_a_model_too_large_to_inline_is_refused_naming_why():
    blocks = "".join(f"        self.b{k} = Block()\n" for k in range(24))
    calls = "".join(f"        x = self.b{k}(x)\n" for k in range(24))
    code = ("import torch\nimport torch.nn as nn\n\n\nclass Block(nn.Module):\n    def forward(self, x):\n"
            "        y = torch.relu(x)\n        return y * x + x\n\n\nclass Model(nn.Module):\n"
            f"    def __init__(self):\n        super().__init__()\n{blocks}\n    def forward(self, x):\n{calls}"
            "        return x\n\n\ndef get_inputs():\n    return [torch.randn(2, 4)]\n")
    from bot.request import parse_request
    with pytest.raises(GenerationError, match=f"grows past {MAX_INLINED:,} operations"):
        parse_request(f"```python\n{code}```")


@pytest.mark.parametrize("init, says", [
    ("self.b = Block(torch.randn(3))", "self.b is set on line"),
    ("self.b = Block()", "Block.__init__ takes c, which nothing gives: give it in the call on line"),
])
def test_blocks_made_of_what_is_not_known_are_refused(init, says):
    code = f'''
    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c = c

        def forward(self, x):
            return x * self.c

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            {init}

        def forward(self, x):
            return self.b(x)

    def get_inputs():
        return [torch.randn(2, 4)]
    '''
    with pytest.raises(GenerationError) as e:
        read(code)
    assert says in str(e.value)


def test_a_model_of_blocks_passes_the_judge_against_the_pasted_file():
    """The whole path: the pasted file is the reference (integrity-checked), the judge binds each
    inlined block's weights at its path, and the chain's kernels match the model's own forward."""
    from runner.integrity import check_reference

    small = RESNET_BLOCKS.replace("torch.randn(2, 4, 8, 8)", "torch.randn(1, 4, 5, 5)")
    _, files, result = judged(f"in fp32\n```python\nimport torch\nimport torch.nn as nn\n{small}```\n")
    assert check_reference(files["reference.py"], "Model") == []
    assert result["status"] == "pass", result["summary"]


def test_a_forward_growing_a_list_of_features_concatenates_them_as_they_were():
    from bot.request import parse_request
    code = ("def f(x, y):\n    feats = [x]\n    feats.append(torch.relu(y))\n    z = torch.cat(feats, dim=1)\n"
            "    feats.extend([z[:, :8] * 2.0])\n    return torch.cat(feats, dim=1)\n")
    spec, _ = parse_request(f"```python\n{code}```\nx and y are 4x8")
    assert spec["expression"] == "cat([x, relu(y), cat([x, relu(y)], dim=1)[:, :8] * 2.0], dim=1)"



MHA = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(32, dim=2)
        q = q.view(B, T, self.h, C // self.h).transpose(1, 2)
        k = k.view(B, T, self.h, C // self.h).transpose(1, 2)
        v = v.view(B, T, self.h, C // self.h).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


def get_inputs():
    return [torch.randn(2, 12, 32)]


def get_init_inputs():
    return [32, 4]
'''


def test_multi_head_self_attention_passes_the_judge_with_weights_at_their_init_scale():
    """Heads split out of the hidden dim (q.view(B, T, h, C // h)), attention, heads joined back:
    read as unflatten, scaled_dot_product_attention and reshape; the judge draws each Linear's weight
    and bias at 1/sqrt(fan_in), as the layer is made, so its float16 reference stays the float64 one."""
    from runner import protocol

    spec, _, result = judged(f"in fp16\n```python\n{MHA}```\n")
    assert "scaled_dot_product_attention(" in spec["expression"] and ".unflatten(2, (4, -1))" in spec["expression"]
    shapes = {i["name"]: i["shapes"][0] for i in spec["inputs"]}
    assert protocol.init_scale(spec["inputs"], "qkv_bias", shapes) == 1 / 32 ** 0.5
    assert protocol.init_scale(spec["inputs"], "x", shapes) == 1.0
    assert result["status"] == "pass", result["summary"]
