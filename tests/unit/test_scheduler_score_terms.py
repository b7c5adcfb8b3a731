"""What a placement's score adds to its policy's: package locality (the snapshot records
which packages each machine holds), failure-domain spreading and the cost of preempting,
the arithmetic beside each row: the pure terms first, then their effect on a pass."""

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from reference.scheduler import SchedulerConfig, Snapshot, plan_pass
from reference.scheduler.terms import locality_bonus, preemption_cost, skew_penalty, spread_penalty
from spec.model import Resources, TaskId
from tests.unit.scheduler_cells import machine, pending, running


@pytest.mark.parametrize(
    ("weight", "placed", "here", "want"),
    [
        (10.0, 0, 0, 0.0),  # the job's first task: 10 / (0 + 1) * 0 = 0
        (10.0, 1, 1, 5.0),  # its one task is in this domain: 10 / (1 + 1) * 1 = 5
        (10.0, 3, 2, 5.0),  # 2 of its 3 here: 10 / (3 + 1) * 2 = 5
        (10.0, 3, 0, 0.0),  # none of its 3 here: 10 / 4 * 0 = 0
        (40.0, 4, 4, 32.0),  # all 4 here: 40 / (4 + 1) * 4 = 32
    ],
)
def test_spread_penalty(weight, placed, here, want):
    assert spread_penalty(weight, placed, here) == pytest.approx(want)


def test_spread_penalty_of_a_whole_sample():
    # 3 placed, weight 10: 10 / 4 = 2.5 points per task of the job already in the domain.
    assert spread_penalty(10.0, 3, np.array([0, 1, 3])).tolist() == [0.0, 2.5, 7.5]


@pytest.mark.parametrize(
    ("weight", "has", "want"),
    [
        (5.0, True, 5.0),  # the machine holds the package: 5 * 1
        (5.0, False, 0.0),  # it does not: 5 * 0
        (0.0, True, 0.0),  # no locality weight: 0 * 1
    ],
)
def test_locality_bonus(weight, has, want):
    assert locality_bonus(weight, has) == want


def test_locality_bonus_of_a_whole_sample():
    assert locality_bonus(5.0, np.array([True, False])).tolist() == [5.0, 0.0]


@pytest.mark.parametrize(
    ("priorities", "per_victim", "per_priority", "want"),
    [
        ((), 100.0, 0.25, 0.0),  # fits as is: no cost
        ((0,), 100.0, 0.25, 100.25),  # 100 + 0.25 * (0 + 1)
        ((150,), 100.0, 0.25, 137.75),  # 100 + 0.25 * (150 + 1) = 100 + 37.75
        ((0, 100), 100.0, 0.25, 225.5),  # (100 + 0.25 * 1) + (100 + 0.25 * 101) = 100.25 + 125.25
        ((9, 19), 0.0, 1.0, 30.0),  # no fixed cost: (9 + 1) + (19 + 1)
    ],
)
def test_preemption_cost(priorities, per_victim, per_priority, want):
    assert preemption_cost(priorities, per_victim, per_priority) == pytest.approx(want)


@pytest.mark.parametrize(
    ("package", "weight", "where"),
    [
        # worst_fit: 100 * mean leftover over (cpu, ram); the task asks cpu 1000, no ram.
        #   a (empty):          cpu (4000-1000)/4000 = 0.75, ram 1.0 -> 87.5
        #   b (1000 cpu used):  cpu (3000-1000)/4000 = 0.50, ram 1.0 -> 75.0
        ("pkg", 50.0, "b"),  # b holds the package: 75 + 50 = 125 > 87.5
        ("pkg", 0.0, "a"),  # no locality weight: 87.5 > 75
        ("", 50.0, "a"),  # the task names no package: no bonus anywhere
        ("other", 50.0, "a"),  # no machine holds this package
    ],
)
def test_package_locality(package, weight, where):
    snap = Snapshot(
        (machine("a"), machine("b")),
        (running("be/other", 0, 1000, "b"),),
        (pending("web/x", 100, 1000, package=package),),
        packages={"b": frozenset({"pkg"})},
    )
    cfg = SchedulerConfig(policy="worst_fit", locality_weight=weight, spread_weight=0.0)
    (p,) = plan_pass(snap, cfg).placements
    assert p.machine == where


@pytest.mark.parametrize(
    ("spread", "where"),
    [
        # best_fit: 100 * (1 - mean leftover over (cpu, ram)); web/x already runs 1000 on a.
        #   a: cpu (3000-1000)/4000 = 0.50, ram 1.0 -> 100 * (1 - 0.75)  = 25.0
        #   b: cpu (4000-1000)/4000 = 0.75, ram 1.0 -> 100 * (1 - 0.875) = 12.5
        # spreading subtracts weight / (placed + 1) * (job's tasks in the domain) = weight / 2 on a.
        (0.0, "a"),  # no spreading: 25 > 12.5
        (10.0, "a"),  # 25 - 5 = 20 > 12.5
        (40.0, "b"),  # 25 - 20 = 5 < 12.5
    ],
)
def test_failure_domain_spreading(spread, where):
    snap = Snapshot(
        (machine("a"), machine("b")),
        (running("web/x", 100, 1000, "a", 0),),
        (pending("web/x", 100, 1000, 1),),
    )
    cfg = SchedulerConfig(policy="best_fit", spread_weight=spread, skew_weight=0.0, locality_weight=0.0)
    (p,) = plan_pass(snap, cfg).placements
    assert p.machine == where


@pytest.mark.parametrize(
    ("skew", "where"),
    [
        # As above, a: 25.0 and b: 12.5 (best_fit), domain spreading off. The skew term
        # subtracts weight * (the job's tasks on the machine - the fewest on any sampled
        # machine) = weight * (1 - 0) on a, nothing on b.
        (0.0, "a"),  # 25 > 12.5
        (10.0, "a"),  # 25 - 10 = 15 > 12.5
        (15.0, "b"),  # 25 - 15 = 10 < 12.5
    ],
)
def test_machine_skew_spreading(skew, where):
    snap = Snapshot(
        (machine("a"), machine("b")),
        (running("web/x", 100, 1000, "a", 0),),
        (pending("web/x", 100, 1000, 1),),
    )
    cfg = SchedulerConfig(policy="best_fit", spread_weight=0.0, skew_weight=skew, locality_weight=0.0)
    (p,) = plan_pass(snap, cfg).placements
    assert p.machine == where


def test_skew_penalty_is_per_task_above_the_least_loaded_machine():
    assert list(skew_penalty(10.0, np.array([3, 1, 2, 1]))) == [20.0, 0.0, 10.0, 0.0]
    assert skew_penalty(10.0, np.array([], dtype=np.int64)).size == 0


def test_a_large_job_of_tiny_tasks_spreads_over_its_sample_instead_of_piling_onto_two_machines():
    # 2,000 tasks of 1m CPU on 20 machines of 64 cores in two racks: best fit alone would put
    # 1,000 on one machine of each rack (the fullest machine always scores highest).
    machines = tuple(replace(machine(f"m{i:02d}", cpu=64000), failure_domain=f"rack{i % 2}") for i in range(20))
    snap = Snapshot(machines, (), tuple(pending("big/x", 100, 1, i) for i in range(2000)))
    counts = Counter(p.machine for p in plan_pass(snap, SchedulerConfig(policy="best_fit")).placements)
    assert sum(counts.values()) == 2000
    assert len(counts) == 20 and max(counts.values()) - min(counts.values()) <= 1
    piled = Counter(p.machine for p in plan_pass(snap, SchedulerConfig(policy="best_fit", skew_weight=0.0)).placements)
    assert len(piled) == 2


def test_a_job_of_more_tasks_than_the_sample_holds_spreads_over_the_whole_cell():
    # Relaxed randomization samples max(50, 5%) feasible machines: 50 of these 100. A class of
    # 1,000 tasks samples one machine per task (up to the cell), so the job covers all 100
    # machines, 10 each, instead of 20 each on the first 50 its walk reaches.
    machines = tuple(machine(f"m{i:03d}", cpu=64000) for i in range(100))
    snap = Snapshot(machines, (), tuple(pending("big/x", 100, 1, i) for i in range(1000)))
    counts = Counter(p.machine for p in plan_pass(snap, SchedulerConfig(policy="best_fit")).placements)
    assert sum(counts.values()) == 1000
    assert len(counts) == 100 and max(counts.values()) == min(counts.values()) == 10
    # A class smaller than the sample keeps relaxed randomization's bound on the walk.
    small = Snapshot(machines, (), tuple(pending("small/x", 100, 1, i) for i in range(40)))
    assert len({p.machine for p in plan_pass(small, SchedulerConfig(policy="best_fit")).placements}) == 40


def test_the_snapshot_records_which_packages_each_machine_holds():
    # A running task of a job with a package puts that package on its machine (locality).
    from reference.scheduler.adapter import snapshot_from_state
    from spec.fmap import FMap
    from spec.model import CellState, Job, Task, TaskState

    job = Job("u", "web", 100, 1, Resources.of(cpu=100), package="web-v1")
    task = Task(TaskId("u/web", 0), TaskState.RUNNING, "m0", 100, Resources.of(cpu=100))
    state = CellState(machines=FMap({"m0": machine("m0")}), jobs=FMap({job.key: job}), tasks=FMap({task.id: task}))
    assert snapshot_from_state(state).packages == {"m0": frozenset({"web-v1"})}
