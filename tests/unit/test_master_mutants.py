"""Small hand-checkable cases for the master's Draft/Cell objects and the pure reply mapping.

Tables in the kube-scheduler style: one row per case, the expected value beside it.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace

import pytest

from reference.jobspec import parse_job
from reference.master.cell import Cell, Draft, JobInfo, MachineInfo, TaskInfo, borglet_task_id
from reference.master.reports import (
    Hold,
    hold_back,
    live_by_index,
    map_reply,
    parse_borglet_task_id,
)
from spec.actions import EvictReason, machine_add, schedule, submit
from spec.model import CellState, Machine, Resources, TaskId

SPEC = parse_job({"name": "web", "user": "alice", "task_count": 2, "request": {"cpu": "100m"},
                  "command": ["sleep", "100"], "restart_policy": "never"})  # fmt: skip
T0, T1 = TaskId("alice/web", 0, 0), TaskId("alice/web", 1, 0)
M2 = Machine("m2", Resources.of(cpu=4000, ram=2**30))


def placed_cell(**info: object) -> Cell:
    """alice/web's two tasks RUNNING on m1, each with TaskInfo(**info)."""
    state = machine_add(CellState(), Machine("m1", Resources.of(cpu=4000, ram=2**30)))
    assert state is not None
    state = submit(state, SPEC.to_spec_job())
    for i in range(2):
        state = schedule(state, TaskId("alice/web", i, 0), "m1")
    assert state is not None
    tasks = {tid: TaskInfo(**info) for tid in state.tasks}  # type: ignore[arg-type]
    return Cell(state, {"m1": MachineInfo("http://127.0.0.1:1")}, {"alice/web": JobInfo(SPEC)}, tasks)


# --- TaskInfo and Cell ------------------------------------------------------------------------


def test_task_info_defaults_describe_a_task_never_reported():
    i = TaskInfo()
    assert (i.port, i.healthy, i.restarts, i.borglet_state, i.seen, i.placement) == (0, None, 0, "", False, 0)
    assert borglet_task_id(T0, i) == "alice/web/0#0@0"


def test_infos_are_frozen_values():
    # Draft.changed compares infos by identity, so an info is replaced, never edited in place.
    for info in (MachineInfo("http://127.0.0.1:1"), TaskInfo(port=1), JobInfo(SPEC)):
        with pytest.raises(FrozenInstanceError):
            info.address = "x"  # type: ignore[misc,union-attr]
    assert hash(MachineInfo("a")) == hash(MachineInfo("a"))
    with pytest.raises(FrozenInstanceError):
        Cell().revision = 1  # type: ignore[misc]


def test_history_keeps_the_last_twenty_entries():
    info = TaskInfo()
    for i in range(25):
        info = info.with_history("RUNNING", float(i), f"step {i}")
    assert len(info.history) == 20  # entries 5..24
    assert info.history[0] == ("RUNNING", 5.0, "step 5")
    assert info.history[-1] == ("RUNNING", 24.0, "step 24")


def test_task_info_of_an_unknown_task_is_the_default():
    cell = placed_cell()
    unknown = TaskId("bob/x", 0, 0)
    assert cell.task_info(unknown) == TaskInfo()
    assert Draft(cell, 0.0).task_info(unknown) == TaskInfo()
    assert Draft(cell, 0.0).machine_info("nowhere") == MachineInfo()


# --- Draft.step and history ---------------------------------------------------------------------


def test_step_with_a_false_guard_changes_nothing():
    d = Draft(placed_cell(), 1.0)
    assert d.step("finish", TaskId("bob/x", 0, 0)) is False  # no such task: guard false
    assert d.steps == [] and not d.changed and d.tasks == d.base.tasks


def test_step_records_history_with_the_reason_or_the_action_name():
    d = Draft(placed_cell(), 7.0)
    assert d.step("finish", T0, reason="exit 0") is True
    assert d.step("fail", T1) is True  # no reason given: the action's name
    assert d.steps == ["finish", "fail"]
    assert d.tasks[T0].history == (("DEAD", 7.0, "exit 0"),)
    assert d.tasks[T1].history == (("DEAD", 7.0, "fail"),)


def test_new_tasks_get_a_first_history_entry_and_default_facts():
    d = Draft(Cell(machine_add(CellState(), M2)), 2.0)  # type: ignore[arg-type]
    assert d.step("submit", SPEC.to_spec_job(), reason="submitted")
    assert set(d.tasks) == {T0, T1}  # two new tasks, none before
    for tid in (T0, T1):
        assert d.tasks[tid] == TaskInfo(
            history=(("PENDING", 2.0, "submitted"),), events=((1, 2.0, "submitted", "submitted"),)
        )
    assert d.step("schedule", T0, "m2")  # a first placement: placement 0 + 1 = 1
    assert d.tasks[T0].placement == 1
    assert d.tasks[T0].history == (("PENDING", 2.0, "submitted"), ("RUNNING", 2.0, "schedule"))


def test_a_step_that_leaves_a_task_state_alone_adds_no_history():
    d = Draft(placed_cell(), 7.0)
    assert d.step("machine_add", M2)  # tasks untouched
    assert all(info.history == () for info in d.tasks.values())


def test_evict_then_place_elsewhere_resets_the_process_facts():
    reported = {"port": 9000, "healthy": True, "borglet_state": "RUNNING", "seen": True,
                "usage": (("cpu", 50),), "started_at": 5.0, "restarts": 2}  # fmt: skip
    d = Draft(placed_cell(**reported), 3.0)
    assert d.step("machine_add", M2)
    # RUNNING on m1 -> PENDING (no machine): facts reset, placement + 0 (no new process yet)
    assert d.step("evict", T0, EvictReason.RECLAMATION)
    i = d.tasks[T0]
    assert (i.port, i.healthy, i.borglet_state, i.seen, i.usage, i.started_at) == (0, None, "", False, (), 0.0)
    assert i.placement == 0 and i.restarts == 2  # restarts belong to the task, not to the process
    assert i.history == (("PENDING", 3.0, "evict"),)
    # PENDING -> RUNNING on m2: a new process, placement 0 + 1 = 1
    assert d.step("schedule", T0, "m2")
    assert d.tasks[T0].placement == 1
    assert borglet_task_id(T0, d.tasks[T0]) == "alice/web/0#0@1"
    # T1 never moved: its facts are untouched
    assert d.tasks[T1] == d.base.tasks[T1]


def test_dead_task_loses_its_process_facts_but_gets_no_new_placement():
    d = Draft(placed_cell(port=9000, seen=True, placement=4), 1.0)
    assert d.step("finish", T0)  # RUNNING on m1 -> DEAD with no machine
    assert d.state.tasks[T0].machine is None
    i = d.tasks[T0]
    assert (i.port, i.seen, i.placement) == (0, False, 4)  # placement 4 + 0: no new process


def test_set_task_info_ignores_tasks_not_in_the_state():
    d = Draft(placed_cell(), 1.0)
    d.set_task_info(T0, TaskInfo(port=1))
    d.set_task_info(TaskId("bob/x", 0, 0), TaskInfo(port=2))
    assert d.tasks[T0].port == 1
    assert TaskId("bob/x", 0, 0) not in d.tasks


# --- Draft.changed: one row per kind of change ----------------------------------------------------


def _state_step(d: Draft) -> None:
    d.step("machine_add", M2)


def _quota(d: Draft) -> None:
    d.quotas[("alice", "prod")] = Resources.of(cpu=1)  # type: ignore[index]  # any key


def _new_machine(d: Draft) -> None:
    d.machines["m1"] = MachineInfo("http://127.0.0.1:2")


def _drop_machine(d: Draft) -> None:
    del d.machines["m1"]


def _new_job(d: Draft) -> None:
    d.jobs["alice/web"] = JobInfo(SPEC, submitted_at=9.0)


def _drop_job(d: Draft) -> None:
    del d.jobs["alice/web"]


def _new_task(d: Draft) -> None:
    d.tasks[T0] = replace(d.tasks[T0], port=1)


def _drop_task(d: Draft) -> None:
    del d.tasks[T0]


def _same_objects(d: Draft) -> None:
    d.machines["m1"] = d.base.machines["m1"]  # the very same object: not a change


@pytest.mark.parametrize(
    ("edit", "changed"),
    [
        (lambda d: None, False),
        (_same_objects, False),
        (_state_step, True),
        (_quota, True),
        (_new_machine, True),
        (_drop_machine, True),  # 0 machines != 1
        (_new_job, True),
        (_drop_job, True),  # 0 jobs != 1
        (_new_task, True),
        (_drop_task, True),  # 1 task != 2
    ],
)
def test_draft_changed(edit, changed):
    d = Draft(placed_cell(), 1.0)
    edit(d)
    assert d.changed is changed


# --- Borglet task ids and holds -------------------------------------------------------------------


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


@pytest.mark.parametrize(
    ("hold", "text"),
    [
        (Hold("alice/web/0#1@0", "", "m3"), "waiting for machine m3 to report"),
        (Hold("alice/web/0#1@0", "alice/web/0#0@2", "m1"), "waiting for incarnation 0 to stop"),
        (Hold("alice/web/0#1@0", "foreign-id", "m1"), "waiting for foreign-id to stop"),
    ],
)
def test_hold_describe(hold, text):
    assert hold.describe() == text


def test_live_by_index_counts_live_parseable_ids_of_up_machines_only():
    reported = {
        "m1": {"alice/web/0#0@0": "RUNNING", "alice/web/1#0@0": "FINISHED", "junk": "RUNNING"},
        "m2": {"alice/web/0#1@0": "STARTING"},
        "m3": {"alice/web/1#1@0": "RUNNING"},  # m3 is down
    }
    assert live_by_index(reported, ["m2", "m1"]) == {
        ("alice/web", 0): [("m1", "alice/web/0#0@0"), ("m2", "alice/web/0#1@0")],
    }


def _d(task_id: str) -> dict:
    job, index, _ = parse_borglet_task_id(task_id)  # type: ignore[misc]
    return {"task_id": task_id, "job": job, "index": index}


NEW = "alice/web/0#1@0"
OLD_LIVE = {("alice/web", 0): [("m1", "alice/web/0#0@0")]}


@pytest.mark.parametrize(
    ("live", "released", "unreported", "kept", "held"),
    [
        ({}, set(), None, [NEW], []),  # nothing else live, every machine reported: send it
        ({}, set(), [], [NEW], []),  # an empty list of unreported machines is the same
        ({("alice/web", 0): [("m2", NEW)]}, set(), None, [NEW], []),  # only itself is live
        (OLD_LIVE, set(), None, [], [Hold(NEW, "alice/web/0#0@0", "m1")]),  # wait for the old one
        (OLD_LIVE, {NEW}, None, [NEW], []),  # already released: never taken back
        ({}, set(), ["m9", "m4"], [], [Hold(NEW, "", "m4")]),  # first unreported machine, sorted
        ({}, {NEW}, ["m4"], [NEW], []),
        (OLD_LIVE, set(), ["m4"], [], [Hold(NEW, "alice/web/0#0@0", "m1")]),  # the live one first
    ],
)
def test_hold_back(live, released, unreported, kept, held):
    keep, holds = hold_back([_d(NEW)], live, released, unreported)
    assert [d["task_id"] for d in keep] == kept
    assert holds == held


# --- map_reply ------------------------------------------------------------------------------------


def _reply(cell: Cell, tid: TaskId, **fields: object) -> dict:
    return {"tasks": [{"task_id": borglet_task_id(tid, cell.task_info(tid)), **fields}]}


def test_map_reply_reads_missing_fields_as_zero():
    cell = placed_cell()
    out = map_reply(cell, "m1", _reply(cell, T0, state="RUNNING"), {T0})
    assert out.steps == []
    info = out.infos[T0]  # first report: seen flips to True, worth writing
    assert (info.port, info.restarts, info.started_at, info.seen, info.usage) == (0, 0, 0.0, True, ())
    assert out.usage[T0] == ()


def test_map_reply_reads_given_fields():
    cell = placed_cell()
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
    cell = placed_cell(**base)
    fields = {"state": "RUNNING", "port": 9000, "healthy": True, "started_at": 5.0} | change
    out = map_reply(cell, "m1", _reply(cell, T0, **fields), {T0})
    assert (T0 in out.infos) is written


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
    cell = placed_cell(seen=True, borglet_state="RUNNING")
    assert map_reply(cell, "m1", _reply(cell, T0, state=state, reason=reason), {T0}).steps == [step]


def test_map_reply_skips_tasks_no_longer_running_there():
    cell = placed_cell(seen=True)
    assert map_reply(cell, "m2", _reply(cell, T0, state="FINISHED"), {T0}).steps == []  # wrong machine
    # absent from the reply: lost only once the borglet had reported it
    assert map_reply(cell, "m1", {"tasks": []}, {T0}).steps == [("lost", (T0,), "unknown to its borglet")]
    assert map_reply(placed_cell(), "m1", {"tasks": []}, {T0}).steps == []


def test_a_tracked_map_pops_a_missing_key_to_its_default_and_records_it():
    from reference.master.cell import Tracked

    t = Tracked({"a": 1})
    assert t.pop("x", 5) == 5 and t.written == {"x"}
    assert t.pop("a") == 1 and "a" not in t


def testchanged_keys_of_maps_made_apart_are_found_by_comparison():
    # Maps not made from one another by one step have no record of their change: their keys
    # are compared entry by entry (by identity), both ways.
    from reference.master.cell import changed_keys
    from spec.fmap import FMap

    one, two, three = object(), object(), object()
    before = FMap({"a": one, "b": two})
    assert changed_keys(before, before) == set()
    assert changed_keys(before, FMap({"a": one, "c": three})) == {"b", "c"}
    assert changed_keys(before, before.set("a", three)) == {"a"}
