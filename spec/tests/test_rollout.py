"""Rolling updates in the spec: any field of a job can change; a change a running task must
restart for is rolled out at most max_unavailable tasks at a time, the rest apply in place."""

from __future__ import annotations

from dataclasses import replace

from spec.actions import disrupted_tasks, roll, schedule, tasks_down, update, within_budget
from spec.explore import Scope, explore
from spec.invariants import check_state
from spec.model import Constraint, ConstraintOp, RestartPolicy, TaskState, is_stale, task_template

from .fixtures import cell, job, running, tid


def three_running(max_unavailable: int = 1):
    j = replace(job(n=3, cpu=500, priority=200), max_unavailable=max_unavailable)
    s = cell()
    for i, m in enumerate(("m0", "m1", "m0")):
        s = running(s, j, m, i)
    return j, s


def test_a_new_template_makes_running_tasks_stale_and_pending_ones_current():
    j, s = three_running()
    s = update(s, j.key, job=replace(j, template="cmd-v2"))
    assert s is not None and s.jobs[j.key].version == 1
    new = s.jobs[j.key]
    assert all(is_stale(s.tasks[tid(j, i)], new) for i in range(3))
    assert all(s.tasks[tid(j, i)].state is TaskState.RUNNING for i in range(3))  # nothing restarts by itself


def test_roll_takes_at_most_max_unavailable_down():
    j, s = three_running(max_unavailable=1)
    s = update(s, j.key, job=replace(j, template="cmd-v2"))
    first = roll(s, tid(j, 0))
    assert first is not None and disrupted_tasks(first, first.jobs[j.key]) == 1
    replacement = first.latest(j.key, 0)
    assert replacement.state is TaskState.PENDING and replacement.down_for == "roll"
    assert replacement.template == task_template(first.jobs[j.key])
    assert roll(first, tid(j, 1)) is None  # 1 down = the budget
    placed = schedule(first, replacement.id, "m1")
    assert placed is not None and placed.latest(j.key, 0).down_for == ""  # running again: not down
    assert roll(placed, tid(j, 1)) is not None


def test_a_budget_of_two_rolls_two_at_once():
    j, s = three_running(max_unavailable=2)
    s = update(s, j.key, job=replace(j, template="cmd-v2"))
    two = roll(roll(s, tid(j, 0)), tid(j, 1))
    assert two is not None and disrupted_tasks(two, two.jobs[j.key]) == 2
    assert roll(two, tid(j, 2)) is None
    assert not check_state(two)


def test_a_task_down_for_another_cause_spends_the_budget():
    # A failed task is down (on_failure restarts it): a roll must not add a second outage.
    j, s = three_running()
    s = update(s, j.key, job=replace(j, template="cmd-v2"))
    from spec.actions import fail

    s = fail(s, tid(j, 2))
    assert tasks_down(s, j.key) == 1 and not within_budget(s, s.jobs[j.key])
    assert roll(s, tid(j, 0)) is None


def test_changes_that_need_no_restart_apply_in_place():
    j, s = three_running()
    # priority 200 -> 250 stays in the production band; the restart policy and the count change too
    s2 = update(s, j.key, job=replace(j, priority=250, restart_policy=RestartPolicy.ALWAYS, task_count=4))
    assert s2 is not None
    new = s2.jobs[j.key]
    for i in range(3):
        t = s2.tasks[tid(j, i)]
        assert t.state is TaskState.RUNNING and t.priority == 250 and not is_stale(t, new)
    assert s2.latest(j.key, 3).state is TaskState.PENDING  # the added task


def test_a_change_of_band_or_constraints_is_rolled():
    j, s = three_running()
    batch = update(s, j.key, job=replace(j, priority=100))
    assert all(is_stale(batch.tasks[tid(j, i)], batch.jobs[j.key]) for i in range(3))
    assert batch.tasks[tid(j, 0)].priority == 200  # keeps its old band until replaced
    moved = update(s, j.key, job=replace(j, constraints=(Constraint("rack", ConstraintOp.EQ, ("r1",)),)))
    # Tasks on m0 (rack r0) no longer meet the job's constraints: they are stale, not violations.
    assert not check_state(moved)
    assert roll(moved, tid(j, 0)) is not None


def test_update_guards_for_whole_jobs():
    j, s = three_running()
    assert update(s, j.key, job=j) is None  # identical: nothing changes
    assert update(s, j.key, job=replace(j, name="other")) is None  # another job's name
    assert update(s, j.key, job=replace(j, max_unavailable=0)) is None  # a budget of 0 could never roll
    rolling = roll(update(s, j.key, job=replace(j, template="v2", max_unavailable=2)), tid(j, 0))
    rolling = roll(rolling, tid(j, 1))
    # Two are down for the roll: the budget cannot drop below that until they run again.
    assert update(rolling, j.key, job=replace(rolling.jobs[j.key], max_unavailable=1)) is None


def test_the_explorer_rolls_updates_within_budget():
    res = explore(Scope(2, 2, 1), max_states=3_000)
    assert res.violation is None, res.violation
    assert res.actions_fired["roll"] > 0 and res.actions_fired["update"] > 0
    assert res.invariant_checks["disruptions_within_budget"] > 100
