# entry: scale_columns
"""out[..., j] = x[..., j] * w[j] in fp16, one row per program, with the shape, device and size
checks a launcher makes before it allocates and launches."""
import torch
import triton
import triton.language as tl

DEVICE = triton.runtime.driver.active.get_active_torch_device()


@triton.jit
def _scale_columns_kernel(x_ptr, w_ptr, out_ptr, row_stride, N, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * N + cols, (x * w).to(tl.float16), mask=mask)


def scale_columns(x, w):
    assert x.device == DEVICE and w.device == DEVICE
    assert x.shape[-1] == w.shape[0], "Incompatible dimensions"
    assert x.is_contiguous(), "x must be contiguous"
    assert w.is_contiguous()
    x_arg = x.reshape(-1, x.shape[-1])
    M, N = x_arg.shape
    out = torch.empty((M, N), device=x.device, dtype=torch.float16)
    MAX_FUSED_SIZE = 65536 // x.element_size()
    BLOCK_SIZE = min(MAX_FUSED_SIZE, triton.next_power_of_2(N))
    if N > BLOCK_SIZE:
        raise RuntimeError("scale_columns: rows longer than 64 KB are not supported")
    num_warps = min(max(BLOCK_SIZE // 256, 1), 8)
    _scale_columns_kernel[(M,)](x_arg, w, out, x_arg.stride(0), N, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return out.view(*x.shape[:-1], N)
