# expect: declares global
import pytest
import torch

from kernel import op as kernel
from reference import op as reference

RUNS = 0


def test_op():
    global RUNS
    RUNS += 1
