"""Convergence asks no roll of a job whose rollout the shell holds by its documented rule: a task
of the current version crashed and restarted less than ROLLOUT_PAUSE_S ago (the harness's own
kill_task_process makes such crashes)."""

from __future__ import annotations

from dataclasses import replace

from harness.checks import ROLLOUT_PAUSE_S, convergence_problems, rollout_paused
from harness.observe import Observation
from spec.actions import machine_add, roll, schedule, submit, update
from spec.model import CellState, Job, Machine, Resources, TaskId

NOW = 10_000.0


def cell_mid_rollout() -> tuple[CellState, TaskId, TaskId]:
    """Job u/j of 2 tasks on m0, then a new version: task 0 replaced and running it, task 1 stale."""
    s = machine_add(CellState(), Machine("m0", Resources.of(cpu=4000, ram=2**30)))
    job = Job("u", "j", 100, 2, Resources.of(cpu=100, ram=2**20), max_unavailable=1)
    s = submit(s, job)
    for i in range(2):
        s = schedule(s, TaskId("u/j", i), "m0")
    s = update(s, "u/j", job=replace(job, template="v2"))
    s = roll(s, TaskId("u/j", 0))
    new = TaskId("u/j", 0, 1)
    s = schedule(s, new, "m0")
    assert s is not None and roll(s, TaskId("u/j", 1)) is not None  # the spec allows the next roll
    return s, new, TaskId("u/j", 1)


def observation(s: CellState, views: dict) -> Observation:
    return Observation(t=0.0, state=s, task_views=views, machine_views={})


def test_a_crash_of_the_current_version_within_the_pause_holds_the_rollout_and_nothing_else():
    s, new, stale = cell_mid_rollout()
    crashed = {"last_exit": "signal 9", "failures": 1, "restarts": 0, "started_at": NOW - 5}
    assert rollout_paused(s, observation(s, {new: crashed}), NOW) == {"u/j"}
    assert rollout_paused(s, observation(s, {new: {**crashed, "started_at": NOW - ROLLOUT_PAUSE_S}}), NOW) == set()
    assert rollout_paused(s, observation(s, {new: {**crashed, "failures": 0}}), NOW) == set()  # never restarted
    assert rollout_paused(s, observation(s, {stale: crashed}), NOW) == set()  # the old version's crash
    no_roll = [p for p in convergence_problems(s, observation(s, {}), {"u/j"}, NOW) if "no roll" in p]
    held = [p for p in convergence_problems(s, observation(s, {new: crashed}), {"u/j"}, NOW) if "no roll" in p]
    assert no_roll and not held, (no_roll, held)
