"""Pure step arithmetic: per-step stats from cumulative response-time histograms, and the stop rules.

No Locust import here, so the rules can be tested as plain functions. Locust keeps, per
request name, a cumulative histogram {rounded ms: count}; the difference of two snapshots is
exactly the requests of one step, so a step's percentiles are not smeared by earlier steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from bench.stats import histogram_percentile

Histogram = Mapping[int, int]


class StopReason(StrEnum):
    ERROR_RATE = "error_rate"
    P95_SLO = "p95_slo"
    MAX_USERS = "max_users"


@dataclass(frozen=True)
class StopRules:
    """When the ladder stops: a step over `max_error_rate` or over the p95 SLO, or the top step done."""

    slo_p95_ms: float
    max_users: int
    max_error_rate: float = 0.01
    # A step with fewer requests says little about its percentiles; it cannot trip the SLO.
    min_requests: int = 20


@dataclass(frozen=True)
class StepStats:
    """What one step of the ladder measured, all names together or one group of names."""

    users: int
    seconds: float
    requests: int
    failures: int
    p50_ms: float
    p95_ms: float
    p99_ms: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0

    @property
    def error_rate(self) -> float:
        return self.failures / self.requests if self.requests else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "rps": round(self.rps, 2), "error_rate": round(self.error_rate, 5)}


@dataclass(frozen=True)
class Verdict:
    """A tripped rule: which, at which step, and the value that tripped it."""

    reason: StopReason
    step: int
    users: int
    value: float
    limit: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Ladder:
    """The steps measured so far and, once a rule tripped, the verdict."""

    steps: list[StepStats] = field(default_factory=list)
    groups: list[dict[str, StepStats]] = field(default_factory=list)
    times: list[tuple[float, float]] = field(default_factory=list)  # wall clock, per step
    verdict: Verdict | None = None


def diff(after: Histogram, before: Histogram) -> dict[int, int]:
    """after - before, dropping empty buckets (histograms only grow, so counts stay >= 0)."""
    out = {}
    for bucket, count in after.items():
        delta = count - before.get(bucket, 0)
        if delta > 0:
            out[bucket] = delta
    return out


def step_stats(
    users: int, seconds: float, histogram: Histogram, requests: int, failures: int
) -> StepStats:
    """One step's stats. `requests` counts successes and failures; Locust puts only successful
    requests' times in the histogram, so percentiles are of answered requests (nearest-rank,
    as every report's); a step that answered none has percentiles of 0."""
    return StepStats(
        users=users,
        seconds=seconds,
        requests=requests,
        failures=failures,
        p50_ms=histogram_percentile(histogram, 0.50) or 0.0,
        p95_ms=histogram_percentile(histogram, 0.95) or 0.0,
        p99_ms=histogram_percentile(histogram, 0.99) or 0.0,
    )


def check(step: StepStats, index: int, rules: StopRules) -> Verdict | None:
    """The first rule this step breaks, errors first (an erroring system is failed whatever
    its latency); None when the step passes."""
    if step.requests and step.error_rate > rules.max_error_rate:
        return Verdict(StopReason.ERROR_RATE, index, step.users, step.error_rate, rules.max_error_rate)
    if step.requests >= rules.min_requests and step.p95_ms > rules.slo_p95_ms:
        return Verdict(StopReason.P95_SLO, index, step.users, step.p95_ms, rules.slo_p95_ms)
    if step.users >= rules.max_users:
        return Verdict(StopReason.MAX_USERS, index, step.users, step.users, rules.max_users)
    return None


def user_ladder(start: int, step: int, max_users: int) -> list[int]:
    """start, start+step, ... up to max_users inclusive (max_users is always the last rung)."""
    if start < 1 or step < 1 or max_users < start:
        raise ValueError(f"bad ladder: start={start} step={step} max={max_users}")
    rungs = list(range(start, max_users + 1, step))
    if rungs[-1] != max_users:
        rungs.append(max_users)
    return rungs


def group_of(name: str) -> str:
    """Request names are '<group>: <what>' ('read: list jobs'); the group is what is before ':'."""
    head, sep, _ = name.partition(":")
    return head.strip() if sep else "other"
