# entry: gelu_tanh
"""GELU (tanh approximation), written tutorial-style.

The prose here may say anything: torch.add(x, y), `import os`, eval("..."), __import__('sys'),
getattr(torch, "add"), torch.cuda.synchronize(), `if __name__ == "__main__":`. None of it runs.
"""

# %%
# Compute kernel
# --------------
# A comment may name torch.nn.functional.gelu, the reference, os.system or anything else.

import torch  # torch.ops.aten.gelu would compute it; the kernel below does
import triton
import triton.language as tl

"""A bare string between statements (sphinx-gallery style): torch.cuda.Event, time.sleep."""


@triton.jit
def _gelu_tanh_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    """Elementwise: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))). numpy.tanh, torch.tanh."""
    # tanh(u) = 2 * sigmoid(2u) - 1
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    y = 0.5 * x * (2 * tl.sigmoid(2 * u))  # 1 + tanh(u) == 2 * sigmoid(2u)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


# %%
# The launcher
# ------------
def gelu_tanh(x):
    """Launches one program per 1024 elements. (`x.sum()`, `torch.compile` and `del` are only words here.)"""
    x = x.contiguous()  # the kernel reads x as flat memory
    out = torch.empty_like(x)
    n = out.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)  # noqa: E731
    _gelu_tanh_kernel[grid](x, out, n, BLOCK_SIZE=1024)
    return out

# %%
# Benchmarks and tests are the harness's job: no `if __name__ == "__main__":` block here.
