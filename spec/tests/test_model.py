"""The cell's data: task ids, resource vectors and their shortfalls, constraints, and what an
alloc reserves at its priority."""

from __future__ import annotations

from spec.fmap import FMap
from spec.model import Alloc, CellState, Machine, Resources, TaskId


def test_task_id_incarnation_defaults_to_zero() -> None:
    # model.py TaskId: a default incarnation of 1 survived.
    assert TaskId("u/j", 0).incarnation == 0
    assert str(TaskId("u/j", 3)) == "u/j/3#0"


def test_a_named_resource_a_request_lacks_counts_as_zero() -> None:
    # model.py Resources.get: a missing name read as 1 survived.
    assert Resources.of(cpu=500).get("gpu") == 0
    assert Resources.of(cpu=500).get("cpu") == 500


def test_requests_are_nonnegative_and_name_their_shortfall() -> None:
    # model.py Resources.is_nonnegative (`v >= 0` to `v >= -1`) and shortfall (returning None).
    assert Resources.of(cpu=500).is_nonnegative() and not Resources.of(cpu=-1).is_nonnegative()
    assert Resources.of(cpu=500, ram=10).shortfall(Resources.of(cpu=400, ram=10)) == ("cpu",)


def test_an_alloc_at_the_floor_priority_counts_as_reserved_at_it() -> None:
    # model.py machine_reserved: `a.priority >= min_priority` to `>` survived.
    m0 = Machine("m0", Resources.of(cpu=4000))
    s = CellState(machines=FMap({"m0": m0}), allocs=FMap({"a/0": Alloc("a", 0, "m0", Resources.of(cpu=1000), 200)}))
    assert s.machine_reserved("m0", min_priority=200) == Resources.of(cpu=1000)
    assert s.machine_reserved("m0", min_priority=201) == Resources()


def test_constraint_operators() -> None:
    # model.py Constraint.holds: EQ flipped to != survived (the Hypothesis tests draw it rarely).
    from spec.model import Constraint, ConstraintOp

    m = Machine("m0", Resources.of(cpu=1), attrs=(("rack", "r1"),))
    assert Constraint("rack", ConstraintOp.EQ, ("r1",)).holds(m)
    assert not Constraint("rack", ConstraintOp.EQ, ("r2",)).holds(m)
    assert Constraint("rack", ConstraintOp.NE, ("r2",)).holds(m)
    assert Constraint("rack", ConstraintOp.IN, ("r0", "r1")).holds(m)
    assert not Constraint("rack", ConstraintOp.NOT_IN, ("r0", "r1")).holds(m)


def test_latest_is_the_newest_incarnation_whether_a_job_is_scanned_or_indexed() -> None:
    from spec import actions
    from spec.model import LATEST_SCAN_MAX, DeathCause, Job, Task, TaskState

    for n in (3, LATEST_SCAN_MAX - 1, LATEST_SCAN_MAX, 3 * LATEST_SCAN_MAX):
        job = Job(user="u", name=f"j{n}", priority=100, task_count=n, request=Resources.of(cpu=10))
        s = actions.submit(CellState(), job)
        s = actions.kill_job(s, job.key)
        s = actions.submit(s, job)  # every index's incarnation 1; the killed 0s are dropped
        assert s is not None and {t.id.incarnation for t in s.tasks.values()} == {1}
        # An older incarnation kept beside a newer one (a state the checker must see): the newest wins.
        live_old = Task(TaskId(job.key, 1, 0), TaskState.RUNNING, "m0", 100, Resources.of(cpu=10))
        s = s.with_(tasks=s.tasks.set(live_old.id, live_old))
        newer = Task(TaskId(job.key, 2, 7), TaskState.DEAD, None, 100, Resources.of(), DeathCause.FAILED)
        s = s.with_(tasks=s.tasks.set(newer.id, newer))
        for i in range(n):
            brute = max((t for t in s.tasks if t.job == job.key and t.index == i), key=lambda t: t.incarnation)
            assert s.latest(job.key, i).id == brute, (n, i)
        assert s.latest(job.key, n) is None
        assert actions.next_incarnation(s, job.key, 2) == 8
