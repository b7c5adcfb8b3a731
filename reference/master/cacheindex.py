"""How the watch cache's indexes follow each changed task or job (pure: from the index as it stands and one change to the edits that change makes).

The indexes serve `Cell.work` (the tasks a scheduling pass could act on) and `Cell.running`,
and move the capacity epoch: a job's task ids, the latest incarnation of each task index, the
work set, the running set. The cache applies the edits in place, so an event costs what it
changes, never the cell's size; a reload (after a compaction) is the empty index and a put
of every key.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import NamedTuple

from reference.master.cell import is_pass_work
from spec.model import Job, Task, TaskId, TaskState

IndexKey = tuple[str, int]  # (job, task index)


@dataclass(frozen=True)
class Index:
    """The watch cache's maps and indexes, read-only here (the cache's own dicts, not copies)."""

    tasks: Mapping[TaskId, Task]
    jobs: Mapping[str, Job]
    job_tasks: Mapping[str, Set[TaskId]]  # job -> its task ids
    latest: Mapping[IndexKey, int]  # (job, index) -> its latest incarnation
    work: Set[TaskId]


class Edits(NamedTuple):
    """What one change does to the indexes; each part applies on its own, in any order.

    A tuple, not a dataclass: one is made for every key of a reload.
    """

    job_task: tuple[TaskId, bool] | None = None  # a task joins (True) or leaves its job's ids
    latest: tuple[IndexKey, int | None] | None = None  # an index's latest incarnation; None: none left
    work: tuple[tuple[TaskId, bool], ...] = ()  # tasks joining (True) or leaving the work set
    running: tuple[TaskId, bool] | None = None  # the task joins (True) or leaves the running set
    capacity: bool = False  # what tasks hold on machines changed: the capacity epoch moves


NOTHING = Edits()


def held(old: Task | None, new: Task | None) -> tuple[tuple[TaskId, bool] | None, bool]:
    """The running-set edit of a task going from `old` to `new` (None: absent), and whether
    what it holds on a machine changed (a borglet report that changes only a task's runtime
    facts does not)."""
    was = old is not None and old.state is TaskState.RUNNING
    now = new is not None and new.state is TaskState.RUNNING
    running = (new.id, True) if now and not was else (old.id, False) if was and not now else None  # type: ignore[union-attr]
    capacity = (was or now) and (
        not (was and now)
        or (old.machine, old.request, old.reserved) != (new.machine, new.request, new.reserved)  # type: ignore[union-attr]
    )
    return running, capacity


def _judged(index: Index, tid: TaskId, task: Task | None, job: Job | None, latest: bool) -> tuple[TaskId, bool] | None:
    """The work-set edit for `tid` (as `task`, of `job`, the latest of its index or not): None
    when its membership does not change."""
    work = task is not None and is_pass_work(task, job, latest)
    return None if work == (tid in index.work) else (tid, work)


def task_put(index: Index, task: Task) -> Edits:
    """A task written: it joins its job's ids; a newer incarnation becomes its index's latest
    (the former latest is history now, out of the work set); it is judged for the work set."""
    tid = task.id
    key = (tid.job, tid.index)
    job = index.jobs.get(tid.job)
    latest = index.latest.get(key, -1)
    newer = tid.incarnation > latest
    work: tuple[tuple[TaskId, bool], ...] = ()
    if newer and latest >= 0:
        former = TaskId(tid.job, tid.index, latest)
        if (judged := _judged(index, former, index.tasks.get(former), job, False)) is not None:
            work = (judged,)
    if (judged := _judged(index, tid, task, job, newer or tid.incarnation == latest)) is not None:
        work += (judged,)
    running, capacity = held(index.tasks.get(tid), task)
    return Edits((tid, True), (key, tid.incarnation) if newer else None, work, running, capacity)


def task_deleted(index: Index, tid: TaskId) -> Edits:
    """A task's key deleted: it leaves every index; if it was its index's latest, the newest
    incarnation left (if any) takes its place and is judged again."""
    old = index.tasks.get(tid)
    if old is None:
        return NOTHING
    key = (tid.job, tid.index)
    work = [(tid, False)] if tid in index.work else []
    latest: tuple[IndexKey, int | None] | None = None
    if index.latest.get(key) == tid.incarnation:
        left = [o.incarnation for o in index.job_tasks.get(tid.job, ()) if o.index == tid.index and o != tid]
        latest = (key, max(left) if left else None)
        if left:
            newest = TaskId(tid.job, tid.index, max(left))
            judged = _judged(index, newest, index.tasks.get(newest), index.jobs.get(tid.job), True)
            if judged is not None:
                work.append(judged)
    running, capacity = held(old, None)
    return Edits((tid, False), latest, tuple(work), running, capacity)


def job_put(index: Index, job: Job) -> Edits:
    """A job written: each of its tasks is judged again against it; a new request,
    constraints or priority moves the capacity epoch (its pending tasks may fit now)."""
    old = index.jobs.get(job.key)
    capacity = old is not None and (old.request, old.constraints, old.priority) != (
        job.request, job.constraints, job.priority,
    )  # fmt: skip
    return Edits(work=_job_judged(index, job.key, job), capacity=capacity)


def job_deleted(index: Index, key: str) -> Edits:
    """A job's key deleted: its tasks (their keys go on their own) are judged without it."""
    return Edits(work=_job_judged(index, key, None))


def _job_judged(index: Index, key: str, job: Job | None) -> tuple[tuple[TaskId, bool], ...]:
    edits = []
    for tid in index.job_tasks.get(key, ()):
        judged = _judged(index, tid, index.tasks.get(tid), job, index.latest.get((tid.job, tid.index)) == tid.incarnation)
        if judged is not None:
            edits.append(judged)
    return tuple(edits)
