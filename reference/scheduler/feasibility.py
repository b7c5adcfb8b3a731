"""Feasibility of one (class, machine) pair: constraints, free resources, GPUs, and preemption victims."""

from __future__ import annotations

from collections.abc import Mapping

from spec.model import is_prod, may_preempt

from .cellview import CellView, Victim, gpu_take
from .classes import TaskClass, constraint_holds


def constraints_hold(cls: TaskClass, cell: CellView, mi: int) -> bool:
    attrs = cell.attrs[mi]
    return all(constraint_holds(c, attrs) for c in cls.compiled)


def fits_free(cls: TaskClass, cell: CellView, mi: int) -> bool:
    """The request fits what is free now, whole GPUs and GPU shares included."""
    f = cell.free_for(mi, is_prod(cls.priority))
    for d, a in cls.nz:
        if f[d] < a:
            return False
    if cls.gpu_whole or cls.gpu_share:
        return gpu_take(cell.gfree[mi], cell.gcap[mi], cls.gpu_whole, cls.gpu_share) is not None
    return True


def _fits(cls: TaskClass, free: list[int], gfree: list[int], gcap: list[int]) -> bool:
    for d, a in cls.nz:
        if free[d] < a:
            return False
    if cls.gpu_whole or cls.gpu_share:
        return gpu_take(gfree, gcap, cls.gpu_whole, cls.gpu_share) is not None
    return True


def choose_victims(
    cls: TaskClass,
    cell: CellView,
    mi: int,
    disrupted: Mapping[str, int],
    limit: int | None,
) -> list[Victim] | None:
    """The fewest, lowest-priority running tasks whose eviction makes the request fit, or None.

    Only tasks the spec lets this priority preempt are candidates (strictly lower priority,
    never prod over prod), and none of a job that already reached its disruption limit.
    Greedy from the lowest priority (largest first within a priority, so fewer are needed),
    then a reprieve pass from the highest victim down drops any that turned out unnecessary.
    """
    vs = cell.victims[mi]
    if not vs or cell.vmin[mi] >= cls.priority:
        return None
    per_job: dict[str, int] = {}
    cands = []
    for v in vs:
        if may_preempt(cls.priority, v.priority):
            cands.append(v)
    if not cands:
        return None
    cap = cell.cap[mi]
    cands.sort(key=lambda v: (v.priority, -sum(a / c for a, c in zip(v.req, cap, strict=True) if c)))
    free = list(cell.free_for(mi, is_prod(cls.priority)))
    gfree = list(cell.gfree[mi])
    gcap = cell.gcap[mi]
    chosen: list[Victim] = []
    fits = False
    for v in cands:
        if limit is not None and disrupted.get(v.job, 0) + per_job.get(v.job, 0) >= limit:
            continue
        _release(v, free, gfree, +1)
        chosen.append(v)
        per_job[v.job] = per_job.get(v.job, 0) + 1
        if _fits(cls, free, gfree, gcap):
            fits = True
            break
    if not fits:
        return None
    for v in sorted(chosen, key=lambda v: -v.priority):
        _release(v, free, gfree, -1)
        if _fits(cls, free, gfree, gcap):
            chosen.remove(v)  # not needed after all: reprieved
        else:
            _release(v, free, gfree, +1)
    return chosen


def _release(v: Victim, free: list[int], gfree: list[int], sign: int) -> None:
    for i, a in enumerate(v.req):
        free[i] += sign * a
    for g, a in v.gpu_shares:
        gfree[g] += sign * a
