"""Usage over the last hour for Sigma's charts: a bounded, in-memory ring of samples per job and per machine, pure but for the sampler thread at the end.

Every series is sampled at the same instants (one shared ring of times), so a series costs two
float32 rings of `SAMPLES` values: 60 samples a minute apart is 480 bytes a series, 4.7 MiB for
the `MAX_SERIES` of 10,000. A series not seen for a whole ring is dropped; beyond `MAX_SERIES`
new series are not kept (the pages then say the chart has no history). Each replica samples
its own watch cache: nothing goes to etcd, and a replica's history starts when it does.
"""

from __future__ import annotations

import math
import os
import threading
from array import array
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

SAMPLE_ENV = "MINBORG_SIGMA_SAMPLE_S"  # the sampling interval, for tests that cannot wait a minute
DEFAULT_SAMPLE_S = 60.0
WINDOW_S = 3600.0
MAX_SERIES = 10_000
NAN = float("nan")


@dataclass(frozen=True)
class Point:
    at: float
    cpu_milli: float
    ram_bytes: float


@dataclass
class UsageHistory:
    """The last `samples` instants' (cpu_milli, ram_bytes) of each series ("job:u/n", "machine:m1")."""

    samples: int = int(WINDOW_S // DEFAULT_SAMPLE_S)
    max_series: int = MAX_SERIES
    times: array = field(default_factory=lambda: array("d"))
    series: dict[str, tuple[array, array]] = field(default_factory=dict)
    last_seen: dict[str, int] = field(default_factory=dict)  # series -> the sample number it was last in
    taken: int = 0  # samples taken so far; sample k sits at slot k % samples
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, at: float, values: Mapping[str, tuple[float, float]]) -> None:
        """One sample at `at` of every series in `values`; series absent from it get no value (NaN)."""
        with self.lock:
            slot = self.taken % self.samples
            if len(self.times) < self.samples:
                self.times.append(at)
            else:
                self.times[slot] = at
            for key, (cpu, ram) in values.items():
                rings = self.series.get(key)
                if rings is None:
                    if len(self.series) >= self.max_series:
                        continue
                    rings = self.series[key] = (array("f", [NAN] * self.samples), array("f", [NAN] * self.samples))
                rings[0][slot], rings[1][slot] = cpu, ram
                self.last_seen[key] = self.taken
            for key, rings in self.series.items():
                if key not in values:
                    rings[0][slot] = rings[1][slot] = NAN
            for key in [k for k, n in self.last_seen.items() if self.taken - n >= self.samples]:
                del self.series[key], self.last_seen[key]
            self.taken += 1

    def points(self, key: str, since: float) -> list[Point]:
        """The series' samples taken at `since` or later, oldest first (none where it had no value)."""
        with self.lock:
            rings = self.series.get(key)
            if rings is None:
                return []
            n = len(self.times)
            start = self.taken % self.samples if n == self.samples else 0
            out = []
            for i in range(n):
                slot = (start + i) % self.samples
                at, cpu, ram = self.times[slot], rings[0][slot], rings[1][slot]
                if at >= since and not math.isnan(cpu):
                    out.append(Point(at, float(cpu), float(ram)))
            return out


def usage_of(pairs: Iterable[tuple[str, int]]) -> tuple[float, float]:
    d = dict(pairs)
    return float(d.get("cpu_milli", 0)), float(d.get("ram_bytes", 0))


def sample_interval() -> float:
    try:
        return max(0.2, float(os.environ.get(SAMPLE_ENV, DEFAULT_SAMPLE_S)))
    except ValueError:
        return DEFAULT_SAMPLE_S


def start_sampler(
    history: UsageHistory, take: Callable[[], Mapping[str, tuple[float, float]]], clock: Callable[[], float],
    stop: threading.Event, interval_s: float,
) -> threading.Thread:  # fmt: skip
    """Record `take()` now and every `interval_s` until `stop` is set, on a daemon thread."""

    def run() -> None:
        while True:
            try:
                history.record(clock(), take())
            except Exception:  # noqa: BLE001 - a cell view mid-reload must not end the history
                pass
            if stop.wait(interval_s):
                return

    thread = threading.Thread(target=run, name="sigma-usage", daemon=True)
    thread.start()
    return thread
