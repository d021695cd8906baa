"""A pytest plugin the runner loads into every run of a generated test file (`-p runner.pytest_tf32`):
float32 matmuls and convolutions round to TF32 only where the job's spec allows it, as the judge's
own worker sets them (runner.untrusted). torch's cuDNN default allows TF32, which would round a
float32 convolution's reference; a test file may not set it itself (it may change no attributes)."""
from __future__ import annotations

import json
from pathlib import Path


def pytest_configure(config) -> None:
    import torch
    spec = Path("spec.json")
    tf32 = bool(json.loads(spec.read_text()).get("tf32")) if spec.exists() else False
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
