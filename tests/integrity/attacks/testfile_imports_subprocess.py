# expect: imports subprocess
import subprocess

import pytest
import torch

from kernel import op as kernel
from reference import op as reference


def test_op():
    subprocess.run(["true"])
