"""The job autoscaler's decision as pure functions: HPA-style desired count, tolerance, cooldowns, clamp, stabilization."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

# Within 10% of the target the job is left alone, as Kubernetes' HPA does: the metric is
# noisy and every resize costs a start or a drain.
DEFAULT_TOLERANCE = 0.1


@dataclass(frozen=True)
class Policy:
    """One job's autoscale settings, in seconds and metric units."""

    min: int
    max: int
    target: float
    scale_up_cooldown: float = 5.0
    scale_down_cooldown: float = 30.0
    stabilization: float = 10.0  # scale down only to the highest recommendation this long
    tolerance: float = DEFAULT_TOLERANCE


def raw_desired(
    current: int, ready: Sequence[float], unready: int, target: float, tolerance: float = DEFAULT_TOLERANCE
) -> int:
    """desired = ceil(n * average / target) over the job's tasks, or `current` inside the tolerance.

    `ready` holds the metric of each task that is measured; `unready` counts tasks not measured
    yet (starting, no report). As in the HPA, those count as idle when the measured ones say
    scale up (so a step is not answered twice while new tasks start) and as exactly on target
    when they say scale down (so a starting task does not make the job shrink).
    """
    if not ready or target <= 0:
        return current  # nothing measured: no evidence either way
    ratio = (sum(ready) / len(ready)) / target
    if abs(ratio - 1.0) <= tolerance:
        return current
    if unready:
        fill = 0.0 if ratio > 1.0 else target
        new_ratio = (sum(ready) + fill * unready) / (len(ready) + unready) / target
        # The guess may flip the direction or land inside the band: then hold.
        if abs(new_ratio - 1.0) <= tolerance or (new_ratio > 1.0) != (ratio > 1.0):
            return current
        ratio = new_ratio
    n = len(ready) + unready
    # A float product such as 3 * (12.000000001 / 4) must not round a whole number up.
    return max(0, math.ceil(round(n * ratio, 6)))


def clamp(n: int, policy: Policy) -> int:
    return max(policy.min, min(policy.max, n))


class Why(StrEnum):
    STEADY = "steady"
    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"
    UP_COOLDOWN = "up_cooldown"
    DOWN_COOLDOWN = "down_cooldown"
    STABILIZING = "stabilizing"
    BOUNDS = "bounds"  # the count was outside min..max: brought inside at once


@dataclass(frozen=True)
class Decision:
    desired: int
    why: Why
    recommendations: tuple[tuple[float, int], ...] = field(default=())  # (at, clamped rec), the window kept


def decide(
    now: float,
    current: int,
    recommendation: int,
    policy: Policy,
    last_up_at: float | None,
    history: Sequence[tuple[float, int]] = (),
) -> Decision:
    """The task count to set now, given this tick's raw recommendation.

    Up: the clamped recommendation, once `scale_up_cooldown` has passed since the last
    scale-up (a scale-down never delays one: returning load is served at once).
    Down: the highest clamped recommendation of the last `stabilization` seconds (a short dip
    does not shrink the job), once `scale_down_cooldown` has passed since the last scale-up;
    successive scale-downs are paced by the stabilization window alone.
    A count outside min..max is corrected at once, cooldowns or not.
    """
    rec = clamp(recommendation, policy)
    kept = tuple((t, r) for t, r in history if now - t < policy.stabilization) + ((now, rec),)
    since = math.inf if last_up_at is None else now - last_up_at
    if current < policy.min or current > policy.max:
        return Decision(clamp(current, policy), Why.BOUNDS, kept)
    if rec > current:
        if since < policy.scale_up_cooldown:
            return Decision(current, Why.UP_COOLDOWN, kept)
        return Decision(rec, Why.SCALE_UP, kept)
    if rec < current:
        stabilized = max(r for _, r in kept)
        if stabilized >= current:
            return Decision(current, Why.STABILIZING, kept)
        if since < policy.scale_down_cooldown:
            return Decision(current, Why.DOWN_COOLDOWN, kept)
        return Decision(stabilized, Why.SCALE_DOWN, kept)
    return Decision(current, Why.STEADY, kept)


# --- metrics -------------------------------------------------------------------------------


def counter_rate(samples: Sequence[tuple[float, float]]) -> float | None:
    """Per-second rate of a counter from (time, value) samples, oldest first; None if unknown.

    A drop means the process restarted and its counter began again at zero: only the
    increase after the drop counts.
    """
    if len(samples) < 2:
        return None
    span = samples[-1][0] - samples[0][0]
    if span <= 0:
        return None
    increase = 0.0
    for (_, a), (_, b) in zip(samples, samples[1:], strict=False):
        increase += b - a if b >= a else b
    return increase / span


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def parse_counter(text: str, metric: str, exclude: Sequence[str] = ()) -> float | None:
    """Sum of one counter's samples in Prometheus text, skipping samples whose labels contain
    any string of `exclude` (e.g. the borglet's own health probes); None when absent."""
    found = False
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, _, value = line.strip().rpartition(" ")
        if head.split("{", 1)[0] != metric or any(x in head for x in exclude):
            continue
        try:
            total += float(value)
        except ValueError:
            continue
        found = True
    return total if found else None
