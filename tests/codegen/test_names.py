"""The name allocator (bot.codegen.names): inputs keep their names unless the generated file needs
them (or a name derived from them) in the same scope, and every file still runs."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from bot import lower_torch
from bot.codegen.names import allocate
from bot.ops import registry
from bot.spec import parse_expression, validate


def _spec(expression: str, names: list[str], name: str = "op", shape=(5, 33)) -> dict:
    return validate({"name": name, "expression": expression,
                     "inputs": [{"name": n, "dtypes": ["float32"], "shapes": [list(shape)]} for n in names]})


def _load(tmp_path, filename: str, source: str):
    path = tmp_path / filename
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(filename[:-3] + str(abs(hash(source))), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_allocate_renames_only_what_meets_a_name_in_scope():
    def render(names: dict[str, str], operator: str) -> str:
        return (f"import torch\n\n\ndef helper(x):\n    return x\n\n\n"
                f"def {operator}({names['x']}, {names['offs']}, {names['x_ptr']}):\n"
                f"    offs = 1\n    {names['x']}_ptr = {names['x']}\n    return helper({names['offs']}) + offs\n")
    names = allocate(["x", "offs", "x_ptr"], "op", render)
    # offs meets the file's own local; x's derived x_ptr meets the input x_ptr (which came later);
    # x in helper() is another function's: no clash
    assert names == {"x": "x", "offs": "offs_in", "x_ptr": "x_ptr_in"}
    with pytest.raises(ValueError, match="operator name 'torch' clashes"):
        allocate(["x", "offs", "x_ptr"], "torch", render)


@pytest.mark.parametrize("expression, names", [
    ("relu(out + offs) * mask", ["out", "offs", "mask"]),
    ("gelu(x) + x_ptr", ["x", "x_ptr"]),
    ("softmax(rows * N)", ["rows", "N"]),
    ("sum(acc + val, dim=0)", ["acc", "val"]),
    ("rmsnorm(x + weight_ptr, weight, eps=1e-6)", ["x", "weight_ptr", "weight"]),
])
def test_inputs_named_like_the_generated_code_still_compute_right(tmp_path, expression, names):
    shape = [5, 33]
    inputs = [{"name": n, "dtypes": ["float32"], "shapes": [[33] if n == "weight" else shape]} for n in names]
    spec = validate({"name": "op", "expression": expression, "inputs": inputs})
    node = parse_expression(spec)
    reference = _load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)).op
    kernel = _load(tmp_path, "kernel.py", registry.kernel_source(spec, node, {})).op
    torch.manual_seed(0)
    args = [torch.randn(i["shapes"][0]) for i in inputs]
    assert torch.allclose(kernel(*args), reference(*args), rtol=1e-5, atol=1e-5)


def test_an_operator_named_like_the_generated_code_is_refused_naming_it():
    # a builtin or a module kernel.py imports: the spec itself is refused
    for name in ("tl", "torch", "max", "sum"):
        with pytest.raises(ValueError, match=f"spec name '{name}' is Python's {name} or a module kernel.py imports"):
            _spec("relu(x)", ["x"], name=name)
    # a helper of the generated file: the writer refuses it
    spec = _spec("relu(x)", ["x"], name="tuning_key")
    with pytest.raises(ValueError, match="operator name 'tuning_key' clashes with a name the generated code uses"):
        registry.kernel_source(spec, parse_expression(spec), {})
