"""Drains: drain, uncordon and drain_move, and a drain explored to the end within each job's budget."""

from __future__ import annotations

from spec.actions import (
    DEFAULT_BUDGET,
    alloc_create,
    budget,
    drain,
    drain_move,
    machine_remove,
    schedule,
    submit,
    tasks_down,
    uncordon,
)
from spec.explore import Scope, enabled_steps, explore
from spec.invariants import INVARIANTS, Invariant
from spec.model import Alloc, Machine, Resources, TaskState

from .fixtures import cell, job, running, tid

M2 = Machine("m2", Resources.of(cpu=4000, ram=4096), (("rack", "r0"),), "r0")


def test_drain_cordons_and_uncordon_reopens():
    s = cell()
    d = drain(s, "m0")
    assert d is not None and not d.machines["m0"].schedulable and d.machines["m1"].schedulable
    assert drain(d, "m0") is None  # already drained
    assert drain(s, "zz") is None  # no such machine
    assert uncordon(s, "m0") is None  # not drained
    u = uncordon(d, "m0")
    assert u is not None and u.machines["m0"].schedulable


def test_a_drained_machine_takes_no_task_nor_alloc():
    j = job(cpu=500)
    s = drain(running(cell(), j, "m1"), "m0")
    pending = job("p", cpu=500)
    s2 = submit(s, pending)
    assert schedule(s2, tid(pending), "m0") is None  # cordoned
    assert schedule(s2, tid(pending), "m1") is not None
    assert alloc_create(s2, Alloc("a", 0, "m0", Resources.of(cpu=100), 200, "alice")) is None
    assert alloc_create(s2, Alloc("a", 0, "m1", Resources.of(cpu=100), 200, "alice")) is not None


def test_budget_defaults_to_one():
    assert budget(job()) == DEFAULT_BUDGET == 1


def test_drain_move_respects_the_budget():
    # Job of 2 tasks on m0, budget 1: the first moves (1 down), the second waits until the
    # first runs elsewhere.
    j = job(n=2, cpu=500)
    s = running(running(cell(), j, "m0", 0), j, "m0", 1)
    assert drain_move(s, tid(j, 0)) is None  # m0 is not drained
    s = drain(s, "m0")
    first = drain_move(s, tid(j, 0))
    assert first is not None and first.tasks[tid(j, 0)].state is TaskState.PENDING
    assert first.tasks[tid(j, 0)].machine is None and tid(j, 0) in first.tasks  # same incarnation
    assert tasks_down(first, j.key) == 1
    assert drain_move(first, tid(j, 1)) is None  # 1 down already = budget 1
    assert schedule(first, tid(j, 0), "m0") is None  # not back onto the drained machine
    placed = schedule(first, tid(j, 0), "m1")
    assert placed is not None and tasks_down(placed, j.key) == 0
    second = drain_move(placed, tid(j, 1))
    assert second is not None
    done = schedule(second, tid(j, 1), "m1")
    assert done is not None and not done.running_on("m0")
    # Removing the drained, empty machine evicts nothing: nothing runs there.
    removed = machine_remove(done, "m0")
    assert removed is not None and len(removed.running_on("m1")) == 2


def test_a_job_already_down_by_its_budget_is_not_drained():
    # A job with a task that never found a machine is down 1: drain moves none of its tasks.
    j = job(n=2, cpu=500)
    s = drain(running(cell(), j, "m0", 0), "m0")
    assert tasks_down(s, j.key) == 1
    assert drain_move(s, tid(j, 0)) is None


def test_drain_move_needs_a_running_task():
    j = job(cpu=500)
    s = drain(submit(cell(), j), "m0")
    assert drain_move(s, tid(j)) is None  # PENDING


def _drain_within_budget(before, step, after):
    if step.action != "drain_move":
        return []
    job = step.args[0].job
    down = tasks_down(after, job)
    return [] if down <= budget(after.jobs[job]) else [f"{job} has {down} tasks down after {step}"]


def test_drains_explored_keep_every_job_within_its_budget():
    # Every reachable state of a small scope with drains: no drain_move takes a job past its budget.
    within = Invariant("drain_within_budget", "a drain step leaves its job within budget", step_check=_drain_within_budget)
    scope = Scope(machines=2, tasks=2, priorities=1, drains=True)
    res = explore(scope, max_states=1500, invariants=(*INVARIANTS, within))
    assert res.violation is None, res.violation
    assert res.actions_fired["drain"] and res.actions_fired["drain_move"] and res.actions_fired["uncordon"]
    assert res.invariant_checks["drain_within_budget"] > 100


def test_the_budget_check_bites():
    # Without drain_move's budget guard the same exploration finds a job over its budget.
    import spec.actions as A

    def unguarded(state, task_id):
        t = state.tasks.get(task_id)
        if t is None or t.state is not TaskState.RUNNING or state.machines[t.machine].schedulable:
            return None
        return A.evict(state, task_id, A.EvictReason.MAINTENANCE)

    within = Invariant("drain_within_budget", "", step_check=_drain_within_budget)
    res = explore(Scope(machines=2, tasks=2, priorities=1, drains=True), max_states=1500,
                  actions={**A.ACTIONS, "drain_move": unguarded}, invariants=(within,))
    assert res.violation is not None and res.violation.invariants == ["drain_within_budget"]


def test_enabled_steps_propose_drains_only_in_a_drain_scope():
    s = cell()
    assert not [st for st in enabled_steps(Scope(), s) if st.action == "drain"]
    assert {st.args[0] for st in enabled_steps(Scope(drains=True), s) if st.action == "drain"} == {"m0", "m1"}
