"""Proof that the explorer bites: for each invariant, a deliberately broken transition makes
the explorer report that invariant by name, with the shortest trace that reaches it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spec import actions as A
from spec.explore import Scope, explore, walk
from spec.invariants import INVARIANTS
from spec.model import CellState, DeathCause, TaskState, is_stale


def _with(name: str, fn) -> dict:
    table = dict(A.ACTIONS)
    table[name] = fn
    return table


def schedule_ignoring_capacity(s: CellState, task_id, machine):
    """Places a task wherever the machine is up, forgetting to check free resources."""
    t, m, j = s.tasks.get(task_id), s.machines.get(machine), s.jobs.get(task_id.job)
    if t is None or t.state is not TaskState.PENDING or m is None or not m.up or j is None:
        return None
    if not all(c.holds(m) for c in j.constraints):
        return None
    return s.with_(tasks=s.tasks.set(task_id, replace(t, state=TaskState.RUNNING, machine=machine)))


def schedule_ignoring_constraints(s: CellState, task_id, machine):
    """Checks resources but forgets the job's constraints (and its alloc's machine)."""
    t, m, j = s.tasks.get(task_id), s.machines.get(machine), s.jobs.get(task_id.job)
    if t is None or t.state is not TaskState.PENDING or m is None or not m.up or j is None:
        return None
    if not j.request.fits_in(A.machine_free(s, machine)):
        return None
    return s.with_(tasks=s.tasks.set(task_id, replace(t, state=TaskState.RUNNING, machine=machine)))


def schedule_on_down_machine(s: CellState, task_id, machine):
    """Forgets that the machine must be up."""
    t, m = s.tasks.get(task_id), s.machines.get(machine)
    if t is None or t.state is not TaskState.PENDING or m is None or m.up:
        return A.schedule(s, task_id, machine)
    return s.with_(tasks=s.tasks.set(task_id, replace(t, state=TaskState.RUNNING, machine=machine)))


def evict_any_priority(s: CellState, task_id, reason, preemptor=None):
    """Lets any pending task preempt any running one (prod bands included)."""
    t = s.tasks.get(task_id)
    if t is None or t.state is not TaskState.RUNNING:
        return None
    return s.with_(tasks=s.tasks.set(task_id, replace(t, state=TaskState.PENDING, machine=None)))


def submit_ignoring_quota(s: CellState, job):
    if not A.job_is_valid(job) or job.key in s.jobs:
        return None
    tasks = {t.id: t for t in (A.new_task(job, i, A.next_incarnation(s, job.key, i)) for i in range(job.task_count))}
    return A.with_tasks(s.with_(jobs=s.jobs.set(job.key, job)), tasks)


def restart_revives_in_place(s: CellState, task_id):
    """Brings the DEAD task itself back to PENDING instead of a new incarnation."""
    t = s.tasks.get(task_id)
    if A.restart(s, task_id) is None or t is None:
        return None
    return s.with_(tasks=s.tasks.set(task_id, replace(t, state=TaskState.PENDING, cause=None)))


def roll_without_kill(s: CellState, task_id):
    """Starts the new incarnation but leaves the old one RUNNING."""
    t, j = s.tasks.get(task_id), s.jobs.get(task_id.job)
    if t is None or j is None or t.state is not TaskState.RUNNING:
        return None
    nxt = A.new_task(j, task_id.index, task_id.incarnation + 1)
    return s.with_(tasks=s.tasks.set(nxt.id, nxt))


def roll_in_place_twice(s: CellState, task_id):
    """Starts the new incarnation RUNNING next to the old one on the same machine."""
    t, j = s.tasks.get(task_id), s.jobs.get(task_id.job)
    if t is None or j is None or t.state is not TaskState.RUNNING:
        return None
    nxt = A.new_task(j, task_id.index, task_id.incarnation + 1)
    nxt = replace(nxt, state=TaskState.RUNNING, machine=t.machine)
    return s.with_(tasks=s.tasks.set(nxt.id, nxt))


def roll_ignoring_budget(s: CellState, task_id):
    """Replaces a stale task however many of its job's tasks are already down."""
    t, j = s.tasks.get(task_id), s.jobs.get(task_id.job)
    if t is None or j is None or t.state is not TaskState.RUNNING or not is_stale(t, j):
        return None
    nxt = replace(A.new_task(j, task_id.index, task_id.incarnation + 1), down_for="roll")
    return A.with_tasks(s, {task_id: A.dead_task(t, DeathCause.KILLED), nxt.id: nxt})


def kill_job_leaving_tasks(s: CellState, job_key):
    """Removes the job but forgets to kill its tasks."""
    if job_key not in s.jobs:
        return None
    return s.with_(jobs=s.jobs.remove(job_key))


def machine_down_keeping_tasks(s: CellState, name):
    """Marks the machine down but leaves its tasks RUNNING on it."""
    m = s.machines.get(name)
    if m is None or not m.up:
        return None
    return s.with_(machines=s.machines.set(name, replace(m, up=False)))


def schedule_ignoring_alloc(s: CellState, task_id, machine):
    """Places a task of a job in an alloc as if the job had none: anywhere with room."""
    j = s.jobs.get(task_id.job)
    if j is None or j.alloc is None:
        return A.schedule(s, task_id, machine)
    free = s.with_(jobs=s.jobs.set(j.key, replace(j, alloc=None)))
    placed = A.schedule(free, task_id, machine)
    return None if placed is None else placed.with_(jobs=s.jobs)


def schedule_prod_into_reclaimed(s: CellState, task_id, machine):
    """Offers prod tasks the resources reclaimed from other prod tasks, as if they were batch."""
    t, m, j = s.tasks.get(task_id), s.machines.get(machine), s.jobs.get(task_id.job)
    if t is None or t.state is not TaskState.PENDING or m is None or not m.up or j is None:
        return None
    if j.alloc is not None or not all(c.holds(m) for c in j.constraints):
        return A.schedule(s, task_id, machine)
    if not j.request.fits_in(A.machine_free(s, machine)):
        return None
    return s.with_(tasks=s.tasks.set(task_id, replace(t, state=TaskState.RUNNING, machine=machine)))


def reserve_without_bounds(s: CellState, task_id, reservation):
    """Sets any reservation, even above the request."""
    t = s.tasks.get(task_id)
    if t is None or t.state is not TaskState.RUNNING:
        return None
    return s.with_(tasks=s.tasks.set(task_id, replace(t, reservation=t.request.scale(3))))


BROKEN = {
    "dead_stays_dead": ("restart", restart_revives_in_place, Scope(2, 2, 2)),
    "running_task_has_one_up_machine": ("machine_down", machine_down_keeping_tasks, Scope(2, 2, 2)),
    "prod_requests_within_capacity": ("schedule", schedule_prod_into_reclaimed, Scope(1, 3, 3, reclaim=True)),
    "prod_never_preempts_prod": ("evict", evict_any_priority, Scope(1, 3, 3)),
    "constraints_hold": ("schedule", schedule_ignoring_constraints, Scope(2, 2, 2)),
    "admitted_jobs_fit_quota": ("submit", submit_ignoring_quota, Scope(2, 2, 2, prod_quota=500)),
    "one_incarnation_running": ("roll", roll_in_place_twice, Scope(2, 2, 2)),
    "only_newest_incarnation_live": ("roll", roll_without_kill, Scope(2, 2, 2)),
    "live_tasks_belong_to_jobs": ("kill_job", kill_job_leaving_tasks, Scope(2, 2, 2)),
    "reservations_within_capacity": ("reserve", reserve_without_bounds, Scope(1, 2, 2, reclaim=True)),
    "alloc_tasks_within_alloc": ("schedule", schedule_ignoring_alloc, Scope(2, 3, 3, allocs=True)),
    # one job of two tasks, max_unavailable 1: its template changes, and both are rolled at once
    "disruptions_within_budget": ("roll", roll_ignoring_budget, Scope(2, 2, 1)),
}


def test_every_invariant_has_a_breaking_transition():
    assert set(BROKEN) == {i.name for i in INVARIANTS}


@pytest.mark.parametrize("invariant", sorted(BROKEN))
def test_explorer_reports_the_broken_invariant(invariant):
    action, broken, scope = BROKEN[invariant]
    res = explore(scope, actions=_with(action, broken), max_states=200_000)
    assert res.violation is not None, f"{invariant}: no violation found in {res.states} states"
    assert invariant in res.violation.invariants
    assert res.violation.trace, "a trace leads to the violation"
    assert res.violation.trace[-1].action == action  # the broken action is the last step


def test_correct_spec_has_no_violation_in_the_same_scopes():
    for scope in {s for _, _, s in BROKEN.values()}:
        res = explore(scope, max_states=5_000)
        assert res.violation is None, res.violation


def test_walk_finds_a_violation_and_is_replayable_by_seed():
    table = _with("machine_down", machine_down_keeping_tasks)
    a = walk(Scope(2, 2, 2), steps=5_000, seed=7, actions=table)
    b = walk(Scope(2, 2, 2), steps=5_000, seed=7, actions=table)
    assert a.violation is not None
    assert "running_task_has_one_up_machine" in a.violation.invariants
    assert [str(s) for s in a.violation.trace] == [str(s) for s in b.violation.trace]


def schedule_in_any_alloc_of_the_set(s: CellState, task_id, machine):
    """Places a task of a job in an alloc set on the machine of any alloc of the set, not only
    of alloc `index` (the index rule forgotten)."""
    t, m, j = s.tasks.get(task_id), s.machines.get(machine), s.jobs.get(task_id.job)
    if j is None or j.alloc is None:
        return A.schedule(s, task_id, machine)
    if t is None or t.state is not TaskState.PENDING or m is None or not m.up:
        return None
    if not any(a.machine == machine and (s.alloc_used(a.name) + j.request).fits_in(a.resources)
               for a in s.alloc_set(j.alloc)):  # fmt: skip
        return None
    return s.with_(tasks=s.tasks.set(task_id, replace(t, state=TaskState.RUNNING, machine=machine)))


def test_the_index_rule_bites():
    # The set a0 has alloc 0 on m0 and alloc 1 on m1; the job in it has one task, index 0.
    res = explore(Scope(2, 3, 3, allocs=True), actions=_with("schedule", schedule_in_any_alloc_of_the_set),
                  max_states=200_000)  # fmt: skip
    assert res.violation is not None and "alloc_tasks_within_alloc" in res.violation.invariants
    assert "outside its alloc a0/0" in " ".join(res.violation.messages)
