"""The softmax family (bot.ops.softmax): softmax and log_softmax over the last dim through the row
template (bot.codegen.row_kernel), generated kernel.py files imported and run against the
generated reference on float64 inputs."""
from __future__ import annotations

import pytest
import torch

from generated import make_spec
from lowering import SQUARE, check, generate

from bot import ir

# The masked lanes of a tail block compute on placeholder values (log(0) and the like).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# The reduce and norm cases of these row-op tests are in test_reduce.py and test_norm.py.
ROW_OPS = ["softmax(x)", "softmax(x * 0.5)", "log_softmax(x)", "log_softmax(x * y)"]


@pytest.mark.parametrize("expression", ROW_OPS)
def test_row_op(tmp_path, expression):
    names = ir.input_names(ir.parse(expression))
    check(tmp_path, make_spec(expression, {n: SQUARE + [[2, 3, 40]] for n in names}))


@pytest.mark.parametrize("expression", ["softmax(x)", "log_softmax(x - 1.0)"])
def test_looped_row_path(tmp_path, expression):
    # A 64-wide tile forces rows of 300 and 1000 through the looped kernel; more rows than one
    # tile holds so partly filled row blocks are exercised too.
    shapes = {"x": [[3, 300], [1000], [40, 70]]}
    for extra in ("w", "b"):
        if extra in expression:
            shapes[extra] = [[300], [1000], [70]]
    check(tmp_path, make_spec(expression, shapes), {"block": 64}, looped=True)


def test_a_row_broadcast_past_two_runs_of_dims_is_refused_clearly_at_launch(tmp_path):
    # y holds three runs of x's row dims (broadcast between them): the kernel generated for other
    # shapes refuses it naming the shapes, where a launch would read the wrong rows
    spec = make_spec("softmax(x + y)", {"x": [[2, 3, 4]], "y": [[2, 1, 4]]})
    _, kernel = generate(tmp_path, spec)
    x, y = torch.randn(2, 3, 4, 2, 3, 5), torch.randn(2, 1, 4, 1, 3, 5)
    with pytest.raises(ValueError, match=r"input y has shape \[2, 1, 4, 1, 3, 5\], broadcast against"):
        kernel(x, y)
    x, y = torch.randn(2, 3, 4), torch.randn(2, 1, 4)
    torch.testing.assert_close(kernel(x, y), torch.softmax(x + y, -1))


def test_softmin_is_softmax_of_the_negation():
    # torch.nn.functional.softmin(x, dim) = softmax(-x, dim): read so, over any dim
    assert ir.parse("F.softmin(x, dim=-1)", as_written=True) == ir.parse("softmax(-x)")
    x = torch.randn(4, 6, dtype=torch.float64)
    assert torch.allclose(torch.softmax(-x, 0), torch.nn.functional.softmin(x, 0))
    assert ir.parse("F.softmin(x, dim=0)", as_written=True) == ir.parse("softmax(-x, dim=0)", as_written=True)
