"""The lean launch (runner/lean_launch.py) that every kernel.py carries: a launch after the first of
the same key goes straight to the binary Triton compiled, and nothing Triton compiles into that
binary (dtypes, 16-byte alignment, integer values, constexprs, launch options, the grid) is reused
across keys. The interpreter hands back no binary, so there every launch takes Triton's own path."""
from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
import torch
from triton.tools.tensor_descriptor import TensorDescriptor

from generated import load, make_spec

from bot import ir
from bot.spec import parse_expression

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"


def kernel_module(tmp_path, expression: str, shapes: dict, dtype: str = "float16"):
    spec = make_spec(expression, shapes, dtypes=(dtype,), name="lean_op")
    return load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {}))


def test_the_interpreter_launches_through_triton_and_keeps_nothing(tmp_path):
    if GPU:
        pytest.skip("the interpreter's path (no GPU)")
    module = kernel_module(tmp_path, "x + y", {"x": [[8, 33]], "y": [[8, 33]]})
    x, y = torch.randn(8, 33, dtype=torch.float16), torch.randn(8, 33, dtype=torch.float16)
    for _ in range(2):
        torch.testing.assert_close(module.lean_op(x, y), x + y)
    assert module._COMPILED == {}


class _Recorded:
    """A @triton.jit kernel whose launch hands back a binary as a GPU's would: Triton's own launch
    records the arguments its binary receives (every parameter, bound in order), the binary records
    what the lean launch gives it, and both compute through the interpreter."""

    def __init__(self, jit, log: dict):
        self.jit, self.log, self.arg_names = jit, log, jit.arg_names

    def __getitem__(self, grid):
        def triton_launch(*args, **kwargs):
            bound = inspect.signature(self.jit.fn).bind(*args, **{k: v for k, v in kwargs.items()
                                                                  if k in self.arg_names})
            bound.apply_defaults()
            self.log["triton"].append(((*grid, 1, 1)[:3], _described(bound.arguments.values())))
            self.jit[grid](*args, **kwargs)
            return SimpleNamespace(packed_metadata=None, function=None, _init_handles=lambda: None, run=self.binary)
        return triton_launch

    def binary(self, gx, gy, gz, stream, function, metadata, launch_metadata, enter, leave, *args):
        self.log["binary"].append(((gx, gy, gz), _described(args)))
        self.jit[(gx, gy, gz)](*args)


def _described(values) -> tuple:
    return tuple((v.dtype, tuple(v.shape)) if isinstance(v, torch.Tensor)
                 else (v.base.dtype, tuple(v.shape), tuple(v.strides), tuple(v.block_shape))
                 if isinstance(v, TensorDescriptor) else v for v in values)


@pytest.mark.parametrize("expression, shapes", [
    ("x + y", {"x": [[8, 33]], "y": [[8, 33]]}),
    ("x * y", {"x": [[8, 33]], "y": [[33]]}),
    ("softmax(x)", {"x": [[8, 33]]}),
    ("sum(x, dim=0)", {"x": [[8, 33]]}),
    ("layernorm(x, w, b, eps=1e-05)", {"x": [[8, 33]], "w": [[33]], "b": [[33]]}),
    ("conv2d(x, w, padding=1)", {"x": [[1, 4, 6, 6]], "w": [[8, 4, 3, 3]]}),
    ("scaled_dot_product_attention(q, k, v, is_causal=True)", {n: [[1, 2, 16, 8]] for n in "qkv"}),
    ("a @ b", {"a": [[8, 32]], "b": [[32, 24]]}),            # TMA descriptors, keyed by block shape
    ("a @ b", {"a": [[2, 8, 32]], "b": [[32, 24]]}),
])
def test_the_kept_binary_gets_the_arguments_tritons_launch_gives_it(tmp_path, expression, shapes):
    if GPU:
        pytest.skip("emulates a GPU's binary on the interpreter")
    module = kernel_module(tmp_path, expression, shapes, dtype="float32")
    log = {"triton": [], "binary": []}
    module.driver = SimpleNamespace(active=SimpleNamespace(get_current_device=lambda: 0,
                                                           get_current_stream=lambda device: 0))
    for name in [n for n in vars(module) if n.endswith("_kernel")]:
        setattr(module, name, _Recorded(getattr(module, name), log))
    torch.manual_seed(0)
    inputs = [torch.randn(s[0]) for s in shapes.values()]
    first = module.lean_op(*inputs)
    second = module.lean_op(*inputs)
    torch.testing.assert_close(second, first)
    assert log["binary"] and log["binary"] == log["triton"]


@pytest.mark.gpu
def test_later_launches_reuse_the_binary_of_their_own_key_only(tmp_path):
    module = kernel_module(tmp_path, "x * y", {"x": [[64, 100]], "y": [[64, 100]]})
    base = torch.randn(2 * 64 * 100 + 8, device=DEVICE, dtype=torch.float16)
    aligned = base[:6400].view(64, 100)
    shifted = base[1:6401].view(64, 100)            # 2 bytes past a 16-byte boundary: another binary
    y = torch.randn(64, 100, device=DEVICE, dtype=torch.float16)
    for x in (aligned, shifted, aligned, shifted):
        torch.testing.assert_close(module.lean_op(x, y), x * y)
    assert len(module._COMPILED) == 2
    odd = torch.randn(63, 100, device=DEVICE, dtype=torch.float16)      # another n_elements and grid
    torch.testing.assert_close(module.lean_op(odd, odd), odd * odd)
    assert len(module._COMPILED) == 3
    torch.testing.assert_close(module.lean_op(aligned, y, config={"BLOCK": 2048, "num_warps": 8}), aligned * y)
    assert len(module._COMPILED) == 4
    fp32 = torch.randn(64, 100, device=DEVICE)
    torch.testing.assert_close(module.lean_op(fp32, fp32), fp32 * fp32)
    assert len(module._COMPILED) == 5


@pytest.mark.gpu
def test_matmuls_tma_descriptors_key_their_block_shapes(tmp_path):
    """Descriptors of other block shapes (other configs) or dtypes launch their own binaries; the same
    ones reuse theirs with the new operands' addresses and shapes."""
    module = kernel_module(tmp_path, "a @ b", {"a": [[64, 256]], "b": [[256, 128]]})
    cases = [((64, 256), (256, 128), torch.float16, None), ((100, 256), (256, 128), torch.float16, None),
             ((64, 256), (256, 128), torch.bfloat16, None),
             ((64, 256), (256, 128), torch.float16, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8,
                                                      "num_warps": 4, "num_stages": 3})]
    for _ in range(2):
        for a_shape, b_shape, dtype, config in cases:
            a, b = (torch.randn(s, device=DEVICE, dtype=dtype) for s in (a_shape, b_shape))
            torch.testing.assert_close(module.lean_op(a, b, config=config), a @ b, rtol=1e-2, atol=1e-2)
    assert 3 <= len(module._COMPILED) <= len(cases)


@pytest.mark.gpu
def test_repeated_calls_skip_tritons_launch_path(tmp_path):
    module = kernel_module(tmp_path, "x + y", {"x": [[64, 64]], "y": [[64, 64]]})
    through_triton = []
    run = module.lean_op_kernel.run
    module.lean_op_kernel.run = lambda *args, **kwargs: through_triton.append(1) or run(*args, **kwargs)
    x = torch.randn(64, 64, device=DEVICE, dtype=torch.float16)
    for _ in range(5):
        torch.testing.assert_close(module.lean_op(x, x), x + x)
    assert len(through_triton) == 1


@pytest.mark.gpu
def test_a_profilers_launch_hook_still_sees_every_launch(tmp_path):
    from triton import knobs
    module = kernel_module(tmp_path, "x + y", {"x": [[256]], "y": [[256]]})
    x = torch.randn(256, device=DEVICE, dtype=torch.float16)
    module.lean_op(x, x)
    seen = []
    chain = knobs.runtime.launch_enter_hook        # a HookChain from Triton 3.5, else a function or None
    if hasattr(chain, "add"):
        chain.add(seen.append)
    else:
        knobs.runtime.launch_enter_hook = seen.append
    try:
        torch.testing.assert_close(module.lean_op(x, x), x + x)
    finally:
        if hasattr(chain, "remove"):
            chain.remove(seen.append)
        else:
            knobs.runtime.launch_enter_hook = chain
    assert len(seen) == 1
    torch.testing.assert_close(module.lean_op(x, x), x + x)      # hooks gone: the kept binary again
    assert len(seen) == 1


@pytest.mark.gpu
def test_a_second_gpu_current_takes_its_own_launch(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    module = kernel_module(tmp_path, "x + y", {"x": [[256]], "y": [[256]]})
    for device in ("cuda:0", "cuda:1", "cuda:0"):
        with torch.cuda.device(device):
            x = torch.randn(256, device=device, dtype=torch.float16)
            torch.testing.assert_close(module.lean_op(x, x), x + x)
