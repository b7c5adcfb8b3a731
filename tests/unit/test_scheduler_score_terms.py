"""What a placement's score adds to its policy's: package locality (the snapshot records
which packages each machine holds) and failure-domain spreading, the arithmetic beside each row."""

import pytest

from reference.scheduler import PendingTask, SchedulerConfig, Snapshot, plan_pass
from reference.scheduler.snapshot import RunningTask
from spec.model import Machine, Resources, TaskId

GiB = 2**30


def machine(name, cpu=4000, gpu=0):
    res = {"cpu": cpu, "ram": 8 * GiB} | ({"gpu": gpu} if gpu else {})
    return Machine(name, Resources.of(res))


def running(job, prio, cpu, where, i=0, gpu=0):
    res = {"cpu": cpu} | ({"gpu": gpu} if gpu else {})
    return RunningTask(TaskId(job, i), where, prio, Resources.of(res))


def pending(job, prio, cpu, i=0, package=""):
    return PendingTask(TaskId(job, i), job.split("/")[0], prio, Resources.of(cpu=cpu), package=package)


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
    cfg = SchedulerConfig(policy="best_fit", spread_weight=spread, locality_weight=0.0)
    (p,) = plan_pass(snap, cfg).placements
    assert p.machine == where


def test_the_snapshot_records_which_packages_each_machine_holds():
    # A running task of a job with a package puts that package on its machine (locality).
    from reference.scheduler.adapter import snapshot_from_state
    from spec.fmap import FMap
    from spec.model import CellState, Job, Task, TaskState

    job = Job("u", "web", 100, 1, Resources.of(cpu=100), package="web-v1")
    task = Task(TaskId("u/web", 0), TaskState.RUNNING, "m0", 100, Resources.of(cpu=100))
    state = CellState(machines=FMap({"m0": machine("m0")}), jobs=FMap({job.key: job}), tasks=FMap({task.id: task}))
    assert snapshot_from_state(state).packages == {"m0": frozenset({"web-v1"})}
