"""The generated reference test passes torch's own result in every dtype, at full size, for every
catalog operator and every single pointwise function: a tolerance that fails honest torch code
would fail honest kernels too. On the GPU only (on the CPU the generated tests shrink every case)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot import catalog
from bot.generators.interface import GenRequest
from bot.generators.offline import OfflineGenerator

SINGLE_OPS = ["gelu(x)", "gelu(x, approximate='tanh')", "silu(x)", "sigmoid(x)", "tanh(x)", "exp(x)",
              "log(x)", "sqrt(x)", "rsqrt(x)", "x * y + z", "x / y", "gelu(x + b) - y"]
REQUESTS = [e.request("big") for e in catalog.ENTRIES] + [f"{e} for 4096x4096, each in fp16, bf16, fp32"
                                                             for e in SINGLE_OPS]


@pytest.mark.gpu
@pytest.mark.parametrize("request_text", REQUESTS)
def test_torch_itself_passes_the_generated_reference_test(request_text, tmp_path):
    gen = OfflineGenerator()
    spec = gen.generate(GenRequest("spec", request_text)).content
    files = {"spec.json": spec}
    for stage, name in (("reference", "reference.py"), ("reference_test", "test_reference.py")):
        files[name] = gen.generate(GenRequest(stage, request_text, approved={"spec": spec})).content
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    # as the runner runs it (runner.worker): TF32 only where the spec allows it, cuDNN's included
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "runner.pytest_tf32",
                          "test_reference.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:]
