"""The spread of repeated timings: each time is the median of its samples with their interquartile
range, and a speedup (one version's time over another's) an interval from those ranges, a tie
where the interval holds 1.0: the two versions' times overlap, so neither is shown as faster."""
from __future__ import annotations

import statistics


def quartiles(samples: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile) of the samples; one sample is all three."""
    if len(samples) < 2:
        return samples[0], samples[0], samples[0]
    q1, median, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q1, median, q3


def ratio_range(num: list[float] | None, den: list[float] | None) -> list[float] | None:
    """[low, high] of num / den over their interquartile ranges ([q1, q3] each): the low end the
    fastest numerator over the slowest denominator."""
    if not (num and den and den[0] > 0 and den[1] > 0):
        return None
    return [num[0] / den[1], num[1] / den[0]]


def is_tie(interval: list[float] | None) -> bool:
    return bool(interval) and interval[0] <= 1.0 <= interval[1]
