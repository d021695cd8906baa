"""How the runner times a version: GPU time (the basis for comparing versions), do_bench per call,
CUDA-graph replay, wall clock on the cpu backend, and the copy bandwidth every result is set
against. Trusted code: the timed function may be generated, the clock is not."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch
import triton.testing

CPU_RUNS = 5
FLUSH_BYTES = 2 * 2**30  # reading 2 GiB takes ~0.5 ms on an H200: longer than any launch path
GPU_REPS = 100


def time_cuda(fn: Callable, timing: dict) -> dict:
    """Three views of one version on the GPU, in ms:
    - ms: triton.testing.do_bench median per call (L2 flushed); it includes the host's launch
      overhead whenever that outlasts do_bench's 256 MB flush, as Triton's Python launcher can;
    - cudagraph_ms: CUDA-graph replay median, launch overhead gone but L2 kept warm between calls;
    - gpu_ms: GPU time with L2 flushed and the host kept ahead (see gpu_time), the basis for
      comparing versions."""
    out = {"ms": triton.testing.do_bench(fn, warmup=timing.get("warmup_ms", 25), rep=timing.get("rep_ms", 100),
                                         return_mode="median")}
    out["gpu_ms"] = gpu_time(fn, timing.get("gpu_reps", GPU_REPS))
    if timing.get("cudagraph", True):
        try:
            out["cudagraph_ms"] = triton.testing.do_bench_cudagraph(fn, rep=timing.get("rep_ms", 100),
                                                                    return_mode="median")
        except Exception:
            out["cudagraph_ms"] = None      # a version that cannot be captured still has the others
    return out


_flush_buffer: list[torch.Tensor] = []


def gpu_time(fn: Callable, reps: int) -> float:
    """Median device time of fn between two events, with L2 flushed before each call by reading
    FLUSH_BYTES. Reading leaves L2 clean: zeroing a buffer (do_bench's flush) leaves it full of
    dirty lines whose write-back then lands inside the timed call, about 8 us on an H200 that
    is no version's own work (a 128 MiB row sum: 41 us after a zeroing flush, 33 us after a
    reading one). The flush keeps the device busy far longer than any host launch path, so the
    host is always ahead and the events bracket only fn's work on the GPU."""
    if not _flush_buffer:
        _flush_buffer.append(torch.zeros(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda"))
    flush = _flush_buffer[0]
    fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        flush.max()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


def time_cpu(fn: Callable, timing: dict) -> dict:
    """Wall-clock median of a few runs after one warm-up run."""
    fn()
    samples = []
    for _ in range(timing.get("cpu_runs", CPU_RUNS)):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return {"ms": statistics.median(samples) * 1e3}


def copy_gbps(device: str, timer: Callable) -> float:
    """Device copy bandwidth, bytes read + written: the ceiling for memory-bound kernels. On the
    GPU it is GPU time, the clock every version is compared on."""
    nbytes = 2**30 if device == "cuda" else 2**26
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    times = timer(lambda: dst.copy_(src), {"cudagraph": False})
    return 2 * nbytes / (times.get("gpu_ms", times["ms"]) * 1e-3) / 1e9
