"""A task's typed events from spec steps and borglet reports, pending summaries, and the
change log that watches replay (floor, bounds, resumption)."""

from __future__ import annotations

import pytest

from reference.master import events
from reference.master.cell import Cell, Draft, TaskInfo
from reference.master.changes import Change, ChangeLog, TooOld
from spec.actions import machine_add
from spec.model import CellState
from tests.unit.test_master_mutants import M2, SPEC, T0, placed_cell


@pytest.mark.parametrize(
    ("reason", "kind", "detail"),
    [
        ("exit 3", "exited", "exit code 3"),
        ("signal 9", "signaled", "killed by signal 9"),
        ("oom", "oom", "killed by the kernel: over its RAM limit (OOM)"),
        ("spawn: [Errno 2] No such file", "spawn_failed", "could not start its process: spawn: [Errno 2] No such file"),
        ("setup: no port", "spawn_failed", "could not start its process: setup: no port"),
    ],
)
def test_exit_reasons_become_typed_events(reason: str, kind: str, detail: str) -> None:
    assert events.exit_kind(reason) == (kind, detail)


def test_steps_add_numbered_events_with_the_machine_and_the_reason() -> None:
    d = Draft(Cell(machine_add(CellState(), M2)), 2.0)  # type: ignore[arg-type]
    d.step("submit", SPEC.to_spec_job(), reason="submitted")
    d.step("schedule", T0, "m2")
    d.now = 3.0
    d.step("fail", T0, reason="exit 3")
    assert d.tasks[T0].events == (
        (1, 2.0, "submitted", "submitted"),
        (2, 2.0, "scheduled", "on m2"),
        (3, 3.0, "exited", "exit code 3"),
    )
    assert d.tasks[T0].machine == "m2"  # kept after the task left it, for its logs


def test_an_eviction_says_from_where_and_why() -> None:
    d = Draft(placed_cell(), 5.0)
    from spec.actions import EvictReason

    assert d.step("evict", T0, EvictReason.MAINTENANCE, reason="drain of m1")
    assert d.tasks[T0].events[-1][2:] == ("evicted", "from m1: drain of m1")


def test_reports_add_started_exited_and_restarted_events_in_order() -> None:
    d = Draft(placed_cell(), 5.0)
    running = TaskInfo(port=80, pid=11, borglet_state="RUNNING", started_at=1.0, seen=True)
    d.set_task_info(T0, running)
    assert d.tasks[T0].events[-1][2:] == ("started", "pid 11 on m1, port 80")
    waiting = TaskInfo(port=80, pid=0, borglet_state="STARTING", started_at=1.0, seen=True, reason="exit 1")
    d.set_task_info(T0, waiting)
    again = TaskInfo(port=80, pid=12, borglet_state="RUNNING", started_at=2.0, seen=True, restarts=1)
    d.set_task_info(T0, again)
    assert [e[2] for e in d.tasks[T0].events][-4:] == ["started", "exited", "restarted", "started"]
    assert d.tasks[T0].events[-3][3] == "exit code 1; its borglet restarts it in place"


def test_events_are_bounded_and_keep_numbering() -> None:
    evs: tuple = ()
    for i in range(events.EVENTS_LIMIT + 5):
        evs = events.append(evs, float(i), [("started", f"pid {i}")])
    assert len(evs) == events.EVENTS_LIMIT and evs[0][0] == 6 and evs[-1][0] == events.EVENTS_LIMIT + 5


def test_pending_summary_names_the_machines_and_each_reason() -> None:
    from reference.scheduler.plan import Reason

    reasons = (Reason("cpu", "1 of 4 machines have 8000m free", 1), Reason("constraint rack", "0 of 4 machines match"))
    assert events.pending_summary(reasons, 4) == (
        "0 of 4 machines fit: cpu: 1 of 4 machines have 8000m free; constraint rack: 0 of 4 machines match"
    )


def change(rev: int, key: str = "a/b", size: int = 10) -> Change:
    return Change(rev, "job", key, b"x" * size, None)


def test_change_log_replays_after_a_revision_and_refuses_older_than_its_floor() -> None:
    log = ChangeLog(max_changes=3)
    log.reset(10)
    for rev in (11, 12, 12, 13):
        log.record(change(rev))
    # 4 changes, 3 kept: the first (11) left, so a watch from 10 would miss it; from 11 it would not.
    assert log.floor == 11
    with pytest.raises(TooOld):
        log.after(10)
    got, reached = log.after(11)
    assert [c.revision for c in got] == [12, 12, 13] and reached == 13
    assert log.after(13) == ([], 13)
    log.advance(20)  # a progress notification: nothing changed up to 20
    assert log.after(13) == ([], 20)


def test_change_log_is_bounded_in_bytes() -> None:
    log = ChangeLog(max_changes=100, max_bytes=25)
    for rev in (1, 2, 3):
        log.record(change(rev, size=10))
    assert log.floor == 1 and [c.revision for c in log.after(1)[0]] == [2, 3]


def test_change_types() -> None:
    assert Change(1, "job", "k", b"v", None).type == "ADDED"
    assert Change(1, "job", "k", b"v", b"u").type == "MODIFIED"
    assert Change(1, "job", "k", None, b"u").type == "DELETED"
