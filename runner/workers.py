"""The judge's end of its untrusted workers: each generated file (the reference, every kernel
version) runs in a sandboxed process of its own (runner.untrusted), and the judge reaches it only
through runner.channel.

A worker that dies, hangs past the judge's deadline or breaks the protocol is a WorkerDied with
how it ended; the judge never waits on it for good and never reads more than it asked for.
"""
from __future__ import annotations

import itertools
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from runner import channel, launch_count, protocol, sandbox


class WorkerDied(Exception):
    """The worker process is gone, hung, or broke the protocol; the message says how."""


# One output tensor, or a tuple of them (torch.max(x, dim)'s values and indices).
Output = torch.Tensor | tuple[torch.Tensor, ...]


def outputs(out: Output) -> list[torch.Tensor]:
    """An output's tensors: itself, or a tuple's."""
    return list(out) if isinstance(out, tuple) else [out]


@dataclass
class Called:
    out: Output | None = None             # the output(s), read as the judge's dtypes and shapes, on the judge's device
    problem: str = ""                     # empty when the call returned a tensor of the right kind
    lost: bool = False                    # the worker's CUDA context is gone
    changed: list[int] = field(default_factory=list)   # positions of inputs that came back different
    launches: dict[str, int] | None = None   # kernels the driver saw it launch, by name (None: not counted)


class Worker:
    """One sandboxed worker process and the judge's socket to it."""

    def __init__(self, role: str, root: Path, backend: str, gpu: int | None, limits: sandbox.Limits,
                 deadline: float, launch_library: Path | None = None) -> None:
        """launch_library: runner.launch_count's library, to count this CUDA worker's launches."""
        self.role, self.deadline = role, deadline
        self.device = protocol.device_type(backend)
        judge_end, worker_end = channel.pair()
        workdir = root / f"worker-{role.replace('@', '-')}"
        workdir.mkdir(parents=True, exist_ok=True)
        fd = worker_end.fileno()
        self.counter = None
        if launch_library is not None and self.device == "cuda":
            # A copy in the worker's own directory: the one host path its sandbox shows it.
            self.counter = launch_count.Counter(Path(shutil.copy(launch_library, workdir)))
        env, fds = (self.counter.env(), (fd, self.counter.fd)) if self.counter else ({}, (fd,))
        self.child = sandbox.start(sandbox.python_cmd("-m", "runner.untrusted", str(fd)), workdir,
                                   backend=backend, gpu=gpu, limits=limits, pass_fds=fds, env=env)
        worker_end.close()
        self.sock = judge_end
        self._ids = itertools.count()

    def request(self, message: dict, fds: list[int] = ()) -> tuple[dict, list[int]]:
        """Send one request and wait for its answer, at most until the judge's deadline."""
        try:
            channel.send(self.sock, message, list(fds))
        except channel.ChannelError as e:
            raise WorkerDied(self._how_it_ended(e)) from None
        return self.receive()

    def receive(self) -> tuple[dict, list[int]]:
        """The next answer, at most until the judge's deadline (a request answered in two parts has two)."""
        try:
            return channel.recv(self.sock, timeout=max(self.deadline - time.monotonic(), 1.0))
        except channel.ChannelError as e:
            raise WorkerDied(self._how_it_ended(e)) from None

    def _how_it_ended(self, error: channel.ChannelError) -> str:
        try:
            outcome = self.child.outcome(timeout=3)     # a closed channel: the process is on its way out
        except TimeoutError:
            self.child.kill()
            return f"the {self.role} worker broke off ({error}) and was stopped"
        last = (outcome.stderr_tail.strip().splitlines() or [""])[-1][:300]
        if outcome.timed_out:
            how = f"ran past its time limit ({outcome.duration_s:.0f} s)"
        elif outcome.out_of_memory:
            how = "ran out of memory (sandbox limit or allocation refused)"
        elif outcome.signal_name:
            how = f"died with {outcome.signal_name}"
        else:
            how = f"exited with code {outcome.exit_code}"
        return f"the {self.role} worker process {how}" + (f": {last}" if last else "")

    def ok(self, message: dict, fds: list[int] = ()) -> dict:
        """A request whose failure is the worker's error message (as WorkerDied when it is lost)."""
        reply, extra = self.request(message, fds)
        channel.close(extra)
        if not reply.get("ok"):
            raise CallFailed(str(reply.get("error", "failed"))[:400], bool(reply.get("lost")))
        return reply

    # --- tensors -------------------------------------------------------------------------------

    def put(self, tensors: list[torch.Tensor]) -> list[str]:
        ids = [f"t{next(self._ids)}" for _ in tensors]
        self._send_tensors("put", ids, tensors)
        return ids

    def _send_tensors(self, op: str, ids: list[str], tensors: list[torch.Tensor]) -> None:
        fds = [channel.tensor_fd(t) for t in tensors]
        try:
            self.ok({"op": op, "tensors": [{"id": i, **channel.describe(t)} for i, t in zip(ids, tensors)]}, fds)
        finally:
            channel.close(fds)

    def drop(self, ids: list[str]) -> None:
        self.ok({"op": "drop", "ids": ids})

    def call(self, args: list[torch.Tensor], like: torch.Tensor | None, fn: str = "main", config: dict | None = None,
             check_inputs: bool = False) -> Called:
        """Call the worker's function on copies of args. like: the reference output whose dtype and
        shape the output must have (None for the reference itself, whose output defines them)."""
        ids = self.put(args)
        try:
            return self.call_ids(ids, args, like, fn, config, check_inputs)
        finally:
            self.drop(ids)

    def call_ids(self, ids: list[str], args: list[torch.Tensor], like: torch.Tensor | None, fn: str = "main",
                 config: dict | None = None, check_inputs: bool = False) -> Called:
        """call() on tensors already in the worker (ids), whose values the judge holds as args."""
        message = {"op": "call", "fn": fn, "args": ids, "config": config, "inputs_back": check_inputs,
                   "like": _described(like)}
        before = self.counter.counts() if self.counter else None
        reply, fds = self.request(message)
        try:
            called = self._called(reply, fds, args, like, check_inputs)
        finally:
            channel.close(fds)
        if self.counter:
            called.launches = launch_count.launched(before, self.counter.counts())
        return called

    def grads(self, args: list[torch.Tensor], upstream: torch.Tensor, wrt: list[int],
              fn: str = "main") -> tuple[list[torch.Tensor | None], str]:
        """(the gradient of each args[i], i in wrt, from the worker's forward and backward on copies of
        args with the upstream gradient, None where it gave none; a problem or '')."""
        ids = self.put([*args, upstream])
        try:
            reply, fds = self.request({"op": "grads", "fn": fn, "args": ids[:-1], "upstream": ids[-1], "wrt": wrt})
            try:
                if not reply.get("ok"):
                    return [], str(reply.get("error", "failed"))[:400]
                described = reply.get("grads")
                if not isinstance(described, list) or len(described) != len(wrt) or \
                        len(fds) != sum(d is not None for d in described):
                    raise WorkerDied(f"the {self.role} worker answered {len(wrt)} gradients with {str(described)[:80]}")
                buffers = iter(fds)
                return [None if d is None else channel.read_tensor(next(buffers), channel.dtype_of(d.get("dtype")),
                                                                  _shape(d.get("shape")))
                        for d in described], ""
            finally:
                channel.close(fds)
        finally:
            self.drop(ids)

    def refill(self, ids: list[str], tensors: list[torch.Tensor]) -> None:
        """Write new values into the worker's tensors in place: same storage, same addresses."""
        self._send_tensors("refill", ids, tensors)

    def _called(self, reply: dict, fds: list[int], args: list[torch.Tensor], like: Output | None,
                check_inputs: bool) -> Called:
        if not reply.get("ok"):
            return Called(problem=str(reply.get("error", "failed"))[:400], lost=bool(reply.get("lost")))
        several = "outputs" in reply
        described = reply["outputs"] if several else [reply]
        if not isinstance(described, list) or not described:
            raise WorkerDied(f"the {self.role} worker described its outputs as {str(described)[:80]}")
        want = len(described) + (len(args) if check_inputs else 0)
        if len(fds) != want:
            raise WorkerDied(f"the {self.role} worker sent {len(fds)} buffers where the judge asked for {want}")
        if like is not None:
            problem = _unlike(described, like, several)
            if problem:
                return Called(problem=problem)
            kinds = [(t.dtype, list(t.shape)) for t in outputs(like)]
        else:
            kinds = [(channel.dtype_of(d.get("dtype")), _shape(d.get("shape"))) for d in described]
        if any(d.get("device") != self.device for d in described):
            wrong = next(d.get("device") for d in described if d.get("device") != self.device)
            return Called(problem=f"output on {wrong} but the inputs are on {self.device}")
        where = args[0].device if args else "cpu"
        outs = [channel.read_tensor(fd, dtype, shape).to(where) for fd, (dtype, shape) in zip(fds, kinds)]
        changed = [i for i, (arg, fd) in enumerate(zip(args, fds[len(outs):]))
                   if not torch.equal(_bits(channel.read_tensor(fd, arg.dtype, list(arg.shape))), _bits(arg.cpu()))]
        return Called(out=tuple(outs) if several else outs[0], changed=changed)

    def close(self) -> None:
        self.sock.close()
        self.child.kill()
        if self.counter:
            self.counter.close()


class CallFailed(Exception):
    """A request the worker answered with an error (generated code raised)."""

    def __init__(self, message: str, lost: bool) -> None:
        super().__init__(message)
        self.lost = lost


def _described(like) -> dict | list[dict] | None:
    """What the worker is told of the output it should give (its first's size poisons memory)."""
    if like is None:
        return None
    described = [channel.describe(t) for t in outputs(like)]
    return described if isinstance(like, tuple) else described[0]


def _unlike(described: list[dict], like, several: bool) -> str:
    """Why outputs described so differ from the reference's like (one tensor or a tuple), or ''."""
    likes = outputs(like)
    if several != isinstance(like, tuple) or len(described) != len(likes):
        said = f"a tuple of {len(described)} tensors" if several else "one tensor"
        wanted = f"a tuple of {len(likes)} tensors" if isinstance(like, tuple) else "one tensor"
        return f"returned {said} but the reference gives {wanted}"
    for k, (d, t) in enumerate(zip(described, likes)):
        which = f"output {k + 1}'s" if several else "output"
        if d.get("shape") != list(t.shape):
            return f"{which} shape {d.get('shape')} but the reference gives {list(t.shape)}"
        if d.get("dtype") != channel.describe(t)["dtype"]:
            return f"{which} dtype torch.{d.get('dtype')} but the reference gives {t.dtype}"
    return ""


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _shape(value) -> list[int]:
    if not (isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)):
        raise WorkerDied(f"a worker described an output of shape {str(value)[:80]}")
    return value
