# expect: which is not a function a test file may call
import pytest
import torch

from kernel import op as kernel
from reference import op as reference


def test_op():
    getattr(torch, "save")(torch.randn(4), "out.pt")
