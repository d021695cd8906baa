# expect: takes the fixture `tmp_path`
import pytest
import torch

from kernel import op as kernel
from reference import op as reference


def test_op(tmp_path):
    torch.randn(4).numpy().tofile(str(tmp_path / "x"))
