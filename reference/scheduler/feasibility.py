"""Feasibility of one (class, machine) pair: constraints, free resources, GPUs, and preemption victims."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

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


class Prefilter:
    """Necessary conditions for fitting, checked on a run of machines at once (numpy).

    It never rejects a machine that the exact check (`Pass.evaluate`) would accept: a
    machine passes when it is up, its constraints hold, and either every resource it has
    free (slack included for non-prod tasks) covers the request or, with `preempt`, it runs
    something of lower priority. GPUs are judged on their total here, one by one in the
    exact check. The walk of relaxed randomization uses it to skip full machines without a
    Python call per machine. Rows are laid out along the pass's random order, twice over,
    so that any run of the walk (which wraps around) is a slice, not a gather.
    """

    def __init__(self, cell: CellView, order: list[int]) -> None:
        self.cell = cell
        n, d = len(cell.names), len(cell.dims)
        self.ids = np.array(order + order, dtype=np.int64)  # machine at each walk position
        self.pos = np.zeros(n, dtype=np.int64)
        self.pos[self.ids[:n]] = np.arange(n)
        self.n = n
        self.free = np.array(cell.free, dtype=np.int64).reshape(n, d)[self.ids]
        self.slack = np.array(cell.slack, dtype=np.int64).reshape(n, d)[self.ids]
        self.up = np.array(cell.up, dtype=bool)[self.ids]
        self.vmin = np.array(cell.vmin, dtype=np.int64)[self.ids]
        self._codes: dict[str, tuple[np.ndarray, dict[str, int]]] = {}
        self._masks: dict[tuple, np.ndarray] = {}

    def update(self, mi: int) -> None:
        """Mirror machine `mi` after a placement or an eviction changed it."""
        p = int(self.pos[mi])
        self.free[p] = self.free[p + self.n] = self.cell.free[mi]
        self.vmin[p] = self.vmin[p + self.n] = self.cell.vmin[mi]

    def allowed(self, cls: TaskClass) -> np.ndarray:
        """Walk positions whose machine is up and holds the class's constraints, cached per constraint set."""
        mask = self._masks.get(cls.compiled)
        if mask is None:
            mask = self.up.copy()
            for attr, positive, values in cls.compiled:
                codes, index = self._column(attr)
                hit = np.isin(codes, [index[v] for v in values if v in index])
                mask &= hit if positive else ~hit
            self._masks[cls.compiled] = mask
        return mask

    def _column(self, attr: str) -> tuple[np.ndarray, dict[str, int]]:
        got = self._codes.get(attr)
        if got is None:
            index: dict[str, int] = {}
            codes = np.array(
                [index.setdefault(a[attr], len(index)) if attr in a else -1 for a in self.cell.attrs], dtype=np.int64
            )
            got = self._codes[attr] = (codes[self.ids], index)
        return got

    def passing(self, cls: TaskClass, lo: int, hi: int, preempt: bool) -> np.ndarray:
        """Offsets from `lo` of the walk positions in [lo, hi) whose machines may fit the class."""
        need = cls.need
        if need is None:
            need = cls.need = np.array(cls.req, dtype=np.int64)
        free = self.free[lo:hi]
        if not is_prod(cls.priority):
            free = free + self.slack[lo:hi]
        ok = (free >= need).all(axis=1)
        if preempt:
            ok |= self.vmin[lo:hi] < cls.priority
        ok &= self.allowed(cls)[lo:hi]
        return np.flatnonzero(ok)
