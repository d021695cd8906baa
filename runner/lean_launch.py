"""The lean launch every generated kernel.py carries (issue 25: per-call cost). The generator copies
the block below its marker verbatim (bot/codegen/kernel_file.py), and the runner's integrity check
accepts these names only with exactly this text (runner/integrity.py compares the syntax trees), so
no other launcher code may keep state between calls, and `_launch(kernel, grid, *args, **kwargs)` is
checked as the launch `kernel[grid](*args, **kwargs)` it stands for.

Why: Triton's `kernel[grid](...)` binds, specializes and hashes every argument again on each call,
which on small tensors costs more than the GPU's work. The CompiledKernel that launch returns can be
launched directly. A hand-written cache over Triton's own one (which this is) was measured to be
needed: Triton 3.6's CompiledKernel[grid](...) still reads the device, its hooks and the launch
metadata on every call (tests/launch_overhead.py and docs/BENCHMARKS.md give the numbers).
"""
import torch

# ---- copied into kernel.py from here
try:        # Triton 3.4 and later; with an older one every launch takes Triton's own path
    from triton import knobs
    from triton.runtime import driver
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:
    knobs = driver = TensorDescriptor = None

# key -> how to launch the binary Triton compiled for it (filled by _keep, read by _launch only)
_COMPILED = {}
# Arguments keyed by type and value (1, 1.0 and True are equal but compile apart); a tensor by its
# dtype and its address modulo 16 (Triton specializes on 16-byte alignment); a host TMA descriptor by
# its dtype and block shape (what Triton specializes it on: the binary's launcher encodes the rest
# from the descriptor each call); anything else gives an unhashable key, so its launch takes Triton's
# own path (_keep keeps no keyword but plain ones).
_PLAIN = frozenset({int, float, bool, str, type(None), torch.dtype})


def _launch(kernel, grid, *args, **kwargs):
    # kernel[grid](*args, **kwargs), through the binary Triton compiled for this key the first time.
    key = (id(kernel), grid, *kwargs.items(), *map(type, kwargs.values()),
           *[(a.dtype, a.data_ptr() % 16) if type(a) is torch.Tensor else (type(a), a) if type(a) in _PLAIN
             else (TensorDescriptor, a.base.dtype, *a.block_shape) if type(a) is TensorDescriptor
             else (a.dtype, a.data_ptr() % 16) if isinstance(a, torch.Tensor) else [] for a in args])
    try:
        run, gx, gy, gz, device, function, metadata, names, _ = _COMPILED[key]
    except KeyError:
        _keep(key, kernel, grid, args, kwargs, kernel[grid](*args, **kwargs))
        return
    except TypeError:               # an unhashable key: a value not keyed above, or a grid function
        kernel[grid](*args, **kwargs)
        return
    enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    # Another GPU, or a profiler's launch hooks (a function, or a HookChain holding any): Triton's path.
    if device != driver.active.get_current_device() or getattr(enter, "calls", enter) or getattr(leave, "calls", leave):
        kernel[grid](*args, **kwargs)
        return
    run(gx, gy, gz, driver.active.get_current_stream(device), function, metadata, None, None, None, *args,
        *[kwargs[name] for name in names])


def _keep(key, kernel, grid, args, kwargs, compiled):
    # Keep what launches `compiled` again, where Triton's launch returned a binary (the interpreter
    # returns none), the grid is numbers and every parameter was given (the binary takes them all).
    if (driver is None or not hasattr(compiled, "packed_metadata") or type(grid) is not tuple
            or not all(type(g) is int for g in grid)):
        return
    names = tuple(kernel.arg_names[len(args):])
    if not set(names) <= kwargs.keys() or not all(type(v) in _PLAIN for v in kwargs.values()):
        return
    if len(_COMPILED) >= 4096:          # shapes without end: start again rather than grow
        _COMPILED.clear()
    compiled._init_handles()
    gx, gy, gz = (*grid, 1, 1)[:3]
    # compiled itself too: its binary is unloaded when it is freed
    _COMPILED[key] = (compiled.run, gx, gy, gz, driver.active.get_current_device(), compiled.function,
                      compiled.packed_metadata, names, compiled)
