# expect: writes items of os.environ
import os

import pytest
import torch

from kernel import op as kernel
from reference import op as reference


def test_op():
    os.environ["TRITON_INTERPRET"] = "0"
