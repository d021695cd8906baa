"""The norm family (bot.ops.norm): layernorm and rmsnorm over the last dim, with or without weight
and bias, through the row template (bot.codegen.row_kernel), generated kernel.py files imported
and run against the generated reference on float64 inputs."""
from __future__ import annotations

import pytest

from generated import make_spec
from lowering import SQUARE, assert_close, check, generate, make_inputs

from bot import ir
from runner import protocol

# The masked lanes of a tail block compute on placeholder values (log(0) and the like).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# The reduce and softmax cases of these row-op tests are in test_reduce.py and test_softmax.py.
ROW_OPS = ["layernorm(x)", "rmsnorm(x)", "layernorm(x + y, eps=1e-3)"]


@pytest.mark.parametrize("expression", ROW_OPS)
def test_row_op(tmp_path, expression):
    names = ir.input_names(ir.parse(expression))
    check(tmp_path, make_spec(expression, {n: SQUARE + [[2, 3, 40]] for n in names}))


NORMS = {
    "layernorm weight": ("layernorm(x, w)", ["w"]),
    "layernorm weight bias": ("layernorm(x, w, b, eps=1e-5)", ["w", "b"]),
    "layernorm bias only": ("layernorm(x, bias=b)", ["b"]),
    "rmsnorm weight": ("rmsnorm(x, w, eps=1e-6)", ["w"]),
    "rmsnorm of a residual sum": ("rmsnorm(x + r, w)", ["w"]),
    "weights named like the kernel's own locals": ("layernorm(x, NV, TAIL)", ["NV", "TAIL"]),
}


@pytest.mark.parametrize("variant", NORMS)
def test_norm_weight_and_bias(tmp_path, variant):
    expression, vectors = NORMS[variant]
    cases = [[3, 5], [2, 3, 40]]
    shapes = {"x": cases, **{v: [[c[-1]] for c in cases] for v in vectors}}
    if "r" in ir.input_names(ir.parse(expression)):
        shapes["r"] = cases
    check(tmp_path, make_spec(expression, shapes))


@pytest.mark.parametrize("expression", ["layernorm(x, w, b)", "rmsnorm(x, w)"])
def test_looped_row_path(tmp_path, expression):
    # A 64-wide tile forces rows of 300 and 1000 through the looped kernel; more rows than one
    # tile holds so partly filled row blocks are exercised too.
    shapes = {"x": [[3, 300], [1000], [40, 70]]}
    for extra in ("w", "b"):
        if extra in expression:
            shapes[extra] = [[300], [1000], [70]]
    check(tmp_path, make_spec(expression, shapes), {"block": 64}, looped=True)


# The pointwise case of this test is in test_pointwise.py (ids kept as they were).
@pytest.mark.parametrize("expression, shapes", [
    pytest.param("layernorm(x, w)", {"x": [[40, 70], [2, 3000]], "w": [[70], [3000]]}, id="layernorm(x, w)-shapes1"),
])
def test_every_config_is_correct_on_every_case(tmp_path, expression, shapes):
    spec = make_spec(expression, shapes, dtypes=("float32",))
    reference, kernel = generate(tmp_path, spec)
    for case in protocol.cases(spec):
        inputs = make_inputs(spec, case, {n: "float32" for n in shapes})
        want = reference(*[t.double() for t in inputs])
        reduce_len = case.shapes["x"][-1] if "norm" in expression else 1
        for config in kernel.__globals__["CONFIGS"]:
            assert_close(kernel(*inputs, config=config), want, "float32", reduce_len, f"{config} {case.label}")
