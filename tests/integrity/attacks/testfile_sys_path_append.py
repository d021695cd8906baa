# expect: uses sys.path.append
import sys

import pytest
import torch

from kernel import op as kernel
from reference import op as reference

sys.path.append("/")


def test_op():
    pass
