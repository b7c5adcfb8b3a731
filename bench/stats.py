"""Percentiles of measured samples, with the one convention every bench and report uses.

The convention is nearest-rank: the q-th percentile of n samples is the k-th smallest sample,
k = ceil(q * n), at least 1. It is always one of the samples (no interpolation), so a
percentile of latencies is a latency that some request had, and a Locust histogram, which
keeps only bucket counts, gives the same answer as the list of samples it counted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping


def nearest_rank(count: int, q: float) -> int:
    """The 1-based rank of the q-th percentile among `count` samples: ceil(q * count), at least 1."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"a percentile is a fraction in [0, 1] such as 0.99, got {q}")
    if count < 1:
        raise ValueError("a percentile needs at least one sample")
    return max(1, math.ceil(q * count))


def percentile(values: Iterable[float], q: float) -> float | None:
    """The nearest-rank q-th percentile (q in [0, 1]) of `values`; None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[nearest_rank(len(ordered), q) - 1]


def histogram_percentile(histogram: Mapping[int, int], q: float) -> float | None:
    """The nearest-rank q-th percentile of the samples a histogram {bucket: count} counts;
    None when it counts none. The same sample `percentile` picks from the list of buckets."""
    total = sum(histogram.values())
    if total == 0:
        return None
    rank = nearest_rank(total, q)
    seen = 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen >= rank:
            return float(bucket)
    raise AssertionError("unreachable: the counts sum to total >= rank")
