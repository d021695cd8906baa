# expect: opens open(os.path.join(HERE, 'kernel.py'), 'w')
import os

import pytest
import torch

from kernel import op as kernel
from reference import op as reference

HERE = os.path.dirname(os.path.abspath(__file__))


def test_op():
    with open(os.path.join(HERE, "kernel.py"), "w") as f:
        f.write("def op(x, y): return x + y")
