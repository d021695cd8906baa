# entry: scaled_add
"""out = x + alpha * y over flat tensors, with a persistent grid: the device, its target and its
multiprocessor count come from Triton's active driver, read once when the module is imported."""
import torch
import triton
import triton.language as tl
from triton.runtime import driver

DEVICE = triton.runtime.driver.active.get_active_torch_device()
properties = driver.active.utils.get_device_properties(DEVICE.index)
NUM_SM = properties["multiprocessor_count"]
WARP_SIZE = properties["warpSize"]
TARGET = triton.runtime.driver.active.get_current_target()


def is_hip():
    return triton.runtime.driver.active.get_current_target().backend == "hip"


def lanes_per_warp():
    target = driver.active.get_current_target()
    if target.arch is None:
        return WARP_SIZE
    return target.warp_size


@triton.jit
def _scaled_add_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    first = tl.program_id(0)
    step = tl.num_programs(0)
    for block in tl.range(first, tl.cdiv(n, BLOCK), step):
        offs = block * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + alpha * y, mask=mask)


def scaled_add(x, y, *, alpha=1.0):
    assert x.device == DEVICE and y.device == DEVICE, "inputs must live on Triton's active device"
    assert x.shape == y.shape, "x and y must have the same shape"
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = out.numel()
    block = 8 * lanes_per_warp() * (2 if TARGET.backend == "cuda" else 1)
    sms = driver.active.utils.get_device_properties(x.device.index)["multiprocessor_count"]
    programs = min(triton.cdiv(n, block), 4 * max(sms, NUM_SM))
    num_warps = 8 if is_hip() else 4
    _scaled_add_kernel[(programs,)](x, y, out, alpha, n, BLOCK=block, num_warps=num_warps)
    return out
