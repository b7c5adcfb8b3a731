"""The scheduler places non-prod work into reclaimed resources (reservations below requests), never prod."""

from __future__ import annotations

from reference.scheduler import PendingTask, Snapshot, plan_for, plan_pass
from reference.scheduler.adapter import apply_plan
from reference.scheduler.snapshot import RunningTask
from spec.actions import reserve, schedule, submit
from spec.fmap import FMap
from spec.model import CellState, Job, Machine, Resources, TaskId, TaskState

GiB = 2**30
M = Machine("m0", Resources.of(cpu=1000, ram=4 * GiB))


def running(job: str, prio: int, cpu: int, reserved: int | None) -> RunningTask:
    r = Resources.of(cpu=reserved, ram=GiB) if reserved is not None else None
    return RunningTask(TaskId(job, 0), "m0", prio, Resources.of(cpu=cpu, ram=GiB), False, r)


def pending(job: str, prio: int, cpu: int) -> PendingTask:
    return PendingTask(TaskId(job, 0), "u", prio, Resources.of(cpu=cpu, ram=GiB))


def placed(snapshot: Snapshot) -> set[str]:
    return {p.task.job for p in plan_pass(snapshot).placements}


def test_batch_fits_into_what_a_prod_task_does_not_reserve() -> None:
    prod = running("u/web", 200, cpu=800, reserved=300)
    assert placed(Snapshot((M,), (prod,), (pending("u/batch", 100, 600),))) == {"u/batch"}
    # Without the reservation the machine is full for it.
    full = running("u/web", 200, cpu=800, reserved=None)
    assert placed(Snapshot((M,), (full,), (pending("u/batch", 100, 600),))) == set()


def test_prod_never_uses_reclaimed_resources() -> None:
    prod = running("u/web", 200, cpu=800, reserved=300)
    assert placed(Snapshot((M,), (prod,), (pending("u/api", 200, 600),))) == set()
    assert placed(Snapshot((M,), (prod,), (pending("u/api", 200, 200),))) == {"u/api"}


def test_non_prod_counts_at_its_reservation_for_everyone() -> None:
    batch = running("u/batch", 100, cpu=800, reserved=200)
    # Both prod and non-prod see 800 free: a non-prod task counts at its reservation.
    assert placed(Snapshot((M,), (batch,), (pending("u/api", 200, 700),))) == {"u/api"}
    assert placed(Snapshot((M,), (batch,), (pending("u/other", 100, 700),))) == {"u/other"}


def test_the_plan_is_accepted_by_the_spec() -> None:
    web = Job("u", "web", 200, 1, Resources.of(cpu=800, ram=GiB))
    batch = Job("u", "batch", 100, 1, Resources.of(cpu=600, ram=GiB))
    s = CellState(machines=FMap({"m0": M}))
    s = submit(s, web)
    assert s is not None
    s = schedule(s, TaskId("u/web", 0), "m0")
    assert s is not None
    s = reserve(s, TaskId("u/web", 0), Resources.of(cpu=300, ram=GiB))
    assert s is not None
    s = submit(s, batch)
    assert s is not None
    plan = plan_for(s)
    after = apply_plan(s, plan)  # raises if the spec refuses a step
    assert after.tasks[TaskId("u/batch", 0)].state is TaskState.RUNNING
