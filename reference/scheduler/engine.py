"""One scheduling pass over a snapshot: the pending queue in, a plan out (the pure core).

A pass is a chain of small stages, as Nomad's stack is, each in its own module, each with its
own state:

- source (`walk.Walk`): the machines in a seeded random order, which each class walks from a
  start (one shared start by default);
- feasibility (`feasibility.Prefilter`, a run of machines at a time in numpy, then
  `feasibility.Feasibility.check`, one machine at a time): whether the class fits, and if not,
  why, recorded where it is rejected;
- score (`scoring.Scorer`): the policy's score, less what preempting costs;
- limit (`sample.Sampler`, relaxed randomization): each class collects a sample of k feasible
  machines, its scores cached while their machines have not moved;
- pick (`Pass.pick`): the sample's scores plus the job's own terms (`jobterms.JobTerms`:
  spreading, package locality, crashing pairings), the best one checked exactly, then
  committed to the working cell (`Pass.commit`).

Equivalence classes share a sample and its scores between tasks with the same needs
(`Classes`). Preemption is the last resort: a class's sample takes machines that need victims
only once none fits as it is. A class that fits nowhere is told why from the rejections its
last walk recorded (`reasons.explain`), and the rest of its tasks are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from .cellview import CellView, Victim
from .classes import TaskClass, class_key, make_class
from .config import SchedulerConfig
from .feasibility import Feasibility, Prefilter, Rejection, constraints_hold, release
from .jobterms import JobTerms
from .plan import Placement, Plan, Preemption, Reason, Unschedulable
from .queue import ordered
from .reasons import amount, explain
from .sample import Sample, Sampler
from .scoring import Scorer
from .snapshot import PendingTask, Snapshot
from .walk import Walk


class Classes:
    """The equivalence classes of a queue: each task's class, and per class its sample, what
    is left of its tasks, and, once it fits nowhere, why. Without equivalence classes every
    task is a class of its own and keeps nothing."""

    def __init__(self, pending: list[PendingTask], cfg: SchedulerConfig) -> None:
        self.shared = cfg.equivalence_classes
        # Each class key numbered once: the lookups below hash a small int, not the request.
        number: dict[tuple, int] = {}
        self.keys = [number.setdefault(class_key(t), len(number)) for t in pending]
        self.key_of = list(number)
        self.left: dict[int, int] = {}
        for key in self.keys:
            self.left[key] = self.left.get(key, 0) + 1
        # Per class, the most pending tasks one job has in it: what its sample is sized by.
        per_job: dict[tuple[int, str], int] = {}
        if cfg.equivalence_classes and cfg.relaxed_randomization:
            for task, key in zip(pending, self.keys, strict=True):
                per_job[key, task.job] = per_job.get((key, task.job), 0) + 1
        self.job_most: dict[int, int] = {}
        for (key, _), count in per_job.items():
            self.job_most[key] = max(self.job_most.get(key, 0), count)
        self.classes: dict[int, TaskClass] = {}
        self.samples: dict[int, Sample] = {}
        self.dead: dict[int, tuple[Reason, ...]] = {}

    def fits_nowhere(self, key: int) -> tuple[Reason, ...] | None:
        """Why the class fits nowhere, when an earlier task of it found that out."""
        return self.dead.get(key) if self.shared else None

    def died(self, key: int, reasons: tuple[Reason, ...]) -> None:
        if self.shared:
            self.dead[key] = reasons  # fits nowhere: skipped for the rest of the pass
            self.samples.pop(key, None)

    def done(self, key: int) -> None:
        """One task of the class handled: its sample goes with its last task."""
        self.left[key] -= 1
        if self.shared and not self.left[key]:
            self.samples.pop(key, None)


class Pass:
    """One pass: the stages wired over one working copy of the cell, and the plan they make."""

    def __init__(
        self,
        snapshot: Snapshot,
        config: SchedulerConfig,
        seed: int,
        recent_disruptions: Mapping[str, int] | None,
        cell: CellView | None = None,
        job_on: Callable[[str], Iterable[str]] | None = None,
    ) -> None:
        """`cell`: a view of the snapshot's cell for this pass to change, instead of one built
        from the snapshot's machines and running tasks (`carried.CarriedCell`); `job_on`: the
        machines of a job's running tasks (`jobterms.JobTerms`), with `cell`."""
        self.cfg = config
        self.cell = cell = cell if cell is not None else CellView(snapshot, seed ^ 0x5A17)
        self.walk = Walk(len(cell.names), seed, config.relaxed_shared_start)
        cell.salt = self.walk.salt()
        self.pre = Prefilter(cell, self.walk.order)
        self.feasible = Feasibility(cell, config.preemption, config.max_disruptions_per_job, recent_disruptions)
        self.plan = Plan()
        self.scorer = Scorer(cell, config, self.feasible, self.plan.stats)
        self.sampler = Sampler(cell, config, self.walk, self.pre, self.scorer, self.plan.stats)
        self.terms = JobTerms(snapshot, cell, config, job_on)

    def pick(self, cls: TaskClass, s: Sample, task: PendingTask) -> tuple[int, int, list[Victim], float] | None:
        """(slot, machine, victims, score) of the best machine in the sample, or None: fits nowhere."""
        cfg, sampler = self.cfg, self.sampler
        if cfg.score_cache:
            sampler.refresh(cls, s)
        else:  # every task scores its class's sample afresh
            sampler.rescore_all(cls, s)
        while True:
            if s.valid < s.want and s.cursor < sampler.n:
                sampler.refill(cls, s)
            if s.valid == 0:
                if s.preempting or not cfg.preemption:
                    return None
                s.preempt(cls, len(self.cell.dims))  # the last resort: only when no machine fits as it is
                continue
            total = self.terms.totals(s, task)
            slot = int(total.argmax())
            ties = (total == total[slot]).nonzero()[0]
            if len(ties) > 1:  # the first in the walk, as a pass that scores every machine takes it
                slot = int(ties[s.ranks[ties].argmin()])
            mi = int(s.machines[slot])
            # A cached score may be stale within the threshold; feasibility is checked exactly.
            got = self.feasible.check(cls, mi, s.preempting)
            if got.__class__ is not Rejection:
                self.plan.stats.cache_hits += cfg.score_cache
                return slot, mi, got, float(total[slot])  # type: ignore[return-value]
            sampler.drop(s, slot, got)  # type: ignore[arg-type]

    def commit(self, task: PendingTask, cls: TaskClass, mi: int, victims: list[Victim], score: float) -> None:
        """Place the task on machine `mi` of the working cell, evicting `victims` first."""
        cell, plan = self.cell, self.plan
        free, gfree = cell.free[mi], cell.gfree[mi]
        name = cell.names[mi]
        for v in victims:
            cell.victims[mi].remove(v)
            release(v, free, gfree)
            cell.forget_kind(mi, v.req)
            self.feasible.evicted(v.job)
            plan.preemptions.append(
                Preemption(v.id, task.id, name, f"priority {task.priority} preempts {v.priority} on {name}")
            )
        if victims:
            cell.vmin[mi] = min((v.priority for v in cell.victims[mi]), default=1 << 30)
        if cls.gpu:
            for g, a in self.scorer.gpus(cls, mi):
                gfree[g] -= a
            cell.add_kind(mi, cls.req)
        for d, a in cls.nz:
            free[d] -= a
        cell.touch(mi, self.cfg.cache_threshold if self.cfg.score_cache else 0.0)
        self.pre.update(mi)
        plan.placements.append(Placement(task.id, name, tuple(v.id for v in victims), score))
        self.terms.placed(task, mi)

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
        classes = Classes(pending, self.cfg)
        stats = self.plan.stats
        for task, key in zip(pending, classes.keys, strict=True):
            start = clock() if clock else 0.0
            stats.processed += 1
            if task.alloc is not None:
                self.place_in_alloc(task)
            elif (reasons := classes.fits_nowhere(key)) is not None:
                stats.skipped_by_dead_class += 1
                self._unschedulable(task, reasons)
            else:
                self.schedule(task, key, classes)
            classes.done(key)
            if clock:
                stats.latencies.append(clock() - start)
        return self.plan

    def schedule(self, task: PendingTask, key: int, classes: Classes) -> None:
        """One task through the stages: its class, the class's sample, the pick, the commit."""
        cfg = self.cfg
        cls = classes.classes.get(key) if classes.shared else None
        if cls is None:
            cls = make_class(task, self.cell, classes.key_of[key])
            self.plan.stats.classes += 1
            if classes.shared:
                classes.classes[key] = cls
        mix = self.scorer.mix
        if mix is not None:  # fgd: the mix of shapes seen so far, this one included
            mix.add((cls.gpu_whole, cls.gpu_share, cls.compiled) if cls.gpu else None, cls.req[0])
        s = classes.samples.get(key) if classes.shared else None
        if s is None:
            s = self.sampler.new(cls, classes.job_most.get(key, 1), last_walk=not cfg.preemption)
            if classes.shared:
                classes.samples[key] = s
        got = self.pick(cls, s, task)
        if got is None:
            assert s.tally is not None, "a class fits nowhere only after its last walk"
            reasons = explain(s.tally.settle(), cls, self.cell.dims, cfg.preemption)
            classes.died(key, reasons)
            self._unschedulable(task, reasons)
            return
        slot, mi, victims, score = got
        bumps = self.cell.bumps
        self.commit(task, cls, mi, victims, score)
        if cfg.score_cache and classes.shared and classes.left[key] > 1:
            self.sampler.rescore(cls, s, [slot])  # the class's next task sees this machine's new state
            # The commit moved at most this slot's machine's version: current as before, if it was.
            if s.epoch == bumps and self.cell.bumps - bumps <= 1:
                s.epoch = self.cell.bumps


def plan_pass(
    snapshot: Snapshot,
    config: SchedulerConfig | None = None,
    seed: int = 0,
    recent_disruptions: Mapping[str, int] | None = None,
    clock: Callable[[], float] | None = None,
    limit: int | None = None,
    *,
    cell: CellView | None = None,
    job_on: Callable[[str], Iterable[str]] | None = None,
) -> Plan:
    """Schedule the snapshot's pending queue once: placements, preemptions, unschedulable tasks.

    `recent_disruptions` counts each job's tasks disrupted in the caller's window, for
    `max_disruptions_per_job`. `clock`, if given, only times each task for the stats.
    `limit` stops after that many tasks of the ordered queue (the rest stay pending, unreported).
    `cell` and `job_on`: the cell as `Pass` takes it, where the caller carries it from pass to pass.
    """
    cfg = config or SchedulerConfig()
    queue = ordered(snapshot.pending, cfg.queue_order)
    if limit is not None:
        queue = queue[:limit]
    return Pass(snapshot, cfg, seed, recent_disruptions, cell, job_on).run(queue, clock)
