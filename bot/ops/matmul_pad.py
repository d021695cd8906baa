"""The copy of a matmul operand into a zero-padded buffer with 16-byte aligned rows, as TMA needs:
kernel.py's _pad, carried by every matmul kernel.py (whether an operand needs it is known only at
launch). Real code, imported and linted by the tests; the bot reads this file's text (bot.codegen.
fixed) and never imports it. The kernel writes every element of the buffer, the zeros too, so
the buffer is allocated with torch.empty and written once.
"""
import torch
import triton
import triton.language as tl

from runner.lean_launch import _launch      # kernel.py holds its own copy (runner/lean_launch.py's block)


@triton.jit
def _pad_kernel(src_ptr, dst_ptr, R, C, R_pad, C_pad, TRANSPOSE: tl.constexpr, BLOCK_R: tl.constexpr,
                BLOCK_C: tl.constexpr):
    # One BLOCK_R x BLOCK_C tile of src [R, C] padded to [R_pad, C_pad] (of the matrix
    # program_id(1) of a batch): src where it has elements, zeros past its last row and column.
    # Stored into dst [R_pad, C_pad], or transposed into dst [C_pad, R_pad].
    pid = tl.program_id(0)
    tiles_c = tl.cdiv(C_pad, BLOCK_C)
    batch = tl.program_id(1).to(tl.int64)
    rows = ((pid // tiles_c) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)[:, None]
    cols = (pid % tiles_c) * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    x = tl.load(src_ptr + batch * R * C + rows * C + cols, mask=(rows < R) & (cols < C), other=0.0)
    inside = (rows < R_pad) & (cols < C_pad)
    if TRANSPOSE:
        tl.store(dst_ptr + batch * R_pad * C_pad + tl.trans(cols) * R_pad + tl.trans(rows), tl.trans(x),
                 mask=tl.trans(inside))
    else:
        tl.store(dst_ptr + batch * R_pad * C_pad + rows * C_pad + cols, x, mask=inside)


def _pad(x, R_pad, C_pad, transpose=False):
    # x [..., R, C] (contiguous) copied into a new [..., R_pad, C_pad] (transposed: [..., C_pad,
    # R_pad]), zeros in the rows and columns added. Tiles of 16 x 256, 4096 elements a program: the
    # tile matters little here, since rows of odd length load element by element. Square 64 x 64
    # tiles to transpose, so reads and writes both stay within a few cache lines per row.
    shape = (C_pad, R_pad) if transpose else (R_pad, C_pad)
    padded = torch.empty((*x.shape[:-2], *shape), dtype=x.dtype, device=x.device)
    BLOCK_R, BLOCK_C = (64, 64) if transpose else (16, 256)
    matrices = x.shape[:-2].numel()          # every leading dim is the batch
    grid = (triton.cdiv(R_pad, BLOCK_R) * triton.cdiv(C_pad, BLOCK_C), matrices)
    _launch(_pad_kernel, grid, x, padded, x.shape[-2], x.shape[-1], R_pad, C_pad, TRANSPOSE=transpose,
            BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C, num_warps=4)
    return padded
