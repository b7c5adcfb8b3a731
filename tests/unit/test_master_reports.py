"""Borglet task ids; a borglet's reply mapped to spec steps and task facts; the Draft records
history; the writer's diff and batching."""

from __future__ import annotations

import pytest

from reference.master import codec, intake
from reference.master.cell import Cell, Draft, borglet_task_id
from reference.master.reports import desired_set, map_reply, parse_borglet_task_id
from reference.master.writer import chunks, diff_ops
from reference.store import ops as store_ops
from spec.actions import EvictReason
from spec.model import TaskId, TaskState
from tests.unit import master_cells


def placed_cell(seen: bool = False) -> Cell:
    """alice/web's two tasks on m1; `seen`: each already reported RUNNING by its borglet."""
    return master_cells.placed_cell(seen=seen, borglet_state="RUNNING" if seen else "")


T0, T1 = TaskId("alice/web", 0, 0), TaskId("alice/web", 1, 0)


def reply(*entries: tuple[TaskId, str, str | None], cell: Cell) -> dict:
    return {"tasks": [{"task_id": borglet_task_id(t, cell.task_info(t)), "state": s, "reason": r,
                       "port": 9000, "restarts": 0, "started_at": 5.0} for t, s, r in entries]}  # fmt: skip


def test_desired_set_lists_running_tasks_with_their_job_file() -> None:
    cell = placed_cell()
    desired, ids = desired_set(cell, "m1", "c1")
    assert ids == {T0, T1}
    assert desired[0]["bns"] == "0.web.alice.c1.minborg"
    assert desired[0]["command"] == ["sleep", "100"] and desired[0]["request"]["cpu"] == 100


def test_a_memo_reuses_entries_of_tasks_rewritten_unchanged_and_rebuilds_changed_ones() -> None:
    from dataclasses import replace

    from spec.fmap import FMap

    cell = placed_cell()
    memo: dict = {}
    first, _ = desired_set(cell, "m1", "c1", memo)
    # The same task values in new objects (a task record decoded again): the entries stand.
    tasks = FMap({tid: replace(t) for tid, t in cell.state.tasks.items()})
    again = replace(cell, state=replace(cell.state, tasks=tasks))
    second, _ = desired_set(again, "m1", "c1", memo)
    assert all(a is b for a, b in zip(first, second, strict=True))
    # A changed priority is a new entry, equal to one built without the memo.
    bumped = FMap({tid: replace(t, priority=t.priority + 1) for tid, t in cell.state.tasks.items()})
    changed = replace(cell, state=replace(cell.state, tasks=bumped))
    third, _ = desired_set(changed, "m1", "c1", memo)
    assert third == desired_set(changed, "m1", "c1")[0]
    assert third[0] is not first[0] and third[0]["priority"] == first[0]["priority"] + 1


def test_ended_states_map_to_spec_actions() -> None:
    cell = placed_cell(seen=True)
    cases = {
        ("FINISHED", None): ("finish", (T0,)),
        ("FAILED", "exit 3"): ("fail", (T0,)),
        ("FAILED", "lost_on_restart"): ("lost", (T0,)),
        ("KILLED", "memory_pressure"): ("evict", (T0, EvictReason.RECLAMATION)),
        ("KILLED", "borglet_exit"): ("lost", (T0,)),
    }
    for (state, reason), (action, args) in cases.items():
        out = map_reply(cell, "m1", reply((T0, state, reason), (T1, "RUNNING", None), cell=cell), {T0, T1})
        assert [(a, ar) for a, ar, _ in out.steps] == [(action, args)], (state, reason)


def test_unknown_after_seen_is_lost_but_not_before() -> None:
    seen = placed_cell(seen=True)
    out = map_reply(seen, "m1", {"tasks": []}, {T0})
    assert [(a, ar) for a, ar, _ in out.steps] == [("lost", (T0,))]
    fresh = placed_cell(seen=False)
    assert map_reply(fresh, "m1", {"tasks": []}, {T0}).steps == []


def test_running_report_records_port_without_a_step() -> None:
    cell = placed_cell()
    out = map_reply(cell, "m1", reply((T0, "RUNNING", None), cell=cell), {T0})
    assert out.steps == []
    assert out.infos[T0].port == 9000 and out.infos[T0].seen


def test_tasks_placed_after_the_sync_are_left_alone() -> None:
    cell = placed_cell(seen=True)
    assert map_reply(cell, "m1", {"tasks": []}, set()).steps == []


def test_draft_records_history_and_a_new_placement_id() -> None:
    cell = placed_cell(seen=True)
    d = Draft(cell, now=10.0)
    assert d.step("evict", T0, EvictReason.RECLAMATION, reason="memory_pressure")
    assert d.tasks[T0].history[-1] == ("PENDING", 10.0, "memory_pressure")
    assert d.step("schedule", T0, "m1", reason="scheduled")
    assert d.tasks[T0].placement == 1 and not d.tasks[T0].seen
    assert not d.step("finish", TaskId("alice/web", 9, 0))  # guard false: nothing changes


def test_diff_writes_only_what_changed_and_batches() -> None:
    cell = placed_cell(seen=True)
    d = Draft(cell, now=1.0)
    assert diff_ops(cell, d, codec.Keys("c1")) == []
    d.step("finish", T1, reason="exit 0")
    ops = diff_ops(cell, d, codec.Keys("c1"))
    assert len(ops) == 1 and "request_put" in ops[0]
    d.step("kill_job", "alice/web")
    d.jobs.pop("alice/web")
    assert any("request_delete_range" in op for op in diff_ops(cell, d, codec.Keys("c1")))
    assert [len(c) for c in chunks(list(range(250)), 120)] == [120, 120, 10]  # type: ignore[arg-type]
    # 400 puts of a 4,000-character (3,000-byte) value and a short key: 16 + (12 + 4000) * 3 // 4
    # = 3,025 bytes each, so 346 fit under 1 MiB (346 * 3025 = 1,046,650 <= 1,048,576).
    big = [store_ops.put("k" * 9, "v" * 3000) for _ in range(400)]
    assert [len(c) for c in chunks(big, 1000, 1 << 20)] == [346, 54]
    assert [len(c) for c in chunks(big, 100, 1 << 20)] == [100, 100, 100, 100]
    assert cell.state.tasks[T1].state is TaskState.RUNNING  # the base is never changed


# --- Borglet task ids and map_reply as tables (on master_cells' cell, whose infos each case sets) -----


@pytest.mark.parametrize(
    ("task_id", "parsed"),
    [
        ("alice/web/3#1@2", ("alice/web", 3, 1)),
        ("alice/web/3#1", ("alice/web", 3, 1)),  # no placement suffix
        ("alice/web/3", None),  # no incarnation
        ("3#1@0", None),  # no job
        ("alice/web/x#1@0", None),  # index not a number
        ("alice/web/3#y@0", None),  # incarnation not a number
        ("", None),
    ],
)
def test_parse_borglet_task_id(task_id, parsed):
    assert parse_borglet_task_id(task_id) == parsed


def _reply(cell: Cell, tid: TaskId, **fields: object) -> dict:
    return {"tasks": [{"task_id": borglet_task_id(tid, cell.task_info(tid)), **fields}]}


def test_map_reply_reads_missing_fields_as_zero():
    cell = master_cells.placed_cell()
    out = map_reply(cell, "m1", _reply(cell, T0, state="RUNNING"), {T0})
    assert out.steps == []
    info = out.infos[T0]  # first report: seen flips to True, worth writing
    assert (info.port, info.restarts, info.started_at, info.seen, info.usage) == (0, 0, 0.0, True, ())
    assert out.usage[T0] == ()


def test_map_reply_reads_given_fields():
    cell = master_cells.placed_cell()
    r = _reply(cell, T0, state="RUNNING", port=9000, restarts=3, started_at=5.5, usage={"ram": 7, "cpu": 20})
    info = map_reply(cell, "m1", r, {T0}).infos[T0]
    assert (info.port, info.restarts, info.started_at, info.borglet_state) == (9000, 3, 5.5, "RUNNING")
    assert info.usage == (("cpu", 20), ("ram", 7))  # sorted by name


@pytest.mark.parametrize(
    ("change", "written"),
    [
        ({}, False),  # the same facts again: nothing to write
        ({"usage": {"cpu": 99}}, False),  # usage alone can wait
        ({"port": 9001}, True),
        ({"restarts": 1}, True),
        ({"healthy": False}, True),
        ({"started_at": 6.0}, True),
        ({"state": "STARTING"}, True),
    ],
)
def test_map_reply_writes_only_facts_clients_act_on(change, written):
    base = {"port": 9000, "healthy": True, "borglet_state": "RUNNING", "seen": True, "started_at": 5.0}
    cell = master_cells.placed_cell(**base)
    fields = {"state": "RUNNING", "port": 9000, "healthy": True, "started_at": 5.0} | change
    out = map_reply(cell, "m1", _reply(cell, T0, **fields), {T0})
    assert (T0 in out.infos) is written


def test_a_queued_tasks_new_port_waits_for_its_start_and_is_written_with_it():
    base = {"borglet_state": "QUEUED", "seen": True}
    cell = master_cells.placed_cell(**base)
    # The borglet chose a port just before the spawn: still QUEUED, nothing to write yet.
    assert T0 not in map_reply(cell, "m1", _reply(cell, T0, state="QUEUED", port=9000), {T0}).infos
    # The process runs: the port comes with the start.
    info = map_reply(cell, "m1", _reply(cell, T0, state="RUNNING", port=9000, started_at=5.0), {T0}).infos[T0]
    assert (info.port, info.borglet_state, info.started_at) == (9000, "RUNNING", 5.0)
    # A first report that says QUEUED is written (the task is seen), with what it carries.
    fresh = master_cells.placed_cell()
    assert map_reply(fresh, "m1", _reply(fresh, T0, state="QUEUED", port=9000), {T0}).infos[T0].port == 9000


@pytest.mark.parametrize(
    ("state", "reason", "step"),
    [
        ("FAILED", "crash", ("fail", (T0,), "crash")),
        ("FAILED", None, ("fail", (T0,), "failed")),
        ("FAILED", "lost_on_restart", ("lost", (T0,), "lost_on_restart")),
        ("KILLED", "memory_pressure", ("evict", (T0, EvictReason.RECLAMATION), "memory_pressure")),
        ("KILLED", None, ("lost", (T0,), "killed on the machine: ?")),
        ("FINISHED", None, ("finish", (T0,), "exit 0")),
    ],
)
def test_map_reply_steps(state, reason, step):
    cell = master_cells.placed_cell(seen=True, borglet_state="RUNNING")
    assert map_reply(cell, "m1", _reply(cell, T0, state=state, reason=reason), {T0}).steps == [step]


def test_map_reply_skips_tasks_no_longer_running_there():
    cell = master_cells.placed_cell(seen=True)
    assert map_reply(cell, "m2", _reply(cell, T0, state="FINISHED"), {T0}).steps == []  # wrong machine
    # absent from the reply: lost only once the borglet had reported it
    assert map_reply(cell, "m1", {"tasks": []}, {T0}).steps == [("lost", (T0,), "unknown to its borglet")]
    assert map_reply(master_cells.placed_cell(), "m1", {"tasks": []}, {T0}).steps == []



def test_a_removed_machine_is_synced_while_it_may_run_a_process_and_holds_its_index_back() -> None:
    from reference.master.reports import departed_live, hold_back, live_by_index

    reported = {
        "m0": {"carol/db/0#0@1": "RUNNING"},
        "m3": {"carol/web/0#0@1": "RUNNING", "carol/web/1#0@1": "KILLED"},  # m3 was removed
        "m4": {"carol/web/2#0@1": "FINISHED"},  # removed too, nothing live there
    }
    departed = departed_live(reported, in_cell={"m0"})
    assert list(departed) == ["m3"]
    # The removed machine counts as up for the hold: incarnation 4 of index 0 waits for 0 to stop.
    live = live_by_index({**reported, **departed}, ["m0", *departed])
    new = {"task_id": "carol/web/0#4@2", "job": "carol/web", "index": 0}
    keep, held = hold_back([new], live, released=set())
    assert keep == [] and held[0].machine == "m3" and held[0].blocker == "carol/web/0#0@1"
    # Once m3 reports it stopped, m3 is no longer synced and nothing is held.
    reported["m3"]["carol/web/0#0@1"] = "KILLED"
    assert departed_live(reported, in_cell={"m0"}) == {}
    keep, held = hold_back([new], live_by_index(reported, ["m0"]), released=set())
    assert keep == [new] and held == []


def test_a_task_sent_to_a_removed_machine_and_not_yet_reported_counts_as_live_there() -> None:
    from reference.master.reports import departed_live

    # m5 was sent carol/web/3#0@1 and removed before it reported anything about it.
    departed = departed_live({"m5": {}}, in_cell={"m0"}, sent={"m5": {"carol/web/3#0@1"}, "m0": {"x/y/0#0@1"}})
    assert departed == {"m5": {"carol/web/3#0@1": "QUEUED"}}
    # Reported ended after the empty sync: nothing left there.
    assert departed_live({"m5": {"carol/web/3#0@1": "KILLED"}}, in_cell={"m0"}, sent={"m5": set()}) == {}


def test_facts_mapped_on_a_view_a_write_behind_are_news_only_where_they_differ_from_the_cells_now():
    from dataclasses import replace

    from reference.master.cell import TaskInfo
    from reference.master.reports import news

    # Two polls mapped on the same view (the task not yet reported): both say QUEUED, the
    # second with the port its borglet just picked. Once the first is written, the second
    # says nothing a client can use.
    cur = TaskInfo(borglet_state="QUEUED", seen=True)
    assert not news(cur, replace(cur, port=4100, pid=0))
    assert news(cur, replace(cur, port=4100, borglet_state="RUNNING", started_at=7.0))
    assert news(TaskInfo(), replace(cur, port=4100))  # the first report is news
    running = TaskInfo(borglet_state="RUNNING", seen=True, port=4100, started_at=7.0)
    assert news(running, replace(running, port=4101))  # a running task's port is a fact
    assert not news(running, replace(running, pid=99, usage=(("cpu", 3),)))  # these can wait


def test_a_borglets_word_that_a_task_is_ready_is_read_from_the_whole_reply_and_nothing_else():
    from reference.master.reports import ready_ids

    said = {"tasks": [
        {"task_id": "alice/web/0#0@1", "state": "RUNNING", "ready": True},
        {"task_id": "alice/web/1#0@1", "state": "RUNNING", "ready": False},
        {"task_id": "alice/web/2#0@1", "state": "RUNNING", "ready": True},  # whatever the sync named
    ]}  # fmt: skip
    assert ready_ids(said) == {"alice/web/0#0@1", "alice/web/2#0@1"}
    said["tasks"][0]["state"] = "FAILED"  # a stale "ready" beside an exit is no word
    said["tasks"][2]["ready"] = "yes"  # nor a value that is not JSON's true
    assert ready_ids(said) == frozenset()
    assert ready_ids({"tasks": "nonsense"}) == ready_ids({}) == frozenset()


def test_an_odd_usage_is_kept_in_bounds_and_its_record_reads_back_as_held():
    # A hostile or broken borglet: amounts beyond 64 bits, an infinity, NaN, a word, a negative.
    cell = master_cells.placed_cell()
    odd = {"cpu": 10**21, "ram": float("inf"), "disk": float("nan"), "net": "lots", "gpu": -5, "io": "12", "x": 2.9}
    r = _reply(cell, T0, state="RUNNING", usage=odd)
    info = map_reply(cell, "m1", r, {T0}).infos[T0]  # no exception: the reply is this machine's alone
    assert info.usage == (("cpu", 2**63 - 1), ("gpu", 0), ("io", 12), ("x", 2))
    assert intake.machine_facts({"usage": odd}).usage == info.usage
    assert intake.machine_facts({"usage": ["not", "a", "mapping"]}).usage == ()
    # Held in bounds, the record decodes to exactly what the leader holds (to each type).
    t = cell.state.tasks[T0]
    assert repr(codec.decode_task(codec.encode_task(t, info))) == repr((t, info))
