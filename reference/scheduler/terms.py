"""The built-in score terms added to the policy's score: failure-domain spreading, package locality, preemption cost.

Pure functions of numbers; spreading and locality also take numpy arrays, one entry per
machine of a sample, and then score the whole sample at once. The weights are
`SchedulerConfig`'s, in the policies' points (0..100).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

Counts = int | np.ndarray


def spread_penalty(weight: float, placed: int, here: Counts) -> float | np.ndarray:
    """Points off a machine whose failure domain already holds `here` of the job's `placed`
    tasks: weight / (placed + 1) * here, `weight` times the share of the job (this task
    counted) that the domain already holds."""
    return (weight / (placed + 1)) * here


def locality_bonus(weight: float, has_package: bool | np.ndarray) -> float | np.ndarray:
    """Points on a machine that already holds the job's package (no download): weight, else 0."""
    return weight * has_package


def preemption_cost(victim_priorities: Iterable[int], per_victim: float, per_priority: float) -> float:
    """Points off a placement that evicts tasks of these priorities: per victim a fixed cost
    (by default more than any policy score: preempting is the last resort) plus
    per_priority * (priority + 1), so that lower-priority victims are preferred."""
    cost = 0.0
    for p in victim_priorities:
        cost += per_victim + per_priority * (p + 1)
    return cost
