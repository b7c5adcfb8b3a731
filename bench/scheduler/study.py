"""Trace experiments, pure: placements before the first failure, allocation at saturation, cell compaction."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from reference.scheduler import PendingTask, QueueOrder, SchedulerConfig, Snapshot, plan_pass
from spec.model import Machine, Resources, total

from .trace import TracePod

RESOURCES = ("cpu", "ram", "gpu")


@dataclass(frozen=True)
class ArrivalResult:
    placed_before_first_failure: int
    tasks: int
    placed_total: int
    alloc_at_first_failure: dict[str, float]  # allocated / capacity, per resource
    alloc_at_end: dict[str, float]


def _ratios(used: Resources, cap: Resources) -> dict[str, float]:
    return {r: (used.get(r) / cap.get(r) if cap.get(r) else 0.0) for r in RESOURCES}


def arrivals(machines: Sequence[Machine], pods: Sequence[TracePod], config: SchedulerConfig, seed: int) -> ArrivalResult:
    """Tasks in trace order, none ever leaving: how far the cell gets before one fits nowhere,
    and how full it is then and once every task has been tried (saturated)."""
    cfg = replace(config, queue_order=QueueOrder.GIVEN, preemption=False)
    tasks = [p.task for p in pods]
    plan = plan_pass(Snapshot(tuple(machines), pending=tuple(tasks)), cfg, seed)
    failed = {u.task for u in plan.unschedulable}
    first = next((i for i, t in enumerate(tasks) if t.id in failed), len(tasks))
    cap = total(m.capacity for m in machines)
    placed = set(plan.placed_on())
    before = total(t.request for t in tasks[:first])
    at_end = total(t.request for t in tasks if t.id in placed)
    return ArrivalResult(first, len(tasks), len(placed), _ratios(before, cap), _ratios(at_end, cap))


def busiest_moment(pods: Sequence[TracePod]) -> tuple[int, list[PendingTask]]:
    """The time when the most tasks are alive (created, not yet deleted), and those tasks."""
    events = []
    for p in pods:
        events.append((p.created, 1))
        if p.deleted is not None:
            events.append((p.deleted, -1))
    events.sort(key=lambda e: (e[0], e[1]))  # a deletion at t frees before a creation at t
    alive = best = 0
    when = 0
    for t, d in events:
        alive += d
        if alive > best:
            best, when = alive, t
    live = [p.task for p in pods if p.created <= when and (p.deleted is None or p.deleted > when)]
    return when, live


def lower_bound(machines: Sequence[Machine], tasks: Sequence[PendingTask]) -> int:
    """Per resource, total request over the largest machine's capacity, rounded up; the largest."""
    need = total(t.request for t in tasks)
    bound = 0
    for r in RESOURCES:
        biggest = max((m.capacity.get(r) for m in machines), default=0)
        if need.get(r):
            bound = max(bound, math.ceil(need.get(r) / biggest) if biggest else 10**9)
    return bound


def fits_all(machines: Sequence[Machine], tasks: Sequence[PendingTask], config: SchedulerConfig, seed: int) -> bool:
    plan = plan_pass(Snapshot(tuple(machines), pending=tuple(tasks)), replace(config, preemption=False), seed)
    return not plan.unschedulable


def compact(machines: Sequence[Machine], tasks: Sequence[PendingTask], config: SchedulerConfig, seed: int) -> int | None:
    """Borg's cell compaction for one seed: remove machines in a seeded random order and binary
    search the most that can go with every task still placed; returns the machines left, or
    None when the tasks do not all fit even in the whole cell."""
    order = list(machines)
    random.Random(seed).shuffle(order)
    lo, hi = 0, len(order)  # removing lo machines fits; removing hi is not known to
    if not fits_all(order, tasks, config, seed):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits_all(order[mid:], tasks, config, seed):
            lo = mid
        else:
            hi = mid
    return len(order) - lo


def compaction(
    machines: Sequence[Machine], tasks: Sequence[PendingTask], config: SchedulerConfig, seeds: Sequence[int]
) -> tuple[float | None, list[int | None]]:
    """The median over seeds of the machines the tasks need, with each seed's figure (None:
    does not fit in the whole cell). The median is None when any seed does not fit: a cell
    that fits only sometimes has no compacted size."""
    found = [compact(machines, tasks, config, s) for s in seeds]
    if any(f is None for f in found):
        return None, found
    return statistics.median(f for f in found if f is not None), found
