# expect: uses __import__
import pytest
import torch

from kernel import op as kernel
from reference import op as reference


def test_op():
    __import__("os").system("true")
