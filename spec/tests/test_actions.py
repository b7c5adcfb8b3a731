"""Each action's guard (enabled and disabled) and effect, one table or case per action."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spec.actions import (
    ACTIONS,
    EvictReason,
    Step,
    alloc_create,
    alloc_delete,
    evict,
    fail,
    finish,
    job_is_valid,
    kill,
    kill_job,
    lost,
    machine_add,
    machine_down,
    machine_remove,
    machine_up,
    reserve,
    restart,
    restart_allowed,
    roll,
    schedule,
    submit,
    update,
)
from spec.fmap import FMap
from spec.model import (
    Alloc,
    CellState,
    DeathCause,
    Job,
    Machine,
    Resources,
    RestartPolicy,
    TaskId,
    TaskState,
    band_of,
    may_preempt,
)

from .fixtures import LARGE, M0, SMALL, cell, cell_with_job, job, running, tid

# --- submit ------------------------------------------------------------------------------


def test_submit_admits_and_creates_pending_tasks():
    j = job(n=3)
    s = submit(cell(), j)
    assert s is not None and j.key in s.jobs
    assert sorted(t.id.index for t in s.tasks.values()) == [0, 1, 2]
    assert all(t.state is TaskState.PENDING and t.machine is None for t in s.tasks.values())
    assert all(t.request == j.request and t.priority == j.priority for t in s.tasks.values())


@pytest.mark.parametrize(
    "bad",
    [
        replace(job(), task_count=-1),
        replace(job(), priority=400),
        replace(job(), priority=-1),
        replace(job(), user=""),
        replace(job(), name=""),
        replace(job(), request=Resources.of(cpu=-5)),
        job(alloc="no-such-alloc"),
    ],
    ids=["negative-count", "priority-too-high", "priority-negative", "no-user", "no-name",
         "negative-request", "unknown-alloc"],
)
def test_submit_refuses_invalid_jobs(bad):
    assert submit(cell(), bad) is None


def test_submit_refuses_duplicate_name():
    s = submit(cell(), job())
    assert s is not None
    assert submit(s, job(cpu=5)) is None


def test_submit_refuses_beyond_quota_in_band():
    s = cell(prod_quota=2000)
    s = submit(s, job("a", cpu=1000, n=2))
    assert s is not None
    assert submit(s, job("b", cpu=1)) is None  # prod quota used up
    assert submit(s, job("c", priority=100, cpu=1)) is not None  # batch band has no entry


def test_resubmit_after_kill_is_a_new_incarnation():
    j = job()
    s = kill_job(running(cell(), j), j.key)
    s = submit(s, j)
    assert s is not None
    assert s.latest(j.key, 0).id.incarnation == 1
    assert s.latest(j.key, 0).state is TaskState.PENDING


# --- schedule ------------------------------------------------------------------------------


def test_schedule_places_pending_task():
    j = job()
    s = running(cell(), j, "m1")
    t = s.tasks[tid(j)]
    assert (t.state, t.machine, t.request) == (TaskState.RUNNING, "m1", j.request)


def test_schedule_guards():
    j = job(cpu=1500, rack="r0")
    s = submit(cell(), j)
    assert schedule(s, tid(j), "m1") is None  # constraint rack=r0 fails on m1
    assert schedule(s, tid(j), "nope") is None  # unknown machine
    assert schedule(s, TaskId("x/y", 0), "m0") is None  # unknown task
    down = machine_down(s, "m0")
    assert schedule(down, tid(j), "m0") is None  # machine down
    s2 = schedule(s, tid(j), "m0")
    assert s2 is not None
    assert schedule(s2, tid(j), "m0") is None  # not PENDING any more
    k = job("other", cpu=1000)
    s3 = submit(s2, k)
    assert schedule(s3, tid(k), "m0") is None  # 1500 + 1000 > 2000 cpu


def test_schedule_into_alloc_only_on_its_machine_and_within_it():
    s = alloc_create(cell(), Alloc("a", 0, "m0", Resources.of(cpu=1000), priority=200))
    s = alloc_create(s, Alloc("a", 1, "m1", Resources.of(cpu=1000), priority=200))
    j = job(n=2, cpu=600, alloc="a")
    k = job("other", n=1, cpu=600, alloc="a")
    s = submit(submit(s, j), k)
    assert schedule(s, tid(j, 0), "m1") is None  # task 0 runs in alloc a/0, on m0
    assert schedule(s, tid(j, 1), "m0") is None  # task 1 runs in alloc a/1, on m1
    s = schedule(s, tid(j, 0), "m0")
    assert s is not None
    assert schedule(s, tid(j, 1), "m1") is not None
    assert schedule(s, tid(k, 0), "m0") is None  # 600 + 600 > 1000 in alloc a/0, shared by both jobs


def test_a_job_needs_an_alloc_for_each_task_of_its_set():
    s = alloc_create(cell(), Alloc("a", 0, "m0", Resources.of(cpu=1000), priority=200))
    assert submit(s, job(n=2, alloc="a")) is None  # no alloc a/1
    s2 = submit(s, job(n=1, alloc="a"))
    assert s2 is not None
    assert update(s2, "alice/web", task_count=2) is None  # growing past the set is refused too
    s3 = alloc_create(s2, Alloc("a", 1, "m1", Resources.of(cpu=1000), priority=200))
    assert update(s3, "alice/web", task_count=2) is not None


def test_an_alloc_set_spreads_over_distinct_machines():
    s = alloc_create(cell(), Alloc("a", 0, "m0", Resources.of(cpu=500), priority=200))
    assert alloc_create(s, Alloc("a", 1, "m0", Resources.of(cpu=500), priority=200)) is None
    assert alloc_create(s, Alloc("b", 0, "m0", Resources.of(cpu=500), priority=200)) is not None  # another set
    assert alloc_create(s, Alloc("a", -1, "m1", Resources.of(cpu=500), priority=200)) is None


def test_an_empty_alloc_stays_reserved():
    s = alloc_create(cell(), Alloc("a", 0, "m0", Resources.of(cpu=1500), priority=200))
    k = job("other", cpu=1000)
    s = submit(s, k)
    assert schedule(s, tid(k), "m0") is None  # 1500 + 1000 > 2000 though no task runs in the alloc


# --- evict -----------------------------------------------------------------------------------


def test_evict_back_to_pending_same_incarnation():
    j = job(priority=100)
    s = evict(running(cell(), j), tid(j), EvictReason.MAINTENANCE)
    t = s.tasks[tid(j)]
    assert (t.state, t.machine, t.id.incarnation) == (TaskState.PENDING, None, 0)


def test_preemption_guard():
    batch = job("batch", priority=100, cpu=2000)
    prod = job("prod", priority=200, cpu=2000)
    prod2 = job("prod2", priority=250, cpu=2000)
    s = running(cell(M0), batch, "m0")
    s = submit(submit(s, prod), prod2)
    assert evict(s, tid(batch), EvictReason.PREEMPTION, tid(prod)) is not None
    assert evict(s, tid(batch), EvictReason.PREEMPTION, None) is None  # preemptor required
    assert evict(s, tid(batch), EvictReason.MAINTENANCE, tid(prod)) is None  # only preemption names one
    s = running(kill_job(s, batch.key), prod, "m0")
    assert evict(s, tid(prod), EvictReason.PREEMPTION, tid(prod2)) is None  # prod never preempts prod


@pytest.mark.parametrize(
    "preemptor,victim,ok",
    [(200, 100, True), (100, 100, False), (100, 0, True), (250, 200, False), (300, 200, False),
     (300, 199, True), (99, 100, False)],
)
def test_may_preempt_table(preemptor, victim, ok):
    assert may_preempt(preemptor, victim) is ok


@pytest.mark.parametrize("p,band", [(0, "best_effort"), (99, "best_effort"), (100, "batch"),
                                    (200, "production"), (299, "production"), (300, "monitoring")])
def test_bands(p, band):
    assert band_of(p).value == band


# --- finish, fail, lost, kill --------------------------------------------------------------


@pytest.mark.parametrize(
    "action,cause",
    [(finish, DeathCause.FINISHED), (fail, DeathCause.FAILED), (lost, DeathCause.LOST),
     (kill, DeathCause.KILLED)],
)
def test_running_to_dead(action, cause):
    j = job()
    s = action(running(cell(), j), tid(j))
    t = s.tasks[tid(j)]
    assert (t.state, t.cause, t.machine, t.request) == (TaskState.DEAD, cause, None, Resources())
    assert action(s, tid(j)) is None  # a DEAD task cannot die again


@pytest.mark.parametrize("action", [finish, fail, lost])
def test_pending_cannot_finish_fail_or_be_lost(action):
    j = job()
    assert action(submit(cell(), j), tid(j)) is None


def test_kill_pending_task():
    j = job()
    s = kill(submit(cell(), j), tid(j))
    assert s.tasks[tid(j)].state is TaskState.DEAD


def test_kill_job_kills_all_and_removes_job():
    j = job(n=2)
    s = kill_job(running(cell(), j), j.key)
    assert j.key not in s.jobs
    assert all(t.state is TaskState.DEAD and t.cause is DeathCause.KILLED for t in s.tasks.values())
    assert kill_job(s, j.key) is None


# --- restart ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy,cause,ok",
    [
        (RestartPolicy.NEVER, DeathCause.FAILED, False),
        (RestartPolicy.ON_FAILURE, DeathCause.FAILED, True),
        (RestartPolicy.ON_FAILURE, DeathCause.LOST, True),
        (RestartPolicy.ON_FAILURE, DeathCause.FINISHED, False),
        (RestartPolicy.ALWAYS, DeathCause.FINISHED, True),
        (RestartPolicy.ALWAYS, DeathCause.KILLED, False),
    ],
)
def test_restart_policy_table(policy, cause, ok):
    assert restart_allowed(policy, cause) is ok


def test_restart_makes_new_incarnation_and_drops_dead_history():
    j = job(policy=RestartPolicy.ON_FAILURE)
    s = fail(running(cell(), j), tid(j))
    s2 = restart(s, tid(j))
    assert s2 is not None
    new = s2.latest(j.key, 0)
    assert (new.id.incarnation, new.state) == (1, TaskState.PENDING)
    assert tid(j) not in s2.tasks  # the DEAD incarnation 0 is history now
    assert restart(s2, tid(j)) is None  # not the newest incarnation any more


def test_restart_guards():
    j = job(policy=RestartPolicy.NEVER)
    s = fail(running(cell(), j), tid(j))
    assert restart(s, tid(j)) is None  # policy
    k = job("k", policy=RestartPolicy.ALWAYS)
    s = running(cell(), k)
    assert restart(s, tid(k)) is None  # not DEAD
    s = kill(s, tid(k))
    assert restart(s, tid(k)) is None  # killed tasks stay dead


# --- update and roll ---------------------------------------------------------------------


def test_update_grows_and_shrinks():
    j = job(n=2, cpu=500)
    s = running(cell(), j)
    grown = update(s, j.key, task_count=3)
    assert grown.jobs[j.key].task_count == 3 and grown.jobs[j.key].version == 1
    assert grown.latest(j.key, 2).state is TaskState.PENDING
    shrunk = update(grown, j.key, task_count=1)
    assert shrunk.latest(j.key, 1).state is TaskState.DEAD
    assert shrunk.latest(j.key, 2).state is TaskState.DEAD
    assert shrunk.latest(j.key, 0).state is TaskState.RUNNING
    regrown = update(shrunk, j.key, task_count=2)
    assert regrown.latest(j.key, 1).id.incarnation == 1  # a new incarnation of index 1


def test_update_guards():
    j = job()
    s = running(cell(prod_quota=2000), j)
    assert update(s, "nobody/none", task_count=2) is None
    assert update(s, j.key) is None  # nothing changes
    assert update(s, j.key, task_count=-1) is None
    assert update(s, j.key, task_count=3) is None  # 3 x 1000 beyond the 2000 quota


def test_update_request_then_roll():
    j = job(n=1, cpu=500)
    s = running(cell(), j)
    s = update(s, j.key, request=Resources.of(cpu=700))
    assert s.tasks[tid(j)].request == Resources.of(cpu=500)  # running keeps its old request
    assert roll(s, TaskId("x/y", 0)) is None
    rolled = roll(s, tid(j))
    assert rolled is not None
    new = rolled.latest(j.key, 0)
    assert (new.id.incarnation, new.state, new.request) == (1, TaskState.PENDING, Resources.of(cpu=700))
    assert roll(running(cell(), j), tid(j)) is None  # request already current


# --- machines and allocs ---------------------------------------------------------------------


def test_machine_lifecycle():
    j = job()
    s = running(cell(), j, "m0")
    assert machine_add(s, M0) is None  # already there
    assert machine_remove(s, "m0") is None  # runs a task
    assert machine_up(s, "m0") is None  # already up
    down = machine_down(s, "m0")
    assert not down.machines["m0"].up
    assert down.tasks[tid(j)].state is TaskState.DEAD and down.tasks[tid(j)].cause is DeathCause.LOST
    assert machine_down(down, "m0") is None
    up = machine_up(down, "m0")
    assert up.machines["m0"].up and up.running_on("m0") == []
    gone = machine_remove(up, "m0")
    assert "m0" not in gone.machines
    assert machine_add(gone, Machine("m0", Resources.of(cpu=1))) is not None


def test_alloc_lifecycle():
    s = cell()
    a = Alloc("a", 0, "m0", Resources.of(cpu=1500), priority=200)
    s = alloc_create(s, a)
    assert s is not None
    assert alloc_create(s, a) is None  # name taken
    assert alloc_create(s, Alloc("b", 0, "m0", Resources.of(cpu=1000), priority=200)) is None  # no room
    assert alloc_create(s, Alloc("c", 0, "zz", Resources.of(cpu=1), priority=200)) is None
    assert machine_remove(s, "m0") is None  # holds an alloc
    s = alloc_create(s, Alloc("a", 1, "m1", Resources.of(cpu=100), priority=200))
    j = job(cpu=100, alloc="a")
    s2 = submit(s, j)
    assert alloc_delete(s2, "a/0") is None  # a job names its set
    assert alloc_delete(s2, "a/1") is None  # even an alloc no task of the job runs in
    assert alloc_delete(kill_job(s2, j.key), "a/0") is not None
    assert alloc_delete(s, "a/0") is not None
    assert alloc_delete(s, "zz") is None


def test_every_action_is_in_the_table_and_documented():
    for name, fn in ACTIONS.items():
        doc = fn.__doc__ or ""
        assert "Guard:" in doc and "Effect:" in doc, name


# --- reserve: resource reclamation ---------------------------------------------------------


def test_reserve_guards_and_effect():
    j = job(priority=200, cpu=1000)
    s = running(cell(M0), j)
    half = Resources.of(cpu=400)
    r = reserve(s, tid(j), half)
    assert r.tasks[tid(j)].reservation == half and r.tasks[tid(j)].reserved == half
    assert reserve(s, tid(j), Resources.of(cpu=1001)) is None  # above the request
    assert reserve(s, tid(j), Resources.of(cpu=-1)) is None
    assert reserve(submit(cell(), job("p")), tid(job("p")), half) is None  # not RUNNING
    back = reserve(r, tid(j), j.request)
    assert back.tasks[tid(j)].reservation is None  # full request is stored as "no estimate"


def test_batch_uses_reclaimed_resources_but_prod_does_not():
    prod = job("prod", priority=200, cpu=2000)
    s = reserve(running(cell(M0), prod), tid(prod), Resources.of(cpu=500))
    batch = job("batch", priority=100, cpu=1500)
    s2 = submit(s, batch)
    assert schedule(s2, tid(batch), "m0") is not None  # 500 reserved + 1500 fits in 2000
    other = job("prod2", user="bob", priority=200, cpu=500)
    s3 = submit(s, other)
    assert schedule(s3, tid(other), "m0") is None  # prod counts prod at full requests
    placed = schedule(s2, tid(batch), "m0")
    assert reserve(placed, tid(prod), prod.request) is None  # growing back would overcommit


# --- update, job validity and alloc priorities: their edges -------------------------------


def test_update_rewrites_pending_requests_but_not_running_ones() -> None:
    # actions.py update: flipping `cur.state is PENDING` or `cur.request != new.request` survived.
    s = cell_with_job()
    s = schedule(s, TaskId("u/j", 0, 0), "m0")
    assert s is not None
    s2 = update(s, "u/j", request=LARGE)
    assert s2 is not None
    assert s2.tasks[TaskId("u/j", 1, 0)].state is TaskState.PENDING
    assert s2.tasks[TaskId("u/j", 1, 0)].request == LARGE  # not placed yet: takes the new request
    assert s2.tasks[TaskId("u/j", 0, 0)].request == SMALL  # running: keeps its request until rolled
    s3 = update(s2, "u/j", task_count=3)
    assert s3 is not None and s3.tasks[TaskId("u/j", 1, 0)].request == LARGE


def test_a_job_of_no_task_is_valid_and_a_negative_count_is_not() -> None:
    # actions.py job_is_valid: `task_count >= 1` survived (a job may be submitted empty and
    # resized later; the load campaign's write-path runs submit such jobs).
    assert job_is_valid(Job("u", "j", 100, 0, SMALL))
    assert not job_is_valid(Job("u", "j", 100, -1, SMALL))
    # and `0 <= priority`: best effort (priority 0) is a valid band
    assert job_is_valid(Job("u", "j", 0, 1, SMALL)) and not job_is_valid(Job("u", "j", -1, 1, SMALL))
    assert submit(CellState(), Job("u", "j", 100, 0, SMALL)) is not None


def test_alloc_priorities_run_from_zero() -> None:
    # actions.py alloc_create: `0 <= priority` to `0 < priority` survived.
    from spec.actions import alloc_create

    s = CellState(machines=FMap({"m0": Machine("m0", Resources.of(cpu=4000))}))
    assert alloc_create(s, Alloc("a", 0, "m0", Resources.of(cpu=1000), 0)) is not None
    assert alloc_create(s, Alloc("a", 0, "m0", Resources.of(cpu=1000), -1)) is None


# --- a trace's step names what it acts on ----------------------------------------------------


def test_a_trace_step_names_its_alloc() -> None:
    # actions.py _short: an Alloc argument printed as None survived (traces must say which).
    step = Step("alloc_create", (Alloc("a1", 0, "m0", Resources.of(cpu=500), 100, "u"),))
    assert "a1/0@m0" in str(step)


def test_a_trace_step_names_its_machine() -> None:
    # actions.py _short: a Machine argument printed as None survived.
    assert "Machine(m0)" in str(Step("machine_add", (Machine("m0", Resources.of(cpu=1)),)))


def test_a_prod_alloc_is_not_given_what_a_prod_task_reserves_less_of():
    # A prod task of 2000m reserving 1000m (reclaimed): the 1000m it gave back is for non-prod
    # work only. A prod alloc must fit beside prod tasks' full requests, as a prod task must;
    # a non-prod alloc may take the reclaimed share.
    j = job(cpu=2000)
    s = reserve(running(cell(), j), tid(j), Resources.of(cpu=1000))
    assert s is not None
    assert alloc_create(s, Alloc("a", 0, "m0", Resources.of(cpu=1000), priority=200)) is None
    assert alloc_create(s, Alloc("b", 0, "m0", Resources.of(cpu=1000), priority=100)) is not None
