"""Property: with the scalability techniques on, each placement is as good as a fresh scan of
every machine would pick, up to the score cache's stated tolerance.

The cells have at most 40 machines, fewer than the smallest sample relaxed randomization
collects (50), so the sample holds every feasible machine and the only approximation left is
the score cache: a score is reused while every resource of its machine moved by at most
`cache_threshold` of capacity (GPUs: not at all). Capacity only shrinks in these passes (no
preemption), so a reused score is off by at most L * threshold, L being how many points the
policy moves per unit of fractional drift; the chosen machine then trails the best by at
most twice that (plus the integer flooring of the Kubernetes formulas).
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference.scheduler.config import QueueOrder, SchedulerConfig
from reference.scheduler.engine import Pass
from reference.scheduler.snapshot import PendingTask, Snapshot
from spec.model import Machine, Resources, TaskId

GiB = 2**30
# Points a score moves per unit of fractional drift in one resource (see policies.py):
# best/worst fit and dot_prod move with a mean of fractions; borg_hybrid with lmin (1x)
# plus 4x the mean excess s times 1 - lmin (s and lmin each move at most 1x, so the
# product at most 2x, times 4: 8x); GPU-aware policies see exact GPUs (any change rescored).
LIPSCHITZ = {
    "best_fit": 100, "worst_fit": 100, "dot_prod": 100, "borg_hybrid": 900,
    "k8s_least_allocated": 100, "k8s_balanced": 100, "random_fit": 0,
    "gpu_packing": 0, "gpu_clustering": 0, "fgd": 0,
}
FLOORED = {"k8s_least_allocated", "k8s_balanced"}

machines = st.lists(
    st.tuples(st.sampled_from([4000, 8000, 16000]), st.sampled_from([8, 16, 32]), st.sampled_from([0, 1, 2, 4, 8])),
    min_size=1, max_size=40,
)
tasks = st.lists(
    st.tuples(st.sampled_from([100, 250, 500, 1000, 2000]), st.sampled_from([1, 2, 4]),
              st.sampled_from([0, 0, 150, 300, 500, 700, 1000, 2000])),
    min_size=1, max_size=60,
)


class Checked(Pass):
    """A pass that, before each placement, scans every machine afresh and compares."""

    worst_gap = 0.0

    def commit(self, task, cls, mi, victims, score):
        fresh = [self.scorer.evaluate(cls, m) for m in range(len(self.cell.names))]
        best = max(s for s in fresh if isinstance(s, float))
        assert isinstance(fresh[mi], float), "the chosen machine must fit"
        self.worst_gap = max(self.worst_gap, best - fresh[mi])
        super().commit(task, cls, mi, victims, score)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines, tasks, st.sampled_from(sorted(LIPSCHITZ)), st.sampled_from([0.0, 0.02, 0.05]), st.integers(0, 2**16))
def test_techniques_on_pick_within_the_cache_tolerance_of_a_fresh_scan(ms, ts, policy, threshold, seed):
    cell = tuple(
        Machine(f"m{i}", Resources.of(cpu=c, ram=r * GiB, gpu=g * 1000), (("gpu_model", "X"),) if g else ())
        for i, (c, r, g) in enumerate(ms)
    )
    pending = tuple(
        PendingTask(TaskId(f"u/j{i}", 0), "u", 100, Resources.of(cpu=c, ram=r * GiB // 4, gpu=g))
        for i, (c, r, g) in enumerate(ts)
    )
    if policy == "fgd":
        threshold = 0.0  # fgd's score turns on whether a shape's CPU still fits: exact only
    cfg = SchedulerConfig(
        policy=policy, cache_threshold=threshold, mix_threshold=0.0, preemption=False,
        spread_weight=0.0, locality_weight=0.0, queue_order=QueueOrder.GIVEN,
    )
    p = Checked(Snapshot(cell, pending=pending), cfg, seed, None)
    p.run(list(pending), None)
    bound = 2 * LIPSCHITZ[policy] * threshold + (2 if policy in FLOORED else 0) + 1e-9
    assert p.worst_gap <= bound, (policy, threshold, p.worst_gap)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**16), st.integers(60, 120), st.integers(40, 150))
def test_random_fit_places_alike_with_techniques_on_and_off(seed, n, count):
    """random_fit's salt falls along the walk, so the sample's best is the first feasible machine
    the walk reaches, which is what a scan of every machine picks: with nothing departing, a
    small sample (5 feasible machines here) places every task where the full scan does."""
    import random

    rng = random.Random(seed)
    cell = tuple(
        Machine(f"m{i}", Resources.of(cpu=rng.choice([4000, 8000]), ram=rng.choice([8, 16]) * GiB, gpu=rng.choice([0, 2000])))
        for i in range(n)
    )
    pending = tuple(
        PendingTask(TaskId(f"u/j{i}", 0), "u", 100,
                    Resources.of(cpu=rng.choice([500, 1000, 2000]), ram=rng.choice([1, 2]) * GiB, gpu=rng.choice([0, 0, 500, 1000])))
        for i in range(count)
    )
    on = SchedulerConfig(policy="random_fit", preemption=False, queue_order=QueueOrder.GIVEN, relaxed_min_feasible=5, relaxed_fraction=0.0)
    off = on.without_techniques()
    snap = Snapshot(cell, pending=pending)
    placed_on = Pass(snap, on, seed, None).run(list(pending), None).placements
    placed_off = Pass(snap, off, seed, None).run(list(pending), None).placements
    assert [(p.task, p.machine) for p in placed_on] == [(p.task, p.machine) for p in placed_off]
