"""A fleet on one host (issue 27): `kernelbot runner --gpus all` supervises one runner process per GPU.
Each child is the ordinary runner (runner.worker) pinned to its GPU, so each sandboxes its own jobs,
heartbeats on its own and takes one job at a time from the shared queue: jobs spread over the GPUs
by who is free, and no GPU ever runs two timed jobs at once. A child that dies is started again; the
job it held is re-queued by the bot once its heartbeat goes stale (KERNELBOT_STALE_S), and any free
runner of the fleet takes it. SIGTERM or SIGINT stops every child, then the supervisor.

The GPUs come from nvidia-smi (index and name), asked once at start; the supervisor never
initialises CUDA itself.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

RESTART_PAUSE_S = 2.0        # between a child's death and its restart
FAST_DEATH_S = 10.0          # a child that dies sooner than this after its start ...
FAST_DEATH_PAUSE_S = 30.0    # ... three times in a row waits this long before the next start


class FleetError(ValueError):
    """The --gpus list names no GPU this host has; the message says which it has."""


def host_gpus() -> list[tuple[int, str]]:
    """(index, name) of each GPU nvidia-smi lists; [] where there is none or no nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    gpus = []
    for line in out.stdout.splitlines():
        index, _, name = line.partition(",")
        if index.strip().isdigit():
            gpus.append((int(index), name.strip()))
    return gpus


def chosen_gpus(spec: str, available: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The GPUs `--gpus` names: "all", or indices such as "0,2,3"."""
    have = dict(available)
    if not have:
        raise FleetError("--gpus: nvidia-smi lists no GPU on this host; run `kernelbot runner --backend cpu` "
                         "for a CPU runner")
    if spec.strip() == "all":
        return sorted(have.items())
    try:
        wanted = [int(part) for part in spec.split(",") if part.strip()]
    except ValueError:
        raise FleetError(f"--gpus {spec!r}: give 'all' or GPU indices separated by commas, e.g. 0,1") from None
    missing = [i for i in wanted if i not in have]
    if missing or not wanted or len(set(wanted)) != len(wanted):
        listed = ", ".join(f"{i} ({n})" for i, n in sorted(have.items()))
        raise FleetError(f"--gpus {spec!r}: this host has GPUs {listed}; name each once, or 'all'")
    return [(i, have[i]) for i in wanted]


@dataclass
class _Child:
    gpu: int
    name: str
    process: subprocess.Popen | None = None
    started: float = 0.0
    fast_deaths: int = 0
    not_before: float = 0.0        # when a dead child may start again (0: not dead)


class Fleet:
    """One runner child per GPU, kept running until stop()."""

    def __init__(self, backend: str, queue_url: str, gpus: list[tuple[int, str]],
                 heartbeat_s: float | None = None) -> None:
        self.backend, self.queue_url, self.heartbeat_s = backend, queue_url, heartbeat_s
        self.children = [_Child(i, name) for i, name in gpus]
        self.stopping = threading.Event()

    def say(self, text: str) -> None:
        print(f"[fleet {self.backend}] {text}", flush=True)

    def command(self, gpu: int) -> list[str]:
        cmd = [sys.executable, "-m", "runner.worker", "--backend", self.backend, "--queue", self.queue_url,
               "--gpu", str(gpu)]
        return cmd + (["--heartbeat-s", str(self.heartbeat_s)] if self.heartbeat_s else [])

    def start(self, child: _Child) -> None:
        child.process = subprocess.Popen(self.command(child.gpu))
        child.started = time.monotonic()
        self.say(f"GPU {child.gpu} ({child.name}): runner pid {child.process.pid}")

    def tick(self) -> None:
        """Start children that are not running (a first start, or a restart after a death)."""
        now = time.monotonic()
        for child in self.children:
            if child.process is not None and child.process.poll() is None:
                continue
            if child.process is not None and child.not_before == 0.0:      # just found dead
                lived = now - child.started
                child.fast_deaths = child.fast_deaths + 1 if lived < FAST_DEATH_S else 0
                pause = FAST_DEATH_PAUSE_S if child.fast_deaths >= 3 else RESTART_PAUSE_S
                child.not_before = now + pause
                self.say(f"GPU {child.gpu}: runner pid {child.process.pid} exited with {child.process.returncode} "
                         f"after {lived:.0f} s; restarting in {pause:.0f} s")
                continue
            if now >= child.not_before:
                child.not_before = 0.0
                self.start(child)

    def run(self) -> None:
        n = len(self.children)
        self.say(f"{n} runner{'s' * (n != 1)}, one per GPU: "
                 + ", ".join(f"{c.gpu} ({c.name})" for c in self.children))
        while not self.stopping.is_set():
            self.tick()
            self.stopping.wait(0.5)
        self.stop_children()

    def stop_children(self, grace_s: float = 30.0) -> None:
        """SIGTERM to every child (each stops its job's sandbox and writes itself gone), then SIGKILL
        to any still running after grace_s."""
        running = [c.process for c in self.children if c.process is not None and c.process.poll() is None]
        for p in running:
            p.terminate()
        deadline = time.monotonic() + grace_s
        for p in running:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.say("stopped")


def supervise(backend: str, queue_url: str, gpus: str, heartbeat_s: float | None = None) -> int:
    """`kernelbot runner --gpus ...`: run the fleet until SIGTERM or SIGINT."""
    fleet = Fleet(backend, queue_url, chosen_gpus(gpus, host_gpus()), heartbeat_s)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: fleet.stopping.set())
    fleet.run()
    return 0
