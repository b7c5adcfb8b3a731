"""Per-task load for the job autoscaler: request rates scraped from each task's /metrics, CPU from borglet reports."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

import httpx

from reference.elastic.decisions import counter_rate, mean, parse_counter

log = logging.getLogger(__name__)

REQUESTS_METRIC = "hello_requests_total"
# The borglet's health probes hit every task once a second: they are not the job's load.
PROBE_LABELS = ('path="/healthz"',)
SCRAPE_TIMEOUT_S = 0.5
# Long enough to smooth per-second noise, short enough to see a step within a few seconds.
WINDOW_S = 3.0


class Samples:
    """A rolling window of (time, value) samples per key."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._d: dict[Hashable, deque[tuple[float, float]]] = {}

    def add(self, key: Hashable, at: float, value: float) -> None:
        q = self._d.setdefault(key, deque())
        q.append((at, value))
        # Keep one sample older than the window so a rate spans the whole window.
        while len(q) > 2 and at - q[1][0] >= self.window_s:
            q.popleft()

    def get(self, key: Hashable) -> list[tuple[float, float]]:
        return list(self._d.get(key, ()))

    def keep_only(self, keys: Iterable[Hashable]) -> None:
        alive = set(keys)
        for k in [k for k in self._d if k not in alive]:
            del self._d[k]


class RequestRates:
    """Requests per second of each task, from deltas of its `hello_requests_total`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, workers: int = 8) -> None:
        self.clock = clock
        self.samples = Samples()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scrape")
        self._http = httpx.Client(timeout=httpx.Timeout(SCRAPE_TIMEOUT_S, connect=SCRAPE_TIMEOUT_S))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.close()

    def _scrape(self, url: str) -> float | None:
        try:
            response = self._http.get(url)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        return parse_counter(response.text, REQUESTS_METRIC, PROBE_LABELS)

    def measure(self, targets: Mapping[Hashable, str]) -> dict[Hashable, float | None]:
        """key -> requests/s over the window (None until two samples), scraping each URL once."""
        futures = {k: self._pool.submit(self._scrape, url) for k, url in targets.items()}
        out: dict[Hashable, float | None] = {}
        for k, fut in futures.items():
            value = fut.result()
            if value is not None:
                self.samples.add(k, self.clock(), value)
            out[k] = counter_rate(self.samples.get(k))
        self.samples.keep_only(targets)
        return out


class CpuUtilization:
    """CPU of each task in percent of its request, averaged over the window."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.samples = Samples()

    def measure(self, usage: Mapping[Hashable, tuple[int, int]]) -> dict[Hashable, float | None]:
        """key -> percent, from (cpu_milli used, cpu_milli requested) per key."""
        out: dict[Hashable, float | None] = {}
        now = self.clock()
        for k, (used, requested) in usage.items():
            if requested > 0:
                self.samples.add(k, now, 100.0 * used / requested)
            out[k] = mean([v for _, v in self.samples.get(k)])
        self.samples.keep_only(usage)
        return out
