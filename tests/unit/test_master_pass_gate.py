"""When the leader's scheduling pass has work: pending, restartable or stale tasks only."""

from reference.master.leader import pass_has_work
from spec.fmap import FMap
from spec.model import (
    CellState,
    DeathCause,
    Job,
    Resources,
    RestartPolicy,
    Task,
    TaskId,
    TaskState,
)

REQ = Resources.of({"cpu": 100, "ram": 100})


def cell(
    tasks: list[Task], policy: RestartPolicy = RestartPolicy.ON_FAILURE, count: int = 2
) -> CellState:
    job = Job("u", "j", 100, count, REQ, restart_policy=policy)
    return CellState(jobs=FMap({job.key: job}), tasks=FMap({t.id: t for t in tasks}))


def task(
    index: int,
    state: TaskState,
    inc: int = 0,
    cause: DeathCause | None = None,
    req: Resources = REQ,
) -> Task:
    return Task(
        TaskId("u/j", index, inc),
        state,
        machine="m" if state is TaskState.RUNNING else None,
        request=req,
        cause=cause,
    )


def test_empty_and_all_running_is_quiet() -> None:
    assert not pass_has_work(CellState())
    assert not pass_has_work(cell([task(0, TaskState.RUNNING), task(1, TaskState.RUNNING)]))


def test_pending_is_work() -> None:
    assert pass_has_work(cell([task(0, TaskState.RUNNING), task(1, TaskState.PENDING)]))


def test_killed_tasks_are_no_work() -> None:
    assert not pass_has_work(
        cell([task(0, TaskState.DEAD, cause=DeathCause.KILLED), task(1, TaskState.RUNNING)])
    )


def test_dead_task_of_a_killed_job_is_no_work() -> None:
    orphan = Task(TaskId("u/gone", 0), TaskState.DEAD, cause=DeathCause.FAILED)
    assert not pass_has_work(CellState(tasks=FMap({orphan.id: orphan})))


def test_restartable_dead_task_is_work() -> None:
    assert pass_has_work(cell([task(0, TaskState.DEAD, cause=DeathCause.FAILED)], count=1))
    assert not pass_has_work(
        cell([task(0, TaskState.DEAD, cause=DeathCause.FAILED)], RestartPolicy.NEVER, count=1)
    )
    assert not pass_has_work(cell([task(0, TaskState.DEAD, cause=DeathCause.FINISHED)], count=1))
    assert pass_has_work(
        cell([task(0, TaskState.DEAD, cause=DeathCause.FINISHED)], RestartPolicy.ALWAYS, count=1)
    )


def test_only_the_latest_incarnation_counts() -> None:
    old = task(0, TaskState.DEAD, inc=0, cause=DeathCause.FAILED)
    assert not pass_has_work(cell([old, task(0, TaskState.RUNNING, inc=1)], count=1))


def test_dead_index_beyond_task_count_is_no_work() -> None:
    assert not pass_has_work(
        cell(
            [task(0, TaskState.RUNNING), task(1, TaskState.DEAD, cause=DeathCause.FAILED)], count=1
        )
    )


def test_stale_running_task_is_work() -> None:
    stale = task(0, TaskState.RUNNING, req=Resources.of({"cpu": 50, "ram": 100}))
    assert pass_has_work(cell([stale], count=1))
