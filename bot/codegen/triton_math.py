"""Float32 math helpers generated kernel.py files call: real code, imported and linted by the tests
(tests/codegen/test_fixed_helpers.py), copied into a kernel.py by name (bot.codegen.fixed) when it
calls them, with the helpers they call. The bot reads this file's text and never imports it: a
bot-only host has no triton.
"""
import triton
import triton.language as tl


@triton.jit
def _tanh(x):
    # tanh from exp (libdevice's is not available everywhere); exp(-2|x|) never overflows.
    t = tl.exp(-2.0 * tl.abs(x))
    y = (1.0 - t) / (1.0 + t)
    return tl.where(x < 0, -y, y)


@triton.jit
def _erf(x):
    # Eigen's fast float erf: a rational function on [-4, 4] (erf there is +-1 in float32), within
    # 4.4e-7 of erf, in half libdevice's operations (cheaper in a matmul epilogue's GELU).
    x = tl.minimum(tl.maximum(x, -4.0), 4.0)
    x2 = x * x
    p = x2 * -2.72614225801306e-10 + 2.77068142495902e-08
    p = x2 * p + -2.10102402082508e-06
    p = x2 * p + -5.69250639462346e-05
    p = x2 * p + -7.34990630326855e-04
    p = x2 * p + -2.95459980854025e-03
    p = x2 * p + -1.60960333262415e-02
    q = x2 * -1.45660718464996e-05 + -2.13374055278905e-04
    q = x2 * q + -1.68282697438203e-03
    q = x2 * q + -7.37332916720468e-03
    q = x2 * q + -1.42647390514189e-02
    return x * p / q


@triton.jit
def _atan(x):
    # Cephes' atanf: |x| reduced to at most tan(pi/8) around pi/2 (past tan(3pi/8)) or pi/4, then an
    # odd polynomial; a few float32 ulps. NaN stays NaN, +-inf gives +-pi/2.
    a = tl.abs(x)
    big = a > 2.414213562373095
    mid = a > 0.4142135623730951
    t = tl.where(big, -1.0 / a, tl.where(mid, (a - 1.0) / (a + 1.0), a))
    base = tl.where(big, 1.5707963267948966, tl.where(mid, 0.7853981633974483, 0.0))
    z = t * t
    p = ((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1
    y = base + (p * z * t + t)
    return tl.where(x < 0, -y, y)


@triton.jit
def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x * 0.7071067811865476))


@triton.jit
def _gelu_tanh(x):
    return 0.5 * x * (1.0 + _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


@triton.jit
def _silu(x):
    return x * tl.sigmoid(x)


@triton.jit
def _max_nan(a, b):
    # torch's max: NaN wins (on the GPU one max.NaN instruction, as cheap as a plain max).
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _min_nan(a, b):
    # torch's min: NaN wins.
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _logaddexp(a, b):
    # log(exp(a) + exp(b)) from the larger: no overflow; -inf and inf stay (logcumsumexp's combine)
    m = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    return tl.where(tl.abs(m) == float("inf"), m, m + tl.log(tl.exp(a - m) + tl.exp(b - m)))


@triton.jit
def _powi(x, E: tl.constexpr):
    # x ** E for an integer E >= 1 by repeated multiplication (exact sign for negative x).
    y = x
    for _ in tl.static_range(E - 1):
        y = y * x
    return y


@triton.jit
def _mul(a, b):
    # a product's combine (prod over a tile axis)
    return a * b
