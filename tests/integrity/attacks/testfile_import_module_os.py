# expect: may import by name only the job's modules
import importlib

import pytest
import torch

from kernel import op as kernel
from reference import op as reference


def test_op():
    importlib.import_module("os").system("true")
