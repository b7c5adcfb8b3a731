"""fgd's scores for a class without GPUs a run at a time (fgdbatch): the same floats, the same plan."""

import numpy as np

from bench.scheduler.workload import synthetic_cell
from reference.scheduler import PendingTask, SchedulerConfig, Snapshot, plan_pass, scoring
from reference.scheduler.classes import class_key, make_class
from reference.scheduler.engine import Pass
from reference.scheduler.fgdbatch import NO_FREE_GPU, fgd_many
from reference.scheduler.scoring import Scorer
from spec.model import Machine, Resources, TaskId

GiB = 2**30


def test_a_machine_without_free_gpu_scores_the_flat_fifty():
    # F = free GPU - E[usable] = 0 - 0 before and after; 100 / (1 + e^0) = 50
    assert NO_FREE_GPU == 50.0


def _cell():
    """Machines with 8 GPUs and 16 to 64 cores, and machines without GPUs; pending: 4- and 12-core
    GPU tasks, then CPU-only tasks of 10 cores."""
    machines = [Machine(f"g{i}", Resources.of(cpu=16_000 * (1 + i % 4), ram=256 * GiB, gpu=8000)) for i in range(12)]
    machines += [Machine(f"c{i}", Resources.of(cpu=32_000, ram=128 * GiB)) for i in range(12)]
    pending = [PendingTask(TaskId(f"u/gpu{i}", 0), "u", 100, Resources.of(cpu=4000 + 8000 * (i % 2), ram=GiB, gpu=500 + 500 * (i % 3)))
               for i in range(30)]
    pending += [PendingTask(TaskId(f"u/cpu{i}", 0), "u", 100, Resources.of(cpu=10_000, ram=GiB)) for i in range(30)]
    return Snapshot(tuple(machines), pending=tuple(pending))


def test_each_batched_score_is_what_evaluate_gives_that_machine():
    snap = _cell()
    p = Pass(snap, SchedulerConfig(policy="fgd"), 1, None)
    for t in snap.pending[:30]:  # the mix: the GPU tasks' shapes
        cls = make_class(t, p.cell, class_key(t))
        p.scorer.mix.add((cls.gpu_whole, cls.gpu_share, cls.compiled), cls.req[0])
    p.cell.gfree[0][:3] = [0, 200, 500]  # some GPUs of the first machine in use
    p.cell.gfree[1][:] = [0] * 8  # every GPU of the second
    cls = make_class(snap.pending[-1], p.cell, class_key(snap.pending[-1]))
    n = len(p.cell.names)
    mis = np.arange(n, dtype=np.int64)
    free = np.array([p.cell.free[mi] for mi in range(n)], dtype=np.int64)
    got = fgd_many(p.cell, mis, free, lambda mi, cpu, gfree: p.scorer.fgd(cls, mi, [cpu], gfree)[0]).tolist()
    want = [p.scorer.evaluate(cls, mi, False) for mi in range(n)]
    assert got == want
    # A 10-core task leaves 6 of 16 cores on g0: the 12-core shapes no longer fit beside its free GPUs,
    # F grows, the score drops below 50; machines without GPUs (c*) and g1 (no free GPU) score 50 exactly.
    assert got[0] < NO_FREE_GPU and got[1] == NO_FREE_GPU and all(x == NO_FREE_GPU for x in got[12:])


def test_a_pass_places_the_same_with_and_without_the_batch(monkeypatch):
    snap = synthetic_cell(400, 3000, 3)
    cfg = SchedulerConfig(policy="fgd")
    calls = []

    def counted(cell, mis, free, score):
        calls.append(len(mis))
        return fgd_many(cell, mis, free, score)

    monkeypatch.setattr(scoring, "fgd_many", counted)
    batched = plan_pass(snap, cfg, 3)
    assert calls, "the batch was used"
    monkeypatch.setattr(Scorer, "batched", lambda self, cls, preempting: False)  # every machine through evaluate
    single = plan_pass(snap, cfg, 3)
    assert [(x.task, x.machine) for x in batched.placements] == [(x.task, x.machine) for x in single.placements]
    assert [u.task for u in batched.unschedulable] == [u.task for u in single.unschedulable]
