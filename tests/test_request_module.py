"""Pasted PyTorch modules (bot.request.pasted_module): the KernelBench layout, a forward alone, submodules,
constants, get_inputs' shapes and dtypes; the reference is the pasted file itself, run by the judge."""
from __future__ import annotations

import re
import textwrap

import pytest
import torch
import torch.nn.functional as F

from bot import ir, lower_torch, testgen
from bot.generators.interface import GenerationError, GenRequest
from bot.generators.offline import OfflineGenerator
from bot.request import parse_request
from generated import error, load
from bot.spec import SpecError, parse_expression, validate
from runner import inputs as runner_inputs
from runner import protocol, worker
from runner.integrity import check_reference, check_test


def fenced(code: str, words: str = "") -> str:
    return f"{words}\n```python\n{textwrap.dedent(code).strip()}\n```\n"


SUM_MODULE = """
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        \"\"\"Sum over a dim; input of shape (batch, dim1, dim2).\"\"\"
        def __init__(self, dim: int):
            super(Model, self).__init__()
            self.dim = dim

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sum(x, dim=self.dim)

    batch_size = 16
    dim1 = 32
    dim2 = 31
    reduce_dim = 1

    def get_inputs():
        x = torch.rand(batch_size, dim1, dim2)
        return [x]

    def get_init_inputs():
        return [reduce_dim]
"""


def test_kernelbench_layout_gives_shapes_dims_and_the_pasted_reference():
    spec, notes = parse_request(fenced(SUM_MODULE))
    assert spec["expression"] == "sum(x, dim=1)"
    assert spec["inputs"][0]["shapes"] == [[16, 32, 31]] and spec["inputs"][0]["dtypes"] == ["float32"]
    assert spec["reference_class"] == "Model"
    assert any("get_inputs makes float32" in n for n in notes)
    assert any("reference is the pasted Model, verbatim" in n for n in notes)


def test_words_beside_the_module_choose_dtypes():
    spec, _ = parse_request(fenced(SUM_MODULE, "make this fast for fp16 and bf16"))
    assert spec["inputs"][0]["dtypes"] == ["float16", "bfloat16"] and spec["reference_class"] == "Model"


CAST_MODULE = SUM_MODULE.replace("torch.sum(x, dim=self.dim)", "(x > 0.5).float().mean(dim=self.dim)")


def test_a_cast_to_the_dtype_every_input_has_is_kept_and_a_boolean_cast_is_its_0_or_1():
    spec, notes = parse_request(fenced(CAST_MODULE))
    assert spec["expression"] == "mean((x > 0.5) * 1.0, dim=1)" and spec["inputs"][0]["dtypes"] == ["float32"]
    assert any("casts to float32, the dtype every tested input already has" in n for n in notes)
    with pytest.raises(GenerationError, match=r"casts with '\(x > 0.5\).float\(\)'.*\(float16, bfloat16 here\)"):
        parse_request(fenced(CAST_MODULE, "make this fast for fp16 and bf16"))


def test_constants_submodules_and_folded_math():
    code = """
        import math
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        HIDDEN = 2 * 64
        SHAPE = (8, HIDDEN)

        class FusedAct(nn.Module):
            def __init__(self, slope=0.2, scale=1.0):
                super().__init__()
                self.act = nn.LeakyReLU(slope)
                self.softmax = nn.Softmax(dim=1)
                self.scale = scale * math.sqrt(2.0 / math.pi)

            def forward(self, x):
                return self.softmax(self.act(x) * self.scale)

        def get_inputs():
            return [torch.randn(*SHAPE, dtype=torch.float16)]

        def get_init_inputs():
            return []
    """
    spec, _ = parse_request(fenced(code))
    assert spec["name"] == "fused_act" and spec["inputs"][0]["dtypes"] == ["float16"]
    assert spec["inputs"][0]["shapes"] == [[8, 128]]
    node = ir.parse(spec["expression"])
    assert node.op == "softmax" and node.attr("dim") == -1          # dim 1 of a 2-D input is its last
    assert "0.2" in spec["expression"] and "0.797884" in spec["expression"]


def test_a_local_used_twice_is_one_matmul_and_a_shared_weight_keeps_its_shape():
    code = """
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x, w):
                y = torch.matmul(x, w)
                return y * torch.sigmoid(y)

        def get_inputs():
            return [torch.randn(4, 64, 32), torch.randn(32, 48)]

        def get_init_inputs():
            return []
    """
    spec, _ = parse_request(fenced(code))
    assert [i["shapes"] for i in spec["inputs"]] == [[[4, 64, 32]], [[32, 48]]]
    assert spec["outputs"][0]["shapes"] == [[4, 64, 48]]


TRANSPOSED_B = """
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super(Model, self).__init__()

        def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
            return torch.matmul(A.T, B.T)

    M = 24
    K = 40
    N = 16

    def get_inputs():
        A = torch.rand(K, M)
        B = torch.rand(N, K)
        return [A, B]

    def get_init_inputs():
        return []
"""


def test_transposed_operands_are_read_as_they_lie_and_judged_against_the_paste():
    request = fenced(TRANSPOSED_B)
    spec, _ = parse_request(request)
    assert spec["expression"] == "matmul(A.T, B.T)" and spec["reduce"] == {"inputs": ["A"], "dim": -2}
    assert [i["shapes"] for i in spec["inputs"]] == [[[40, 24]], [[16, 40]]]
    assert spec["outputs"][0]["shapes"] == [[24, 16]]
    gen, approved = OfflineGenerator(), {"spec": __import__("json").dumps(spec)}
    files = {"spec.json": approved["spec"], "reference.py": gen.generate(GenRequest("reference", request, approved)).content}
    for stage, kind in (("reference_test", "reference_test"), ("kernel_test", "kernel_test")):
        if stage == "kernel_test":
            files["kernel.py"] = gen.generate(GenRequest("kernel", request, approved)).content
        files[f"test_{stage.split('_')[0]}.py"] = gen.generate(GenRequest(stage, request, approved)).content
        result = worker.execute_job({"job_id": f"t-{kind}", "kind": kind, "backend": "cpu", "attempt": 1,
                                     "timeout_s": 300, "files": dict(files)}, lambda line: None)
        assert result["status"] == "pass", result["summary"]


@pytest.mark.parametrize("forward, expression", [
    ("values, indices = torch.max(x, dim=self.dim)\n            return values", "max(x, dim=1)"),
    ("values, indices = torch.max(x, dim=self.dim)\n            return indices", "argmax(x, dim=1)"),
    ("return x.min(self.dim).values", "min(x, dim=1)"),
    ("lo, hi = torch.aminmax(x, dim=self.dim)\n            return hi - lo", "max(x, dim=1) - min(x, dim=1)"),
    ("return x.aminmax(dim=self.dim).min", "min(x, dim=1)"),
])
def test_one_part_of_max_over_a_dim_is_read_and_the_module_stays_the_reference(forward, expression):
    code = SUM_MODULE.replace("return torch.sum(x, dim=self.dim)", forward)
    spec, _ = parse_request(fenced(code))
    assert spec["expression"] == expression and spec["reference_class"] == "Model"


def test_a_module_returning_values_and_indices_is_one_kernel_with_both():
    code = SUM_MODULE.replace("return torch.sum(x, dim=self.dim)",
                              "values, indices = torch.max(x, dim=self.dim)\n            return values, indices")
    spec, _ = parse_request(fenced(code))
    assert spec["expression"].startswith("max_with_indices(x, dim=")
    assert [o["name"] for o in spec["outputs"]] == ["values", "indices"]


def test_a_module_returning_two_other_tensors_returns_each_as_its_own_output():
    code = SUM_MODULE.replace("return torch.sum(x, dim=self.dim)",
                              "values, indices = torch.max(x, dim=self.dim)\n            return values * 2, indices")
    spec, _ = parse_request(fenced(code))
    assert spec["expression"] == "outputs(max(x, dim=1) * 2.0, argmax(x, dim=1))"
    assert [(o["name"], o["dtypes"][0]) for o in spec["outputs"]] == [("out0", "float32"), ("out1", "int64")]


def module(init: str, forward: str, inputs: str = "torch.rand(4, 8)", init_inputs: str | None = "[]") -> str:
    """A KernelBench-style file: class Model with __init__(self, <init>) and forward, get_inputs and
    (unless None) get_init_inputs."""
    params, _, body = init.partition(":")
    code = (f"class Model(nn.Module):\n    def __init__(self{params}):\n        super().__init__()\n"
            f"        {body.strip() or 'pass'}\n\n    def forward(self, {forward}\n\n"
            f"def get_inputs():\n    return [{inputs}]\n")
    return code + (f"\ndef get_init_inputs():\n    return {init_inputs}\n" if init_inputs else "")


@pytest.mark.parametrize("code, says", [
    (module(", c: self.emb = nn.Embedding(c, 8)", "x):\n        return torch.relu(self.emb(x))",
            "torch.rand(2, 3)", "[3]"), "reads x as int64 indices, but get_inputs makes it a float tensor"),
    (module(", c: self.conv = nn.ConvTranspose2d(c, c, 3, padding_mode='reflect')", "x):\n        return self.conv(x)",
            "torch.rand(2, 3, 8, 8)", "[3]"), "line 7: nn.ConvTranspose2d (set on line 4) pads with 'reflect', which torch "
                                              "takes for convolutions (not transposed ones) as 'zeros'"),
    ("def forward(self, x):\n    return torch.softmax(x, dim=self.dim)\n",
     "line 2: forward reads self.dim, which __init__ does not set"),
    (module(", dim: self.dim = dim", "x):\n        return torch.logaddexp2(x, x * self.dim)", init_inputs="[1]"),
     "line 7: forward returns 'torch.logaddexp2(x, x * 1)': unsupported function 'logaddexp2'"),
    (module(", dim: self.dim = dim", "x):\n        return torch.sum(x, dim=self.dim)", init_inputs=None),
     "Model.__init__ takes dim, which nothing gives: add get_init_inputs()"),
    (module(", d: self.norm = nn.RMSNorm((4, d), eps=1e-6)", "x):\n        return self.norm(x)", "torch.rand(2, 4, 8)",
            init_inputs="[8]"), "rmsnorm over normalized_shape '(4, 8)' is not supported"),
    (module(", d: self.norm = nn.RMSNorm(d)", "x):\n        return self.norm(x)", init_inputs="[8]"),
     "nn.RMSNorm (set on line 4) without eps uses the input dtype's machine epsilon"),
    (module("", "a, s):\n        return a * s", "torch.rand(4, 8), 'scale'"), "neither a tensor nor a number"),
])
def test_what_cannot_be_read_is_refused_by_line_and_briefly(code, says):
    with pytest.raises(GenerationError) as e:
        parse_request(fenced(code))
    assert says in str(e.value)
    assert len(str(e.value)) < 300 and ir.SUPPORTED_TEXT not in str(e.value)


def test_values_get_inputs_sets_by_index_are_left_to_the_judge():
    code = module("", "x, m):\n        return torch.softmax(x.masked_fill(~m, float('-inf')), dim=-1)",
                  "torch.randn(4, 8), torch.rand(4, 8) > 0.5").replace(
        "    return [torch.randn(4, 8), torch.rand(4, 8) > 0.5]",
        "    m = torch.rand(4, 8) > 0.5\n    m[:, 0] = True\n    t = torch.randint(0, 8, (4,))\n    t[:2] = -100\n"
        "    return [torch.randn(4, 8), m]")
    spec, _ = parse_request(fenced(code))
    assert [i["shapes"] for i in spec["inputs"]] == [[[4, 8]], [[4, 8]]] and spec["inputs"][1]["dtypes"] == ["bool"]


@pytest.mark.parametrize("forward, inputs, expression", [
    ("x.sum(dim=-1, dtype=torch.float32)", "torch.rand(4, 8)", "sum(x, dim=-1)"),
    ("F.softmax(x, dim=1, dtype=torch.float32).to(x.dtype)", "torch.rand(4, 8).half()", "softmax(x"),
    ("torch.cumsum(x, 1, dtype=x.dtype)", "torch.rand(4, 8).bfloat16()", "cumsum(x"),
])
def test_a_reductions_dtype_is_read_as_a_cast_of_its_result(forward, inputs, expression):
    spec, notes = parse_request(fenced(module("", f"x):\n        return {forward}", inputs)))
    assert spec["expression"].startswith(expression)
    assert any("ignored dtype casts" in n or "casts to float32" in n for n in notes)


@pytest.mark.parametrize("forward, inputs", [("x.sum(dim=-1, dtype=torch.float32)", "torch.rand(4, 8).half()"),
                                             ("x.cumsum(1, dtype=torch.int64)", "torch.rand(4, 8)")])
def test_a_reductions_dtype_that_pytorch_would_return_is_refused(forward, inputs):
    with pytest.raises(GenerationError, match="so in PyTorch it returns that dtype"):
        parse_request(fenced(module("", f"x):\n        return {forward}", inputs)))


@pytest.mark.parametrize("init, forward, inputs, says", [
    ("", "x * 2.0 + torch.ones(8)", "torch.rand(4, 8).half()", "torch.ones(8) makes a float32 tensor beside"),
    ("", "x + torch.tensor([[0.5], [1.5], [2.5], [3.5]])", "torch.rand(4, 8).bfloat16()", "makes a float32 tensor"),
    ("", "x * torch.full((4, 1), float('-inf'))", "torch.rand(4, 8).half()", "makes a float32 tensor"),
    ("", "x + torch.ones(8, dtype=torch.float16)", "torch.rand(4, 8, dtype=torch.bfloat16)",
     "makes a float16 tensor beside get_inputs' bfloat16"),
    (": self.scale = nn.Parameter(torch.randn(8))", "x * self.scale", "torch.rand(4, 8).half()",
     "learned tensors (scale) are float32"),
    ("", "x + y", "torch.rand(4, 8).half(), torch.rand(4, 8)", "tensors of float16 and float32"),
    ("", "x * torch.full((8,), fill_value=2.5)", "torch.rand(4, 8).half()", "makes a float32 tensor"),
    ("", "x + x.new_ones(8, dtype=torch.float32)", "torch.rand(4, 8).half()", "makes a float32 tensor"),
    ("", "x * (torch.arange(8) / 8)", "torch.rand(4, 8).half()", "makes a float32 tensor"),       # int made float
    ("", "x * torch.exp(-torch.arange(8))", "torch.rand(4, 8).half()", "makes a float32 tensor"),
])
def test_a_16_bit_paste_that_pytorch_would_promote_to_float32_is_refused(init, forward, inputs, says):
    params = "x, y" if forward.endswith(" y") else "x"
    with pytest.raises(GenerationError, match=re.escape(says)):
        parse_request(fenced(module(init, f"{params}):\n        return {forward}", inputs)))


@pytest.mark.parametrize("forward", ["x + torch.ones(8, dtype=x.dtype)", "x * torch.tensor(2.0)", "x + x.new_ones(8)",
                                     "x + torch.arange(8)", "x + torch.full((8,), 2)", "x + torch.arange(8) // 2",
                                     "x.masked_fill(torch.triu(torch.ones(4, 8), 1).bool(), 0.0)",
                                     "x + torch.ones(8).to(x.dtype)", "x * (torch.arange(8) / 8).type_as(x)"])
def test_constants_that_keep_a_16_bit_inputs_dtype_are_read(forward):
    spec, _ = parse_request(fenced(module("", f"x):\n        return {forward}", "torch.rand(4, 8).half()")))
    assert spec["inputs"][0]["dtypes"] == ["float16"]


@pytest.mark.parametrize("made", ["torch.randint(0, 2, x.shape).bool()", "torch.rand(8, 37) > 0.5",
                                  "torch.randint(0, 2, (8, 37), dtype=torch.bool)",
                                  "torch.ones(x.size(0), 37, dtype=torch.bool)", "torch.zeros_like(x).to(torch.bool)",
                                  "~(torch.rand_like(x) < 0.5)"])
def test_a_bool_tensor_get_inputs_makes_is_a_mask_input(made):
    # KernelBench's masked cumsum (level 1, problem 93), with its mask made in each of these ways
    code = module(", dim: self.dim = dim", "x, mask):\n        return torch.cumsum(x * mask, dim=self.dim)",
                  init_inputs="[1]").replace("    return [torch.rand(4, 8)]",
                                             f"    x = torch.rand(8, 37)\n    mask = {made}\n    return [x, mask]")
    spec, _ = parse_request(fenced("import torch\nimport torch.nn as nn\n\n" + code))
    assert spec["expression"] == "cumsum(x * mask, dim=-1)" and spec["reference_class"] == "Model"
    assert [(i["dtypes"], i["shapes"], i["domain"]) for i in spec["inputs"]] == [
        (["float32"], [[8, 37]], "normal"), (["bool"], [[8, 37]], "mask")]


def test_a_correction_that_changes_the_operation_drops_the_pasted_reference():
    code = SUM_MODULE.replace("torch.sum", "torch.mean")
    spec, notes = parse_request(fenced(code), ["fp16 only"])
    assert spec["reference_class"] == "Model" and spec["inputs"][0]["dtypes"] == ["float16"]
    spec, notes = parse_request(fenced(code), ["make it max(x, dim=1)"])
    assert "reference_class" not in spec and any("a correction changed what the pasted Model" in n for n in notes)


@pytest.mark.parametrize("name, kwargs", [
    ("leaky_relu", {"negative_slope": 0.2}), ("elu", {"alpha": 0.5}), ("selu", {}), ("celu", {"alpha": 2.0}),
    ("relu6", {}), ("hardtanh", {"min_val": -2.0, "max_val": 3.0}), ("hardsigmoid", {}), ("hardswish", {}),
    ("softsign", {}), ("softplus", {"beta": 2.0}), ("mish", {}), ("logsigmoid", {}), ("tanhshrink", {}),
    ("softshrink", {"lambd": 0.3}), ("hardshrink", {}),
])
def test_activations_written_in_ir_ops_match_pytorch(tmp_path, name, kwargs):
    args = "".join(f", {k}={v}" for k, v in kwargs.items())
    node = ir.parse(f"{name}(x{args})")
    spec = {"name": "act", "expression": ir.to_text(node), "description": "",
            "inputs": [{"name": "x", "dtypes": ["float32"], "shapes": [[8]]}]}
    namespace: dict = {}
    exec(lower_torch.reference_source(spec, node), namespace)
    x = torch.linspace(-40, 40, 40001, dtype=torch.float64)
    torch.testing.assert_close(namespace["act"](x), getattr(F, name)(x, **kwargs), rtol=1e-12, atol=1e-8)


SCALAR_MODULE = "import torch\nimport torch.nn as nn\n\n\n" + module("", "a, s):\n        return a * s", "torch.rand(4, 8), 3.5")


@pytest.mark.parametrize("code", [SUM_MODULE, SCALAR_MODULE], ids=["sum", "a number get_inputs gives"])
def test_the_pasted_file_is_the_reference_and_passes_the_judge_and_its_tests(code):
    request = fenced(code)
    spec, _ = parse_request(request)
    gen = OfflineGenerator()
    approved = {"spec": __import__("json").dumps(spec)}
    reference = gen.generate(GenRequest("reference", request, approved)).content
    assert reference.strip() == textwrap.dedent(code).strip()
    assert check_reference(reference, "Model") == []
    test = testgen.reference_test_source(spec)
    assert check_test(test) == []
    files = {"spec.json": approved["spec"], "reference.py": reference, "test_reference.py": test}
    result = worker.execute_job({"job_id": "t-pasted", "kind": "reference_test", "backend": "cpu", "attempt": 1,
                                 "timeout_s": 120, "files": files}, lambda line: None)
    assert result["status"] == "pass", result["summary"]


LEARNED = {
    "linear": (module(", k, n: self.fc = nn.Linear(k, n)", "x):\n        return torch.relu(self.fc(x)) * 0.5",
                      "torch.randn(24, 40)", "[40, 16]"), "relu(matmul(x, fc_weight.T) + fc_bias) * 0.5",
               {"fc_weight": ([16, 40], "fc.weight"), "fc_bias": ([16], "fc.bias")}),
    "layernorm": (module(", d: self.ln = nn.LayerNorm(d, eps=1e-6)", "x):\n        return self.ln(x + 1.0)",
                         "torch.randn(8, 6, 50)", "[50]"), "layernorm(x + 1.0, ln_weight, ln_bias, eps=1e-06)",
                  {"ln_weight": ([50], "ln.weight"), "ln_bias": ([50], "ln.bias")}),
    "linear without bias, called twice": (
        module(", d: self.fc = nn.Linear(d, d, bias=False)", "x):\n        y = self.fc(x)\n        return y + y",
               "torch.randn(32, 20)", "[20]"), "matmul(x, fc_weight.T) + matmul(x, fc_weight.T)",
        {"fc_weight": ([20, 20], "fc.weight")}),
    # nn.Sequential: each layer's function on the one before's result, its tensors where the module keeps them
    "sequential": (module(", k: self.net = nn.Sequential(nn.Linear(k, 12), nn.GELU(), nn.Flatten(0), nn.Dropout(0.0))",
                          "x):\n        return self.net(x)", "torch.randn(6, 20)", "[20]"),
                   "gelu(matmul(x, net_0_weight.T) + net_0_bias).flatten(0, -1)",
                   {"net_0_weight": ([12, 20], "net.0.weight"), "net_0_bias": ([12], "net.0.bias")}),
    # nn.ModuleList built in a loop and looped over in forward: unrolled, one weight per layer
    "module list": (module(", d, n: self.blocks = nn.ModuleList()\n        for _ in range(n):\n"
                           "            self.blocks.append(nn.Linear(d, d))",
                           "x):\n        for k, block in enumerate(self.blocks):\n"
                           "            x = torch.tanh(block(x)) + (x if k else 0.0)\n        return x",
                           "torch.randn(10, 12)", "[12, 2]"),
                    "tanh(matmul(tanh(matmul(x, blocks_0_weight.T) + blocks_0_bias) + 0.0, blocks_1_weight.T) + "
                    "blocks_1_bias) + (tanh(matmul(x, blocks_0_weight.T) + blocks_0_bias) + 0.0)",
                    {f"blocks_{k}_{p}": (shape, f"blocks.{k}.{p}") for k in (0, 1)
                     for p, shape in (("weight", [12, 12]), ("bias", [12]))}),
}


@pytest.mark.parametrize("name, kinds", [("linear", ("reference_test", "kernel_test")), ("layernorm", ()),
                                         ("linear without bias, called twice", ()), ("sequential", ("kernel_test",)),
                                         ("module list", ())])
def test_learned_weights_are_inputs_the_judge_makes_and_binds_into_the_pasted_module(name, kinds):
    code, expression, learned = LEARNED[name]
    request = fenced("import torch\nimport torch.nn as nn\n\n" + code)
    spec, _ = parse_request(request)
    assert spec["expression"] == expression and spec["reference_class"] == "Model"
    params = {i["name"]: (i["shapes"][0], i["parameter"]) for i in spec["inputs"] if i.get("parameter")}
    assert params == learned
    # The module's sizes stay as they are in the odd and shrunk cases: its weights are built with them.
    assert {d for shape, _ in learned.values() for d in shape} <= set(spec["fixed_sizes"])
    gen, approved = OfflineGenerator(), {"spec": __import__("json").dumps(spec)}
    files = {"spec.json": approved["spec"], "reference.py": gen.generate(GenRequest("reference", request, approved)).content,
             "kernel.py": gen.generate(GenRequest("kernel", request, approved)).content}
    for kind in kinds:
        test = gen.generate(GenRequest(kind, request, approved)).content
        assert check_test(test) == []
        files[f"test_{kind.split('_')[0]}.py"] = test
        result = worker.execute_job({"job_id": f"t-{kind}", "kind": kind, "backend": "cpu", "attempt": 1,
                                     "timeout_s": 300, "files": dict(files)}, lambda line: None)
        assert result["status"] == "pass", result["summary"]
        assert result["pytest"]["passed"] >= 1 and not result["pytest"]["failed"], result["pytest"]


def test_infinities_written_as_calls_reach_the_kernel_and_pass_its_test():
    code = module("", "x, mask):\n        return torch.softmax(x.masked_fill(mask, float('-inf')), dim=-1) * math.inf ** 0",
                  "torch.randn(6, 33), torch.rand(6, 33) > 0.7")
    request = fenced("import math\nimport torch\nimport torch.nn as nn\n\n" + code)
    spec, _ = parse_request(request)
    assert spec["expression"] == "softmax(where(mask, -inf, x)) * 1.0"
    gen, approved = OfflineGenerator(), {"spec": __import__("json").dumps(spec)}
    files = {"spec.json": approved["spec"], **{f: gen.generate(GenRequest(k, request, approved)).content
                                               for f, k in (("reference.py", "reference"), ("kernel.py", "kernel"),
                                                            ("test_kernel.py", "kernel_test"))}}
    result = worker.execute_job({"job_id": "t-inf", "kind": "kernel_test", "backend": "cpu", "attempt": 1,
                                 "timeout_s": 300, "files": files}, lambda line: None)
    assert result["status"] == "pass", result["summary"]


def test_a_reference_class_the_file_cannot_build_fails_with_why():
    spec, _ = parse_request(fenced(SUM_MODULE))
    broken = textwrap.dedent(SUM_MODULE).replace("return [reduce_dim]", "return [reduce_dim, 2]")
    files = {"spec.json": __import__("json").dumps(spec), "reference.py": broken,
             "test_reference.py": testgen.reference_test_source(spec)}
    result = worker.execute_job({"job_id": "t-broken", "kind": "reference_test", "backend": "cpu", "attempt": 1,
                                 "timeout_s": 120, "files": files}, lambda line: None)
    assert result["status"] != "pass" and "Model(*get_init_inputs()) fails" in result["summary"]


@pytest.mark.parametrize("code, words, expression", [
    ("def forward(self, x):\n    return torch.max(x, dim=1)[0]\n", "fp16 64x128", "max(x, dim=-1)"),
    ("def forward(self, x):\n    return torch.softmax(x, dim=1)\n", "64x128", "softmax(x)"),
    ("def f(x):\n    return x * math.pi\n", "", "x * 3.141592653589793"),
    ("def forward(self, a, b):\n    y = a @ b\n    return y + torch.relu(y)\n", "512x256 by 256x128",
     "matmul(a, b) + relu(matmul(a, b))"),
])
def test_a_forward_alone_or_a_function(code, words, expression):
    spec, _ = parse_request(fenced(code, words))
    assert spec["expression"] == expression and "reference_class" not in spec


def test_a_correction_with_shapes_keeps_its_other_words_and_replaces_get_inputs_shapes():
    spec, _ = parse_request(fenced(SUM_MODULE), ["shape 8x9x10"])
    assert spec["inputs"][0]["shapes"] == [[8, 9, 10]] and spec["reference_class"] == "Model"
    spec, _ = parse_request("layernorm on 512x1000 fp32", ["eps 1e-3, shape 64x64"])
    assert spec["expression"] == "layernorm(x, weight, bias, eps=0.001)" and spec["inputs"][0]["shapes"] == [[64, 64]]


@pytest.mark.parametrize("init, forward, inputs, expression", [
    (": self.loss = nn.TripletMarginLoss(margin=0.5)", "a, p, n):\n        return self.loss(a, p, n)",
     "torch.rand(4, 8), torch.rand(4, 8), torch.rand(4, 8)", "mean(relu(norm(a - p + 1e-06, p=2.0, dim=-1) - "
     "norm(a - n + 1e-06, p=2.0, dim=-1) + 0.5), dim=None)"),
    (": self.loss = nn.SmoothL1Loss(beta=0.0, reduction='sum')", "x, y):\n        return self.loss(x, y)",
     "torch.rand(4, 8), torch.rand(4, 8)", "sum(abs(x - y), dim=None)"),
    (": self.loss = nn.KLDivLoss(reduction='batchmean')", "x, y):\n        return self.loss(torch.log(x), y)",
     "torch.rand(4, 8), torch.rand(4, 8)",
     "mean(sum(where(y > 0.0, y * (log(y) - log(x)), 0.0).flatten(1, -1), dim=1), dim=None)"),
])
def test_a_loss_module_is_the_function_it_computes(init, forward, inputs, expression):
    spec, _ = parse_request(fenced(module(init, forward, inputs)))
    assert spec["expression"] == expression and spec["reference_class"] == "Model"


SIGNS = "torch.randint(0, 2, ({})).float() * 2 - 1"


@pytest.mark.parametrize("init, forward, inputs, call, domains", [
    (": self.loss = nn.NLLLoss(ignore_index=-100, reduction='sum')", "x, t):\n        return self.loss(x, t)",
     "torch.randn(16, 10), torch.randint(0, 10, (16,))", "F.nll_loss(x, t, reduction='sum')",
     {"x": "normal", "t": "index"}),
    (": self.loss = nn.CrossEntropyLoss(ignore_index=0)", "x, t):\n        return self.loss(x, t)",
     "torch.randn(16, 10), torch.randint(0, 10, (16,))", "F.cross_entropy(x, t, ignore_index=0)",
     {"x": "normal", "t": "index"}),
    (": self.loss = nn.HingeEmbeddingLoss(margin=0.5)", "x, y):\n        return self.loss(x, y)",
     f"torch.randn(16, 10), {SIGNS.format('16, 10')}", "F.hinge_embedding_loss(x, y, margin=0.5)",
     {"x": "normal", "y": "sign"}),
    (": self.loss = nn.CosineEmbeddingLoss(0.1, reduction='none')", "a, b, y):\n        return self.loss(a, b, y)",
     f"torch.randn(16, 10), torch.randn(16, 10), {SIGNS.format('16,')}",
     "F.cosine_embedding_loss(a, b, y, margin=0.1, reduction='none')", {"a": "nonzero", "b": "nonzero", "y": "sign"}),
    (": self.loss = nn.MarginRankingLoss(margin=0.2)", "a, b, y):\n        return self.loss(a, b, y)",
     f"torch.randn(16), torch.randn(16), {SIGNS.format('16,')}", "F.margin_ranking_loss(a, b, y, margin=0.2)",
     {"a": "normal", "b": "normal", "y": "normal"}),
    (": self.cos = nn.CosineSimilarity(dim=1, eps=1e-6)", "a, b):\n        return 1 - self.cos(a, b)",
     "torch.randn(16, 10), torch.randn(1, 10)", "1 - F.cosine_similarity(a, b, dim=1, eps=1e-6)",
     {"a": "nonzero", "b": "nonzero"}),
])
def test_target_loss_and_similarity_modules_are_the_functions_they_compute(init, forward, inputs, call, domains):
    spec, _ = parse_request(fenced(module(init, forward, inputs)))
    assert ir.parse(spec["expression"]) == ir.parse(call, as_written=True) and spec["reference_class"] == "Model"
    assert {i["name"]: i["domain"] for i in spec["inputs"]} == domains


@pytest.mark.parametrize("init, inputs, says", [
    ("nn.NLLLoss()", "torch.randn(4, 10, 3), torch.randint(0, 10, (4, 3))", "nll_loss on 3-D logits, whose classes"),
])
def test_nll_modules_beside_torchs_defaults_are_refused_saying_why(init, inputs, says):
    code = module(f": self.loss = {init}", "x, t):\n        return self.loss(x, t)", inputs)
    with pytest.raises(GenerationError, match=re.escape(says)):
        parse_request(fenced(code))


MLP_MODULE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class MLP(nn.Module):
    def __init__(self, dim=1024, hidden=4096):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
"""


@pytest.mark.parametrize("words", ["for 16x1024 fp16", "with x 16x1024, fp16"])
def test_a_module_without_get_inputs_takes_its_tensors_shape_from_the_words_and_its_weights_own(words):
    spec, _ = parse_request(fenced(MLP_MODULE) + "\n" + words)
    assert {i["name"]: i["shapes"] for i in spec["inputs"]} == {
        "x": [[16, 1024]], "gate_proj_weight": [[4096, 1024]], "up_proj_weight": [[4096, 1024]],
        "down_proj_weight": [[1024, 4096]]}
    assert all(set(i["dtypes"]) == {"float16"} for i in spec["inputs"])


def test_a_module_without_get_inputs_takes_each_tensors_shape_by_name():
    code = ("import torch\nimport torch.nn as nn\n\nclass Attention(nn.Module):\n    def forward(self, q, k, v):\n"
            "        return (q @ k.transpose(-2, -1) * 0.125).softmax(dim=-1) @ v\n")
    spec, _ = parse_request(fenced(code) + "\nwith q 2x8x128x64, k 2x8x128x64, v 2x8x128x64")
    assert {i["name"]: i["shapes"] for i in spec["inputs"]} == {n: [[2, 8, 128, 64]] for n in "qkv"}


LLAMA_RMSNORM = """
import torch
import torch.nn as nn

class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight
"""


@pytest.mark.parametrize("words", ["for x 64x256 bf16, dim 256", "x 64x256 in bf16 with dim=256 and eps 1e-5"])
def test_a_modules_own_methods_are_inlined_and_its_init_arguments_come_from_the_words(words):
    spec, notes = parse_request(fenced(LLAMA_RMSNORM) + "\n" + words)
    eps = "1e-05" if "eps" in words else "1e-06"
    assert ir.parse(spec["expression"]) == ir.parse(f"x * rsqrt(mean(x ** 2.0, dim=-1, keepdim=True) + {eps}) * weight")
    assert {i["name"]: i["shapes"] for i in spec["inputs"]} == {"x": [[64, 256]], "weight": [[256]]}
    assert any("ignored dtype casts" in n for n in notes)     # float() then type_as(x): the input's dtype


def test_an_init_argument_nothing_gives_is_refused_naming_it():
    with pytest.raises(GenerationError, match="takes dim, which nothing gives"):
        parse_request(fenced(LLAMA_RMSNORM) + "\nfor x 64x256 bf16")


LLAMA_ATTENTION = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class SelfAttention(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        bsz, seqlen, _ = x.shape
        q = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = out.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(out)
"""


def test_an_attention_module_merges_its_heads_back_with_the_inputs_first_dims():
    spec, _ = parse_request(fenced(LLAMA_ATTENTION) + "\nx 2x16x64 fp16, dim 64, n_heads 4")
    node = ir.parse(spec["expression"], as_written=True)
    assert ir.output_shape(node, {i["name"]: i["shapes"][0] for i in spec["inputs"]}) == [2, 16, 64]
    assert "scaled_dot_product_attention(" in spec["expression"] and ".reshape(x.shape[0], x.shape[1], -1)" in \
        spec["expression"]
    assert {i["name"] for i in spec["inputs"]} == {"x", "wq_weight", "wk_weight", "wv_weight", "wo_weight"}


SCALED = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, q):
        return torch.softmax(q * q.size(-1) ** -0.5, dim=-1)

def get_inputs():
    return [torch.randn(64, 256)]

def get_init_inputs():
    return []
"""


def test_a_size_the_code_reads_as_a_number_keeps_that_size_in_every_case():
    """q.size(-1) ** -0.5 is 0.0625 at 256 columns: the odd-sized and shrunk cases keep 256, where the
    pasted module would compute another scale."""
    spec, _ = parse_request(fenced(SCALED))
    assert ir.parse(spec["expression"]) == ir.parse("softmax(q * 0.0625)")
    q = spec["inputs"][0]
    assert q["fixed_dims"] == [1] and 256 in spec["fixed_sizes"]
    with pytest.raises(SpecError, match="fixed_dims"):
        validate({**spec, "inputs": [{**q, "fixed_dims": [2]}]})


FROZEN_NORM = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class FrozenNorm(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(c))
        self.register_buffer("running_var", torch.ones(c))
        self.register_buffer("mask", torch.ones(c, c, dtype=torch.bool).tril(), persistent=False)

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, training=False, eps=1e-5)

def get_inputs():
    return [torch.randn(4, 8, 5, 5)]

def get_init_inputs():
    return [8]
"""


def test_registered_float_buffers_are_inputs_the_judge_binds_as_parameters():
    spec, _ = parse_request(fenced(FROZEN_NORM))
    inputs = {i["name"]: (i["shapes"][0], i.get("parameter"), i["domain"]) for i in spec["inputs"]}
    assert inputs["running_mean"] == ([8], "running_mean", "normal")
    assert inputs["running_var"][:2] == ([8], "running_var") and inputs["running_var"][2] == "positive"
    # a bool buffer is unknown: a forward reading it is refused naming the line that made it
    code = FROZEN_NORM.replace("training=False, eps=1e-5)", "training=False, eps=1e-5) * self.mask[0, 0]")
    with pytest.raises(GenerationError, match="mask"):
        parse_request(fenced(code))


LM_HEAD = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lm_head = nn.Linear(64, 500, bias=False)

    def forward(self, x, targets):
        logits = self.lm_head(x)
        B, T, V = logits.shape
        return F.cross_entropy(logits.view(B * T, V), targets.view(B * T))

def get_inputs():
    return [torch.randn(2, 16, 64), torch.randint(0, 500, (2, 16))]

def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("view", ["logits.view(B * T, V), targets.view(B * T)",
                                  "logits.view(-1, logits.size(-1)), targets.view(-1)"])
def test_a_language_models_loss_over_its_flattened_tokens_reads(view):
    # the logits' rank is the product's flattened one (2-D), not the input's; the targets' one size,
    # named by the logits' dims, is all of them
    spec, _ = parse_request(fenced(LM_HEAD.replace("logits.view(B * T, V), targets.view(B * T)", view)))
    node = ir.parse(spec["expression"])
    assert node.op == "cross_entropy" and ir.matmul_node(node) is not None
    assert ir.output_shape(node.args[1], {i["name"]: i["shapes"][0] for i in spec["inputs"]}) == [32]


PADDED_CONV = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pad = PAD
        self.conv = nn.Conv2d(4, 8, 2)

    def forward(self, x):
        return self.conv(self.pad(x))

def get_inputs():
    return [torch.randn(2, 4, 9, 9)]

def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("pad, padding", [("nn.ZeroPad2d((1, 0, 1, 0))", "padding=1, padding_end=(0, 0)"),
                                          ("nn.ConstantPad2d(2, 0.0)", "padding=2"), ("nn.ZeroPad2d(1)", "padding=1")])
def test_a_zero_padding_layer_before_a_convolution_is_its_padding(pad, padding):
    spec, _ = parse_request(fenced(PADDED_CONV.replace("PAD", pad)))
    assert ir.parse(spec["expression"]) == ir.parse(f"conv2d(x, conv_weight, conv_bias, {padding})")


@pytest.mark.parametrize("pad, written", [("nn.ReflectionPad2d(1)", "mode='reflect', value=0.0"),
                                          ("nn.ConstantPad2d(1, 3.0)", "mode='constant', value=3.0")])
def test_a_padding_of_other_values_is_a_kernel_before_the_convolution(pad, written):
    spec, _ = parse_request(fenced(PADDED_CONV.replace("PAD", pad)))
    want = f"conv2d(pad(x, (1, 1, 1, 1), {written}), conv_weight, conv_bias)"
    assert ir.parse(spec["expression"]) == ir.parse(want)


@pytest.mark.parametrize("init, call", [
    ("self.n = nn.BatchNorm2d(8)\n        self.n.train(mode=flag)", "self.n.train(mode=flag)"),
    ("self.n = nn.BatchNorm2d(8)\n        self.m = Block()\n        self.m.eval()", "self.m.eval()"),
    ("self.n = nn.BatchNorm2d(8)\n        self.m = Block()\n        self.eval()", "self.eval()"),
    ("self.n = nn.BatchNorm2d(8)\n        self.half()", "self.half()"),
    ("self.n = nn.BatchNorm2d(8)\n        self._freeze()\n\n    def _freeze(self):\n"
     "        for m in self.modules():\n            if isinstance(m, nn.BatchNorm2d):\n                m.eval()", "m.eval()"),
])
def test_a_module_whose_init_changes_how_it_runs_is_refused_naming_the_call(init, call):
    # a mode not written as a constant, a dtype, a loop over self.modules(), a module class of the paste
    # (Block: its own layers not reached): read as torch builds it, the kernel would solve another problem
    text = ("import torch\nimport torch.nn as nn\n\nflag = bool(0.5)\n\nclass Block(nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n        self.d = nn.Dropout(0.1)\n\n"
            "    def forward(self, x):\n        return self.d(x)\n\n"
            "class Model(nn.Module):\n    def __init__(self):\n"
            f"        super().__init__()\n        {init}\n\n    def forward(self, x):\n        return self.n(x)\n\n"
            "def get_inputs():\n    return [torch.randn(2, 8, 6, 5)]\n")
    said = error(text)
    assert call in said and "changes its" in said


@pytest.mark.parametrize("init, forward, expression", [
    ("self.n = nn.BatchNorm2d(8)\n        self.n.eval()", "self.n(x)",
     "batch_norm(x, n_running_mean, n_running_var, n_weight, n_bias, training=False, eps=1e-05)"),
    ("self.n = nn.BatchNorm2d(8, affine=False)\n        self.d = nn.Dropout(0.2)\n        self.eval()",
     "self.d(self.n(x))", "batch_norm(x, n_running_mean, n_running_var, None, None, training=False, eps=1e-05)"),
    ("self.s = nn.Sequential(nn.BatchNorm2d(8), nn.Dropout(0.2))\n        self.s.train(False)", "self.s(x)",
     "batch_norm(x, s_0_running_mean, s_0_running_var, s_0_weight, s_0_bias, training=False, eps=1e-05)"),
    ("self.n = nn.BatchNorm2d(8, track_running_stats=False)\n        self.n.eval()", "self.n(x)",
     "batch_norm(x, None, None, n_weight, n_bias, training=True, eps=1e-05)"),
    ("self.r = nn.RReLU(0.1, 0.3)\n        self.eval()", "self.r(x)", "rrelu(x, lower=0.1, upper=0.3, training=False)"),
    ("self.n = nn.BatchNorm2d(8)\n        self.eval()\n        self.m = nn.BatchNorm2d(8)", "self.m(self.n(x))",
     "batch_norm(batch_norm(x, n_running_mean, n_running_var, n_weight, n_bias, training=False, eps=1e-05), "
     "None, None, m_weight, m_bias, training=True, eps=1e-05)"),
])
def test_eval_mode_set_in_init_is_read_as_torch_runs_it(init, forward, expression):
    # eval() / train(False) on the module or a layer: batch norm over its running statistics (buffers the
    # judge draws, the variance positive, and binds), dropout its input; a layer made after stays in training
    text = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
            f"        super().__init__()\n        {init}\n\n    def forward(self, x):\n        return {forward}\n\n"
            "def get_inputs():\n    return [torch.randn(2, 8, 6, 5)]\n")
    spec, _ = parse_request(text)
    assert ir.parse(spec["expression"]) == ir.parse(expression)
    stats = {i["parameter"]: i["domain"] for i in spec["inputs"] if "running" in (i.get("parameter") or "")}
    assert all(domain == ("positive" if path.endswith("var") else "normal") for path, domain in stats.items())


def test_train_mode_kept_and_grad_flags_in_init_are_read_past():
    text = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.n = nn.BatchNorm2d(8)\n        self.n.train()\n"
            "        self.n.requires_grad_(False)\n\n    def forward(self, x):\n        return self.n(x)\n\n"
            "def get_inputs():\n    return [torch.randn(2, 8, 6, 5)]\n")
    spec, _ = parse_request(text)
    assert "batch_norm" in spec["expression"] and "training=True" in spec["expression"]


def test_an_in_place_update_of_a_tensor_of_its_own_is_the_name_bound_anew():
    spec, _ = parse_request("def f(x, y):\n    z = x * 2\n    z.relu_()\n    z.mul_(y)\n    z += 1\n    return z\n"
                            "for x 8x16 and y 8x16")
    assert ir.parse(spec["expression"]) == ir.parse("relu(x * 2) * y + 1")


@pytest.mark.parametrize("body, shared", [
    ("z = x * 2\n    w = z\n    z += y\n    return w * y", "w"),            # the same tensor under two names
    ("z = x * 2\n    v = z.view(-1, 16)\n    z.add_(y)\n    return v * y", "v"),   # a view of it
    ("z = x[:, :8]\n    z.mul_(2)\n    return x * y", "x"),                 # z is a view of x
])
def test_an_in_place_update_seen_through_another_name_is_refused(body, shared):
    # PyTorch's result reads the change through the other name; the name bound anew would not
    said = error(f"def f(x, y):\n    {body}\nfor x 16x16 and y 16x16")
    assert f"while {shared} shares its memory" in said


def test_an_in_place_update_of_an_input_is_refused_as_the_runner_refuses_it():
    said = error("def f(x, y):\n    t = x * 2\n    x += y\n    return t * x\nfor x 16x16 and y 16x16")
    assert "changes the input x in place" in said and "x = x + y" in said


def _module(init: str, body: str) -> str:
    return ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\nclass Model(nn.Module):\n"
            f"    def __init__(self):\n        super().__init__()\n        {init}\n\n    def forward(self, x, y):\n"
            f"        {body}\n\ndef get_inputs():\n    return [torch.randn(8, 16), torch.randn(8, 16)]\n")


@pytest.mark.parametrize("init, body, expected", [
    # nn.ReLU(inplace=True) on h: h itself is relu'd, so h read after it is too (torch: relu(h) + relu(h))
    ("self.relu = nn.ReLU(inplace=True)", "h = x * y\n        z = self.relu(h)\n        return z + h",
     "relu(x * y) + relu(x * y)"),
    ("self.act = nn.LeakyReLU(0.2, True)", "h = x * y\n        h = self.act(h)\n        return h * x",
     "where(x * y > 0, x * y, x * y * 0.2) * x"),
    ("self.relu = nn.ReLU(inplace=True)", "return self.relu(x + y)", "relu(x + y)"),
])
def test_a_layer_made_in_place_changes_the_tensor_it_is_called_on(init, body, expected):
    spec, _ = parse_request(_module(init, body))
    assert ir.parse(spec["expression"]) == ir.parse(expected)


def test_an_in_place_layer_inside_a_larger_expression_over_a_name_read_again_is_refused():
    said = error(_module("self.relu = nn.ReLU(inplace=True)", "h = x * y\n        return h * 2 + self.relu(h)"))
    assert "changes h in place inside a larger expression" in said


@pytest.mark.parametrize("body, expected", [
    ("y = x * 3\n    torch.relu_(y)\n    return y + x", "relu(x * 3) + x"),                # a module's in-place form
    ("y = x.clone()\n    y[y < 0] = 0.0\n    return y * 2", "where(x < 0, 0.0, x) * 2"),      # a store where a mask holds
    ("y = torch.log(x)\n    y[torch.isnan(y)] = 1.0\n    return y", "where(log(x) != log(x), 1.0, log(x))"),
])
def test_in_place_function_forms_and_masked_stores_are_read(body, expected):
    spec, _ = parse_request(f"def f(x):\n    {body}\nfor x 8x16")
    assert ir.parse(spec["expression"]) == ir.parse(expected)


@pytest.mark.parametrize("body", [
    "y = torch.zeros_like(x)\n    y[:, :-1, :2] = x[:, 1:, :2]\n    y[:, 1:, 2:4] = x[:, :-1, 2:4]\n    return y",  # a shift
    "y = x * 2.0\n    y[:, -1] = 0.0\n    y[1:3, ..., 0] = x[0, :, 1]\n    return y",
    "y = x.clone()\n    y[0, 2:, 1] = -1.0\n    return torch.relu(y)",
])
def test_a_store_into_a_slice_is_a_cat_of_the_pieces_around_it(tmp_path, body):
    spec, _ = parse_request(f"def f(x):\n    {body}\nfor x 4x5x6")
    node = parse_expression(spec)
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, node, {})), spec["name"])
    x = torch.randn(4, 5, 6)
    scope: dict = {"torch": torch}
    exec(f"def f(x):\n    {body}\n", scope)
    torch.testing.assert_close(kernel(x), scope["f"](x.clone()), rtol=0, atol=0)


@pytest.mark.parametrize("made, shape", [("nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=2.0)", [2, 12, 3, 4]),
                                         ("nn.LocalResponseNorm(2)", [2, 5, 7])])
def test_local_response_norm_sums_its_channel_window_as_torch_averages_it(tmp_path, made, shape):
    spec, _ = parse_request(fenced(module(f": self.n = {made}", "x):\n        return self.n(x)",
                                          f"torch.randn({', '.join(map(str, shape))})")))
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    x = torch.randn(shape)
    x[0, -1] = float("inf")         # past the end, the window reads zeros (torch: x / inf = 0 there), not NaN
    torch.testing.assert_close(kernel(x), eval(made, {"nn": torch.nn})(x), equal_nan=True)


def test_a_buffer_computed_from_numbers_in_init_is_a_learned_input_of_its_shape():
    # HF's LlamaRotaryEmbedding: inv_freq from torch.arange in __init__, attributes set as a tuple
    init = (": self.dim, self.base = 16, 10000.0\n        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, "
            "dtype=torch.int64).float() / self.dim))\n        self.register_buffer('inv_freq', inv_freq, persistent=False)")
    forward = "q):\n        return q * torch.outer(torch.arange(q.shape[0], dtype=torch.float32), self.inv_freq).cos()"
    spec, _ = parse_request(fenced(module(init, forward, "torch.randn(9, 8)")))
    assert {i["name"]: i["shapes"] for i in spec["inputs"]} == {"q": [[9, 8]], "inv_freq": [[8]]}


@pytest.mark.parametrize("forward, inputs, shape", [
    ("q, k, v):\n        return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v",      # one k, v head (MQA)
     "torch.randn(2, 4, 6, 8), torch.randn(2, 1, 6, 8), torch.randn(2, 1, 6, 8)", [2, 4, 6, 8]),
    ("a, b):\n        return a @ b", "torch.randn(4, 6), torch.randn(3, 6, 5)", [3, 4, 5]),
])
def test_a_product_whose_batch_dims_broadcast_reads_its_operands_expanded(tmp_path, forward, inputs, shape):
    spec, _ = parse_request(fenced(module("", forward, inputs)))
    node = parse_expression(spec)
    assert "expand(" in spec["expression"] and ir.output_shape(node, {i["name"]: i["shapes"][0] for i in spec["inputs"]}) == shape
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, node, {})), spec["name"])
    args = [torch.randn(i["shapes"][0]) for i in spec["inputs"]]
    scope: dict = {"torch": torch}
    exec(f"def f({forward}\n", scope)
    torch.testing.assert_close(kernel(*args), scope["f"](*args), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("made, body, shape", [
    ("nn.MultiheadAttention(16, 4, batch_first=True)", "out, _ = self.a(x, x, x)\n        return out", [2, 7, 16]),
    ("nn.MultiheadAttention(16, 2, bias=False)", "return self.a(x, x, x)[0] * 2.0", [7, 2, 16]),
])
def test_multihead_attention_is_its_projections_around_attention(tmp_path, made, body, shape):
    spec, _ = parse_request(fenced(module(f": self.a = {made}", f"x):\n        {body}",
                                          f"torch.randn({', '.join(map(str, shape))})")))
    assert "scaled_dot_product_attention" in spec["expression"]
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    layer, x = eval(made, {"nn": torch.nn}), torch.randn(shape)
    weights = {"a_in_proj_weight": layer.in_proj_weight, "a_in_proj_bias": layer.in_proj_bias,
               "a_out_proj_weight": layer.out_proj.weight, "a_out_proj_bias": layer.out_proj.bias, "x": x}
    with torch.no_grad():
        got = kernel(*[weights[i["name"]].detach() for i in spec["inputs"]])
        want = layer(x, x, x)[0] * (2.0 if "2.0" in body else 1.0)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_multihead_attention_with_a_mask_or_its_weights_used_is_refused():
    masked = module(": self.a = nn.MultiheadAttention(16, 4)", "x):\n        return self.a(x, x, x, attn_mask=x[0])[0]")
    assert "no attn_mask" in error(fenced(masked))
    used = module(": self.a = nn.MultiheadAttention(16, 4)", "x):\n        out, w = self.a(x, x, x)\n        return w")
    assert "multihead_attention_weights_are_not_computed" in error(fenced(used))


def test_a_layer_norm_without_weights_keeps_the_size_it_was_built_for():
    # nn.LayerNorm(24, elementwise_affine=False) normalizes 24 alone: the runner's other cases keep it
    spec, _ = parse_request(fenced(module(": self.n = nn.LayerNorm(24, elementwise_affine=False)",
                                          "x):\n        return self.n(x) * 2.0", "torch.randn(3, 5, 24)")))
    assert 24 in spec["fixed_sizes"] and "normalized_shape=(24,)" in spec["expression"]


@pytest.mark.parametrize("store", ["y[:, ::2] = 0.0", "y[:, 1:-1] = 0.0", "y[:, -1:1] = 0.0", "y[:, 3:2] = 0.0"])
def test_a_store_into_a_strided_or_possibly_empty_slice_is_refused(store):
    # 1:-1 holds nothing at sizes up to 2, where torch stores nothing but the pieces around it would overlap
    assert "is not supported" in error(f"def f(x):\n    y = x.clone()\n    {store}\n    return y\nfor x 4x6")


@pytest.mark.parametrize("text", ["torch.gather(x, 1, t // 2) with x 4x8 and t 4x3",
                                  "F.cross_entropy(x, t + 1) with x 4x8 and t 4"])
def test_indices_computed_from_an_input_are_refused(text):
    assert "are computed from an input" in error(text)


@pytest.mark.parametrize("made, expected", [
    ('nn.EmbeddingBag(50, 16)', "mean(embedding(ids, e_weight), dim=1)"),
    ('nn.EmbeddingBag(50, 16, mode="max")', "amax(embedding(ids, e_weight), dim=1)"),
])
def test_an_embedding_bag_over_2d_ids_reduces_each_row(made, expected):
    text = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
            f"        super().__init__()\n        self.e = {made}\n\n    def forward(self, ids):\n        return self.e(ids)\n\n"
            "def get_inputs():\n    return [torch.randint(0, 50, (4, 7))]\n")
    spec, _ = parse_request(text)
    assert ir.parse(spec["expression"]) == ir.parse(expected)


def test_a_view_updated_in_place_is_refused_while_its_base_is_read_after():
    said = error("def f(x, y):\n    z = x * 2\n    h = z.view(-1, 16)\n    h += 1\n    h.mul_(2)\n    return z * y\n"
                 "for x 16x16 and y 16x16")
    assert "while z shares its memory" in said


@pytest.mark.parametrize("made, shapes", [
    ("[torch.randn(2, 33, 16) for _ in range(3)]", [[2, 33, 16]] * 3),
    ("[torch.randn(n, 8) for n in (4, 1, 4)]", [[4, 8], [1, 8], [4, 8]]),
])
def test_get_inputs_may_return_a_list_comprehension(made, shapes):
    code = module("", "a, b, c):\n        return a + b * c").replace("    return [torch.rand(4, 8)]",
                                                                    f"    return {made}")
    spec, _ = parse_request(fenced("import torch\nimport torch.nn as nn\n\n" + code))
    assert [i["shapes"] for i in spec["inputs"]] == [[s] for s in shapes]


INT_MASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, m, s):
        return torch.where(m == 0, -1e9, s).softmax(-1)

def get_inputs():
    return [torch.randint(0, 2, (4, 6)), torch.randn(4, 6)]
'''


@pytest.mark.parametrize("made, low_high", [("torch.randint(0, 2, (4, 6))", [0, 2]), ("torch.randint(5, (4, 6))", [0, 5]),
                                            ("torch.randint(low=-3, high=4, size=(4, 6))", [-3, 4])])
def test_an_int_tensor_read_as_numbers_stays_int64_drawn_as_get_inputs_draws_it(tmp_path, made, low_high):
    # an int attention mask first: the kernel's output still takes the float input's dtype
    spec, _ = parse_request(INT_MASK.replace("torch.randint(0, 2, (4, 6))", made))
    assert spec["inputs"][0] == {"name": "m", "dtypes": ["int64"], "shapes": [[4, 6]], "domain": "whole",
                                 "range": low_high}
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    m, s = torch.randint(*low_high, (4, 6)), torch.randn(4, 6)
    for dtype in (torch.float32, torch.float16):
        want = torch.where(m == 0, -1e9, s.to(dtype).double()).softmax(-1)
        got = kernel(m, s.to(dtype))
        assert got.dtype == dtype and torch.allclose(got.double(), want, atol=2e-3)
    case, variant = protocol.cases(spec)[0], protocol.dtype_variants(spec)[0]
    drawn = runner_inputs.make_inputs(spec, case, variant, 0, "cpu")[0]
    assert drawn.dtype == torch.int64 and drawn.min() >= low_high[0] and drawn.max() < low_high[1]


def test_an_int_tensor_made_other_than_by_randint_and_read_as_numbers_is_refused():
    code = INT_MASK.replace("torch.randint(0, 2, (4, 6))", "torch.randint(0, 2, (4, 6)) * 2")
    with pytest.raises(GenerationError, match="int64 other than by torch.randint"):
        parse_request(code)


def test_the_size_of_a_computed_tensor_is_read_as_its_number_and_kept_in_every_case():
    # a causal mask sized by the scores it masks (s = q @ k^T; n = s.size(-1)), made in forward
    code = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, q, k):
        s = q @ k.transpose(-2, -1)
        rows, cols = s.size(-2), s.size(-1)
        return s.masked_fill(torch.triu(torch.ones(rows, cols, dtype=torch.bool), 1), float("-inf")).softmax(-1)

def get_inputs():
    return [torch.randn(2, 6, 4), torch.randn(2, 9, 4)]
'''
    spec, _ = parse_request(code)
    assert "full((6, 9), 1.0)" in spec["expression"]
    assert {i["name"]: i.get("fixed_dims") for i in spec["inputs"]} == {"q": [1], "k": [1]}
