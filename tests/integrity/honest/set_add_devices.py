# entry: scaled_sum
"""out = x + alpha * y, refusing inputs on different devices: the launcher gathers the devices
in a plain Python set."""
import torch
import triton
import triton.language as tl


@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (x + alpha * y).to(out_ptr.dtype.element_ty), mask=mask)


def scaled_sum(x, y, *, alpha=1.0):
    devices = set()
    for t in (x, y):
        devices.add(str(t.device))
    if len(devices) != 1:
        raise ValueError(f"inputs are on {sorted(devices)}; put them on one device")
    seen_shapes = []
    seen_shapes.append(tuple(x.shape))
    seen_shapes.append(tuple(y.shape))
    if seen_shapes[0] != seen_shapes[1]:
        raise ValueError(f"shapes differ: {seen_shapes}")
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = out.numel()
    _axpy[(triton.cdiv(n, 512),)](x, y, out, alpha, n, BLOCK=512)
    return out
