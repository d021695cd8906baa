"""The untrusted worker: one generated file (a kernel, a reference, a ghost of a kernel) loaded in
a sandboxed process of its own, running the calls the judge asks for over runner.channel.

Runs as ``python -m runner.untrusted FD`` under the sandbox, FD being its end of a socketpair.
Nothing it answers is believed on its word: the judge reads outputs as raw bytes of the dtype
and shape it fixed, compares them itself, checks the inputs came back unchanged, and checks the
GPU times reported here against its own wall clock (runner.harness). This module only makes the
generated code callable from another process; the code it loads could rewrite any of it.
"""
from __future__ import annotations

import ctypes
import importlib.util
import inspect
import json
import os
import socket
import sys
import tempfile
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable

import torch
import torch.utils.deterministic

from runner import channel, liger_ops, timers
from runner.module_call import module_call


def describe_error(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:240]


def built_module(cls: type, init_inputs: Callable | None, device: str) -> torch.nn.Module:
    """A pasted nn.Module as KernelBench-style code builds it, once per load: Class(*get_init_inputs()),
    on the job's device. Built here, in the untrusted worker, like any of the file's own code."""
    if not callable(init_inputs):
        raise TypeError("it defines no get_init_inputs()")
    return cls(*init_inputs()).to(device)


@contextmanager
def poisoned_memory(shape: torch.Size, dtype: torch.dtype, device: str):
    """Make memory the code allocates for its output hold NaN, so unwritten elements show.

    Two layers: a NaN block of exactly the output's size and dtype allocated and freed right
    before the call (the next allocation of that size gets the same memory back: reliably under
    CUDA's caching allocator, usually under glibc malloc on CPU); and torch's deterministic mode
    with fill_uninitialized_memory, which fills new floating-point tensors from torch.empty and
    kin with NaN on any device (warn_only, so no operation is refused; restored after)."""
    if dtype.is_floating_point:
        torch.full(shape, float("nan"), dtype=dtype, device=device)   # allocated, then freed at once
    det = torch.utils.deterministic
    was = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
           det.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.use_deterministic_algorithms(was[0], warn_only=was[1])
        det.fill_uninitialized_memory = was[2]


def launch_switch() -> Callable[[int], int] | None:
    """The on/off switch of the judge's launch counter (runner/launch_count.c), once the CUDA
    driver has loaded it into this process; None elsewhere."""
    path = os.environ.get("CUDA_INJECTION64_PATH")
    if not path:
        return None
    try:
        return ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW).kernelbot_count_launches
    except (OSError, AttributeError):
        return None


@contextmanager
def launches_counted(switch: Callable[[int], int] | None):
    """The driver counts launches for the judge while a checked call runs, and only then: its
    callbacks would slow the timed calls."""
    if switch is None:
        yield
        return
    switch(1)
    try:
        yield
    finally:
        switch(0)


class Worker:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.device = "cpu"
        self.fns: dict[str, Callable] = {}
        self.modules: dict[str, tuple[torch.nn.Module, list[str]]] = {}    # pasted modules, with their parameters
        self.tensors: dict[str, torch.Tensor] = {}
        self.switch: Callable[[int], int] | None = None

    def handle(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        op = getattr(self, f"op_{msg.get('op')}", None)
        if op is None:
            return {"ok": False, "error": f"unknown op {msg.get('op')!r}"}, []
        return op(msg, fds)

    # --- loading ------------------------------------------------------------------------------

    def op_load(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        """Import the source as a module of its own and keep its function under msg['as'] ('main')."""
        self.device = msg["device"]
        # torch's float32 matmuls and convolutions (cuDNN's default allows TF32) round as the spec allows
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(msg.get("tf32"))
        folder = Path(tempfile.gettempdir()) / "kernelbot_src"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{msg['module']}.py"
        path.write_text(msg["source"])
        module_name = f"kernelbot_job_{msg['module']}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module     # Triton's jit and dataclasses look modules up by name
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as e:
            return {"ok": False, "error": f"{msg['file']} does not import: {describe_error(e)}"}, []
        fn = module.__dict__.get(msg["entry"])
        if inspect.isclass(fn) and issubclass(fn, torch.nn.Module):
            try:
                built = built_module(fn, module.__dict__.get("get_init_inputs"), self.device)
                parameters = list(msg.get("parameters", []))
                fn = module_call(built, parameters)
            except Exception as e:
                return {"ok": False, "error": f"{msg['file']}: {msg['entry']}(*get_init_inputs()) fails: "
                                              f"{describe_error(e)}"}, []
            self.modules[msg.get("as", "main")] = (built, parameters)
        if not callable(fn):
            return {"ok": False, "error": f"{msg['file']} defines no function {msg['entry']}()"}, []
        self.fns[msg.get("as", "main")] = fn
        try:
            configs = json.loads(json.dumps(module.__dict__["CONFIGS"])) if "CONFIGS" in module.__dict__ else None
        except (TypeError, ValueError):
            configs = "CONFIGS is not plain data"
        try:
            takes_config = "config" in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            takes_config = False
        return {"ok": True, "configs": configs, "takes_config": takes_config}, []

    def op_compile(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        # A fresh compile per case x dtype (after reset) so dynamo's recompile limit never
        # silently falls back to eager.
        torch.compiler.reset()
        if "main" in self.modules:      # a pasted module: compiled itself, its parameters bound around it
            module, parameters = self.modules["main"]
            compiled = torch.compile(module, mode=msg["mode"], dynamic=False)
            self.fns["compiled"] = module_call(module, parameters, forward=compiled)
        else:
            self.fns["compiled"] = torch.compile(self.fns["main"], mode=msg["mode"], dynamic=False)
        return {"ok": True}, []

    def op_liger(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        # Liger-Kernel's function for the operator, a baseline the bench plan names (runner.liger_ops).
        try:
            self.fns["liger"] = liger_ops.build(msg["liger"], msg["inputs"])
        except liger_ops.LigerUnavailable as e:
            return {"ok": False, "error": str(e)}, []
        return {"ok": True}, []

    # --- tensors ------------------------------------------------------------------------------

    @staticmethod
    def _received(msg: dict, fds: list[int]) -> list[tuple[str, torch.Tensor]]:
        """(id, tensor on the CPU) for each tensor the request carries; its fds closed."""
        try:
            return [(spec["id"], channel.read_tensor(fd, channel.dtype_of(spec["dtype"]), spec["shape"]))
                    for spec, fd in zip(msg["tensors"], fds)]
        finally:
            channel.close(fds)

    def op_put(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        for key, t in self._received(msg, fds):
            self.tensors[key] = t.to(self.device)
        return {"ok": True}, []

    def op_refill(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        for key, t in self._received(msg, fds):
            self.tensors[key].copy_(t)
        return {"ok": True}, []

    def op_drop(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        for key in msg["ids"]:
            self.tensors.pop(key, None)
        return {"ok": True}, []

    # --- calls --------------------------------------------------------------------------------

    def _fn(self, msg: dict) -> Callable:
        fn = self.fns[msg.get("fn", "main")]
        config = msg.get("config")
        args = [self.tensors[key] for key in msg["args"]]
        if msg.get("upstream"):         # a training call: the forward, then the gradients of the inputs at wrt
            floats = [i for i in msg["wrt"] if type(i) is int and 0 <= i < len(args)]
            return self._step(fn, args, self.tensors[msg["upstream"]], floats)
        return (lambda: fn(*args, config=config)) if config else (lambda: fn(*args))

    @staticmethod
    def _step(fn: Callable, args: list[torch.Tensor], upstream: torch.Tensor, wrt: list[int]) -> Callable:
        """One training step of fn, as timed and as checked: the forward on leaves of args (those at
        wrt requiring grad), then their gradients from upstream (torch.autograd.grad: nothing
        accumulates between calls; None where one gets none)."""
        leaves = [a.detach().requires_grad_(i in wrt) for i, a in enumerate(args)]

        def step() -> tuple:
            with torch.enable_grad():
                out = fn(*leaves)
                if type(out) is not torch.Tensor:
                    raise TypeError(f"returned {type(out).__name__}, not a plain tensor")
                return torch.autograd.grad(out, [leaves[i] for i in wrt], upstream, allow_unused=True)
        return step

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def op_call(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        """One call on poisoned memory; the outputs' bytes back (one tensor, or a tuple of them), then
        the inputs' when asked."""
        like = msg.get("like")
        like = like[0] if isinstance(like, list) and like else like     # several outputs: the first's size
        poison = (poisoned_memory(torch.Size(like["shape"]), channel.dtype_of(like["dtype"]), self.device)
                  if like else nullcontext())
        if self.switch is None and self.device == "cuda":
            self.switch = launch_switch()
        try:
            with poison, launches_counted(self.switch):
                out = self._fn(msg)()
                self._sync()     # surface asynchronous errors here, not later
        except (Exception, SystemExit) as e:
            if isinstance(e, torch.OutOfMemoryError):
                torch.cuda.empty_cache()
            return {"ok": False, "error": f"raised {describe_error(e)}", "lost": not self._usable()}, []
        outs = list(out) if isinstance(out, tuple) else [out]     # a tuple: torch.max(x, dim)'s (values, indices)
        bad = [t for t in outs if type(t) is not torch.Tensor]
        if bad or not outs:
            kind = ("nothing" if not outs else "a torch.Tensor subclass" if isinstance(bad[0], torch.Tensor)
                    else type(bad[0]).__name__)
            where = f"a tuple holding {kind}" if isinstance(out, tuple) else kind
            return {"ok": False, "error": f"returned {where}, not a plain tensor", "lost": False}, []
        back = [self.tensors[key] for key in msg["args"]] if msg.get("inputs_back") else []
        described = [{**channel.describe(t), "device": t.device.type} for t in outs]
        reply = {"ok": True, **described[0], **({"outputs": described} if isinstance(out, tuple) else {})}
        return reply, [channel.tensor_fd(t) for t in [*outs, *back]]

    def op_grads(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        """One training step (_step) on the inputs (those at msg['wrt'] requiring grad) from the upstream
        gradient: each of those inputs' gradients back, None where it got none."""
        args = [self.tensors[k] for k in msg["args"]]
        try:
            grads = self._step(self.fns[msg.get("fn", "main")], args, self.tensors[msg["upstream"]], msg["wrt"])()
            self._sync()
        except (Exception, SystemExit) as e:
            return {"ok": False, "error": f"raised {describe_error(e)}", "lost": not self._usable()}, []
        if not all(g is None or type(g) is torch.Tensor for g in grads):
            return {"ok": False, "error": "a gradient that is not a plain tensor", "lost": False}, []
        return ({"ok": True, "grads": [None if g is None else channel.describe(g) for g in grads]},
                [channel.tensor_fd(g) for g in grads if g is not None])

    def _usable(self) -> bool:
        if self.device != "cuda":
            return True
        try:
            torch.cuda.synchronize()
            torch.zeros(1, device="cuda").add_(1).item()
            return True
        except Exception:
            return False

    def op_warm(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        fn = self._fn(msg)
        fn()
        if self.device == "cuda":
            timers.gpu_samples(fn, 2)    # the loop's first-time costs, not in a timed one
        self._sync()
        return {"ok": True}, []

    def op_loop(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        """n calls back to back, then a sync: the judge times this round trip on its own clock."""
        fn = self._fn(msg)
        for _ in range(msg["n"]):
            fn()
        self._sync()
        return {"ok": True}, []

    def op_gpu_time(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        """Two answers: 'synced' the moment the GPU is done (the judge's clock stops), then the times."""
        synced = lambda: channel.send(self.sock, {"ok": True, "synced": True})  # noqa: E731
        return {"ok": True, "samples": timers.gpu_samples(self._fn(msg), msg["reps"], synced)}, []

    def op_ping(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        return {"ok": True}, []


def serve(sock: socket.socket) -> None:
    worker = Worker(sock)
    while True:
        try:
            msg, fds = channel.recv(sock)
        except channel.ChannelError:
            return        # the judge is done (or gone): so is this process
        try:
            reply, out = worker.handle(msg, fds)
        except (Exception, SystemExit) as e:   # generated code failing in a timed call, or a bad request
            reply, out = {"ok": False, "error": f"raised {describe_error(e)}", "lost": not worker._usable()}, []
        try:
            channel.send(sock, reply, out)
        finally:
            channel.close(out)


def main(argv: list[str] | None = None) -> int:
    fd = int((argv if argv is not None else sys.argv[1:])[0])
    serve(socket.socket(fileno=fd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
