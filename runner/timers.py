"""Clocks: GPU time between events with L2 flushed (the basis for comparing versions), wall clock
on the cpu backend, the flush's own time and the copy bandwidth every result is set against. Used by the untrusted worker to time the code beside it (its numbers are then
checked by the judge, runner.remote_timing) and by the judge for its own measures."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

CPU_RUNS = 5
FLUSH_BYTES = 2 * 2**30  # reading 2 GiB takes ~0.5 ms on an H200: longer than any launch path
GPU_REPS = 100


_flush_buffer: list[torch.Tensor] = []


def gpu_time(fn: Callable, reps: int) -> float:
    """Median device time of fn (see gpu_samples) after one warm-up call."""
    fn()
    torch.cuda.synchronize()
    return statistics.median(gpu_samples(fn, reps))


def flush_buffer() -> torch.Tensor:
    """The buffer read to flush L2, allocated once per process."""
    if not _flush_buffer:
        _flush_buffer.append(torch.zeros(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda"))
    return _flush_buffer[0]


def gpu_samples(fn: Callable, reps: int, synced: Callable[[], None] = lambda: None) -> list[float]:
    """Device time of fn between two events, in ms, once per rep, with L2 flushed before each call
    by reading FLUSH_BYTES. Reading leaves L2 clean: zeroing a buffer (do_bench's flush) leaves it
    full of dirty lines whose write-back then lands inside the timed call, work that is no
    version's own. The flush keeps the device busy far longer than any host launch path (events
    are made inside the loop for that reason), so the host is always ahead and the events bracket
    only fn's work on the GPU. synced() is called as soon as the GPU is done, before the times are
    read: the judge's clock stops there (runner.remote_timing)."""
    flush = flush_buffer()
    events = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush.max()
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    synced()
    return [start.elapsed_time(end) for start, end in events]


def loop_overhead_ms(reps: int = GPU_REPS) -> float:
    """What the gpu_samples loop costs per rep beyond its flushes and the timed work, on this
    process's own clock (the gaps between kernels, the event records): timed around a trusted
    one-element add, in ms. The judge allows for it when it checks a worker's loop."""
    one = torch.zeros(1, device="cuda")
    add = lambda: one.add_(1)  # noqa: E731
    gpu_time(add, 3)
    flush, _ = flush_ms()
    start = time.perf_counter()
    samples = gpu_samples(add, reps)
    wall_ms = (time.perf_counter() - start) * 1e3
    return max(wall_ms / reps - flush - statistics.mean(samples), 0.0)


def flush_ms(reps: int = 50) -> tuple[float, float]:
    """(mean, standard deviation) of one flush of gpu_samples, in ms, on this process's own clock:
    what the judge subtracts from a worker's timed loop to get the work the worker did."""
    flush = flush_buffer()
    flush.max()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        flush.max()
        end.record()
    torch.cuda.synchronize()
    times = [start.elapsed_time(end) for start, end in events]
    return statistics.mean(times), statistics.stdev(times)


def time_cpu(fn: Callable, timing: dict) -> dict:
    """Wall-clock median of a few runs after one warm-up run."""
    fn()
    samples = []
    for _ in range(timing.get("cpu_runs", CPU_RUNS)):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return {"ms": statistics.median(samples) * 1e3}


def copy_gbps(device: str) -> float:
    """Device copy bandwidth, bytes read + written: the ceiling for memory-bound kernels, measured
    by the judge in its own process. On the GPU it is GPU time, the clock versions are compared on."""
    nbytes = 2**30 if device == "cuda" else 2**26
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy = lambda: dst.copy_(src)  # noqa: E731
    ms = gpu_time(copy, GPU_REPS) if device == "cuda" else time_cpu(copy, {})["ms"]
    return 2 * nbytes / (ms * 1e-3) / 1e9
