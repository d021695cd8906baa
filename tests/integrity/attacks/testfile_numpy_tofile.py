# expect: calls .tofile()
import pytest
import torch

from kernel import op as kernel
from reference import op as reference


def test_op():
    torch.randn(4).numpy().tofile("x.bin")
