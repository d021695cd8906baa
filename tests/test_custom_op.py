"""The export's torch_op.py (bot.workflow.custom_op): the approved kernel as a torch custom op, its fake
function the reference, its backward the kernel's Triton backward; imported beside kernel.py and
reference.py as a team would, in a process of its own (a custom op's name registers once per process)."""
from __future__ import annotations

import subprocess
import sys

from bot import lower_torch, training
from bot.spec import parse_expression, validate
from bot.workflow.custom_op import custom_op_source

USE = """
import torch, torch_op, reference
x = torch.randn(8, 64, requires_grad=True); w = torch.randn(64, requires_grad=True)
g = torch.randn(8, 64)
torch_op.op(x, w).backward(g)
x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
reference.op(x64, w64).backward(g.double())
assert torch.allclose(x.grad.double(), x64.grad, atol=1e-5) and torch.allclose(w.grad.double(), w64.grad, atol=1e-5)
torch.library.opcheck(torch.ops.kernelbot.op.default, (torch.randn(4, 64), torch.randn(64)),
                      test_utils=("test_schema", "test_faketensor"))
explained = torch._dynamo.explain(lambda a, b: torch_op.op(a, b) * 2)(x, w)
assert explained.graph_break_count == 0, explained.break_reasons
print("ok")
"""


def test_a_training_kernel_is_a_custom_op_torch_compile_traces_whole(tmp_path):
    spec = validate({"name": "op", "expression": "rmsnorm(x, w, eps=1e-06)", "training": True, "inputs": [
        {"name": "x", "dtypes": ["float32"], "shapes": [[8, 64]]}, {"name": "w", "dtypes": ["float32"], "shapes": [[64]]}]})
    node = parse_expression(spec)
    (tmp_path / "kernel.py").write_text(training.kernel_source(spec, node))
    (tmp_path / "reference.py").write_text(lower_torch.reference_source(spec, node))
    (tmp_path / "torch_op.py").write_text(custom_op_source(spec))
    done = subprocess.run([sys.executable, "-c", USE], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_pasted_module_gets_no_custom_op_file():
    assert custom_op_source({"name": "op", "reference_class": "Model", "inputs": []}) is None
