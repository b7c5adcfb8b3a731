"""Feasibility of a class on a machine: one check that says why it rejects, its numpy twin, and the tally of reasons.

`Feasibility.check` runs the filters in Borg's order and returns, where a machine fails one,
a `Rejection` naming every check of that filter the machine fails (data, not a bare bool),
else the victims the placement needs ([] when it fits as it is): Nomad's checkers record the
reason at the moment they filter a node out, and Kubernetes' Filter returns a status with its
reason, in the same way. A pass records each rejection in a `Tally` when it makes it, and
`reasons.explain` names the counts: nothing is worked out again afterwards. `Prefilter`
applies necessary conditions of the same checks to a run of machines at once; its verdict
(`RunCheck`) holds the reasons of the machines it rejects, read one by one (`rejection`) or
summed into a tally (`count_rejected`), and a property test holds both to `check`'s. The
spec's `task_fits` is the reference a property test holds `check` to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from spec.model import is_prod, may_preempt

from .cellview import CellView, Victim, gpu_take
from .classes import Compiled, TaskClass


class Rejection(NamedTuple):
    """Every check of the first failing filter that one machine fails for a class.

    A machine can pass every check and still be rejected, as when the victims it would need
    are held back by their jobs' disruption limits. Its rejection names nothing (`HELD_BACK`).
    A named tuple, not a dataclass: the pass makes one per machine it rejects while counting,
    and a tuple is built in C.
    """

    down: bool = False
    unmet: tuple[int, ...] = ()  # positions of the class's constraints that do not hold here
    short: tuple[int, ...] = ()  # resource dimensions, the GPU one aside, with less than asked
    gpus: bool = False  # no set of this machine's GPUs takes the GPU request


DOWN = Rejection(down=True)
HELD_BACK = Rejection()


def constraint_holds(c: Compiled, attrs: Mapping[str, str]) -> bool:
    attr, positive, values = c
    # NE and NOT_IN hold on a machine without the attribute: it differs from every value.
    return (attrs.get(attr) in values) is positive


def constraints_hold(cls: TaskClass, attrs: Mapping[str, str]) -> bool:
    return all(constraint_holds(c, attrs) for c in cls.compiled)


def short_of(cls: TaskClass, free: list[int], gfree: list[int], gcap: list[int], gpu_dim: int | None) -> Rejection | None:
    """What the request lacks: each resource on its own (GPUs aside), then the GPUs one by one."""
    short = tuple(d for d, a in cls.nz if free[d] < a and d != gpu_dim)
    gpus = cls.gpu and gpu_take(gfree, gcap, cls.gpu_whole, cls.gpu_share) is None
    return Rejection(short=short, gpus=gpus) if short or gpus else None


def fits(cls: TaskClass, free: list[int], gfree: list[int], gcap: list[int]) -> bool:
    """The request fits `free`, whole GPUs and a GPU share included."""
    for d, a in cls.nz:
        if free[d] < a:
            return False
    if cls.gpu:
        return gpu_take(gfree, gcap, cls.gpu_whole, cls.gpu_share) is not None
    return True


def release(v: Victim, free: list[int], gfree: list[int] | None = None, sign: int = 1) -> None:
    """Add back what evicting `v` frees: its request, and its GPU shares unless `gfree` is None
    (a score that does not read single GPUs). Sign -1 takes them again: a victim reprieved."""
    for i, a in enumerate(v.req):
        free[i] += sign * a
    if gfree is not None:
        for g, a in v.gpu_shares:
            gfree[g] += sign * a


def with_victims(cls: TaskClass, cell: CellView, mi: int) -> tuple[list[int], list[int]]:
    """What the class may use on the machine if every task it may preempt there were evicted."""
    free, gfree = list(cell.free_for(mi, is_prod(cls.priority))), list(cell.gfree[mi])
    for v in cell.victims[mi]:
        if may_preempt(cls.priority, v.priority):
            release(v, free, gfree)
    return free, gfree


class Feasibility:
    """The feasibility stage of one pass: whether a class fits a machine, and if not, why.

    `check` runs the filters in Borg's order and returns at the first that fails, with the
    reason it fails there: the machine is up, the class's constraints hold, the request fits
    what the class may use (free, plus slack for a non-prod task), else, when preempting, what
    lower-priority tasks hold. The pass keeps its disruptions here: each job's tasks evicted
    in the caller's window and by this pass, for `max_disruptions_per_job`.
    """

    __slots__ = ("cell", "preemption", "limit", "disrupted")

    def __init__(self, cell: CellView, preemption: bool, limit: int | None, disrupted: Mapping[str, int] | None) -> None:
        self.cell = cell
        self.preemption = preemption  # the config's: without it `check` never preempts
        self.limit = limit
        self.disrupted: dict[str, int] = dict(disrupted or {})

    def check(self, cls: TaskClass, mi: int, preempt: bool) -> list[Victim] | Rejection:
        """[] when the request fits as it is, the victims to evict when it fits only so (with
        `preempt`), else the `Rejection` of the filter that failed, with every check of that
        filter that fails; resources count what preemptible tasks hold when preempting. A
        machine whose victims are held back by their jobs' disruption limits is `HELD_BACK`.

        The hot path of a pass: the common case (up, constraints hold, the request fits what
        is free) costs no allocation but the empty list, and a reason is built only where a
        machine is rejected.
        """
        cell = self.cell
        if not cell.up[mi]:
            return DOWN
        if cls.compiled:
            attrs = cell.attrs[mi]
            for attr, positive, values in cls.compiled:
                if (attrs.get(attr) in values) is not positive:
                    return Rejection(unmet=tuple(j for j, c in enumerate(cls.compiled) if not constraint_holds(c, attrs)))
        free = cell.free[mi]
        if cell.reclaimed[mi] and not is_prod(cls.priority):
            free = cell.free_for(mi, False)
        gfree = cell.gfree[mi]
        for d, a in cls.nz:
            if free[d] < a:
                break
        else:
            if not cls.gpu or gpu_take(gfree, cell.gcap[mi], cls.gpu_whole, cls.gpu_share) is not None:
                return []
        if preempt and self.preemption and cls.priority > cell.vmin[mi]:
            victims = choose_victims(cls, cell, mi, self.disrupted, self.limit)
            if victims is not None:
                return victims
            free, gfree = with_victims(cls, cell, mi)
        # Below vmin no task here may be preempted: what is free is all the class may use.
        return short_of(cls, free, gfree, cell.gcap[mi], cell.gpu_dim) or HELD_BACK

    def evicted(self, job: str) -> None:
        """One more task of `job` disrupted by this pass."""
        self.disrupted[job] = self.disrupted.get(job, 0) + 1


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
    enough = False
    for v in cands:
        if limit is not None and disrupted.get(v.job, 0) + per_job.get(v.job, 0) >= limit:
            continue
        release(v, free, gfree)
        chosen.append(v)
        per_job[v.job] = per_job.get(v.job, 0) + 1
        if fits(cls, free, gfree, gcap):
            enough = True
            break
    if not enough:
        return None
    for v in sorted(chosen, key=lambda v: -v.priority):
        release(v, free, gfree, -1)
        if fits(cls, free, gfree, gcap):
            chosen.remove(v)  # not needed after all: reprieved
        else:
            release(v, free, gfree)
    return chosen


class Prefilter:
    """Necessary conditions for fitting, checked on a run of machines at once (numpy).

    It never rejects a machine that the exact check (`Feasibility.check`) would accept: a machine passes
    when it is up, its constraints hold, and either every resource it has free (slack
    included for non-prod tasks) covers the request or, with `preempt`, it runs something of
    lower priority. GPUs are judged on their total here, one by one in the exact check. The
    walk of relaxed randomization uses it to skip full machines without a Python call per
    machine. Rows are laid out along the pass's random order, twice over, so that any run of
    the walk (which wraps around) is a slice, not a gather.
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
        self.reclaimed = bool(self.slack.any())  # fixed for the pass: without it slack adds nothing
        self.up = np.array(cell.up, dtype=bool)[self.ids]
        self.vmin = np.array(cell.vmin, dtype=np.int64)[self.ids]
        self._codes: dict[str, tuple[np.ndarray, dict[str, int]]] = {}
        self._holds: dict[Compiled, np.ndarray] = {}
        self._masks: dict[tuple, np.ndarray] = {}
        # Running counts along the walk of what never changes in a pass (machines down, up
        # ones failing a constraint, or any of a set): how many in [lo, hi) is two lookups.
        self._down = _running_count(~self.up)
        self._unmet: dict[Compiled, np.ndarray] = {}
        self._constrained: dict[tuple, np.ndarray] = {}

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
            for c in cls.compiled:
                mask &= self.holds(c)
            self._masks[cls.compiled] = mask
        return mask

    def holds(self, c: Compiled) -> np.ndarray:
        """Walk positions whose machine meets one constraint, cached per constraint."""
        mask = self._holds.get(c)
        if mask is None:
            attr, positive, values = c
            codes, index = self._column(attr)
            hit = np.isin(codes, [index[v] for v in values if v in index])
            mask = self._holds[c] = hit if positive else ~hit
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

    def _verdict(self, cls: TaskClass, lo: int, hi: int, preempt: bool) -> tuple[np.ndarray, np.ndarray]:
        """Per position in [lo, hi): whether what is free covers each resource asked, and
        whether the machine may fit. Both arrays are new, the prefilter's own are not shared."""
        need = cls.need
        if need is None:
            need = cls.need = np.array(cls.req, dtype=np.int64)
        free = self.free[lo:hi]
        if self.reclaimed and not is_prod(cls.priority):
            free = free + self.slack[lo:hi]
        covered = free >= need
        ok = np.logical_and.reduce(covered, axis=1)  # .all's Python wrapper costs more than the run
        if preempt:
            ok |= self.vmin[lo:hi] < cls.priority
        ok &= self.allowed(cls)[lo:hi]
        return covered, ok

    def passing(self, cls: TaskClass, lo: int, hi: int, preempt: bool) -> np.ndarray:
        """Offsets from `lo` of the walk positions in [lo, hi) whose machines may fit the class."""
        return self._verdict(cls, lo, hi, preempt)[1].nonzero()[0]

    def check(self, cls: TaskClass, lo: int, hi: int, preempt: bool) -> RunCheck:
        """`passing`, kept with what it takes to count the reasons of the machines rejected."""
        covered, ok = self._verdict(cls, lo, hi, preempt)
        return RunCheck(self, cls, lo, covered, ok)

    def count_fixed(self, cls: TaskClass, lo: int, hi: int, tally: Tally) -> None:
        """Count the machines at walk positions [lo, hi) that are down or fail a constraint:
        each is rejected whatever its resources."""
        tally.down += _between(self._down, lo, hi)
        if not cls.compiled:
            return
        constrained = self._constrained.get(cls.compiled)
        if constrained is None:
            constrained = self._constrained[cls.compiled] = _running_count(self.up & ~self.allowed(cls))
        tally.constrained += _between(constrained, lo, hi)
        for j, c in enumerate(cls.compiled):
            unmet = self._unmet.get(c)
            if unmet is None:
                unmet = self._unmet[c] = _running_count(self.up & ~self.holds(c))
            tally.unmet[j] += _between(unmet, lo, hi)


def _running_count(mask: np.ndarray) -> np.ndarray:
    """How many positions before each one (and before the end) are set: out[i] = mask[:i].sum()."""
    out = np.zeros(len(mask) + 1, dtype=np.int64)
    np.cumsum(mask, out=out[1:])
    return out


def _between(running: np.ndarray, lo: int, hi: int) -> int:
    return int(running[hi] - running[lo])


class RunCheck:
    """The prefilter's verdict on one run of the walk. Its arrays are its own, taken when it
    looked, so the reasons of the machines it rejected can be summed later, after those
    machines changed: only when the class turns out to fit nowhere."""

    __slots__ = ("pre", "cls", "lo", "covered", "ok")

    def __init__(self, pre: Prefilter, cls: TaskClass, lo: int, covered: np.ndarray, ok: np.ndarray) -> None:
        self.pre, self.cls, self.lo = pre, cls, lo
        self.covered = covered  # per position and resource: what is free covers the request
        self.ok = ok  # per position: the machine may fit

    def passing(self) -> np.ndarray:
        """Offsets from `lo` of the positions whose machines may fit."""
        return np.flatnonzero(self.ok)

    def rejection(self, h: int) -> Rejection | None:
        """Why the prefilter rejected the machine at offset `h` of the run, as `Feasibility.check`
        names it (None: it may fit). What is free is as the prefilter saw it; the GPUs one by
        one are read from the cell (see `gpus_short`)."""
        if self.ok[h]:
            return None
        pre, cls, p = self.pre, self.cls, self.lo + h
        if not pre.up[p]:
            return DOWN
        unmet = tuple(j for j, c in enumerate(cls.compiled) if not pre.holds(c)[p])
        if unmet:
            return Rejection(unmet=unmet)
        cell, gpu_dim = pre.cell, pre.cell.gpu_dim
        short = tuple(d for d, _ in cls.nz if d != gpu_dim and not self.covered[h, d])
        mi = int(pre.ids[p])
        gpus = cls.gpu and gpu_take(cell.gfree[mi], cell.gcap[mi], cls.gpu_whole, cls.gpu_share) is None
        return Rejection(short=short, gpus=gpus)

    def _short_rows(self, upto: int) -> np.ndarray:
        # Rejected with its constraints met: it runs nothing the class may preempt (its lowest
        # victim is not below the class, or there is no preempting), so what it has free is all.
        return self.pre.allowed(self.cls)[self.lo : self.lo + upto] & ~self.ok[:upto]

    def count_rejected(self, upto: int, tally: Tally) -> None:
        """Count, as `Feasibility.check` names them, the reasons of the machines rejected among the
        first `upto` positions of the run, GPUs aside (see `gpus_short`)."""
        pre, cls, lo = self.pre, self.cls, self.lo
        tally.machines += upto - int(np.count_nonzero(self.ok[:upto]))
        pre.count_fixed(cls, lo, lo + upto, tally)
        rows = self._short_rows(upto)
        if not rows.any():
            return
        covered = self.covered[:upto][rows]
        missing = len(covered) - np.count_nonzero(covered, axis=0)
        gpu_dim = pre.cell.gpu_dim
        for d, _ in cls.nz:
            if d != gpu_dim:
                tally.short[d] += int(missing[d])

    def gpus_short(self, upto: int) -> int:
        """Of the machines rejected among the first `upto` positions with their constraints met,
        how many have no set of GPUs for the request: read from the cell, so call it at once."""
        cls, cell = self.cls, self.pre.cell
        n = 0
        for mi in self.pre.ids[self.lo + np.flatnonzero(self._short_rows(upto))].tolist():
            n += gpu_take(cell.gfree[mi], cell.gcap[mi], cls.gpu_whole, cls.gpu_share) is None
        return n


class Tally:
    """The reasons one walk of the machines rejected them for one class, recorded as it rejects
    each: one by one (`add`), or a run of the prefilter at a time (`add_run`, summed by `settle`)."""

    __slots__ = ("machines", "down", "unmet", "constrained", "short", "gpus", "runs")

    def __init__(self, constraints: int, dims: int) -> None:
        self.machines = 0  # machines rejected
        self.down = 0
        self.unmet = [0] * constraints  # up machines where each constraint does not hold
        self.constrained = 0  # up machines where some constraint does not hold
        self.short = [0] * dims  # machines meeting every constraint with less than asked, per resource
        self.gpus = 0  # machines meeting every constraint whose GPUs do not take the request
        self.runs: list[tuple[RunCheck, int]] = []  # prefilter runs not summed yet, with how far they were walked

    def add(self, r: Rejection) -> None:
        self.machines += 1
        if r.down:
            self.down += 1
        elif r.unmet:
            self.constrained += 1
            for j in r.unmet:
                self.unmet[j] += 1
        else:
            for d in r.short:
                self.short[d] += 1
            self.gpus += r.gpus

    def add_run(self, run: RunCheck, upto: int) -> None:
        """The machines the prefilter rejected among the first `upto` positions of `run`."""
        self.runs.append((run, upto))
        if run.cls.gpu:
            self.gpus += run.gpus_short(upto)  # GPUs change in place: read them now

    def settle(self) -> Tally:
        """Sum the runs added so far into the counts; returns the tally."""
        for run, upto in self.runs:
            run.count_rejected(upto, self)
        self.runs.clear()
        return self
