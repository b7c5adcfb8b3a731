"""Machine and reservation changes, explained and judged; job steps and the cell's named endings counted honestly."""

from __future__ import annotations

from dataclasses import replace

from harness.checks import check_observation
from harness.coverage import Coverage
from harness.observe import Observation, quotas_of, resources_of
from harness.transitions import explain, explain_all, machine_changes, reservation_changes
from spec.fmap import FMap
from spec.model import (
    Band,
    CellState,
    DeathCause,
    Job,
    Machine,
    QuotaKey,
    Resources,
    RestartPolicy,
    Task,
    TaskId,
    TaskState,
)

CPU = Resources.of(cpu=1000)
JOB = Job("u", "j", 100, 1, CPU, restart_policy=RestartPolicy.ALWAYS)
TID = TaskId(JOB.key, 0, 0)


def machines(*names: str, down: tuple[str, ...] = ()) -> FMap:
    return FMap({n: Machine(n, Resources.of(cpu=2000), up=n not in down) for n in names})


def cell(ms: FMap, *tasks: Task, jobs: tuple[Job, ...] = (JOB,)) -> CellState:
    return CellState(machines=ms, jobs=FMap({j.key: j for j in jobs}), tasks=FMap({t.id: t for t in tasks}))


def running(machine: str = "m0", reservation: Resources | None = None, tid: TaskId = TID) -> Task:
    return Task(tid, TaskState.RUNNING, machine, 100, CPU, None, reservation)


def actions(changes: list) -> list[tuple[str, bool]]:
    return [(c.step.action, c.ok) for c in changes]


# --- machines -------------------------------------------------------------------------------------


def test_added_and_removed_machines_are_steps() -> None:
    before, after = cell(machines("m0", "m1")), cell(machines("m0", "m2"))
    assert actions(machine_changes(before, after)) == [("machine_add", True), ("machine_remove", True)]


def test_a_machine_added_and_down_since_the_last_poll_is_two_steps() -> None:
    before, after = cell(machines("m0")), cell(machines("m0", "m9", down=("m9",)))
    assert actions(machine_changes(before, after)) == [("machine_add", True), ("machine_down", True)]


def test_machine_down_loses_what_ran_there() -> None:
    before = cell(machines("m0", "m1"), running("m1"))
    lost = replace(running("m1"), state=TaskState.DEAD, machine=None, request=Resources(), cause=DeathCause.LOST)
    ok = machine_changes(before, cell(machines("m0", "m1", down=("m1",)), lost))
    assert actions(ok) == [("machine_down", True)]
    bad = machine_changes(before, cell(machines("m0", "m1", down=("m1",)), running("m1")))
    assert actions(bad) == [("machine_down", False)] and "still RUNNING" in (bad[0].problem or "")


def test_machine_up_is_a_step() -> None:
    before, after = cell(machines("m0", "m1", down=("m1",))), cell(machines("m0", "m1"))
    assert actions(machine_changes(before, after)) == [("machine_up", True)]


def test_a_machine_removed_while_a_task_still_runs_there_is_refused() -> None:
    before = cell(machines("m0", "m1"), running("m1"))
    bad = machine_changes(before, cell(machines("m0"), running("m1")))
    assert actions(bad) == [("machine_remove", False)]


def test_unchanged_machines_are_no_step() -> None:
    s = cell(machines("m0", "m1", down=("m1",)))
    assert machine_changes(s, s) == []


# --- reservations -----------------------------------------------------------------------------------


def test_a_lower_reservation_is_a_reserve() -> None:
    before = cell(machines("m0"), running())
    after = cell(machines("m0"), running(reservation=Resources.of(cpu=600)))
    assert actions(reservation_changes(before, after)) == [("reserve", True)]


def test_a_reservation_above_the_request_is_no_reserve() -> None:
    before = cell(machines("m0"), running(reservation=Resources.of(cpu=600)))
    after = cell(machines("m0"), running(reservation=Resources.of(cpu=1500)))
    assert actions(reservation_changes(before, after)) == [("reserve", False)]


def test_a_task_placed_again_or_moved_is_no_reserve() -> None:
    before = cell(machines("m0", "m1"), running(reservation=Resources.of(cpu=600)))
    again = cell(machines("m0", "m1"), running())
    assert reservation_changes(before, again, replaced=frozenset({TID})) == []
    moved = cell(machines("m0", "m1"), running("m1"))
    assert reservation_changes(before, moved) == []


# --- explanations -----------------------------------------------------------------------------------


def test_a_job_submitted_and_killed_between_polls_is_explained_by_what_was_submitted() -> None:
    before = cell(machines("m0"), jobs=())
    killed = replace(running(), state=TaskState.DEAD, machine=None, request=Resources(), cause=DeathCause.KILLED)
    after = cell(machines("m0"), killed, jobs=())
    assert not explain(before, after, JOB.key, 0).ok
    v = explain(before, after, JOB.key, 0, known={JOB.key: JOB})
    assert v.ok and v.path is not None and v.path[0].action == "submit" and v.path[-1].action == "kill_job"


def test_the_ending_the_cell_names_is_the_one_counted() -> None:
    before = cell(machines("m0", "m1"), running("m0"))
    after = cell(machines("m0", "m1"), Task(TaskId(JOB.key, 0, 1), TaskState.RUNNING, "m1", 100, CPU))
    named = TaskId(JOB.key, 0, 1)
    for reason, action in (("restart after lost", "lost"), ("restart after failed", "fail")):
        [v] = explain_all(before, after, histories={named: [{"state": "PENDING", "reason": reason}]})
        assert v.path is not None and [s.action for s in v.path] == [action, "restart", "schedule"]


def test_job_steps_count_once_per_poll_and_machine_steps_from_the_machines_list() -> None:
    job = replace(JOB, task_count=3)
    before = cell(machines("m0", "m1"), jobs=())
    tasks = [Task(TaskId(job.key, i, 0), TaskState.PENDING, None, 100, CPU) for i in range(3)]
    after = cell(machines("m0", "m1", "m2"), *tasks, jobs=(job,))
    cov = Coverage()
    bad = check_observation(Observation(0.0, before, {}, {}), Observation(1.0, after, {}, {}), cov)
    assert bad == []
    assert cov.actions_observed["submit"] == 1 and cov.actions_observed["machine_add"] == 1


def test_action_total_is_the_larger_count_not_the_sum() -> None:
    cov = Coverage()
    cov.actions_observed["submit"] += 3
    cov.actions_model["submit"] += 2
    assert cov.action_total("submit") == 3


# --- views ---------------------------------------------------------------------------------------------


def test_numbers_in_views_are_spec_units_and_strings_are_job_file_forms() -> None:
    assert resources_of({"cpu": 4000, "ram": 8}) == Resources.of(cpu=4000, ram=8)
    assert resources_of({"cpu": "250m"}) == Resources.of(cpu=250)
    assert resources_of({"cpu": "2"}) == Resources.of(cpu=2000)


def test_quotas_are_read_into_the_spec_state() -> None:
    q = quotas_of([{"user": "*", "band": "batch", "limit": {"cpu": 2000}}])
    s = CellState(quotas=q, jobs=FMap({JOB.key: replace(JOB, task_count=3)}))
    assert s.quota_for("u", Band.BATCH) == Resources.of(cpu=2000)
    assert QuotaKey("*", Band.BATCH) in q
    from spec.invariants import admitted_jobs_fit_quota

    assert admitted_jobs_fit_quota(s)  # 3 x 1000m is beyond 2000m: the check is not vacuous


def test_a_placement_may_have_come_before_another_placed_beside_it() -> None:
    """Prod needs room beside other tasks' reservations; a batch task placed after it (beside
    its reservation only) may leave less than that by the next poll, and that is no violation."""
    prod = Job("u", "p", 200, 1, Resources.of(cpu=1000))
    batch = Job("u", "b", 100, 1, Resources.of(cpu=1500))
    ms = FMap({"m0": Machine("m0", Resources.of(cpu=3000))})
    p = Task(TaskId(prod.key, 0), TaskState.RUNNING, "m0", 200, prod.request)
    b_pending = Task(TaskId(batch.key, 0), TaskState.PENDING, None, 100, batch.request)
    b = Task(TaskId(batch.key, 0), TaskState.RUNNING, "m0", 100, batch.request, None, Resources.of(cpu=1000))
    before = CellState(machines=ms, jobs=FMap({batch.key: batch}), tasks=FMap({b_pending.id: b_pending}))
    after = CellState(machines=ms, jobs=FMap({batch.key: batch, prod.key: prod}), tasks=FMap({p.id: p, b.id: b}))
    assert all(v.ok for v in explain_all(before, after))


def test_no_order_makes_room_that_was_never_there() -> None:
    prod = Job("u", "p", 200, 1, Resources.of(cpu=2500))
    ms = FMap({"m0": Machine("m0", Resources.of(cpu=3000))})
    other = Task(TaskId("u/o", 0), TaskState.RUNNING, "m0", 100, Resources.of(cpu=1000))
    o_job = Job("u", "o", 100, 1, Resources.of(cpu=1000))
    before = CellState(machines=ms, jobs=FMap({o_job.key: o_job}), tasks=FMap({other.id: other}))
    p = Task(TaskId(prod.key, 0), TaskState.RUNNING, "m0", 200, prod.request)
    after = before.with_(jobs=before.jobs.set(prod.key, prod), tasks=before.tasks.set(p.id, p))
    [v] = explain_all(before, after)
    assert not v.ok and "m0" in v.describe()
