"""The one reading and writing of a task id as a borglet knows it: `user/job/3#1@2` is task
index 3 of job `user/job`, its incarnation 1, placed for the 2nd time (`TaskInfo.placement`).

The master builds it (`format_task_id`), the borglet runs a process under it, and the master,
the harness, chaos and the load tests read it back (`parse_task_id`). No I/O.
"""

from __future__ import annotations

from typing import NamedTuple

from .model import TaskId

SHAPE = "'user/job/index#incarnation' or 'user/job/index#incarnation@placement'"


class PlacedTaskId(NamedTuple):
    """A parsed task id: which incarnation of which task index, and which placement of it
    (None when the id has no '@' part)."""

    job: str
    index: int
    incarnation: int
    placement: int | None = None

    @property
    def task(self) -> TaskId:
        return TaskId(self.job, self.index, self.incarnation)

    def __str__(self) -> str:
        return format_task_id(self.task, self.placement)


def format_task_id(tid: TaskId, placement: int | None = None) -> str:
    """TaskId('u/j', 3, 1), 2 -> 'u/j/3#1@2'; without a placement, 'u/j/3#1'."""
    return f"{tid}" if placement is None else f"{tid}@{placement}"


def parse_task_id(text: str) -> PlacedTaskId:
    """'user/job/3#1@2' -> PlacedTaskId('user/job', 3, 1, 2). Raises ValueError naming the
    part that is wrong for anything else."""
    base, at, placement = text.partition("@")
    head, sep, inc = base.rpartition("#")
    job, _, index = head.rpartition("/")
    problem = (
        "no '#incarnation'" if not sep
        else "no job before the index" if not job
        else f"index {index!r} is not a number" if not index.isdigit()
        else f"incarnation {inc!r} is not a number" if not inc.isdigit()
        else f"placement {placement!r} is not a number" if at and not placement.isdigit()
        else ""
    )  # fmt: skip
    if problem:
        raise ValueError(f"task id {text!r}: {problem}; expected {SHAPE}")
    return PlacedTaskId(job, int(index), int(inc), int(placement) if at else None)
