# entry: dropout
"""Dropout whose mask comes from a seed (Philox in the kernel): the same seed gives the same
mask, so nothing but the seed needs keeping for a backward pass."""
import torch
import triton
import triton.language as tl


@triton.jit
def _seeded_dropout(x_ptr, out_ptr, n_elements, p, seed, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    keep = tl.rand(seed, offsets) > p
    tl.store(out_ptr + offsets, tl.where(keep, x / (1 - p), 0.0), mask=mask)


def dropout(x, *, p=0.5, seed=0):
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p must be in [0, 1), got {p}")
    x = x.contiguous()
    out = torch.empty_like(x)
    n_elements = x.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)  # noqa: E731
    _seeded_dropout[grid](x, out, n_elements, p, seed, BLOCK_SIZE=1024)
    return out
