"""Crashing task::machine pairings remembered: a bounded memory that expires, and the score term that makes a task prefer other machines.

Borg "avoids repeating task::machine pairings that cause task or machine crashes" (Verma et
al., section 3.5). The leader records each incarnation of a task index that failed on a
machine (`CrashMemory.record`); the scheduler reads the counts of the last `ttl_s` seconds
and scores a machine lower the more often the index crashed there (`crash_penalty`). One
crash is chance and costs nothing; from `REPEATED` on, each crash costs `weight` points, more
than any policy's spread of scores, so any other feasible machine is preferred, the machine
crashed on least first. It is a preference, never a rule: a task whose only feasible machines
are ones it crashed on still runs there, under its restart back-off (master/backoff.py), so a
crash loop stays a visible, slowed crash loop (BACKOFF, with its exit code) rather than a task
PENDING for the memory's lifetime. The memory is bounded (`max_indices` indices, the
`per_index` newest crashes of each) and forgets after `ttl_s`, so a machine repaired, or a task
fixed, is preferred again. The leader keeps the memory; a scheduler process
(reference/schedulerd/) reads it from the leader's answer to each plan it proposes
(`wire.crashes_to_json`), so its placements avoid the same pairings.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

import numpy as np

IndexKey = tuple[str, int]  # (job key, task index): what every incarnation of a task shares

REPEATED = 2  # crashes on one machine from which it scores lower
WEIGHT = 100.0  # points per crash from REPEATED on: more than a policy's whole range (0..100)
TTL_S = 600.0  # how long a crash is remembered
MAX_INDICES = 10_000  # task indices remembered at most (the least recently crashed are forgotten)
PER_INDEX = 8  # crashes kept per index (the newest)


def crash_penalty(crashes: int, weight: float = WEIGHT) -> float:
    """Points off a machine on which the task's index crashed `crashes` times lately: none
    below REPEATED, weight * (crashes - 1) from there (finite: a preference, not a rule)."""
    if crashes < REPEATED:
        return 0.0
    return weight * (crashes - 1)


def penalties(crashes: Mapping[int, int], machines: np.ndarray, weight: float = WEIGHT) -> np.ndarray:
    """`crash_penalty` for each machine (by row number) of a sample, given crashes by row number."""
    out = np.zeros(len(machines))
    for mi, n in crashes.items():
        p = crash_penalty(n, weight)
        if p:
            out[machines == mi] = p
    return out


class CrashMemory:
    """Recent crashes of each task index by machine: bounded, and each crash forgotten after `ttl_s`.

    Safe to share between threads: the leader's pass records into it while the plans endpoint
    reads it for a scheduler process."""

    def __init__(
        self,
        ttl_s: float = TTL_S,
        max_indices: int = MAX_INDICES,
        per_index: int = PER_INDEX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s, self.max_indices, self.per_index, self.clock = ttl_s, max_indices, per_index, clock
        self._crashes: OrderedDict[IndexKey, list[tuple[float, str]]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._crashes)

    def record(self, job: str, index: int, machine: str) -> None:
        """One incarnation of the index crashed on `machine` now."""
        key = (job, index)
        with self._lock:
            kept = self._crashes.pop(key, [])
            kept.append((self.clock(), machine))
            self._crashes[key] = kept[-self.per_index :]
            while len(self._crashes) > self.max_indices:
                self._crashes.popitem(last=False)  # the index whose last crash is oldest

    def forget(self, job: str) -> None:
        """Forget the crashes of every index of `job`: a new version of it is a new program
        (master/rollout.py), which may run where the old one crashed."""
        with self._lock:
            for key in [k for k in self._crashes if k[0] == job]:
                del self._crashes[key]

    def counts(self, job: str, index: int) -> dict[str, int]:
        """The index's crashes of the last `ttl_s` seconds, by machine."""
        with self._lock:
            kept = list(self._crashes.get((job, index), ()))
        if not kept:
            return {}
        since = self.clock() - self.ttl_s
        out: dict[str, int] = {}
        for at, machine in kept:
            if at > since:
                out[machine] = out.get(machine, 0) + 1
        return out

    def snapshot(self) -> dict[IndexKey, dict[str, int]]:
        """Every index's recent crashes that could change a score (REPEATED or more on a
        machine), for one scheduling pass; expired ones are dropped on the way."""
        since = self.clock() - self.ttl_s
        out: dict[IndexKey, dict[str, int]] = {}
        with self._lock:
            for key in list(self._crashes):
                kept = [c for c in self._crashes[key] if c[0] > since]
                if not kept:
                    del self._crashes[key]
                else:
                    self._crashes[key] = kept
                    out[key] = self._repeated(kept)
        return {key: counts for key, counts in out.items() if counts}

    @staticmethod
    def _repeated(kept: list[tuple[float, str]]) -> dict[str, int]:
        """The machines crashed on REPEATED times or more, with their counts."""
        counts: dict[str, int] = {}
        for _, machine in kept:
            counts[machine] = counts.get(machine, 0) + 1
        return {m: n for m, n in counts.items() if n >= REPEATED}
