# expect: imports pathlib
import pathlib

import pytest
import torch

from kernel import op as kernel
from reference import op as reference


def test_op():
    assert pathlib.Path("reference.py").read_text()
