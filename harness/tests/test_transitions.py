"""The transition explainer: legal multi-step moves are explained, forbidden ones are not."""

from __future__ import annotations

from harness.transitions import explain, explain_all
from spec.fmap import FMap
from spec.model import (
    CellState,
    DeathCause,
    Job,
    Machine,
    Resources,
    RestartPolicy,
    Task,
    TaskId,
    TaskState,
)

CPU = Resources.of(cpu=1000)
JOB = Job("u", "j", 100, 1, CPU, restart_policy=RestartPolicy.ON_FAILURE)
M = FMap({n: Machine(n, Resources.of(cpu=2000)) for n in ("m0", "m1")})


def state(*tasks: Task, machines: FMap = M, jobs: FMap | None = None) -> CellState:
    return CellState(machines=machines, jobs=FMap({JOB.key: JOB}) if jobs is None else jobs, tasks=FMap({t.id: t for t in tasks}))


def task(inc: int, st: TaskState, machine: str | None = None, cause: DeathCause | None = None) -> Task:
    return Task(TaskId(JOB.key, 0, inc), st, machine, 100, CPU if st is not TaskState.DEAD else Resources(), cause)


def test_schedule_is_explained() -> None:
    v = explain(state(task(0, TaskState.PENDING)), state(task(0, TaskState.RUNNING, "m1")), JOB.key, 0)
    assert v.ok and [s.action for s in v.path or ()] == ["schedule"]


def test_fail_restart_schedule_in_one_poll() -> None:
    v = explain(state(task(0, TaskState.RUNNING, "m0")), state(task(1, TaskState.RUNNING, "m1")), JOB.key, 0)
    assert v.ok and [s.action for s in v.path or ()][-2:] == ["restart", "schedule"]


def test_machine_down_explains_lost() -> None:
    down = M.set("m0", Machine("m0", Resources.of(cpu=2000), up=False))
    v = explain(state(task(0, TaskState.RUNNING, "m0")), state(task(0, TaskState.DEAD, cause=DeathCause.LOST), machines=down), JOB.key, 0)
    assert v.ok and "machine_down" in [s.action for s in v.path or ()]


def test_dead_killed_task_coming_back_is_refused() -> None:
    before = state(task(0, TaskState.DEAD, cause=DeathCause.KILLED))
    after = state(task(1, TaskState.PENDING))
    assert not explain(before, after, JOB.key, 0).ok


def test_finished_task_restarted_under_on_failure_is_refused() -> None:
    before = state(task(0, TaskState.RUNNING, "m0"))
    after = state(task(1, TaskState.PENDING))
    v = explain(before, after, JOB.key, 0)
    assert v.ok  # fail or lost then restart: legal
    before_dead = state(task(0, TaskState.DEAD, cause=DeathCause.FINISHED))
    assert not explain(before_dead, after, JOB.key, 0).ok


def test_schedule_onto_full_machine_is_refused() -> None:
    big = Job("u", "big", 100, 1, Resources.of(cpu=2000))
    other = Task(TaskId(big.key, 0, 0), TaskState.RUNNING, "m0", 100, big.request)
    jobs = FMap({JOB.key: JOB, big.key: big})
    only_m0 = FMap({"m0": M["m0"]})
    before = state(task(0, TaskState.PENDING), other, machines=only_m0, jobs=jobs)
    after = state(task(0, TaskState.RUNNING, "m0"), other, machines=only_m0, jobs=jobs)
    assert [v.ok for v in explain_all(before, after)] == [False]


# --- allocs ----------------------------------------------------------------------------------


def test_alloc_set_and_its_job_appearing_in_one_poll_are_explained() -> None:
    from dataclasses import replace

    from harness.transitions import alloc_changes
    from spec.model import Alloc

    allocs = FMap({a.name: a for a in (Alloc("u/s", 0, "m0", CPU, 100, "u"), Alloc("u/s", 1, "m1", CPU, 100, "u"))})
    job = replace(JOB, task_count=2, alloc="u/s")
    before = CellState(machines=M)
    t0 = Task(TaskId(job.key, 0, 0), TaskState.RUNNING, "m0", 100, CPU)
    after = CellState(machines=M, jobs=FMap({job.key: job}), tasks=FMap({t0.id: t0}), allocs=allocs)
    assert [(c.step.action, c.ok) for c in alloc_changes(before, after)] == [("alloc_create", True)] * 2
    v = explain(before, after, job.key, 0)
    assert v.ok and [s.action for s in v.path or ()] == ["submit", "schedule"]
    # Task 0 of the set's job on m1, alloc 1's machine: the index rule forbids it.
    wrong = after.with_(tasks=FMap({t0.id: replace(t0, machine="m1")}))
    assert not explain(before, wrong, job.key, 0).ok
    # A set deleted while its job is still listed is no spec alloc_delete.
    gone = after.with_(allocs=FMap())
    assert [c.ok for c in alloc_changes(after, gone)] == [False, False]
    assert [c.ok for c in alloc_changes(after, gone.with_(jobs=FMap(), tasks=FMap()))] == [True, True]


def test_an_alloc_that_does_not_fit_its_machine_is_no_spec_alloc_create() -> None:
    from harness.transitions import alloc_changes
    from spec.model import Alloc

    big = Alloc("u/s", 0, "m0", Resources.of(cpu=1500), 100, "u")
    busy = state(task(0, TaskState.RUNNING, "m0"))
    (change,) = alloc_changes(busy, busy.with_(allocs=FMap({big.name: big})))
    assert not change.ok and "does not fit" in (change.problem or "")


def test_a_pending_task_of_an_alloc_set_has_room_only_in_its_own_alloc() -> None:
    from dataclasses import replace

    from harness.checks import convergence_problems
    from harness.observe import Observation
    from spec.model import Alloc

    # Alloc 0 of u/s is on m1, which is down; m0 is empty but is no place for task 0.
    job = replace(JOB, alloc="u/s")
    a = Alloc("u/s", 0, "m1", CPU, 100, "u")
    down = FMap({"m0": M["m0"], "m1": replace(M["m1"], up=False)})
    pending = Task(TaskId(job.key, 0, 0), TaskState.PENDING, None, 100, CPU)
    s = CellState(machines=down, jobs=FMap({job.key: job}), tasks=FMap({pending.id: pending}), allocs=FMap({a.name: a}))
    assert convergence_problems(s, Observation(0.0, s, {}, {}), {job.key}) == []
    up = s.with_(machines=M)
    (problem,) = convergence_problems(up, Observation(0.0, up, {}, {}), {job.key})
    assert "m1 (alloc u/s/0) has room" in problem


def test_a_job_submitted_and_resized_down_between_two_polls_is_explained() -> None:
    """Index 1 is first seen DEAD (killed): the job came with 2 tasks and was resized to 1."""
    after = state(task(0, TaskState.PENDING), Task(TaskId(JOB.key, 1, 0), TaskState.DEAD, None, 100, Resources(), DeathCause.KILLED))
    v = explain(CellState(machines=M), after, JOB.key, 1)
    assert v.ok and [s.action for s in v.path or ()] == ["submit", "update"]


def test_two_rolls_between_polls_are_explained_by_a_version_no_poll_saw() -> None:
    # Version 0 runs #0; the poll after sees version 2 (a new template twice) and #2 running:
    # two rolls, the first to the unseen version 1. Seen at version 1 only, #2 is unexplained.
    from dataclasses import replace

    from spec.model import task_template

    # restart_policy never: no fail-and-restart explains a new incarnation, only a roll does
    never = replace(JOB, restart_policy=RestartPolicy.NEVER)
    v0, v2 = never, replace(never, template="c", version=2)
    before = state(replace(task(0, TaskState.RUNNING, "m0"), template=task_template(v0)))
    ran = replace(task(2, TaskState.RUNNING, "m0"), template=task_template(v2))
    before = before.with_(jobs=FMap({JOB.key: v0}))
    v = explain(before, state(ran, jobs=FMap({JOB.key: v2})), JOB.key, 0)
    assert v.ok and [s.action for s in v.path or ()].count("roll") == 2, v
    one_later = replace(v2, version=1)
    assert not explain(before, state(ran, jobs=FMap({JOB.key: one_later})), JOB.key, 0).ok


def _drained(name: str = "m0") -> FMap:
    return M.set(name, Machine(name, Resources.of(cpu=2000), schedulable=False))


def test_a_drain_and_its_move_are_explained_same_incarnation_elsewhere() -> None:
    from harness.transitions import machine_changes

    before, after = state(task(0, TaskState.RUNNING, "m0")), state(task(0, TaskState.RUNNING, "m1"), machines=_drained())
    # The cell's history names the move; without it an eviction for maintenance looks alike.
    moved = {task(0, TaskState.RUNNING).id: [{"reason": "drain of m0"}]}
    (v,) = explain_all(before, after, histories=moved)
    assert v.ok and [s.action for s in v.path or ()] == ["drain", "drain_move", "schedule"]
    (v,) = explain_all(before, after)
    assert v.ok and [s.action for s in v.path or ()] == ["evict", "schedule"]
    assert [(c.step.action, c.ok) for c in machine_changes(before, after)] == [("drain", True)]


def test_a_drained_machine_takes_no_new_task_and_an_uncordon_is_seen() -> None:
    from harness.transitions import machine_changes

    before = state(task(0, TaskState.PENDING), machines=_drained())
    after = state(task(0, TaskState.RUNNING, "m0"), machines=_drained())
    assert not explain(before, after, JOB.key, 0).ok
    assert [c.ok for c in machine_changes(before, after)] == [False]
    back = state(task(0, TaskState.RUNNING, "m0"))
    assert [(c.step.action, c.ok) for c in machine_changes(before, back)] == [("uncordon", True)]
    assert explain(before, back, JOB.key, 0).ok  # uncordoned, then placed there


def test_a_drained_machine_has_no_room_for_a_pending_task() -> None:
    from harness.checks import room_for

    pending = task(0, TaskState.PENDING)
    assert room_for(state(pending), JOB.key, pending) == "m0"
    only_drained = _drained().set("m1", Machine("m1", Resources.of(cpu=2000), up=False))
    assert room_for(state(pending, machines=only_drained), JOB.key, pending) is None


def test_a_job_submitted_and_changed_before_any_poll_is_explained_by_a_roll() -> None:
    # Version 1 is the first the polls see, with #1 running: #0 was placed at version 0,
    # then rolled by the change. With restart_policy never, only that roll explains #1.
    from dataclasses import replace

    from spec.model import task_template

    v1 = replace(JOB, restart_policy=RestartPolicy.NEVER, template="c", version=1)
    ran = replace(task(1, TaskState.RUNNING, "m0"), template=task_template(v1))
    v = explain(CellState(machines=M), state(ran, jobs=FMap({JOB.key: v1})), JOB.key, 0)
    assert v.ok and [s.action for s in v.path or ()] == ["submit", "schedule", "update", "roll", "schedule"], v
    # Seen at version 0, a job no change came to has no earlier template to roll from.
    v0 = replace(v1, version=0)
    assert not explain(CellState(machines=M), state(ran, jobs=FMap({JOB.key: v0})), JOB.key, 0).ok


def test_an_alloc_created_then_its_machine_drained_before_a_poll_is_explained() -> None:
    from harness.transitions import alloc_changes
    from spec.model import Alloc

    a = Alloc("u/s", 0, "m0", CPU, 100, "u")
    before = CellState(machines=M)
    after = CellState(machines=_drained(), allocs=FMap({a.name: a}))
    assert [(c.step.action, c.ok) for c in alloc_changes(before, after)] == [("alloc_create", True)]
    (change,) = alloc_changes(after.with_(allocs=FMap()), after)  # drained in both polls: refused
    assert not change.ok and "schedulable" in (change.problem or "")


def test_an_index_killed_then_resized_away_and_back_between_two_polls_is_explained() -> None:
    # #5 was killed by its user (killed tasks stay dead); two versions later #6 runs: the job
    # was resized below the index and back, which no poll saw (a failover's gap in the polls).
    from dataclasses import replace

    two = replace(JOB, task_count=2, version=1)
    before = state(task(5, TaskState.DEAD, cause=DeathCause.KILLED), jobs=FMap({JOB.key: two}))
    after = state(task(6, TaskState.RUNNING, "m0"), jobs=FMap({JOB.key: replace(two, version=3)}))
    v = explain(before, after, JOB.key, 0)
    assert v.ok and [s.action for s in v.path or ()] == ["update", "update", "schedule"], v
    # One version later, a single resize cannot have gone below the index and back.
    assert not explain(before, after.with_(jobs=FMap({JOB.key: replace(two, version=2)})), JOB.key, 0).ok


def test_three_rolls_between_polls_are_explained_by_the_versions_no_poll_saw() -> None:
    # Version 0 runs #2; the poll after sees version 3 and #5 running: three rolls, one for
    # each version since (a failover's gap in the polls while new versions came).
    from dataclasses import replace

    from spec.model import task_template

    never = replace(JOB, restart_policy=RestartPolicy.NEVER)
    v3 = replace(never, template="c", version=3)
    before = state(replace(task(2, TaskState.RUNNING, "m0"), template=task_template(never)), jobs=FMap({JOB.key: never}))
    ran = replace(task(5, TaskState.RUNNING, "m1"), template=task_template(v3))
    v = explain(before, state(ran, jobs=FMap({JOB.key: v3})), JOB.key, 0)
    assert v.ok and [s.action for s in v.path or ()].count("roll") == 3, v
    # Two versions later, three rolls are one too many.
    assert not explain(before, state(ran, jobs=FMap({JOB.key: replace(v3, version=2)})), JOB.key, 0).ok
