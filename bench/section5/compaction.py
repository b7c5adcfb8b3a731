"""Borg's cell compaction (Verma et al. 2015, section 5.1): the fewest machines a workload fits on, re-packed from scratch each time.

`pack` is the one place a workload meets the scheduler: `plan_pass` with the cell's default
`SchedulerConfig`. Without reclamation it is one pass over every task. With a reservation
margin it is Borg's steady state reached in rounds: the first round is that same pass; then
every placed task runs with its reservation (the cell's own `estimate`, from its usage and
the margin) and the tasks still pending get another pass, where non-prod work may use what
prod tasks requested but do not reserve. Rounds stop when one places nothing new, or after
`MAX_ROUNDS`. A task preempted in any round counts as not placed.

Fits (`fits`): every prod task placed, and at least `NONPROD_SHARE` (99%) of the non-prod
requests placed, in every resource the non-prod tasks ask for. Prod is the work a cell must run;
non-prod work may wait in the queue, and a last 1% of it left pending keeps one awkward batch
task from deciding the cell size. A cell with only non-prod work fits by the second clause alone.

Search (`compact`): the pool's machines in a seeded random order; the cell of size n is the
first n of that order. We gallop (1, 2, 4, ... machines) to the first size that fits, then
bisect between it and the last that did not: about 2 log2(n) packs instead of the n of
removing machines one at a time, with the same answer wherever fitting is monotone in n
(the unit test holds it to an exhaustive search on small cells). A workload that does not fit
on the whole pool has no size (None).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench.stats import percentile
from reference.elastic.reservation import USAGE_KEYS, estimate
from reference.scheduler import RunningTask, SchedulerConfig, Snapshot, plan_pass
from spec.model import CPU, GPU, RAM, Machine, Resources, TaskId

from .workload import Work

NONPROD_SHARE = 0.99
MAX_ROUNDS = 4
TRIALS = 11
# What the section-5 resources mean in a report: the ones a reservation can shrink, and GPUs.
RESOURCES = (CPU, RAM, GPU)


@dataclass(frozen=True)
class PackResult:
    placed: Mapping[TaskId, str]  # task -> machine, for the tasks running at the end
    rounds: int
    reclaimed_share: Mapping[str, float]  # per resource: share of the placed requests beyond capacity


@dataclass(frozen=True)
class Compacted:
    machines: int | None  # None: does not fit even on the whole pool
    result: PackResult | None  # the packing at that size
    packs: int  # how many packs the search took


@dataclass(frozen=True)
class Summary:
    """A policy's compaction over trials: the paper's 90th percentile with min and max."""

    p90: float | None  # None when any trial does not fit
    low: int | None
    high: int | None
    each: tuple[int | None, ...]

    def as_dict(self) -> dict:
        return {"p90": self.p90, "min": self.low, "max": self.high, "each": list(self.each)}


def reservation(w: Work, margin: float) -> Resources:
    """The cell's steady reservation for a task: the reclaimer's estimate after its decay has run out."""
    usage = {USAGE_KEYS[r]: w.usage.get(r) for r in (CPU, RAM)}
    return estimate(w.task.request, usage, w.task.request, math.inf, margin=margin)


def reclaimed_shares(machines: Sequence[Machine], work: Sequence[Work], placed: Mapping[TaskId, str]) -> dict[str, float]:
    """Per resource, the share of the placed tasks' requests that lies beyond their machines' capacity:
    the work that runs in reclaimed resources (0 without reclamation)."""
    cap = {m.name: m.capacity for m in machines}
    asked: dict[str, dict[str, int]] = {}
    total = dict.fromkeys(RESOURCES, 0)
    for w in work:
        where = placed.get(w.task.id)
        if where is None:
            continue
        held = asked.setdefault(where, dict.fromkeys(RESOURCES, 0))
        for r in RESOURCES:
            held[r] += w.task.request.get(r)
            total[r] += w.task.request.get(r)
    beyond = dict.fromkeys(RESOURCES, 0)
    for name, held in asked.items():
        for r in RESOURCES:
            beyond[r] += max(0, held[r] - cap[name].get(r))
    return {r: beyond[r] / total[r] if total[r] else 0.0 for r in RESOURCES}


def pack(machines: Sequence[Machine], tasks: Sequence[Work], seed: int, margin: float | None = None) -> PackResult:
    """Places `tasks` on `machines` with the cell's scheduler; `margin`: reclamation on, at that safety margin."""
    config = SchedulerConfig()
    by_id = {w.task.id: w for w in tasks}
    placed: dict[TaskId, str] = {}
    pending = [w.task for w in tasks]
    rounds = 0
    while pending and rounds < (1 if margin is None else MAX_ROUNDS):
        running = tuple(
            RunningTask(t, m, by_id[t].task.priority, by_id[t].task.request, reservation=reservation(by_id[t], margin))
            for t, m in placed.items()
        ) if margin is not None else ()
        plan = plan_pass(Snapshot(tuple(machines), running=running, pending=tuple(pending)), config, seed + rounds)
        rounds += 1
        before = len(placed)
        for p in plan.placements:
            for v in p.victims:
                placed.pop(v, None)
            placed[p.task] = p.machine
        pending = [w.task for w in tasks if w.task.id not in placed]
        if len(placed) <= before and not any(p.victims for p in plan.placements):
            break
    return PackResult(placed, rounds, reclaimed_shares(machines, tasks, placed))


def fits(tasks: Sequence[Work], result: PackResult, nonprod_share: float = NONPROD_SHARE) -> bool:
    """Every prod task placed and at least `nonprod_share` of the non-prod requests, in each resource asked."""
    asked = dict.fromkeys(RESOURCES, 0)
    got = dict.fromkeys(RESOURCES, 0)
    for w in tasks:
        here = w.task.id in result.placed
        if w.prod:
            if not here:
                return False
            continue
        for r in RESOURCES:
            asked[r] += w.task.request.get(r)
            if here:
                got[r] += w.task.request.get(r)
    return all(got[r] >= nonprod_share * asked[r] for r in RESOURCES if asked[r])


def machine_order(pool: Sequence[Machine], seed: int) -> list[Machine]:
    order = list(pool)
    random.Random(seed).shuffle(order)
    return order


def compact(pool: Sequence[Machine], tasks: Sequence[Work], seed: int, margin: float | None = None) -> Compacted:
    """The fewest machines of the pool, taken in a seeded order, that `tasks` fit on (see the module's docstring)."""
    order = machine_order(pool, seed)
    packs = 0
    known: dict[int, PackResult] = {}

    def fit(n: int) -> bool:
        nonlocal packs
        packs += 1
        result = pack(order[:n], tasks, seed, margin)
        if fits(tasks, result):
            known[n] = result
            return True
        return False

    if not tasks:
        return Compacted(0, PackResult({}, 0, dict.fromkeys(RESOURCES, 0.0)), 0)
    lo, hi = 0, 1  # lo machines do not fit (0 never does); hi is the next size to try
    while not fit(hi):
        if hi == len(order):
            return Compacted(None, None, packs)
        lo, hi = hi, min(len(order), hi * 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fit(mid):
            hi = mid
        else:
            lo = mid
    return Compacted(hi, known[hi], packs)


def summarize(found: Sequence[int | None]) -> Summary:
    sizes = [f for f in found if f is not None]
    if len(sizes) < len(found) or not sizes:
        return Summary(None, min(sizes, default=None), max(sizes, default=None), tuple(found))
    return Summary(percentile(sizes, 0.9), min(sizes), max(sizes), tuple(found))


def seeds(trials: int, first: int = 0) -> list[int]:
    return list(range(first, first + trials))
