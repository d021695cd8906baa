"""Timing a version that runs in an untrusted worker, on the judge's own clock.

- per call (``ms``): the judge's wall clock over n back-to-back calls in the worker and one
  sync, less the channel's round trip: what a caller pays per call in a loop, launch path
  included. Nothing the worker reports enters it.
- GPU time (``gpu_ms``, the basis on the GPU): the worker's CUDA events around each call, L2
  flushed before each (runner.timers.gpu_samples). The judge times the whole loop on its own
  clock too, stopped by a message the worker sends once the GPU is done; the flushes and the
  loop's own cost are the judge's to measure (in its own CUDA context), so wall / reps - flush -
  overhead is the work the worker really did per call (its L2 write-back allowed for). Reported times that disagree
  with that beyond the measured noise (a patched clock, work on another stream, a timer that
  is not the one the judge expects) fail the version: the numbers are not used.
- on the cpu backend the per-call wall clock is the basis; the worker reports no times at all.
Every version, the torch and torch.compile baselines included, is timed the same way. Each time
is the median of repeated samples, with their interquartile range beside it (``*_q``: [q1, q3];
runner.spread): the per-call loop is run PER_CALL_LOOPS times for that.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

from runner import channel, spread, timers
from runner.workers import Worker

LOOP_S = 0.1            # the per-call loops last about this long in all
PER_CALL_LOOPS = 5      # ... split into this many, each one sample of the per-call time
MAX_LOOP = 100_000
# The worker's GPU time may fall short of the judge's by this share of the judge's own estimate,
# plus the noise of the flushes' mean and a few microseconds: the events sit inside the loop, so
# honest reports fall a little short (the event records, the sync and the channel), never far.
TOLERANCE = 0.10
ABS_TOLERANCE_MS = 0.003


class TimingRejected(Exception):
    """The worker's times disagree with the judge's clock; the message gives both."""


@dataclass(frozen=True)
class Loop:
    """What the judge measured in its own CUDA context: one flush, the loop's own cost per rep
    (timers.loop_overhead_ms), and how fast lines written back from L2 drain."""
    flush_ms: float
    flush_std_ms: float
    overhead_ms: float
    l2_bytes: int
    copy_gbps: float

    def write_back_ms(self, out_bytes: int) -> float:
        """The next flush pays for the lines a call left dirty in L2 (its output, some scratch):
        work of the call's own that its events do not see."""
        dirty = min(self.l2_bytes, out_bytes + 4 * 2**20)
        return dirty / (self.copy_gbps * 1e9 / 2) * 1e3


def round_trip_s(worker: Worker, tries: int = 5) -> float:
    """The request overhead every timed call carries at least: the fastest of a few pings (their
    median, on a busy host, can exceed a short call's whole wall time and leave it near zero)."""
    return min(_timed(worker, {"op": "ping"})[1] for _ in range(tries))


def _timed(worker: Worker, message: dict) -> tuple[dict, float]:
    start = time.perf_counter()
    reply = worker.ok(message)
    return reply, time.perf_counter() - start


def per_call_ms(worker: Worker, call: dict, rtt_s: float, loop_s: float = LOOP_S) -> list[float]:
    """Judge's wall clock per call, one sample per loop of PER_CALL_LOOPS, about loop_s seconds in all."""
    _, one = _timed(worker, {**call, "op": "loop", "n": 3})
    n = int(min(max(loop_s / PER_CALL_LOOPS / max((one - rtt_s) / 3, 1e-7), 3), MAX_LOOP))
    return [max(_timed(worker, {**call, "op": "loop", "n": n})[1] - rtt_s, 1e-9) / n * 1e3
            for _ in range(PER_CALL_LOOPS)]


def cpu_ms(worker: Worker, call: dict, rtt_s: float, runs: int) -> list[float]:
    """Single calls on the judge's wall clock (the cpu backend's basis), one sample each."""
    samples = []
    for _ in range(runs):
        _, wall = _timed(worker, {**call, "op": "loop", "n": 1})
        samples.append(max(wall - rtt_s, 1e-9) * 1e3)
    return samples


def gpu_ms(worker: Worker, call: dict, reps: int, rtt_s: float, loop: Loop,
           out_bytes: int) -> tuple[list[float], float]:
    """(the GPU times the worker measured, the judge's estimate per call) after checking one
    against the other; TimingRejected when they disagree."""
    synced, wall = _timed(worker, {**call, "op": "gpu_time", "reps": reps})
    reply, extra = worker.receive()
    channel.close(extra)
    samples = reply.get("samples")
    if not (synced.get("synced") and isinstance(samples, list) and len(samples) == reps
            and all(isinstance(s, (int, float)) and math.isfinite(s) and s >= 0 for s in samples)):
        raise TimingRejected(f"the worker answered {reps} timed calls with {str(samples)[:80]}")
    per_rep = (wall - rtt_s) * 1e3 / reps
    judged = per_rep - loop.flush_ms - loop.overhead_ms
    reported = statistics.mean(samples)
    slack = (TOLERANCE * max(judged, 0.0) + loop.write_back_ms(out_bytes)
             + 4 * loop.flush_std_ms / math.sqrt(reps) + ABS_TOLERANCE_MS)
    if reported < judged - slack:
        raise TimingRejected(f"the worker's GPU time ({reported * 1e3:.1f} us per call, mean of {reps}) is below "
                             f"what the judge's clock saw ({judged * 1e3:.1f} us of work per call beyond its "
                             f"flushes, allowing {slack * 1e3:.1f} us): its clock or its stream is not the one timed")
    if reported > per_rep + slack:
        raise TimingRejected(f"the worker's GPU time ({reported * 1e3:.1f} us per call) is longer than the whole "
                             f"timed loop took per call on the judge's clock ({per_rep * 1e3:.1f} us)")
    return samples, judged


def _summary(key: str, samples: list[float]) -> dict:
    """{key: the median, key_q: [q1, q3]}."""
    q1, median, q3 = spread.quartiles(samples)
    return {key: median, f"{key}_q": [q1, q3]}


def time_version(worker: Worker, call: dict, device: str, timing: dict, loop: Loop | None, out_bytes: int) -> dict:
    """A bench row's timings for one version: warm-up, then the judge's measures (see module doc)."""
    worker.ok({**call, "op": "warm"})
    rtt = round_trip_s(worker)
    if device != "cuda":
        return _summary("ms", cpu_ms(worker, call, rtt, timing.get("cpu_runs", timers.CPU_RUNS)))
    samples, judged = gpu_ms(worker, call, timing.get("gpu_reps", timers.GPU_REPS), rtt, loop, out_bytes)
    return {**_summary("ms", per_call_ms(worker, call, rtt)), **_summary("gpu_ms", samples), "judge_gpu_ms": judged}


def sweep_ms(worker: Worker, call: dict, device: str, reps: int, loop: Loop | None, out_bytes: int) -> float:
    """One config's time in a tuning sweep: checked GPU time over a few calls, or wall clock on cpu."""
    worker.ok({**call, "op": "warm"})
    rtt = round_trip_s(worker, 3)
    samples = cpu_ms(worker, call, rtt, 2) if device != "cuda" else gpu_ms(worker, call, reps, rtt, loop, out_bytes)[0]
    return statistics.median(samples)
