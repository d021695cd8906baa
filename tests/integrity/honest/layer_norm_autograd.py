# entry: layer_norm
"""Layer norm over the last dim as a torch.autograd.Function: a fused forward that keeps each row's
mean and reciprocal std, and a backward that reads them (dx per row, dw and db summed with atomics).
The entry is the Function's apply."""
import torch
import triton
import triton.language as tl


@triton.jit
def _ln_forward(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, row_stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    centered = tl.where(mask, x - mean, 0.0)
    rstd = 1 / tl.sqrt(tl.sum(centered * centered, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    tl.store(y_ptr + row * row_stride + cols, (centered * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _ln_backward(dx_ptr, dy_ptr, dw_ptr, db_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, row_stride, N,
                 BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    xhat = tl.where(mask, (x - tl.load(mean_ptr + row)) * tl.load(rstd_ptr + row), 0.0)
    wdy = tl.where(mask, w * dy, 0.0)
    mean_xhat_wdy = tl.sum(xhat * wdy, axis=0) / N
    mean_wdy = tl.sum(wdy, axis=0) / N
    dx = (wdy - xhat * mean_xhat_wdy - mean_wdy) * tl.load(rstd_ptr + row)
    tl.store(dx_ptr + row * row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.atomic_add(dw_ptr + cols, dy * xhat, mask=mask)
    tl.atomic_add(db_ptr + cols, dy, mask=mask)


class LayerNorm(torch.autograd.Function):
    """y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim."""

    @staticmethod
    def forward(ctx, x, normalized_shape, weight, bias, eps):
        x_arg = x.reshape(-1, x.shape[-1]).contiguous()
        M, N = x_arg.shape
        y = torch.empty_like(x_arg)
        mean = x.new_empty((M,), dtype=torch.float32)
        rstd = torch.empty((M,), dtype=torch.float32, device=x.device)
        MAX_FUSED_SIZE = 65536 // x.element_size()
        BLOCK_SIZE = min(MAX_FUSED_SIZE, triton.next_power_of_2(N))
        if N > BLOCK_SIZE:
            raise RuntimeError("layer_norm: rows longer than 64 KB are not supported")
        num_warps = min(max(BLOCK_SIZE // 256, 1), 8)
        _ln_forward[(M,)](x_arg, y, weight, bias, mean, rstd, x_arg.stride(0), N, eps,
                          BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
        ctx.save_for_backward(x_arg, weight, bias, mean, rstd)
        ctx.BLOCK_SIZE = BLOCK_SIZE
        ctx.num_warps = num_warps
        ctx.input_shape = x.shape
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x_arg, weight, bias, mean, rstd = ctx.saved_tensors
        M, N = x_arg.shape
        dy_arg = dy.reshape(-1, N).contiguous()
        dx = torch.empty_like(dy_arg)
        dw = torch.zeros((N,), dtype=torch.float32, device=weight.device)
        db = weight.new_zeros((N,), dtype=torch.float32)
        _ln_backward[(M,)](dx, dy_arg, dw, db, x_arg, weight, mean, rstd, x_arg.stride(0), N,
                           BLOCK_SIZE=ctx.BLOCK_SIZE, num_warps=ctx.num_warps)
        return dx.view(ctx.input_shape), None, dw.to(weight.dtype), db.to(bias.dtype), None


layer_norm = LayerNorm.apply
