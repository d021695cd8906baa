# expect: opens open('/etc/hostname')
import pytest
import torch

from kernel import op as kernel
from reference import op as reference


def test_op():
    assert open("/etc/hostname").read()
