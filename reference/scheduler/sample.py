"""The limit stage of a pass (relaxed randomization): each class's sample of feasible machines, found by walking the source through feasibility and scored, with the scores cached.

A class walks the random order (`walk.Walk`) from its start until its sample holds enough
feasible machines (`Sampler.want`), skipping the machines the vectorized prefilter rules out
a run at a time and sending the rest through `Scorer.evaluate` (feasibility, then the score),
or, for a batched class, scoring a run of them in one call. The score cache reuses a
(class, machine) score while the machine's version has not moved (`CellView.touch`); each
pick first rescores every cached score whose machine moved, wherever it ranks (`refresh`).
The walk that can end in "fits nowhere" (the preempting one, or the only one without
preemption) keeps a `Tally`, and every rejection is recorded in it where it is made: by the
prefilter a run at a time, by `Feasibility.check` one machine at a time.
"""

from __future__ import annotations

import numpy as np

from spec.model import is_prod

from .cellview import CellView
from .classes import TaskClass
from .config import SchedulerConfig
from .feasibility import Prefilter, Rejection, Tally
from .plan import PassStats
from .scoring import UNCOUNTED, Scorer
from .walk import Walk

# Fewer machines than this are scored one call each: numpy's cost per call outweighs the loop.
BATCH_MIN = 16


class Sample:
    """One class's feasible machines found so far, with cached scores and the versions they saw."""

    __slots__ = (
        "machines", "doms", "scores", "versions", "ranks", "mix", "size", "holes", "valid", "cursor", "offset",
        "preempting", "tally", "epoch",
    )  # fmt: skip

    def __init__(self, capacity: int, offset: int) -> None:
        self.machines = np.zeros(capacity, dtype=np.int64)
        self.doms = np.zeros(capacity, dtype=np.int64)  # failure domain of each slot's machine
        self.scores = np.full(capacity, -np.inf)
        self.versions = np.zeros(capacity, dtype=np.int64)
        self.ranks = np.zeros(capacity, dtype=np.int64)  # each slot's machine's place in the walk: ties go to the first
        self.mix = 0  # the shape mix's version the scores saw (fgd only)
        self.size = 0  # slots in use, holes included
        self.holes: list[int] = []  # slots of machines that stopped fitting
        self.valid = 0
        self.cursor = 0  # how far along the random machine order this class has looked
        self.offset = offset  # where in that order it started
        self.preempting = False  # True once no machine fits without preemption: victims count
        self.tally: Tally | None = None  # the rejections of the walk that can end in "fits nowhere"
        # CellView.bumps when every scored slot's version was last current (-1: not known): while
        # no machine's version has moved since, `Sampler.refresh` has nothing to look at.
        self.epoch = -1

    @property
    def want(self) -> int:
        """Feasible machines the walk collects before the best is picked: the sample's size."""
        return len(self.machines)

    def preempt(self, cls: TaskClass, dims: int) -> None:
        """No machine fits as it is: walk again from the start, counting what victims hold."""
        self.preempting, self.cursor = True, 0
        self.tally = Tally(len(cls.compiled), dims)


class Sampler:
    """Finds, scores and keeps fresh each class's sample of feasible machines."""

    __slots__ = ("cell", "walk", "pre", "scorer", "stats", "n", "k", "dom")

    def __init__(
        self, cell: CellView, cfg: SchedulerConfig, walk: Walk, pre: Prefilter, scorer: Scorer, stats: PassStats
    ) -> None:
        self.cell, self.walk, self.pre, self.scorer, self.stats = cell, walk, pre, scorer, stats
        self.n = len(cell.names)
        self.k = cfg.sample_size(self.n) if cfg.relaxed_randomization else None  # None: every machine
        self.dom = np.array(cell.dom, dtype=np.int64)

    def want(self, job_tasks: int) -> int:
        """How many feasible machines a class samples, where `job_tasks` is the most tasks any
        one job has in it: relaxed randomization's k, or one machine per task of that job where
        it has more, so that a job of thousands of tasks can spread over as many machines as it
        has tasks (up to the whole cell) rather than over the first k its walk reaches.

        A job's tasks are what the spreading terms keep apart; tasks of different jobs that
        share a class are not, so a class of many small jobs keeps the bound: a sample of the
        whole cell would change where each of them lands (every class's walk starts at one
        place, so small samples fill the same machines first) and the cell's packing with it.
        """
        if self.k is None:
            return self.n
        return min(self.n, max(self.k, job_tasks))

    def new(self, cls: TaskClass, job_tasks: int, last_walk: bool) -> Sample:
        """An empty sample for the class, its walk starting where the source says; `last_walk`:
        without preemption, its first walk is the one that can end in "fits nowhere"."""
        s = Sample(max(self.want(job_tasks), 1), self.walk.start())
        if last_walk:
            s.tally = Tally(len(cls.compiled), len(self.cell.dims))
        return s

    def drop(self, s: Sample, slot: int, why: Rejection) -> None:
        """The slot's machine no longer fits: a hole, and the reason counted."""
        if s.scores[slot] != -np.inf:
            s.scores[slot] = -np.inf
            s.holes.append(slot)
            s.valid -= 1
            if s.tally is not None:
                s.tally.add(why)

    def rescore(self, cls: TaskClass, s: Sample, slots: list[int]) -> None:
        """Score these slots' machines afresh, one at a time."""
        machines, version, preempting = s.machines, self.cell.version, s.preempting
        if self.scorer.batched(cls, preempting):
            self._rescore_plain(cls, s, slots, [int(machines[slot]) for slot in slots])
            return
        evaluate = self.scorer.evaluate
        for slot in slots:
            mi = int(machines[slot])
            score = evaluate(cls, mi, preempting)
            if score.__class__ is Rejection:
                self.drop(s, slot, score)  # type: ignore[arg-type]
            else:
                s.scores[slot] = score
                s.versions[slot] = version[mi]

    def _rescore_plain(self, cls: TaskClass, s: Sample, slots: list[int], mis: list[int]) -> None:
        """`rescore` of a batched class's slots (machines `mis`), scored in one call."""
        scores, versions, version = s.scores, s.versions, self.cell.version
        for slot, mi, score in zip(slots, mis, self.scorer.plain(cls, mis, s.tally is not None), strict=True):
            if score.__class__ is Rejection:
                self.drop(s, slot, score)  # type: ignore[arg-type]
            else:
                scores[slot] = score
                versions[slot] = version[mi]

    def refresh(self, cls: TaskClass, s: Sample) -> None:
        """Rescore every cached score whose machine's version moved since, wherever it ranks;
        all of them when the shape mix moved (fgd)."""
        size, bumps = s.size, self.cell.bumps
        mix = self.scorer.mix
        if mix is not None and s.mix != mix.version:
            s.mix = mix.version
            slots = (s.scores[:size] != -np.inf).nonzero()[0]
        elif s.epoch == bumps:
            return  # no machine's version moved since every slot was current
        else:
            # The slots whose machine moved, of which the few that are holes are left out here.
            moved = (s.versions[:size] != self.cell.version[s.machines[:size]]).nonzero()[0]
            slots = moved[s.scores[moved] != -np.inf]
        if len(slots):
            if self.scorer.batched(cls, s.preempting):
                if len(slots) >= BATCH_MIN:
                    self._rescore_many(cls, s, slots)
                else:
                    self._rescore_plain(cls, s, slots.tolist(), s.machines[slots].tolist())
            else:
                self.rescore(cls, s, slots.tolist())
        s.epoch = bumps  # scoring moves no version: every slot is current as of `bumps`

    def rescore_all(self, cls: TaskClass, s: Sample) -> None:
        """Without the score cache: every machine of the sample scored afresh."""
        mix = self.scorer.mix
        s.mix = mix.version if mix is not None else 0
        self.rescore(cls, s, [slot for slot in range(s.size) if s.scores[slot] != -np.inf])

    def _free(self, cls: TaskClass, pos: np.ndarray) -> np.ndarray:
        """What the class may use on the machines at these walk positions (slack is 0 where nothing is reclaimed)."""
        free = self.pre.free[pos]
        return free if not self.pre.reclaimed or is_prod(cls.priority) else free + self.pre.slack[pos]

    def _rescore_many(self, cls: TaskClass, s: Sample, slots: np.ndarray) -> None:
        """`rescore` of many slots in one numpy pass: the class takes no GPUs and preempts
        nothing, so a machine of its sample still fits when what it may use covers the request."""
        self.stats.evaluations += len(slots)
        mis = s.machines[slots]
        free = self._free(cls, self.pre.pos[mis])
        ok = np.ones(len(slots), dtype=bool)
        for d, a in cls.nz:
            ok &= free[:, d] >= a
        good = mis[ok]
        s.scores[slots[ok]] = self.scorer.many(cls, good, free[ok])
        s.versions[slots[ok]] = self.cell.version[good]
        # Each machine that stopped fitting is short of what it no longer covers (it is up and
        # meets the class's constraints, or it would not be in the sample).
        if s.tally is None:  # no reason is counted
            for slot in slots[~ok].tolist():
                self.drop(s, slot, UNCOUNTED)
            return
        for slot, row in zip(slots[~ok].tolist(), free[~ok].tolist(), strict=True):
            self.drop(s, slot, Rejection(short=tuple(d for d, a in cls.nz if row[d] < a)))

    def refill(self, cls: TaskClass, s: Sample) -> None:
        """Walk the random order until the sample holds its feasible machines (or the walk ends)."""
        n, k, run = self.n, s.want, 32
        pre, cell, evaluate = self.pre, self.cell, self.scorer.evaluate
        ids = pre.ids
        batched = self.scorer.batched(cls, s.preempting)
        while s.valid < k and s.cursor < n:
            start = s.cursor
            end = min(n, start + run)
            lo = s.offset + start
            s.cursor = end
            if s.tally is None:
                hits = pre.passing(cls, lo, s.offset + end, s.preempting)
            else:  # the prefilter's verdict keeps the reasons of the machines it rejects
                run_check = pre.check(cls, lo, s.offset + end, s.preempting)
                hits = run_check.passing()
            if len(hits) >= BATCH_MIN and k - s.valid >= BATCH_MIN and batched:
                take = hits[: k - s.valid]
                self._add_many(cls, s, lo + take)
                if s.valid >= k:
                    s.cursor = start + int(take[-1]) + 1  # the rest of the run is still unseen
                hits = hits[:0]
            ahead: list[float | Rejection] = []  # a batched class's scores, taken a run at a time
            i = 0
            for j, h in enumerate(hits.tolist()):
                mi = int(ids[lo + h])
                if batched:
                    if i == len(ahead):  # as many as the sample still lacks: `evaluate`'s count
                        ahead, i = self.scorer.plain(cls, ids[lo + hits[j : j + k - s.valid]].tolist()), 0
                    score = ahead[i]
                    i += 1
                else:
                    score = evaluate(cls, mi, s.preempting)
                if score.__class__ is Rejection:
                    if s.tally is not None:
                        s.tally.add(score)  # type: ignore[arg-type]
                    continue
                slot = s.holes.pop() if s.holes else s.size
                if slot == s.size:
                    s.size += 1
                s.machines[slot] = mi
                s.doms[slot] = cell.dom[mi]
                s.scores[slot] = score
                s.versions[slot] = cell.version[mi]
                s.ranks[slot] = start + h
                s.valid += 1
                if s.valid >= k:
                    s.cursor = start + h + 1  # the rest of the run is still unseen
                    break
            if s.tally is not None:  # nothing moved since the prefilter looked: its reasons stand
                s.tally.add_run(run_check, s.cursor - start)
            run = min(run * 2, 4096)

    def _add_many(self, cls: TaskClass, s: Sample, pos: np.ndarray) -> None:
        """Add the machines at these walk positions, each of which the prefilter found to fit
        (exact for a batched class), filling holes first as the one-at-a-time walk does."""
        self.stats.evaluations += len(pos)
        mis = self.pre.ids[pos]
        m, holes = len(mis), s.holes
        reuse = min(len(holes), m)
        slots = holes[len(holes) - reuse :][::-1] if reuse else []
        del holes[len(holes) - reuse :]
        at = np.array([*slots, *range(s.size, s.size + m - reuse)], dtype=np.int64)
        s.size += m - reuse
        s.machines[at] = mis
        s.doms[at] = self.dom[mis]
        s.scores[at] = self.scorer.many(cls, mis, self._free(cls, pos))
        s.versions[at] = self.cell.version[mis]
        s.ranks[at] = pos - s.offset
        s.valid += m
