"""fgd's remembered scores (ShapeMix.place) and its drift bound: the same floats, the same versions, the same plan."""

import random

import pytest

from bench.scheduler.workload import synthetic_cell
from reference.scheduler import SchedulerConfig, plan_pass
from reference.scheduler.feasibility import constraint_holds
from reference.scheduler.fragmentation import NO_FREE_GPU, ShapeMix, fgd_place

# Two GPU models and an arch: groups with and without constraints, as the synthetic cell has.
CONSTRAINTS = [(), (("gpu_model", True, frozenset({"A100"})),), (("gpu_model", True, frozenset({"V100"})),),
               (("arch", True, frozenset({"x86"})), ("gpu_model", True, frozenset({"A100"})))]
SHAPES = [(0, 250), (0, 500), (1, 0), (2, 0), (0, 0)]  # (whole, share); (0, 0) asks no GPU
ATTRS = [{"gpu_model": g, "arch": a} for g in ("A100", "V100") for a in ("x86", "arm")] + [{"arch": "x86"}]


def reference_place(mix, attrs, cpu_free, cpu_ask, gfree, whole, share):
    """What the pass computed before the mix remembered anything: the allowed groups, then fgd_place."""
    allowed = None
    if mix.constrained:
        allowed = [all(constraint_holds(c, attrs) for c in g[2]) for g, _ in mix.frozen]
    return fgd_place(cpu_free, cpu_ask, gfree, whole, share, mix.frozen, mix.frozen_total, allowed)


def fits(cpu_free, cpu, gfree, whole, share):
    idle = [g for g, f in enumerate(gfree) if f == 1000]
    if cpu_free < cpu or len(idle) < whole:
        return False
    return not share or any(f >= share for g, f in enumerate(gfree) if g not in idle[:whole])


def test_a_machine_without_free_gpu_scores_the_flat_fifty_for_a_task_without_gpus():
    mix = ShapeMix()
    mix.add((0, 500, ()), 2000)
    assert mix.place(0, {}, 8000, 1000, [0, 0], 0, 0) == (NO_FREE_GPU, []) == fgd_place(8000, 1000, [0, 0], 0, 0, mix.frozen, 1)
    assert mix.place(1, {}, 8000, 1000, [], 0, 0) == (NO_FREE_GPU, [])


@pytest.mark.parametrize("seed", range(4))
def test_every_remembered_score_is_fgd_place_of_the_frozen_mix(seed):
    rng = random.Random(seed)
    mix = ShapeMix(threshold=rng.choice([0.0, 0.05, 0.3]))
    machines = [(rng.choice(ATTRS), rng.choice([8, 4, 2])) for _ in range(12)]
    for step in range(600):
        whole, share = rng.choice(SHAPES)
        cpu = rng.choice([1000, 2000, 4000, 8000])
        group = (whole, share, rng.choice(CONSTRAINTS)) if whole or share else None
        mix.add(group, cpu)
        mi = rng.randrange(len(machines))
        attrs, gpus = machines[mi]
        gfree = [rng.choice([0, 0, 250, 500, 750, 1000, 1000]) for _ in range(gpus)]
        cpu_free = rng.choice([0, 2000, 4000, 16000, 32000])
        if not fits(cpu_free, cpu, gfree, whole, share):
            continue  # the pass asks only where the task fits
        want = reference_place(mix, attrs, cpu_free, cpu, gfree, whole, share)
        got = mix.place(mi, attrs, cpu_free, cpu, gfree, whole, share)
        assert got == want, step
        again = mix.place(mi, attrs, cpu_free, cpu, list(gfree), whole, share)
        assert again == want and again[1] is not got[1]  # remembered, and the caller's list is its own


class EveryTime(ShapeMix):
    """The drift computed at every task, as before the bound."""

    def _stays(self, drift):
        return drift <= self.threshold


@pytest.mark.parametrize("threshold", [0.0, 0.01, 0.05, 0.2])
def test_the_drift_bound_moves_the_version_at_the_same_tasks(threshold):
    rng = random.Random(int(threshold * 1000))
    bounded, plain = ShapeMix(threshold), EveryTime(threshold)
    computed = []
    drift = ShapeMix._drift
    bounded._drift = lambda: computed.append(1) or drift(bounded)
    # a mix whose proportions shift over time, so that the drift climbs past the threshold again and again
    for step in range(20000):
        phase = (step // 2500) % 3
        whole, share = SHAPES[(rng.randrange(3) + phase) % len(SHAPES)]
        group = (whole, share, ()) if whole or share else None
        cpu = rng.choice([1000, 2000, 4000 * (1 + phase)])
        assert bounded.add(group, cpu) == plain.add(group, cpu), step
    assert bounded.version == plain.version and bounded.frozen_total == plain.frozen_total
    assert bounded.version > 3
    if threshold >= 0.05:  # the bound spares most of the sums
        assert len(computed) < 20000 / 4


def test_a_pass_places_the_same_with_the_mix_remembering_and_without(monkeypatch):
    snap = synthetic_cell(600, 7000, 5)  # constrained GPU groups, the cell filled until tasks preempt or wait
    cfg = SchedulerConfig(policy="fgd")
    remembered = plan_pass(snap, cfg, 5)
    calls = []

    def plain(self, mi, attrs, cpu_free, cpu_ask, gfree, whole, share):
        calls.append(mi)
        return reference_place(self, attrs, cpu_free, cpu_ask, gfree, whole, share)

    monkeypatch.setattr(ShapeMix, "place", plain)
    monkeypatch.setattr(ShapeMix, "_stays", EveryTime._stays)
    again = plan_pass(snap, cfg, 5)
    assert calls, "the pass scored through the mix"
    assert remembered.placements == again.placements  # machines, victims and scores, float for float
    assert [u.task for u in remembered.unschedulable] == [u.task for u in again.unschedulable]
    assert remembered.preemptions == again.preemptions


def test_machines_in_the_same_state_score_by_the_groups_their_attributes_admit():
    mix = ShapeMix()
    mix.add((0, 500, CONSTRAINTS[1]), 2000)  # shares of A100s only
    mix.add(None, 1000)
    a100, v100 = {"gpu_model": "A100"}, {"gpu_model": "V100"}
    on_a100 = mix.place(0, a100, 4000, 3000, [1000, 500], 0, 0)
    on_v100 = mix.place(1, v100, 4000, 3000, [1000, 500], 0, 0)
    # On the A100 machine the 3000 milli-CPU task leaves too little CPU for the share shape: F grows.
    # On the V100 one no group may use the GPUs before or after: F stays, 50.
    assert on_a100 == reference_place(mix, a100, 4000, 3000, [1000, 500], 0, 0) and on_a100[0] < NO_FREE_GPU
    assert on_v100 == reference_place(mix, v100, 4000, 3000, [1000, 500], 0, 0) == (NO_FREE_GPU, [])
