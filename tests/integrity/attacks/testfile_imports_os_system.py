# expect: uses os.system
import os

import pytest
import torch

from kernel import op as kernel
from reference import op as reference


def test_op():
    os.system("echo pass > result.txt")
    x = torch.randn(4)
    torch.testing.assert_close(kernel(x, x), reference(x, x))
