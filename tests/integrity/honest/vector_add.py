# entry: vector_add
"""Elementwise sum of two vectors, one block of BLOCK_SIZE elements per program."""
import torch
import triton
import triton.language as tl


@triton.jit
def _vector_add_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    in_bounds = offsets < n_elements
    a = tl.load(a_ptr + offsets, mask=in_bounds)
    b = tl.load(b_ptr + offsets, mask=in_bounds)
    tl.store(out_ptr + offsets, a + b, mask=in_bounds)


def vector_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {tuple(a.shape)} and {tuple(b.shape)}")
    a, b = a.contiguous(), b.contiguous()
    out = torch.empty_like(a)
    n_elements = out.numel()
    _vector_add_kernel[lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)](
        a, b, out, n_elements, BLOCK_SIZE=1024)
    return out
