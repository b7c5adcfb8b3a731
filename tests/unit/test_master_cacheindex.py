"""Table tests of the watch cache's index upkeep (master/cacheindex.py): the edits each changed
task or job makes to a job's ids, the latest incarnation of each index, the work and running
sets, and the capacity epoch. Each row is a small cell a reader can check by hand."""

from __future__ import annotations

import pytest

from reference.master.cacheindex import (
    NOTHING,
    Edits,
    Index,
    held,
    job_deleted,
    job_put,
    task_deleted,
    task_put,
)
from spec.model import DeathCause, Job, Resources, RestartPolicy, Task, TaskId, TaskState

SMALL, BIG = Resources.of(cpu=100, ram=100), Resources.of(cpu=200, ram=100)
JOB = Job("u", "j", 100, 2, SMALL, restart_policy=RestartPolicy.ON_FAILURE)  # indexes 0 and 1
A0, A1, B0 = TaskId("u/j", 0, 0), TaskId("u/j", 0, 1), TaskId("u/j", 1, 0)


def pending(tid: TaskId) -> Task:
    return Task(tid, TaskState.PENDING, priority=100, request=SMALL)


def running(tid: TaskId, request: Resources = SMALL, machine: str = "m0") -> Task:
    return Task(tid, TaskState.RUNNING, machine=machine, priority=100, request=request)


def dead(tid: TaskId, cause: DeathCause) -> Task:
    return Task(tid, TaskState.DEAD, priority=100, request=SMALL, cause=cause)


def index(*tasks: Task, jobs: tuple[Job, ...] = (JOB,), work: set[TaskId] | None = None) -> Index:
    """An index as the cache keeps it: latest incarnations and job ids from the tasks; the work
    set as given (default: empty)."""
    latest: dict[tuple[str, int], int] = {}
    job_tasks: dict[str, set[TaskId]] = {}
    for t in tasks:
        latest[(t.job, t.index)] = max(latest.get((t.job, t.index), -1), t.id.incarnation)
        job_tasks.setdefault(t.job, set()).add(t.id)
    return Index({t.id: t for t in tasks}, {j.key: j for j in jobs}, job_tasks, latest, work or set())


@pytest.mark.parametrize(
    ("old", "new", "result"),
    [
        (None, pending(A0), (None, False)),  # nothing held before or after
        (pending(A0), running(A0), ((A0, True), True)),  # placed: runs, holds a machine now
        (running(A0), running(A0), (None, False)),  # a report: same machine, request, reservation
        (running(A0), running(A0, BIG), (None, True)),  # a roll: holds more
        (running(A0), running(A0, machine="m1"), (None, True)),  # moved
        (running(A0), dead(A0, DeathCause.LOST), ((A0, False), True)),  # gone: frees its machine
        (running(A0), None, ((A0, False), True)),  # its key deleted
    ],
)
def test_held(old, new, result):
    assert held(old, new) == result


@pytest.mark.parametrize(
    ("before", "task", "edits"),
    [
        # A new pending task: joins its job's ids, is its index's first incarnation (0), is work.
        (index(), pending(A0), Edits((A0, True), (("u/j", 0), 0), ((A0, True),))),
        # It starts running with its job's request: no work any more, runs, holds a machine.
        (
            index(pending(A0), work={A0}),
            running(A0),
            Edits((A0, True), None, ((A0, False),), (A0, True), True),
        ),
        # Running, its job's request now BIG: a roll makes it work again; a report changes nothing else.
        (index(running(A0), jobs=(Job("u", "j", 100, 2, BIG),)), running(A0), Edits((A0, True), None, ((A0, True),))),
        # Lost, incarnation 0 dead: its replacement (incarnation 1) is written pending. 1 > 0 is
        # the latest now; 0 leaves the work set (history), 1 joins it.
        (
            index(dead(A0, DeathCause.LOST), work={A0}),
            pending(A1),
            Edits((A1, True), (("u/j", 0), 1), ((A0, False), (A1, True))),
        ),
        # Killed by its user: dead, and no work (on_failure does not restart a kill).
        (index(running(A0)), dead(A0, DeathCause.KILLED), Edits((A0, True), None, (), (A0, False), True)),
        # Its job gone: a dead task of no job is no work.
        (index(jobs=()), dead(B0, DeathCause.LOST), Edits((B0, True), (("u/j", 1), 0))),
    ],
)
def test_task_put(before, task, edits):
    assert task_put(before, task) == edits


@pytest.mark.parametrize(
    ("before", "tid", "edits"),
    [
        # Unknown key: nothing.
        (index(), A0, NOTHING),
        # The only incarnation of index 0, pending and work: leaves everything; no latest left.
        (index(pending(A0), work={A0}), A0, Edits((A0, False), (("u/j", 0), None), ((A0, False),))),
        # The latest (1) of index 0 goes: 0, dead by LOST and restartable, is the latest again: work.
        (
            index(dead(A0, DeathCause.LOST), running(A1)),
            A1,
            Edits((A1, False), (("u/j", 0), 0), ((A0, True),), (A1, False), True),
        ),
        # An older incarnation goes: the latest stays 1.
        (index(dead(A0, DeathCause.LOST), running(A1)), A0, Edits((A0, False))),
    ],
)
def test_task_deleted(before, tid, edits):
    assert task_deleted(before, tid) == edits


def test_job_put_and_deleted():
    # Resized from 2 tasks to 1: index 1's dead task (lost, restartable) is no work any more
    # (1 < task_count 1 is false); index 0's is still work. Same request: no capacity move.
    before = index(dead(A0, DeathCause.LOST), dead(B0, DeathCause.LOST), work={A0, B0})
    assert job_put(before, Job("u", "j", 100, 1, SMALL)) == Edits(work=((B0, False),))
    # A new request: its pending tasks may fit elsewhere now, the capacity epoch moves.
    assert job_put(index(pending(A0), work={A0}), Job("u", "j", 100, 2, BIG)) == Edits(capacity=True)
    # A brand-new job moves nothing (its tasks come after it).
    assert job_put(index(jobs=()), JOB) == NOTHING
    # Deleted: its dead tasks are no work; a pending one still is (it waits for its own delete).
    assert job_deleted(index(pending(A0), dead(B0, DeathCause.LOST), work={A0, B0}), "u/j") == Edits(
        work=((B0, False),)
    )
