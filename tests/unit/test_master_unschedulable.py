"""Unschedulable tasks are set aside until capacity may have changed: the watch cache's
capacity epoch moves exactly when a machine, a running task's hold or a job's needs change,
and a leader pass plans only tasks it has not already found unschedulable."""

from __future__ import annotations

from reference.master import codec
from reference.master.cache import WatchCache
from reference.master.cell import Cell, JobInfo, MachineInfo, TaskInfo
from reference.scheduler.setaside import SetAside
from reference.store import ops
from spec.model import (
    Constraint,
    ConstraintOp,
    DeathCause,
    Job,
    Machine,
    Resources,
    Task,
    TaskId,
    TaskState,
)
from tests.unit.test_master_watch_cache import SPEC, FakeClient

KEYS = codec.Keys("c1")
REQ = Resources.of(cpu=100, ram=100)


class Feed:
    def __init__(self) -> None:
        self.client = FakeClient()
        self.cache = WatchCache(self.client, KEYS)  # type: ignore[arg-type]
        self.cache._reload()

    def put(self, key: str, value: bytes) -> Cell:
        self.client.revision += 1
        event = ops.WatchEvent("PUT", key.encode(), value, self.client.revision, 1, 1)
        self.cache._on_events([event], self.client.revision)
        return self.cache.cell()

    def delete(self, key: str) -> Cell:
        self.client.revision += 1
        event = ops.WatchEvent("DELETE", key.encode(), b"", self.client.revision, 0, 0)
        self.cache._on_events([event], self.client.revision)
        return self.cache.cell()

    def task(self, task: Task, info: TaskInfo | None = None) -> Cell:
        return self.put(KEYS.task(task.id), codec.encode_task(task, info or TaskInfo()))

    def job(self, job: Job) -> Cell:
        return self.put(KEYS.job(job.key), codec.encode_job(job, JobInfo(SPEC)))

    def machine(self, m: Machine, info: MachineInfo | None = None) -> Cell:
        return self.put(KEYS.machine(m.name), codec.encode_machine(m, info or MachineInfo()))


def test_capacity_epoch_moves_when_capacity_may_have_changed() -> None:
    f = Feed()
    m0 = Machine("m0", Resources.of(cpu=1000, ram=1000))
    e = f.machine(m0).capacity_epoch
    assert f.machine(m0, MachineInfo(usage=(("cpu", 5),))).capacity_epoch == e  # a usage report
    job = Job("u", "j", 100, 1, REQ)
    assert f.job(job).capacity_epoch == e  # a new job frees nothing
    t = TaskId(job.key, 0)
    assert f.task(Task(t, TaskState.PENDING, None, 100, REQ)).capacity_epoch == e
    c = f.task(Task(t, TaskState.RUNNING, "m0", 100, REQ))
    assert c.capacity_epoch > e and c.running == {t}
    e = c.capacity_epoch
    assert f.task(Task(t, TaskState.RUNNING, "m0", 100, REQ), TaskInfo(port=9)).capacity_epoch == e
    c = f.task(Task(t, TaskState.RUNNING, "m0", 100, REQ, reservation=Resources.of(cpu=50)))
    assert c.capacity_epoch > e  # a lower reservation: reclaimed room
    e = c.capacity_epoch
    c = f.task(Task(t, TaskState.DEAD, None, 100, REQ, DeathCause.FAILED))
    assert c.capacity_epoch > e and c.running == frozenset()
    e = c.capacity_epoch
    c = f.job(Job("u", "j", 100, 1, REQ, constraints=(Constraint("rack", ConstraintOp.EQ, ("a",)),)))
    assert c.capacity_epoch > e  # its pending tasks may fit elsewhere now
    e = c.capacity_epoch
    assert f.job(Job("u", "j", 100, 3, REQ, constraints=(Constraint("rack", ConstraintOp.EQ, ("a",)),))).capacity_epoch == e
    assert f.delete(KEYS.job("u/j")).capacity_epoch == e
    assert f.delete(KEYS.machine("m0")).capacity_epoch > e


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def ids(*n: int) -> set[TaskId]:
    return {TaskId("u/j", i) for i in n}


def test_unschedulable_tasks_are_planned_again_only_after_capacity_moved_or_a_while() -> None:
    clock = Clock()
    u = SetAside(retry_s=30.0, clock=clock)
    assert u.to_plan(ids(0, 1), epoch=5) == ids(0, 1)  # nothing known yet: plan all
    u.found(ids(0, 1), epoch=5)
    cell = Cell(work=frozenset(ids(0, 1)), running=frozenset(), capacity_epoch=5)
    assert u.covers(cell)
    assert not u.covers(Cell(work=frozenset(ids(0, 1, 2)), running=frozenset(), capacity_epoch=5))
    assert u.to_plan(ids(0, 1, 2), epoch=5) == ids(2)  # only the new one
    u.found(set(), epoch=5)  # it was placed
    assert u.to_plan(ids(0, 1), epoch=5) == set()
    assert not u.covers(Cell(work=frozenset(ids(0, 1)), running=frozenset(), capacity_epoch=6))
    assert u.to_plan(ids(0, 1), epoch=6) == ids(0, 1)  # capacity moved: all again
    u.found(ids(1), epoch=6)
    assert u.to_plan(ids(1), epoch=6) == set()
    clock.now = 31.0
    assert not u.covers(Cell(work=frozenset(ids(1)), running=frozenset(), capacity_epoch=6))
    assert u.to_plan(ids(1), epoch=6) == ids(1)  # the periodic retry
    u.found(ids(1), epoch=-1)  # a pass that restarted or rolled: forget everything
    assert u.to_plan(ids(1), epoch=6) == ids(1)
    assert not u.covers(Cell(work=frozenset(ids(1))))  # no cache sets: never skip
