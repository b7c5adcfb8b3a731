"""One scheduling pass over a snapshot: the pending queue in, a plan out (the pure core).

The pipeline for each task, in Nomad's terms: a seeded random source of machines ->
feasibility (constraints, free resources, GPUs, preemptible victims) -> policy score plus
the built-in terms -> limit (relaxed randomization) -> max score. Equivalence classes share
the feasible sample and its scores between tasks with the same needs; the score cache
reuses a (class, machine) score while the machine's version has not moved: a version moves
when any resource drifts more than `cache_threshold` of capacity, when any GPU changes, and
(for `fgd`) when the mix of task shapes drifts. Every cached score in a sample is checked
before each pick, wherever it ranks. Every class walks the random order from one shared
start, and the walk skips machines a vectorized prefilter rules out. Preemption is the last
resort: a class's sample takes machines that need victims only once none fits as it is.
The checks are `feasibility`'s. The walk that can end in "fits nowhere" (the preempting one,
or the only one without preemption) records why it rejects each machine when it does, and the
counts of those reasons are what an unschedulable task is told.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

import numpy as np

from spec.model import is_prod

from .batchscore import BATCH_POLICIES
from .cellview import CellView, Victim, gpu_take
from .classes import TaskClass, class_key, make_class
from .config import SchedulerConfig
from .feasibility import (
    Feasibility,
    Prefilter,
    Rejection,
    Tally,
    constraint_holds,
    constraints_hold,
    release,
)
from .fgdbatch import fgd_many
from .fragmentation import ShapeMix, fgd_place
from .pairing import penalties
from .plan import Placement, Plan, Preemption, Reason, Unschedulable
from .policies import gpu_clustering, gpu_packing, policy_named
from .queue import ordered
from .reasons import amount, explain
from .snapshot import PendingTask, Snapshot
from .terms import locality_bonus, preemption_cost, skew_penalty, spread_penalty

# Fewer machines than this are scored one call each: numpy's cost per call outweighs the loop.
BATCH_MIN = 16


class _Sample:
    """One class's feasible machines found so far, with cached scores and the versions they saw."""

    __slots__ = (
        "machines", "doms", "scores", "versions", "ranks", "mix", "size", "holes", "valid", "cursor", "offset",
        "preempting", "tally",
    )

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

    @property
    def want(self) -> int:
        """Feasible machines the walk collects before the best is picked: the sample's size."""
        return len(self.machines)


class Pass:
    """The state of one pass: the working cell, the plan so far, per-class samples."""

    def __init__(
        self,
        snapshot: Snapshot,
        config: SchedulerConfig,
        seed: int,
        recent_disruptions: Mapping[str, int] | None,
    ) -> None:
        self.cfg = config
        self.policy = policy_named(config.policy)  # None: a GPU-aware policy, see _gpu_score
        self.cell = CellView(snapshot, seed ^ 0x5A17)
        self.n = len(self.cell.names)
        self.k = config.sample_size(self.n)
        self.rng = random.Random(seed)
        self.order = list(range(self.n))
        self.rng.shuffle(self.order)
        # With a shared start, every class walks the same random order from the same place:
        # the samples of different classes overlap and placements fill the same machines
        # first (see docs/decisions.md for what this buys in packing and costs in speed).
        self.offset = self.rng.randrange(max(self.n, 1))
        self.pre = Prefilter(self.cell, self.order)
        # random_fit's salt falls along the walk from the shared start: the feasible machine it
        # prefers is the first one the walk reaches, whether the sample holds k or every machine,
        # so relaxed randomization leaves its choice as it is (first fit in a random order).
        self.cell.salt = walk_salt(self.order, self.offset)
        # A scalar policy with a numpy twin scores a run of machines in one call, where the
        # class takes no GPUs and preempts nothing: the prefilter's verdict is then exact.
        self.batch = BATCH_POLICIES.get(config.policy)
        self.cap = np.array(self.cell.cap, dtype=np.int64).reshape(self.n, len(self.cell.dims))
        self.salt = np.array(self.cell.salt, dtype=np.float64)
        threshold = config.mix_threshold if config.score_cache else 0.0
        self.mix = ShapeMix(threshold) if config.policy == "fgd" else None
        self.gpu_max = max((sum(g) for g in self.cell.gcap), default=0)
        self.dom = np.array(self.cell.dom, dtype=np.int64)
        self.feasible = Feasibility(self.cell, config.preemption, config.max_disruptions_per_job, recent_disruptions)
        # Where each job's tasks are (running, then placed by this pass), and, once a task of
        # the job is scored beside them, the same counted per failure domain and per machine.
        self.job_on: dict[str, list[int]] = {}
        self.job_spread: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.job_hosts: dict[str, int] = {}  # machines holding a task of the job, for the jobs in job_spread
        for t in snapshot.running:
            mi = self.cell.index.get(t.machine)
            if mi is not None:
                self.job_on.setdefault(t.id.job, []).append(mi)
        self.pkg_has: dict[str, np.ndarray] = {}
        self.pkg_machines: dict[str, list[int]] | None = None
        # Recent crashes of a task index by machine row (pairing.py): its own score term.
        self.crashes = {k: {self.cell.index[m]: n for m, n in c.items() if m in self.cell.index}
                        for k, c in snapshot.crashes.items()}  # fmt: skip
        self.plan = Plan()
        self.stats = self.plan.stats

    # --- scoring of one (class, machine) pair ---------------------------------------------

    def evaluate(self, cls: TaskClass, mi: int, preempt: bool = True) -> float | Rejection:
        """The machine's score for the class, or why it is not feasible (without preemption
        when `preempt` is False): `Feasibility.check`, then the policy's score less what the
        victims cost."""
        self.stats.evaluations += 1
        got = self.feasible.check(cls, mi, preempt)
        if got.__class__ is Rejection:
            return got  # type: ignore[return-value]
        cell = self.cell
        free = cell.free[mi]
        if cell.reclaimed[mi] and not is_prod(cls.priority):
            free = cell.free_for(mi, False)
        if not got:
            if self.policy is None:
                return self._gpu_score(cls, mi, free)
            return self.policy(cls.req, free, cell.cap[mi], cell.salt[mi])
        victims: list[Victim] = got  # type: ignore[assignment]
        free = list(free)
        gfree = list(cell.gfree[mi]) if self.policy is None else None
        for v in victims:
            release(v, free, gfree)
        penalty = preemption_cost(
            (v.priority for v in victims), self.cfg.preemption_per_victim, self.cfg.preemption_per_priority
        )
        if self.policy is None:
            # judged on the GPUs as the eviction leaves them, where the commit will place it
            return self._gpu_score(cls, mi, free, gfree) - penalty
        return self.policy(cls.req, free, cell.cap[mi], cell.salt[mi]) - penalty

    def _gpu_score(self, cls: TaskClass, mi: int, free: list[int], gfree: list[int] | None = None) -> float:
        """The GPU-aware policies, fed from the working cell (or from `gfree`, the GPUs after an eviction)."""
        cell, name = self.cell, self.cfg.policy
        gfree = cell.gfree[mi] if gfree is None else gfree
        if name == "fgd":
            return self._fgd(cls, mi, free, gfree)[0]
        if name == "gpu_packing":
            return gpu_packing(cls.gpu_whole, cls.gpu_share, gfree)
        kind = (cls.gpu_whole, cls.gpu_share) if cls.gpu else None
        return gpu_clustering(kind, cell.gkinds[mi], sum(gfree), self.gpu_max)

    def _fgd(self, cls: TaskClass, mi: int, free: list[int], gfree: list[int]) -> tuple[float, list[tuple[int, int]]]:
        mix = self.mix
        assert mix is not None
        allowed = None
        if mix.constrained:
            attrs = self.cell.attrs[mi]
            allowed = [all(constraint_holds(c, attrs) for c in g[2]) for g, _ in mix.frozen]
        return fgd_place(free[0], cls.req[0], gfree, cls.gpu_whole, cls.gpu_share, mix.frozen, mix.frozen_total, allowed)

    def _gpus(self, cls: TaskClass, mi: int) -> list[tuple[int, int]]:
        """The GPUs a placement takes: fgd's own choice, else the fullest GPU that fits a share."""
        cell = self.cell
        if self.mix is not None:
            return self._fgd(cls, mi, cell.free_for(mi, is_prod(cls.priority)), cell.gfree[mi])[1]
        picks = gpu_take(cell.gfree[mi], cell.gcap[mi], cls.gpu_whole, cls.gpu_share)
        assert picks is not None, "checked by pick"
        return picks

    # --- the sample of feasible machines of a class ---------------------------------------

    def _start(self) -> int:
        """Where a new class's walk of the random order begins."""
        if self.cfg.relaxed_shared_start:
            return self.offset
        return self.rng.randrange(max(self.n, 1))

    def _want(self, job_tasks: int) -> int:
        """How many feasible machines a class samples, where `job_tasks` is the most tasks any
        one job has in it: relaxed randomization's k, or one machine per task of that job where
        it has more, so that a job of thousands of tasks can spread over as many machines as it
        has tasks (up to the whole cell) rather than over the first k its walk reaches.

        A job's tasks are what the spreading terms keep apart; tasks of different jobs that
        share a class are not, so a class of many small jobs keeps the bound: a sample of the
        whole cell would change where each of them lands (every class's walk starts at one
        place, so small samples fill the same machines first) and the cell's packing with it.
        """
        if not self.cfg.relaxed_randomization:
            return self.n
        return min(self.n, max(self.k, job_tasks))

    def _set(self, s: _Sample, slot: int, mi: int, score: float | Rejection) -> None:
        """A slot's new score, or its machine's rejection: a hole, and the reason counted."""
        if score.__class__ is Rejection:
            if s.scores[slot] != -np.inf:
                s.scores[slot] = -np.inf
                s.holes.append(slot)
                s.valid -= 1
                if s.tally is not None:
                    s.tally.add(score)  # type: ignore[arg-type]
            return
        s.scores[slot] = score
        s.versions[slot] = self.cell.version[mi]

    def _refresh(self, cls: TaskClass, s: _Sample) -> None:
        """Rescores every cached score whose machine's version moved since, wherever it ranks;
        all of them when the shape mix moved (fgd)."""
        size = s.size
        live = s.scores[:size] != -np.inf
        if self.mix is not None and s.mix != self.mix.version:
            s.mix = self.mix.version
            stale = live
        else:
            stale = live & (s.versions[:size] != self.cell.version[s.machines[:size]])
        slots = stale.nonzero()[0]
        if len(slots) >= BATCH_MIN and self._batched(cls, s):
            self._rescore_many(cls, s, slots)
            return
        for slot in slots.tolist():
            self._rescore(cls, s, slot)

    def _batched(self, cls: TaskClass, s: _Sample) -> bool:
        """Whether the class's sample is scored a run at a time (see `batchscore`)."""
        return (self.batch is not None or self.mix is not None) and not cls.gpu and not s.preempting

    def _scores(self, cls: TaskClass, mis: np.ndarray, free: np.ndarray) -> np.ndarray:
        if self.mix is not None:  # fgd, a class without GPUs: fgdbatch
            return fgd_many(self.cell, mis, free, lambda mi, cpu, gfree: self._fgd(cls, mi, [cpu], gfree)[0])
        need = cls.need
        if need is None:
            need = cls.need = np.array(cls.req, dtype=np.int64)
        assert self.batch is not None
        return self.batch(need, free, self.cap[mis], self.salt[mis])

    def _free(self, cls: TaskClass, pos: np.ndarray) -> np.ndarray:
        """What the class may use on the machines at these walk positions (slack is 0 where nothing is reclaimed)."""
        free = self.pre.free[pos]
        return free if is_prod(cls.priority) else free + self.pre.slack[pos]

    def _rescore_many(self, cls: TaskClass, s: _Sample, slots: np.ndarray) -> None:
        """`_rescore` of many slots in one numpy pass: the class takes no GPUs and preempts
        nothing, so a machine of its sample still fits when what it may use covers the request."""
        self.stats.evaluations += len(slots)
        mis = s.machines[slots]
        free = self._free(cls, self.pre.pos[mis])
        ok = np.ones(len(slots), dtype=bool)
        for d, a in cls.nz:
            ok &= free[:, d] >= a
        good = mis[ok]
        s.scores[slots[ok]] = self._scores(cls, good, free[ok])
        s.versions[slots[ok]] = self.cell.version[good]
        # Each machine that stopped fitting is short of what it no longer covers (it is up and
        # meets the class's constraints, or it would not be in the sample).
        for slot, mi, row in zip(slots[~ok].tolist(), mis[~ok].tolist(), free[~ok].tolist(), strict=True):
            self._set(s, slot, mi, Rejection(short=tuple(d for d, a in cls.nz if row[d] < a)))

    def _rescore(self, cls: TaskClass, s: _Sample, slot: int) -> None:
        mi = int(s.machines[slot])
        self._set(s, slot, mi, self.evaluate(cls, mi, s.preempting))

    def _refill(self, cls: TaskClass, s: _Sample) -> None:
        """Relaxed randomization: walk the random order until the sample holds its feasible machines."""
        n, k, run = self.n, s.want, 32
        while s.valid < k and s.cursor < n:
            start = s.cursor
            end = min(n, start + run)
            lo = s.offset + start
            ids = self.pre.ids
            s.cursor = end
            if s.tally is None:
                hits = self.pre.passing(cls, lo, s.offset + end, s.preempting)
            else:  # the reasons of the machines the prefilter rejects are counted
                run_check = self.pre.check(cls, lo, s.offset + end, s.preempting)
                hits = run_check.passing()
            if len(hits) >= BATCH_MIN and k - s.valid >= BATCH_MIN and self._batched(cls, s):
                take = hits[: k - s.valid]
                self._add_many(cls, s, lo + take)
                if s.valid >= k:
                    s.cursor = start + int(take[-1]) + 1  # the rest of the run is still unseen
                hits = hits[:0]
            for h in hits.tolist():
                mi = int(ids[lo + h])
                score = self.evaluate(cls, mi, s.preempting)
                if score.__class__ is Rejection:
                    if s.tally is not None:
                        s.tally.add(score)  # type: ignore[arg-type]
                    continue
                slot = s.holes.pop() if s.holes else s.size
                if slot == s.size:
                    s.size += 1
                s.machines[slot] = mi
                s.doms[slot] = self.cell.dom[mi]
                s.scores[slot] = score
                s.versions[slot] = self.cell.version[mi]
                s.ranks[slot] = start + h
                s.valid += 1
                if s.valid >= k:
                    s.cursor = start + h + 1  # the rest of the run is still unseen
                    break
            if s.tally is not None:  # nothing moved since the prefilter looked: its reasons stand
                s.tally.add_run(run_check, s.cursor - start)
            run = min(run * 2, 4096)

    def _add_many(self, cls: TaskClass, s: _Sample, pos: np.ndarray) -> None:
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
        s.scores[at] = self._scores(cls, mis, self._free(cls, pos))
        s.versions[at] = self.cell.version[mis]
        s.ranks[at] = pos - s.offset
        s.valid += m

    def _totals(self, s: _Sample, task: PendingTask) -> np.ndarray:
        """Cached class scores plus the job's own terms: spreading and package locality."""
        size = s.size
        total = s.scores[:size]
        cfg = self.cfg
        if cfg.spread_weight or cfg.skew_weight:
            placed = len(self.job_on.get(task.job, ()))
            if placed:
                doms, machines = self._job_spread(task.job)
                if cfg.spread_weight:
                    total = total - spread_penalty(cfg.spread_weight, placed, doms[s.doms[:size]])
                if cfg.skew_weight:
                    # A sample of distinct machines (one walk) larger than the job's hosts holds
                    # a machine without the job's tasks: its least count is 0.
                    least = 0 if not s.preempting and self.job_hosts[task.job] < size else None
                    total = total - skew_penalty(cfg.skew_weight, machines[s.machines[:size]], least)
        if cfg.locality_weight and task.package:
            total = total + locality_bonus(cfg.locality_weight, self._package_on(task.package)[s.machines[:size]])
        crashes = self.crashes.get((task.id.job, task.id.index))
        if crashes:
            total = total - penalties(crashes, s.machines[:size])
        return total

    def _job_spread(self, job: str) -> tuple[np.ndarray, np.ndarray]:
        """The job's tasks counted per failure domain and per machine (a machine is the
        smallest failure domain: a job's tasks spread over machines within a rack too).
        Built only for a job that has a task to place beside others, so a cell of many
        one-task jobs keeps no per-machine array."""
        spread = self.job_spread.get(job)
        if spread is None:
            doms = np.zeros(self.cell.domains, dtype=np.int64)
            machines = np.zeros(self.n, dtype=np.int32)
            for mi in self.job_on.get(job, ()):
                doms[self.cell.dom[mi]] += 1
                machines[mi] += 1
            spread = self.job_spread[job] = (doms, machines)
            self.job_hosts[job] = int(np.count_nonzero(machines))
        return spread

    def _package_on(self, package: str) -> np.ndarray:
        has = self.pkg_has.get(package)
        if has is None:
            if self.pkg_machines is None:  # one inverted index instead of a scan per package
                self.pkg_machines = {}
                for mi, pkgs in enumerate(self.cell.pkgs):
                    for p in pkgs:
                        self.pkg_machines.setdefault(p, []).append(mi)
            has = np.zeros(self.n, dtype=bool)
            has[self.pkg_machines.get(package, [])] = True
            self.pkg_has[package] = has
        return has

    def pick(self, cls: TaskClass, s: _Sample, task: PendingTask) -> tuple[int, int, list[Victim], float] | None:
        """(slot, machine, victims, score) of the best machine in the sample, or None: fits nowhere."""
        if self.cfg.score_cache:
            self._refresh(cls, s)
        else:
            # Without the cache every task scores its class's sample afresh.
            s.mix = self.mix.version if self.mix is not None else 0
            for slot in range(s.size):
                if s.scores[slot] != -np.inf:
                    self._rescore(cls, s, slot)
        while True:
            if s.valid < s.want and s.cursor < self.n:
                self._refill(cls, s)
            if s.valid == 0:
                if s.preempting or not self.cfg.preemption:
                    return None
                # Preemption is the last resort: only when no machine fits as it is.
                s.preempting, s.cursor = True, 0
                s.tally = Tally(len(cls.compiled), len(self.cell.dims))
                continue
            total = self._totals(s, task)
            slot = int(total.argmax())
            ties = (total == total[slot]).nonzero()[0]
            if len(ties) > 1:  # the first in the walk, as a pass that scores every machine takes it
                slot = int(ties[s.ranks[ties].argmin()])
            mi = int(s.machines[slot])
            # A cached score may be stale within the threshold; feasibility is checked exactly.
            got = self.feasible.check(cls, mi, s.preempting)
            if got.__class__ is not Rejection:
                self.stats.cache_hits += self.cfg.score_cache
                return slot, mi, got, float(total[slot])  # type: ignore[return-value]
            self._set(s, slot, mi, got)

    # --- committing a placement -----------------------------------------------------------

    def commit(self, task: PendingTask, cls: TaskClass, mi: int, victims: list[Victim], score: float) -> None:
        cell = self.cell
        free, gfree = cell.free[mi], cell.gfree[mi]
        name = cell.names[mi]
        for v in victims:
            cell.victims[mi].remove(v)
            release(v, free, gfree)
            cell.forget_kind(mi, v.req)
            self.feasible.evicted(v.job)
            self.plan.preemptions.append(
                Preemption(v.id, task.id, name, f"priority {task.priority} preempts {v.priority} on {name}")
            )
        if victims:
            cell.vmin[mi] = min((v.priority for v in cell.victims[mi]), default=1 << 30)
        if cls.gpu:
            for g, a in self._gpus(cls, mi):
                gfree[g] -= a
            cell.add_kind(mi, cls.req)
        for d, a in cls.nz:
            free[d] -= a
        cell.touch(mi, self.cfg.cache_threshold if self.cfg.score_cache else 0.0)
        self.pre.update(mi)
        self.plan.placements.append(Placement(task.id, name, tuple(v.id for v in victims), score))
        if self.cfg.spread_weight or self.cfg.skew_weight:
            self.job_on.setdefault(task.job, []).append(mi)
            spread = self.job_spread.get(task.job)
            if spread is not None:
                spread[0][cell.dom[mi]] += 1
                self.job_hosts[task.job] += not spread[1][mi]
                spread[1][mi] += 1
        if task.package and task.package not in cell.pkgs[mi]:
            cell.pkgs[mi].add(task.package)
            if self.pkg_machines is not None:
                self.pkg_machines.setdefault(task.package, []).append(mi)
            if task.package in self.pkg_has:
                self.pkg_has[task.package][mi] = True

    def place_in_alloc(self, task: PendingTask) -> None:
        cell = self.cell
        a = cell.allocs.get(task.alloc or "")
        subject = f"alloc {task.alloc}"
        if a is None:
            self._unschedulable(task, (Reason(subject, "no such alloc in the cell"),))
            return
        mi = a.machine
        req = cell.vec(task.request.as_dict())
        short = [cell.dims[i] for i, r in enumerate(req) if r > a.free[i]]
        cls = make_class(task, cell, class_key(task))
        if not cell.up[mi]:
            self._unschedulable(task, (Reason(subject, f"its machine {cell.names[mi]} is down"),))
        elif not constraints_hold(cls, cell.attrs[mi]):
            self._unschedulable(task, (Reason(subject, f"constraints do not hold on {cell.names[mi]}"),))
        elif short:
            need = ", ".join(f"{d} {amount(d, req[cell.dim_index[d]])} > {amount(d, a.free[cell.dim_index[d]])} free" for d in short)
            self._unschedulable(task, (Reason(subject, need),))
        else:
            for i, r in enumerate(req):
                a.free[i] -= r
            self.plan.placements.append(Placement(task.id, cell.names[mi]))

    def _unschedulable(self, task: PendingTask, reasons: tuple[Reason, ...]) -> None:
        self.plan.unschedulable.append(Unschedulable(task.id, reasons))

    # --- the pass -------------------------------------------------------------------------

    def run(self, pending: list[PendingTask], clock: Callable[[], float] | None) -> Plan:
        cfg = self.cfg
        classes: dict[int, TaskClass] = {}
        samples: dict[int, _Sample] = {}
        dead: dict[int, tuple[Reason, ...]] = {}
        left: dict[int, int] = {}
        # Each class key numbered once: the lookups below hash a small int, not the request.
        number: dict[tuple, int] = {}
        keys = [number.setdefault(class_key(t), len(number)) for t in pending]
        key_of = list(number)
        for key in keys:
            left[key] = left.get(key, 0) + 1
        # Per class, the most pending tasks one job has in it: what its sample is sized by.
        per_job: dict[tuple[int, str], int] = {}
        if cfg.equivalence_classes and cfg.relaxed_randomization:
            for task, key in zip(pending, keys, strict=True):
                per_job[key, task.job] = per_job.get((key, task.job), 0) + 1
        job_most: dict[int, int] = {}
        for (key, _), count in per_job.items():
            job_most[key] = max(job_most.get(key, 0), count)
        for task, key in zip(pending, keys, strict=True):
            start = clock() if clock else 0.0
            self.stats.processed += 1
            left[key] -= 1
            if task.alloc is not None:
                self.place_in_alloc(task)
            elif cfg.equivalence_classes and key in dead:
                self.stats.skipped_by_dead_class += 1
                self._unschedulable(task, dead[key])
            else:
                cls = classes.get(key) if cfg.equivalence_classes else None
                if cls is None:
                    cls = make_class(task, self.cell, key_of[key])
                    self.stats.classes += 1
                    if cfg.equivalence_classes:
                        classes[key] = cls
                if self.mix is not None:  # fgd: the mix of shapes seen so far, this one included
                    group = (cls.gpu_whole, cls.gpu_share, cls.compiled) if cls.gpu else None
                    self.mix.add(group, cls.req[0])
                s = samples.get(key) if cfg.equivalence_classes else None
                if s is None:
                    s = _Sample(max(self._want(job_most.get(key, 1)), 1), self._start())
                    if not cfg.preemption:  # the first walk is the last
                        s.tally = Tally(len(cls.compiled), len(self.cell.dims))
                    if cfg.equivalence_classes:
                        samples[key] = s
                got = self.pick(cls, s, task)
                if got is None:
                    assert s.tally is not None, "a class fits nowhere only after its last walk"
                    reasons = explain(s.tally.settle(), cls, self.cell.dims, cfg.preemption)
                    if cfg.equivalence_classes:
                        dead[key] = reasons  # fits nowhere: skipped for the rest of the pass
                        samples.pop(key, None)
                    self._unschedulable(task, reasons)
                else:
                    slot, mi, victims, score = got
                    self.commit(task, cls, mi, victims, score)
                    if cfg.score_cache and cfg.equivalence_classes and left[key]:
                        self._rescore(cls, s, slot)  # the class's next task sees this machine's new state
                if cfg.equivalence_classes and not left[key]:
                    samples.pop(key, None)
            if clock:
                self.stats.latencies.append(clock() - start)
        return self.plan


def walk_salt(order: list[int], offset: int) -> list[float]:
    """Per machine a number in [0, 1) that falls along the walk: (n - 1 - j) / n for the machine
    j places after `offset` in the random `order`."""
    n = len(order)
    salt = [0.0] * n
    for j in range(n):
        salt[order[(offset + j) % n]] = (n - 1 - j) / n
    return salt


def plan_pass(
    snapshot: Snapshot,
    config: SchedulerConfig | None = None,
    seed: int = 0,
    recent_disruptions: Mapping[str, int] | None = None,
    clock: Callable[[], float] | None = None,
    limit: int | None = None,
) -> Plan:
    """Schedule the snapshot's pending queue once: placements, preemptions, unschedulable tasks.

    `recent_disruptions` counts each job's tasks disrupted in the caller's window, for
    `max_disruptions_per_job`. `clock`, if given, only times each task for the stats.
    `limit` stops after that many tasks of the ordered queue (the rest stay pending, unreported).
    """
    cfg = config or SchedulerConfig()
    queue = ordered(snapshot.pending, cfg.queue_order)
    if limit is not None:
        queue = queue[:limit]
    return Pass(snapshot, cfg, seed, recent_disruptions).run(queue, clock)
