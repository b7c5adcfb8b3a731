"""Machines and tasks for the scheduler's unit tests: 4-core, 8 GiB machines unless told,
with GPU milli when asked; running and pending tasks by job, priority and milli-CPU."""

from __future__ import annotations

from reference.scheduler import PendingTask
from reference.scheduler.snapshot import RunningTask
from spec.model import Machine, Resources, TaskId

GiB = 2**30


def machine(name: str, cpu: int = 4000, gpu: int = 0) -> Machine:
    res = {"cpu": cpu, "ram": 8 * GiB} | ({"gpu": gpu} if gpu else {})
    return Machine(name, Resources.of(res))


def running(job: str, prio: int, cpu: int, where: str, i: int = 0, gpu: int = 0) -> RunningTask:
    res = {"cpu": cpu} | ({"gpu": gpu} if gpu else {})
    return RunningTask(TaskId(job, i), where, prio, Resources.of(res))


def pending(job: str, prio: int, cpu: int, i: int = 0, package: str = "") -> PendingTask:
    return PendingTask(TaskId(job, i), job.split("/")[0], prio, Resources.of(cpu=cpu), package=package)
