"""The fused backward of layernorm and rmsnorm over the last dim (bot.ops.norm_grad), fixed Triton
kernels that a training kernel.py carries (copied by name, bot.codegen.fixed). Imported and linted by
the tests.

One pass reads each row of x and of the upstream gradient once: it recomputes the row's statistics
(cheaper than saving them: the row is read anyway), writes dx, and adds the row's share of dw and db
to its program's float32 partial sums, which a second kernel adds up over the programs (the split
Liger-Kernel's norms use too: a few hundred partial rows instead of a full-size product).
"""
import triton
import triton.language as tl


@triton.jit
def _norm_grad(x_ptr, w_ptr, up_ptr, dx_ptr, dw_part_ptr, db_part_ptr, R, N, rows_per_program, eps,
               CENTRED: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr):
    # Program p takes rows [p * rows_per_program, (p + 1) * rows_per_program), BLOCK_M at a time.
    # With x_hat = (x - mean) * rstd (no mean for rmsnorm) and g = up * w:
    #   dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat))    (mean(g) only where CENTRED)
    #   dw = sum over rows of up * x_hat, db = sum over rows of up.
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    if HAS_W:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    else:
        w = 1.0
    dw = tl.zeros((BLOCK_N,), dtype=tl.float32)
    db = tl.zeros((BLOCK_N,), dtype=tl.float32)
    first = pid * rows_per_program
    for start in range(first, tl.minimum(first + rows_per_program, R), BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows < R)[:, None] & col_ok[None, :]
        offs = rows.to(tl.int64)[:, None] * N + cols[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if CENTRED:
            x = tl.where(mask, x - (tl.sum(x, axis=1) / N)[:, None], 0.0)
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
        x_hat = x * rstd[:, None]
        g = up * w
        proj = tl.sum(g * x_hat, axis=1) / N
        if CENTRED:
            g = g - (tl.sum(g, axis=1) / N)[:, None]
        dx = rstd[:, None] * (g - x_hat * proj[:, None])
        tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        if HAS_W:
            dw += tl.sum(up * x_hat, axis=0)
        if HAS_B:
            db += tl.sum(up, axis=0)
    if HAS_W:
        tl.store(dw_part_ptr + pid.to(tl.int64) * N + cols, dw, mask=col_ok)
    if HAS_B:
        tl.store(db_part_ptr + pid.to(tl.int64) * N + cols, db, mask=col_ok)


@triton.jit
def _column_sums(part_ptr, out_ptr, P, N, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    # out[n] = sum over p of part[p, n], in float32, stored in out's dtype.
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for p0 in range(0, P, BLOCK_P):
        rows = p0 + tl.arange(0, BLOCK_P)
        mask = (rows < P)[:, None] & (cols < N)[None, :]
        acc += tl.sum(tl.load(part_ptr + rows.to(tl.int64)[:, None] * N + cols[None, :], mask=mask, other=0.0), axis=0)
    tl.store(out_ptr + cols, acc.to(out_ptr.dtype.element_ty), mask=cols < N)


def _norm_grad_tile(n):
    # (BLOCK_M, BLOCK_N, num_warps, programs an SM) for rows of n: whole rows, stacked to 8192
    # elements a tile, 4 warps up to that size (each thread holds 64 of a tile: x, the upstream
    # and their products all live in registers at once) and more past it; two programs an SM, each
    # writing one partial row of dw and db (the best of 24 such choices on an H100 for rmsnorm and
    # layernorm over 16384 x 4096 bfloat16).
    block_n = max(16, 1 << (n - 1).bit_length())
    block_m = max(1, min(16, 8192 // block_n))
    return block_m, block_n, max(4, min(32, block_m * block_n // 2048)), 2
