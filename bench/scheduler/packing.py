"""The GPU packing experiment of the FGD paper (Weng et al., USENIX ATC '23), pure.

Per seed, the pod list is inflated by drawing pods with replacement until their GPU requests
reach `INFLATION` (130%) of the cell's GPU capacity, and the whole list is shuffled. Tasks
arrive one by one in that order and never depart; a task that fits nowhere is skipped. The
figure is the share of GPU capacity (whole GPUs plus fractional remainders) left unallocated
at the moment the arrived GPU requests, skipped tasks included, first reach 100% of capacity.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from reference.scheduler import PendingTask, QueueOrder, SchedulerConfig, Snapshot, plan_pass
from spec.model import GPU, Machine, TaskId

from .trace import TracePod

INFLATION = 1.3
ARRIVED = 1.0


@dataclass(frozen=True)
class PackingResult:
    unallocated_pct: float  # GPU capacity not allocated when arrived requests reach ARRIVED
    arrived_tasks: int
    placed: int
    skipped: int


def gpu_capacity(machines: Sequence[Machine]) -> int:
    return sum(m.capacity.get(GPU) for m in machines)


def workload(pods: Sequence[TracePod], capacity: int, seed: int, inflation: float = INFLATION) -> list[PendingTask]:
    """The pods, plus copies drawn with replacement until their GPU requests reach
    `inflation` x `capacity`, shuffled; each copy is a job of its own (no spreading between copies)."""
    rng = random.Random(seed)
    tasks = [p.task for p in pods]
    asked = sum(t.request.get(GPU) for t in tasks)
    copies: dict[str, int] = {}
    if any(t.request.get(GPU) for t in tasks):
        while asked < inflation * capacity:
            t = rng.choice(tasks)
            n = copies[t.id.job] = copies.get(t.id.job, 0) + 1
            tasks.append(replace(t, id=TaskId(f"{t.id.job}.{n}", t.id.index)))
            asked += t.request.get(GPU)
    rng.shuffle(tasks)
    return tasks


def arrived_prefix(tasks: Sequence[PendingTask], capacity: int, arrived: float = ARRIVED) -> list[PendingTask]:
    """The tasks up to and including the one whose arrival brings GPU requests to `arrived` x capacity."""
    asked = 0
    for i, t in enumerate(tasks):
        asked += t.request.get(GPU)
        if asked >= arrived * capacity:
            return list(tasks[: i + 1])
    return list(tasks)


def unallocated(machines: Sequence[Machine], tasks: Sequence[PendingTask], config: SchedulerConfig, seed: int) -> PackingResult:
    """Schedules the arrived prefix in order (no departures, no preemption) and measures.

    Only the prefix is scheduled: nothing departs and tasks are taken in order, so what
    follows it cannot change the cell at that moment.
    """
    capacity = gpu_capacity(machines)
    prefix = arrived_prefix(tasks, capacity)
    cfg = replace(config, queue_order=QueueOrder.GIVEN, preemption=False)
    plan = plan_pass(Snapshot(tuple(machines), pending=tuple(prefix)), cfg, seed)
    placed = {p.task for p in plan.placements}
    allocated = sum(t.request.get(GPU) for t in prefix if t.id in placed)
    return PackingResult(
        unallocated_pct=100.0 * (capacity - allocated) / capacity if capacity else 0.0,
        arrived_tasks=len(prefix),
        placed=len(placed),
        skipped=len(prefix) - len(placed),
    )
