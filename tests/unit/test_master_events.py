"""A task's typed events from spec steps and borglet reports, pending summaries, and the
change log that watches replay (floor, bounds, resumption)."""

from __future__ import annotations

import pytest

from reference.master import events
from reference.master.cell import Cell, Draft, TaskInfo
from reference.master.changes import Change, ChangeLog, TooOld
from spec.actions import machine_add
from spec.model import CellState
from tests.unit.master_cells import M2, SPEC, T0, placed_cell


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


# --- pending reasons: written by the leader, grouped in the job's view ----------------------------


def pending_cell(count: int) -> Cell:
    """A job of `count` PENDING tasks on a cell of one machine."""
    from reference.jobspec import parse_job
    from reference.master.cell import JobInfo
    from spec.actions import submit

    spec = parse_job({"name": "big", "user": "alice", "task_count": count, "request": {"cpu": "100m"},
                      "command": ["sleep", "100"]})  # fmt: skip
    state = submit(machine_add(CellState(), M2), spec.to_spec_job())
    return Cell(state, jobs={"alice/big": JobInfo(spec)})  # type: ignore[arg-type]


def plan_of(cell: Cell, detail: str):  # type: ignore[no-untyped-def]
    from reference.scheduler.plan import Plan, Reason, Unschedulable

    reasons = (Reason("cpu", detail, 0),)
    return Plan(unschedulable=[Unschedulable(tid, reasons) for tid in sorted(cell.state.tasks, key=str)])


def test_a_pass_writes_pending_reasons_where_they_changed_at_most_200() -> None:
    from reference.master.leader import PENDING_REASONS_PER_PASS, record_pending_reasons
    from reference.master.views import pending_reasons

    cell = pending_cell(250)
    d = Draft(cell, 1.0)
    assert record_pending_reasons(d, plan_of(cell, "0 of 1 machines have 8000m free")) == PENDING_REASONS_PER_PASS
    # Job and index order: the first 200 indices have it.
    written = sorted(tid.index for tid in d.tasks.written)
    assert written == list(range(200))
    after = Cell(d.state, jobs=cell.jobs, tasks=dict(d.tasks.data))
    groups = pending_reasons(after, "alice/big")
    assert [(g["reason"], g["tasks"]) for g in groups] == [
        ("0 of 1 machines fit: cpu: 0 of 1 machines have 8000m free", 200), (None, 50)
    ]  # fmt: skip
    assert groups[0]["indices"] == list(range(20))  # the first 20 named
    # The next pass writes the other 50 and leaves the 200 alone.
    d2 = Draft(after, 2.0)
    assert record_pending_reasons(d2, plan_of(after, "0 of 1 machines have 8000m free")) == 50
    assert min(tid.index for tid in d2.tasks.written) == 200


def test_kept_counts_give_the_same_pending_reasons_as_a_walk() -> None:
    """A watch cache's view carries each job's counts: a job with no PENDING task is not
    walked, and one with some is grouped as a walk groups it."""
    from dataclasses import replace as dc_replace

    from reference.master.leader import record_pending_reasons
    from reference.master.views import pending_reasons, walk_counts

    cell = pending_cell(30)
    d = Draft(cell, 1.0)
    record_pending_reasons(d, plan_of(cell, "0 of 1 machines have 8000m free"))
    walked = Cell(d.state, jobs=cell.jobs, tasks=dict(d.tasks.data))
    kept = dc_replace(walked, counts=walk_counts(walked, None), job_counts={"alice/big": walk_counts(walked, "alice/big")})
    assert pending_reasons(kept, "alice/big") == pending_reasons(walked, "alice/big") != []
    # every task placed: the kept counts say no PENDING task, and the walk finds none either
    d2 = Draft(walked, 2.0)
    for tid in sorted(walked.state.tasks, key=str):
        assert d2.step("schedule", tid, "m2", reason="scheduled")
    placed = Cell(d2.state, jobs=cell.jobs, tasks=dict(d2.tasks.data))
    kept = dc_replace(placed, counts=walk_counts(placed, None), job_counts={"alice/big": walk_counts(placed, "alice/big")})
    assert pending_reasons(kept, "alice/big") == pending_reasons(placed, "alice/big") == []


def test_a_scheduled_task_drops_its_pending_reason() -> None:
    from reference.master.leader import record_pending_reasons

    cell = pending_cell(1)
    d = Draft(cell, 1.0)
    record_pending_reasons(d, plan_of(cell, "0 of 1 machines have 8000m free"))
    tid = next(iter(cell.state.tasks))
    assert d.tasks[tid].pending
    assert d.step("schedule", tid, "m2", reason="scheduled")
    assert d.tasks[tid].pending == "" and d.tasks[tid].events[-1][2:] == ("scheduled", "on m2")


# --- the event stream: which task events a change adds ------------------------------------------


def test_the_event_stream_sends_only_the_events_a_change_added() -> None:
    from reference.master import codec
    from reference.master.watch import event_messages
    from spec.model import Resources, Task, TaskState

    task = Task(T0, TaskState.RUNNING, "m1", 100, Resources.of(cpu=100))
    before = TaskInfo(events=((1, 1.0, "submitted", "submitted"), (2, 1.0, "scheduled", "on m1")))
    after = TaskInfo(events=(*before.events, (3, 2.0, "started", "pid 7 on m1")))
    select, render = event_messages("alice/web")
    change = Change(9, "task", "alice/web/0/0", codec.encode_task(task, after), codec.encode_task(task, before))
    assert select(change) and not select(Change(9, "task", "bob/x/0/0", b"", None))
    messages = list(render(change))
    assert [(m[0], m[1], m[2]["kind"], m[2]["n"]) for m in messages] == [("task", 9, "started", 3)]
    created = Change(8, "task", "alice/web/0/0", codec.encode_task(task, before), None)
    assert [m[2]["kind"] for m in render(created)] == ["submitted", "scheduled"]


def test_a_restart_by_policy_says_how_the_incarnation_it_replaces_ended() -> None:
    from reference.jobspec import parse_job
    from reference.master.cell import JobInfo
    from spec.actions import submit
    from spec.model import TaskId

    spec = parse_job({"name": "w", "user": "alice", "task_count": 1, "request": {"cpu": "100m"},
                      "command": ["false"], "restart_policy": "on_failure"})  # fmt: skip
    state = submit(machine_add(CellState(), M2), spec.to_spec_job())
    d = Draft(Cell(state, jobs={"alice/w": JobInfo(spec)}), 1.0)  # type: ignore[arg-type]
    first = TaskId("alice/w", 0, 0)
    d.step("schedule", first, "m2")
    d.step("fail", first, reason="exit 3")
    cell = Cell(d.state, jobs={"alice/w": JobInfo(spec)}, tasks=dict(d.tasks.data))
    d2 = Draft(cell, 2.0)
    assert d2.step("restart", first, reason="restart after failed")
    second = d2.tasks[TaskId("alice/w", 0, 1)]
    assert second.events == (
        (1, 2.0, "restarted",
         "new incarnation 1 (policy on_failure): restart after failed; incarnation 0 exited: exit code 3"),
    )  # fmt: skip


def test_an_events_tail_renders_only_the_newest_changes_and_keeps_their_order() -> None:
    from reference.master.changes import Change
    from reference.master.watch import newest

    changes = [Change(r, "job", f"u/j{r}", b"x", None) for r in range(1, 101)]
    rendered: list[int] = []

    def render(c: Change) -> list[tuple[str, int, dict]]:
        rendered.append(c.revision)
        return [("job", c.revision, {"n": 1}), ("job", c.revision, {"n": 2})]  # two messages a change

    def odd(c: Change) -> bool:
        return c.revision % 2 == 1

    got = newest(changes, odd, render, 5)
    assert [(r, d["n"]) for _, r, d in got] == [(95, 2), (97, 1), (97, 2), (99, 1), (99, 2)]
    assert rendered == [99, 97, 95]  # from the end, and no further than needed
    everything = newest(changes, odd, lambda c: [("job", c.revision, {})], 1000)
    assert [r for _, r, _ in everything] == list(range(1, 101, 2))


def test_follow_asks_a_tail_of_its_first_replay_only() -> None:
    from reference.cli.watch import follow
    from reference.client import Message

    asked: list[dict] = []

    class Cell:
        def watch(self, path: str, *, since: int | None, timeout_s: float, **params: object):
            asked.append({"since": since, **params})
            if len(asked) == 1:
                raise_gone(12)  # since 0 is older than the log: refused before any message
            yield Message("task", 10 + len(asked), {"kind": "started"})
            if len(asked) == 2:
                raise_gone(13)  # fell behind after a message: the next connection asks no tail
            yield Message("bookmark", 20, {})

    def raise_gone(floor: int) -> None:
        from reference.cellfile import ClientError

        raise ClientError(410, [{"floor": floor}])

    printed = follow(Cell(), "/v1/events", since=0, for_s=5.0, line=str, say=lambda _: None, follow=False, tail=3)
    assert printed == 2 and asked == [{"since": 0, "tail": 3}, {"since": 12, "tail": 3}, {"since": 13}]


def test_a_tail_older_than_the_log_is_served_from_its_floor_only_when_the_log_holds_the_whole_tail() -> None:
    import pytest

    from reference.master.changes import Change, ChangeLog, TooOld
    from reference.master.watch import replay_from

    log = ChangeLog(max_changes=10)
    for r in range(1, 21):  # revisions 11..20 kept, the floor at 10
        log.record(Change(r, "job", f"u/j{r}", b"x", None))
    assert log.floor == 10

    def one(c: Change) -> list[tuple[str, int, dict]]:
        return [("job", c.revision, {})]

    def every(c: Change) -> bool:
        return True

    assert replay_from(log, 12, 0, every, one) == 12  # within the log: as asked
    assert replay_from(log, 0, 5, every, one) == 10  # the newest 5 are all held
    assert replay_from(log, 0, 10, every, one) == 10
    with pytest.raises(TooOld):  # 11 asked, 10 held: the 11th newest may be one it lost
        replay_from(log, 0, 11, every, one)
    with pytest.raises(TooOld):  # no tail: every change after `since` was asked
        replay_from(log, 0, 0, every, one)
    with pytest.raises(TooOld):  # only 5 of the held changes are selected
        replay_from(log, 0, 6, lambda c: c.revision % 2 == 0, one)
