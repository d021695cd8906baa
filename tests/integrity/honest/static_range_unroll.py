# entry: row_sum4
"""Sum of each row of a [M, 4 * W] tensor, its four W-wide chunks unrolled at compile time."""
import torch
import triton
import triton.language as tl

CHUNKS = 4


@triton.jit
def _row_sum4(x_ptr, out_ptr, W, BLOCK_W: tl.constexpr, CHUNKS: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_W)
    acc = tl.zeros([BLOCK_W], dtype=tl.float32)
    for chunk in tl.static_range(CHUNKS):
        acc += tl.load(x_ptr + row * CHUNKS * W + chunk * W + cols, mask=cols < W, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def row_sum4(x):
    x = x.contiguous()
    M, N = x.shape
    if N % CHUNKS:
        raise ValueError(f"the last dim ({N}) must be a multiple of {CHUNKS}")
    W = N // CHUNKS
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    _row_sum4[(M,)](x, out, W, BLOCK_W=triton.next_power_of_2(W), CHUNKS=CHUNKS)
    return out
