"""A task's facts in the master (TaskInfo): defaults, frozen values, a bounded history; a
Draft's steps add history entries and reset a process's facts when the task is placed anew.

Tables in the kube-scheduler style: one row per case, the expected value beside it.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from reference.master import codec
from reference.master.cell import Cell, Draft, JobInfo, MachineInfo, TaskInfo, borglet_task_id
from reference.master.writer import diff_ops
from spec.actions import EvictReason, machine_add
from spec.model import CellState, TaskId
from tests.unit.master_cells import M2, SPEC, T0, T1, placed_cell

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


def test_facts_read_again_unchanged_write_nothing():
    # A borglet's report read again with the same facts (a usage sample that moved nothing)
    # leaves the draft unchanged, so the writer puts no task record.
    base = placed_cell(port=7, seen=True, usage=(("cpu_milli", 0), ("ram_bytes", 4096)))
    d = Draft(base, 5.0)
    d.set_task_info(T0, TaskInfo(port=7, seen=True, usage=(("cpu_milli", 0), ("ram_bytes", 4096))))
    assert not d.changed and T0 not in d.task_keys
    assert diff_ops(d.base, d, codec.Keys("c")) == []
    d.set_task_info(T0, TaskInfo(port=7, seen=True, usage=(("cpu_milli", 3), ("ram_bytes", 4096))))
    assert d.changed and d.tasks[T0].usage == (("cpu_milli", 3), ("ram_bytes", 4096))
    assert len(diff_ops(d.base, d, codec.Keys("c"))) == 1
