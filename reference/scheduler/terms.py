"""The built-in score terms added to the policy's score: failure-domain and machine spreading, package locality, preemption cost.

Pure functions of numbers; spreading and locality also take numpy arrays, one entry per
machine of a sample, and then score the whole sample at once. The weights are
`SchedulerConfig`'s, in the policies' points (0..100).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

Counts = int | np.ndarray


def spread_penalty(weight: float, placed: int, here: Counts) -> float | np.ndarray:
    """Points off a machine whose failure domain already holds `here` of the job's `placed`
    tasks: weight / (placed + 1) * here, `weight` times the share of the job (this task
    counted) that the domain already holds."""
    return (weight / (placed + 1)) * here


def skew_penalty(weight: float, here: np.ndarray, least: int | None = None) -> np.ndarray:
    """Points off each machine of a sample for every task of the job it holds beyond the
    sample's least-loaded machine: weight * (here - min(here)). Like Kubernetes's default
    spreading over hostnames (a soft skew), it keeps a job's tasks apart machine by machine,
    which the share-based domain term cannot once the job is large: a machine then costs a
    sliver of a share per task, and a packing policy's pull toward the fullest machine wins.
    `least` is min(here) when the caller knows it without looking."""
    if here.size == 0:
        return here
    if least == 0:
        return weight * here
    return weight * (here - (np.minimum.reduce(here) if least is None else least))


def locality_bonus(weight: float, has_package: bool | np.ndarray) -> float | np.ndarray:
    """Points on a machine that already holds the job's package (no download): weight, else 0."""
    return weight * has_package


def package_holders(
    placed: Mapping[str, Iterable[str]], images: Mapping[str, Iterable[str]]
) -> dict[str, frozenset[str]]:
    """Which packages each machine holds, for `locality_bonus`: those of the jobs whose tasks
    run there, and the container images its borglet reports its engine holds (a job that
    names an image has it as its package), so a machine that already pulled an image is
    preferred even before a task of the job runs there."""
    held: dict[str, set[str]] = {m: set(p) for m, p in placed.items()}
    for machine, names in images.items():
        held.setdefault(machine, set()).update(names)
    return {m: frozenset(p) for m, p in held.items() if p}


def preemption_cost(victim_priorities: Iterable[int], per_victim: float, per_priority: float) -> float:
    """Points off a placement that evicts tasks of these priorities: per victim a fixed cost
    (by default more than any policy score: preempting is the last resort) plus
    per_priority * (priority + 1), so that lower-priority victims are preferred."""
    cost = 0.0
    for p in victim_priorities:
        cost += per_victim + per_priority * (p + 1)
    return cost
