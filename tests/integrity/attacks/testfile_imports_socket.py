# expect: imports socket
import socket

import pytest
import torch

from kernel import op as kernel
from reference import op as reference


def test_op():
    socket.create_connection(("example.com", 80))
