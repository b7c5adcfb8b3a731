"""The one reading and writing of a task id as a borglet knows it: `user/job/3#1@2` is task
index 3 of job `user/job`, its incarnation 1, placed for the 2nd time (`TaskInfo.placement`).

The master builds it (`format_task_id`), the borglet runs a process under it, and the master,
the harness, chaos and the load tests read it back (`parse_task_id`). No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
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


def by_index(task_ids: Iterable[str]) -> dict[tuple[str, int], list[str]]:
    """(job, index) -> the ids among `task_ids` of that task index, in their order, repeats
    kept (one per process or per borglet's report)."""
    out: dict[tuple[str, int], list[str]] = {}
    for tid in task_ids:
        parsed = parse_task_id(tid)
        out.setdefault((parsed.job, parsed.index), []).append(tid)
    return out


def running_twice(live_ids: Iterable[str]) -> dict[tuple[str, int], list[str]]:
    """A task runs twice: the task indices with more than one of `live_ids`, the ids of the
    live processes (or of the borglets' reports of live tasks) seen at one time. Pass one id
    per copy to count copies (the same id on two machines is two), or a set to count distinct
    incarnations and placements."""
    return {key: ids for key, ids in by_index(live_ids).items() if len(ids) > 1}
