"""The master's reading of the borglets (reference/master/intake.py), as tables: a sync's body,
what an answer's status means, a shard's entry against the leader's copy, whether a report
is taken, and an answer merged into the cell."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reference.master import intake
from reference.master.cell import Draft, borglet_task_id
from reference.master.intake import Reading, Said
from reference.master.reports import Outcome, map_reply
from spec.model import TaskId, TaskState
from tests.unit import master_cells
from tests.unit.master_cells import T0, T1

# --- delta or whole set ---------------------------------------------------------------------------


def _desired(n: int) -> list[dict]:
    return [{"task_id": f"u/j/{i}#0@1"} for i in range(n)]


@pytest.mark.parametrize(
    ("tasks", "base", "sent"),
    [
        (64, None, "tasks"),  # no acknowledged sync to build on: whole
        (63, frozenset({"u/j/0#0@1"}), "tasks"),  # below DELTA_MIN_TASKS: whole
        (64, frozenset({"u/j/0#0@1", "gone"}), "delta"),  # many tasks and a base: a delta
    ],
)
def test_a_sync_is_a_delta_only_with_a_base_and_many_tasks(tasks: int, base: frozenset | None, sent: str) -> None:
    desired = _desired(tasks)
    ids = frozenset(d["task_id"] for d in desired)
    body = intake.sync_body(master="m0", epoch=3, seq=9, revision=40, desired=desired, ids=ids, base=base, base_seq=7)
    assert {k: body[k] for k in ("master", "epoch", "seq", "revision")} == {"master": "m0", "epoch": 3, "seq": 9, "revision": 40}
    assert set(body) - {"master", "epoch", "seq", "revision"} == {sent}
    if sent == "delta":
        # 64 desired, one of them in the base: 63 to add; "gone" is in the base only: removed.
        assert body["delta"]["base_seq"] == 7
        assert len(body["delta"]["add"]) == 63 and body["delta"]["remove"] == ["gone"]


# --- what an answer means -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "text", "said", "reason"),
    [
        (0, None, "connection refused", Said.NOTHING, ""),  # no answer at all
        (200, {"tasks": []}, "", Said.REPLY, ""),
        (200, None, "not json", Said.NOTHING, ""),  # a 200 that is not a report
        (500, None, "oops", Said.NOTHING, ""),
        (409, {"reason": "stale_seq"}, "", Said.REFUSED, "stale_seq"),  # alive: send whole next time
        (409, {"reason": "stale_epoch"}, "", Said.LATER_TERM, "stale_epoch"),
        (409, None, "old borglet", Said.LATER_TERM, "stale_epoch"),  # no reason named: an epoch fence
        (401, {"detail": [{"field": "X-Minborg-Channel-Time", "error": "clock skew"}]}, "", Said.DISTRUSTED,
         "X-Minborg-Channel-Time: clock skew"),
        (403, None, "bad signature", Said.DISTRUSTED, "bad signature"),
    ],
)  # fmt: skip
def test_an_answer_is_read_from_its_status(status: int, body: object, text: str, said: Said, reason: str) -> None:
    answer = intake.read_answer(status, body, text)
    assert (answer.said, answer.reason) == (said, reason)
    assert answer.reply == (body if said is Said.REPLY else None)


# --- a shard's entry and its fence ----------------------------------------------------------------

WHOLE = {"tasks": [{"task_id": "a", "state": "RUNNING"}], "fence": {"epoch": 2, "seq": 5}}


@pytest.mark.parametrize(
    ("entry", "copy", "expected"),
    [
        ({"version": 3, "report": WHOLE}, None, (3, WHOLE)),  # whole: no base needed
        ({"version": 4, "base": 3, "change": {}}, None, None),  # a change, no copy: send whole
        ({"version": 4, "base": 2, "change": {}}, (3, WHOLE), None),  # a change on another base
        ({"version": 4, "base": 3, "change": {"fields": {"fence": {"epoch": 2, "seq": 6}}}}, (3, WHOLE),
         (4, {**WHOLE, "fence": {"epoch": 2, "seq": 6}})),
    ],
)  # fmt: skip
def test_a_shard_entry_is_merged_on_its_base_or_asked_for_whole(entry: dict, copy: tuple | None, expected: object) -> None:
    assert intake.merge_entry(entry, copy) == expected


A5, A6 = frozenset({TaskId("u/a", 5)}), frozenset({TaskId("u/a", 6)})


@pytest.mark.parametrize(
    ("report", "sent", "reading", "ids"),
    [
        ({"fence": {"epoch": 2, "seq": 5}}, {5: A5}, Reading.TAKE, A5),  # read after sync 5: its tasks
        # Read before sync 6 was applied, arriving after 6 was acknowledged: no longer stale (the
        # answer to 6 carried no facts to be overtaken), read against sync 5's tasks, not 6's.
        ({"fence": {"epoch": 2, "seq": 5}}, {5: A5, 6: A6}, Reading.TAKE, A5),
        ({"fence": {"epoch": 2, "seq": 6}}, {5: A5, 6: A6}, Reading.TAKE, A6),
        ({"fence": {"epoch": 2, "seq": 3}}, {5: A5}, Reading.TAKE_UNFENCED, frozenset()),  # a sync no longer held
        ({"fence": {"epoch": 2, "seq": 0}}, {}, Reading.TAKE_UNFENCED, frozenset()),  # nothing sent yet
        ({"fence": {"epoch": 1, "seq": 5}}, {5: A5}, Reading.TAKE_UNFENCED, frozenset()),  # the last term's sync
        ({"epoch": 1}, {5: A5}, Reading.TAKE_UNFENCED, frozenset()),  # an old borglet names only the epoch
        ({}, {5: A5}, Reading.TAKE_UNFENCED, frozenset()),  # never synced
        ({"fence": {"epoch": 3, "seq": 5}}, {5: A5}, Reading.LATER_TERM, frozenset()),  # a newer leader synced it
    ],
)  # fmt: skip
def test_a_report_is_judged_once_from_its_fence_and_read_against_the_sync_it_names(
    report: dict, sent: dict, reading: Reading, ids: frozenset
) -> None:
    assert intake.read_report(report, epoch=2, sent=sent) == (reading, ids)


# --- an answer merged into the cell --------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "up", "write_usage", "reason_changed", "writes"),
    [
        (Outcome(), True, False, False, False),  # nothing new: no write
        (Outcome(steps=[("finish", (T0,), "")]), True, False, False, True),
        (Outcome(), False, False, False, True),  # a down machine answers: it comes up
        (Outcome(), True, True, False, True),
        (Outcome(), True, False, True, True),
    ],
)
def test_an_answer_is_written_only_when_it_changes_the_cell(
    outcome: Outcome, up: bool, write_usage: bool, reason_changed: bool, writes: bool
) -> None:
    assert intake.changes_cell(outcome, up=up, write_usage=write_usage, reason_changed=reason_changed) is writes


def test_an_answer_merges_the_borglets_facts_and_keeps_the_cells_decisions() -> None:
    cell = master_cells.placed_cell()
    cell = replace(cell, tasks={**cell.tasks, T0: replace(cell.task_info(T0), draining_since=7.0)})
    reply = {
        "tasks": [
            {"task_id": borglet_task_id(T0, cell.task_info(T0)), "state": "RUNNING", "port": 9000, "started_at": 1.0},
            {"task_id": borglet_task_id(T1, cell.task_info(T1)), "state": "FINISHED", "reason": "exit 0"},
        ],
        "usage": {"cpu": 120},
        "isolation": "cgroup",
        "channel_skew_s": -30,
    }
    facts = intake.machine_facts(reply)
    assert facts.reason.startswith("clock skew: the borglet's clock is 30 s behind")
    outcome = map_reply(cell, "m1", reply, {T0, T1})
    d = Draft(cell, now=10.0)
    intake.merge(d, "m1", outcome, facts, sent={T0, T1}, usage={T0: (("cpu", 50),)})
    assert d.state.tasks[T1].state is not TaskState.RUNNING  # FINISHED -> finish
    t0 = d.task_info(T0)
    assert (t0.port, t0.seen, t0.draining_since, t0.usage) == (9000, True, 7.0, (("cpu", 50),))
    m1 = d.machine_info("m1")
    assert (m1.usage, m1.isolation, m1.reason) == ((("cpu", 120),), "cgroup", facts.reason)


def test_without_usage_due_the_machines_usage_is_left_as_it_was() -> None:
    cell = master_cells.placed_cell()
    reply = {"tasks": [], "usage": {"cpu": 120}}
    d = Draft(cell, now=10.0)
    intake.merge(d, "m1", Outcome(), intake.machine_facts(reply), sent=set(), usage=None)
    assert d.machine_info("m1").usage == cell.machines["m1"].usage


def test_a_down_machine_that_answers_comes_up() -> None:
    cell = master_cells.placed_cell()
    d = Draft(cell, now=1.0)
    d.step("machine_down", "m1", reason="silent")
    down = d.state
    assert not down.machines["m1"].up
    d2 = Draft(replace(cell, state=down), now=2.0)
    intake.merge(d2, "m1", Outcome(), intake.machine_facts({}), sent=set(), usage=None)
    assert d2.state.machines["m1"].up


def test_an_answer_read_before_a_drain_moved_its_task_does_not_end_it_where_it_now_runs() -> None:
    # m1's answer was mapped from a cell where T0 ran on m1 and m1 did not report it (lost);
    # since, a drain moved T0 (same id, back to PENDING) and it was placed on m2. Merging that
    # answer must not mark T0 lost on m2, where it runs: the checker saw such a task go from
    # PENDING straight to DEAD(lost).
    from spec.model import Machine, Resources

    cell = master_cells.placed_cell(seen=True, borglet_state="RUNNING")
    outcome = map_reply(cell, "m1", {"tasks": [{"task_id": borglet_task_id(T1, cell.task_info(T1)), "state": "RUNNING"}]}, {T0, T1})
    assert ("lost", (T0,), "unknown to its borglet") in outcome.steps
    d = Draft(cell, now=10.0)
    assert d.step("machine_add", Machine("m2", Resources.of(cpu=4000, ram=2**30)))
    assert d.step("drain", "m1") and d.step("drain_move", T0) and d.step("schedule", T0, "m2")
    intake.merge(d, "m1", outcome, intake.machine_facts({}), sent={T0, T1}, usage=None)
    t0 = d.state.tasks[T0]
    assert (t0.state, t0.machine) == (TaskState.RUNNING, "m2")


def test_usage_that_did_not_move_is_no_news_and_merges_to_no_write() -> None:
    """A report whose usage is what the cell holds (the machine's and its running tasks') asks
    for no write; one moved figure, of the machine or of one task, is news."""
    cell = master_cells.placed_cell()
    reply = {"tasks": [], "usage": {"cpu": 120}, "isolation": "cgroup"}
    facts = intake.machine_facts(reply)
    running = [t for t in (T0, T1) if cell.state.tasks[t].state is TaskState.RUNNING and cell.state.tasks[t].machine == "m1"]
    assert running, "the fixture runs a task on m1"
    usage = {tid: (("cpu", 50),) for tid in running}
    assert intake.usage_news(cell, "m1", facts, running, usage)  # never written yet
    d = Draft(cell, now=10.0)
    intake.merge(d, "m1", Outcome(), facts, sent=running, usage=usage)
    written = replace(cell, state=d.state, machines=d.machines, tasks=d.tasks)
    assert not intake.usage_news(written, "m1", facts, running, usage)
    again = Draft(written, now=20.0)
    intake.merge(again, "m1", Outcome(), facts, sent=running, usage=usage)
    assert again.machine_info("m1") is written.machines["m1"]
    assert all(again.task_info(t) is written.task_info(t) for t in running)  # nothing rewritten
    moved = {**usage, running[0]: (("cpu", 51),)}
    assert intake.usage_news(written, "m1", facts, running, moved)
    assert intake.usage_news(written, "m1", intake.machine_facts({**reply, "usage": {"cpu": 121}}), running, usage)
