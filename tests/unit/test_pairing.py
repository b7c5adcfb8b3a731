"""Crashing task::machine pairings: the score term's arithmetic, the memory's bounds and expiry, and a pass that prefers other machines and says why it waits."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from reference.scheduler import SchedulerConfig
from reference.scheduler.adapter import plan_for
from reference.scheduler.pairing import (
    REPEATED,
    WEIGHT,
    CrashMemory,
    crash_penalty,
    penalties,
)
from spec.actions import machine_add, submit
from spec.model import CellState, Job, Machine, Resources, TaskId

CASES = [
    # no crash: nothing off
    (0, 0.0),
    # one crash is chance: nothing off (below REPEATED = 2)
    (1, 0.0),
    # two crashes: WEIGHT * (2 - 1) = 100 * 1 = 100, a policy's whole range (0..100)
    (2, 100.0),
    # three crashes: 100 * (3 - 1) = 200, still finite: a preference, never a rule
    (3, 200.0),
    (7, 600.0),
]


@pytest.mark.parametrize(("crashes", "points"), CASES)
def test_crash_penalty_table(crashes, points):
    assert crash_penalty(crashes) == points


def test_the_thresholds_are_what_the_table_says():
    assert (REPEATED, WEIGHT) == (2, 100.0)
    # a lighter weight scales the repeated case only: 10 * (2 - 1) = 10
    assert crash_penalty(2, weight=10.0) == 10.0


def test_penalties_by_machine_row():
    # rows 4, 7, 9 in a sample; 2 crashes on row 7 (100 off), 3 on row 9 (200 off), 1 on row 4 (nothing)
    got = penalties({4: 1, 7: 2, 9: 3}, np.array([4, 7, 9, 11]))
    assert got.tolist() == [0.0, 100.0, 200.0, 0.0]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_memory_counts_expire_after_ttl():
    clock = Clock()
    m = CrashMemory(ttl_s=60, clock=clock)
    m.record("u/j", 0, "m1")
    clock.now += 30
    m.record("u/j", 0, "m1")
    m.record("u/j", 0, "m2")
    assert m.counts("u/j", 0) == {"m1": 2, "m2": 1}
    assert m.snapshot() == {("u/j", 0): {"m1": 2}}  # only what changes a score (>= REPEATED)
    clock.now += 31  # the first crash is 61 s old: forgotten
    assert m.counts("u/j", 0) == {"m1": 1, "m2": 1}
    assert m.snapshot() == {}
    clock.now += 60
    m.snapshot()
    assert len(m) == 0  # an index with nothing recent left is dropped


def test_memory_is_bounded():
    clock = Clock()
    m = CrashMemory(max_indices=3, per_index=2, clock=clock)
    for i in range(5):
        m.record("u/j", i, "m1")
    assert len(m) == 3 and m.counts("u/j", 0) == {} and m.counts("u/j", 4) == {"m1": 1}
    for _ in range(5):
        m.record("u/j", 4, "m1")
    assert m.counts("u/j", 4) == {"m1": 2}  # the newest per_index = 2 kept


def _cell(*names: str) -> CellState:
    s = CellState()
    for n in names:
        s = machine_add(s, Machine(n, Resources.of(cpu=4000, ram=2**30)))
    job = Job("u", "j", 200, 1, Resources.of(cpu=1000))
    return submit(s, job)


T = TaskId("u/j", 0, 3)


def _plan(state: CellState, crashes: dict) -> object:
    pending = {t for t in state.tasks}
    cfg = SchedulerConfig(spread_weight=0, skew_weight=0, locality_weight=0)
    return plan_for(state, cfg, seed=1, crashes=crashes, pending_ids=pending, running_ids=set())


def _with_task(state: CellState) -> CellState:
    # the index's fourth incarnation is the one pending
    task = state.tasks[TaskId("u/j", 0, 0)]
    return state.with_(tasks=state.tasks.edit({T: replace(task, id=T)}, [task.id]))


def test_a_pass_prefers_a_machine_the_task_did_not_crash_on():
    s = _with_task(_cell("a", "b"))
    free = _plan(s, {})
    first = free.placements[0].machine  # where it goes with no memory (equal machines: the walk's first)
    other = "b" if first == "a" else "a"
    moved = _plan(s, {("u/j", 0): {first: 2}})
    assert moved.placements[0].machine == other


def test_a_task_whose_only_machine_it_crashed_on_still_runs_there():
    # a preference, not a rule: with nowhere else to go it runs there again, under its back-off,
    # however often it crashed there (a crash loop stays visible as one, not PENDING)
    s = _with_task(_cell("a"))
    for crashes in (REPEATED, 3, 8):
        assert _plan(s, {("u/j", 0): {"a": crashes}}).placements[0].machine == "a"


def test_of_machines_it_crashed_on_a_task_goes_where_it_crashed_least():
    s = _with_task(_cell("a", "b"))
    assert _plan(s, {("u/j", 0): {"a": 5, "b": 2}}).placements[0].machine == "b"
    assert _plan(s, {("u/j", 0): {"a": 2, "b": 5}}).placements[0].machine == "a"


def test_the_leader_records_each_failure_once_on_its_machine():
    from reference.master.cell import Cell, Draft, TaskInfo
    from reference.master.crashes import record_failures
    from reference.master.leader import restart_dead
    from spec.actions import fail, schedule

    s = _cell("a", "b")
    tid = TaskId("u/j", 0, 0)
    s = fail(schedule(s, tid, "a"), tid)
    d = Draft(Cell(s, tasks={tid: TaskInfo(machine="a")}), now=100.0)
    memory = CrashMemory()
    assert record_failures(d, {tid}, memory) == 1
    restart_dead(d, {tid}, lambda n: n)  # marks the death seen (its back-off) and restarts it
    assert record_failures(d, {tid}, memory) == 0  # the same death is not counted twice
    assert memory.counts("u/j", 0) == {"a": 1}
