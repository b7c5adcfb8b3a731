"""Tests that kill mutants of spec/ which the other tests let survive (see reports/conformance.md)."""

from __future__ import annotations

from spec.actions import schedule, submit, update
from spec.model import CellState, FMap, Job, Machine, Resources, TaskId, TaskState

SMALL = Resources.of(cpu=500)
LARGE = Resources.of(cpu=1000)


def _cell_with_job(count: int = 2) -> CellState:
    base = CellState(machines=FMap({"m0": Machine("m0", Resources.of(cpu=4000))}))
    s = submit(base, Job("u", "j", 100, count, SMALL))
    assert s is not None
    return s


def test_fmap_keys_are_its_keys() -> None:
    # model.py FMap.keys: returning None instead of the dict view survived.
    m = FMap({"a": 1, "b": 2})
    assert sorted(m.keys()) == ["a", "b"]


def test_task_id_incarnation_defaults_to_zero() -> None:
    # model.py TaskId: a default incarnation of 1 survived.
    assert TaskId("u/j", 0).incarnation == 0
    assert str(TaskId("u/j", 3)) == "u/j/3#0"


def test_update_rewrites_pending_requests_but_not_running_ones() -> None:
    # actions.py update: flipping `cur.state is PENDING` or `cur.request != new.request` survived.
    s = _cell_with_job()
    s = schedule(s, TaskId("u/j", 0, 0), "m0")
    assert s is not None
    s2 = update(s, "u/j", request=LARGE)
    assert s2 is not None
    assert s2.tasks[TaskId("u/j", 1, 0)].state is TaskState.PENDING
    assert s2.tasks[TaskId("u/j", 1, 0)].request == LARGE  # not placed yet: takes the new request
    assert s2.tasks[TaskId("u/j", 0, 0)].request == SMALL  # running: keeps its request until rolled
    s3 = update(s2, "u/j", task_count=3)
    assert s3 is not None and s3.tasks[TaskId("u/j", 1, 0)].request == LARGE
