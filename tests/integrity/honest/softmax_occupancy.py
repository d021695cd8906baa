# entry: softmax
"""Row softmax with as many persistent programs as the device keeps resident at once: the kernel
is compiled ahead of its launch (warmup) to read its register and shared-memory use."""
import torch
import triton
import triton.language as tl
from triton.runtime import driver

DEVICE = triton.runtime.driver.active.get_active_torch_device()
properties = driver.active.utils.get_device_properties(DEVICE.index)
NUM_SM = properties["multiprocessor_count"]
NUM_REGS = properties["max_num_regs"]
SIZE_SMEM = properties["max_shared_mem"]
WARP_SIZE = properties["warpSize"]


@triton.jit
def _softmax_persistent(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr,
                        num_stages: tl.constexpr):
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=num_stages):
        cols = tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        v = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
        e = tl.exp(v - tl.max(v, axis=0))
        tl.store(out_ptr + row * out_stride + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty),
                 mask=mask)


def softmax(x):
    if x.ndim != 2:
        raise ValueError("softmax expects a 2-D tensor")
    n_rows, n_cols = x.shape
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    num_warps = 8
    num_stages = 4 if SIZE_SMEM > 200000 else 2
    y = torch.empty_like(x)
    compiled = _softmax_persistent.warmup(y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE=BLOCK_SIZE,
                                          num_stages=num_stages, num_warps=num_warps, grid=(1,))
    compiled._init_handles()
    if compiled.n_spills > 0:
        num_stages = 1
    regs = max(compiled.n_regs, 1)
    occupancy = NUM_REGS // (regs * WARP_SIZE * num_warps)
    smem = compiled.metadata.shared
    if smem > 0:
        occupancy = min(occupancy, SIZE_SMEM // smem)
    programs = min(NUM_SM * max(occupancy, 1), n_rows)
    compiled[(programs, 1, 1)](y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE, num_stages)
    return y
