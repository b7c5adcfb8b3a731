"""Tests that kill mutants of spec/ which the other tests let survive (see reports/conformance.md)."""

from __future__ import annotations

from spec.actions import Step, job_is_valid, schedule, submit, update
from spec.fmap import FMap
from spec.model import Alloc, CellState, Job, Machine, Resources, TaskId, TaskState

SMALL = Resources.of(cpu=500)
LARGE = Resources.of(cpu=1000)


def _cell_with_job(count: int = 2) -> CellState:
    base = CellState(machines=FMap({"m0": Machine("m0", Resources.of(cpu=4000))}))
    s = submit(base, Job("u", "j", 100, count, SMALL))
    assert s is not None
    return s


def test_fmap_keys_are_its_keys() -> None:
    # model.py FMap.keys: returning None instead of the dict view survived.
    m = FMap({"a": 1, "b": 2})
    assert sorted(m.keys()) == ["a", "b"]


def test_task_id_incarnation_defaults_to_zero() -> None:
    # model.py TaskId: a default incarnation of 1 survived.
    assert TaskId("u/j", 0).incarnation == 0
    assert str(TaskId("u/j", 3)) == "u/j/3#0"


def test_update_rewrites_pending_requests_but_not_running_ones() -> None:
    # actions.py update: flipping `cur.state is PENDING` or `cur.request != new.request` survived.
    s = _cell_with_job()
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


def test_a_named_resource_a_request_lacks_counts_as_zero() -> None:
    # model.py Resources.get: a missing name read as 1 survived.
    assert Resources.of(cpu=500).get("gpu") == 0
    assert Resources.of(cpu=500).get("cpu") == 500


def test_a_trace_step_names_its_alloc() -> None:
    # actions.py _short: an Alloc argument printed as None survived (traces must say which).
    step = Step("alloc_create", (Alloc("a1", "m0", Resources.of(cpu=500), 100, "u"),))
    assert "a1@m0" in str(step)


def test_requests_are_nonnegative_and_name_their_shortfall() -> None:
    # model.py Resources.is_nonnegative (`v >= 0` to `v >= -1`) and shortfall (returning None).
    assert Resources.of(cpu=500).is_nonnegative() and not Resources.of(cpu=-1).is_nonnegative()
    assert Resources.of(cpu=500, ram=10).shortfall(Resources.of(cpu=400, ram=10)) == ("cpu",)


def test_an_alloc_at_the_floor_priority_counts_as_reserved_at_it() -> None:
    # model.py machine_reserved: `a.priority >= min_priority` to `>` survived.
    m0 = Machine("m0", Resources.of(cpu=4000))
    s = CellState(machines=FMap({"m0": m0}), allocs=FMap({"a": Alloc("a", "m0", Resources.of(cpu=1000), 200)}))
    assert s.machine_reserved("m0", min_priority=200) == Resources.of(cpu=1000)
    assert s.machine_reserved("m0", min_priority=201) == Resources()


def test_alloc_priorities_run_from_zero() -> None:
    # actions.py alloc_create: `0 <= priority` to `0 < priority` survived.
    from spec.actions import alloc_create

    s = CellState(machines=FMap({"m0": Machine("m0", Resources.of(cpu=4000))}))
    assert alloc_create(s, Alloc("a", "m0", Resources.of(cpu=1000), 0)) is not None
    assert alloc_create(s, Alloc("a", "m0", Resources.of(cpu=1000), -1)) is None


def test_constraint_operators() -> None:
    # model.py Constraint.holds: EQ flipped to != survived (the Hypothesis tests draw it rarely).
    from spec.model import Constraint, ConstraintOp

    m = Machine("m0", Resources.of(cpu=1), attrs=(("rack", "r1"),))
    assert Constraint("rack", ConstraintOp.EQ, ("r1",)).holds(m)
    assert not Constraint("rack", ConstraintOp.EQ, ("r2",)).holds(m)
    assert Constraint("rack", ConstraintOp.NE, ("r2",)).holds(m)
    assert Constraint("rack", ConstraintOp.IN, ("r0", "r1")).holds(m)
    assert not Constraint("rack", ConstraintOp.NOT_IN, ("r0", "r1")).holds(m)


def test_a_trace_step_names_its_machine() -> None:
    # actions.py _short: a Machine argument printed as None survived.
    assert "Machine(m0)" in str(Step("machine_add", (Machine("m0", Resources.of(cpu=1)),)))


def test_indexes_of_large_maps_follow_their_changes() -> None:
    # model.py's index update (maps of 64 entries or more keep indexes): returning None from
    # it survived, since the other spec tests use small cells.
    s = _cell_with_job(70)
    assert len(s.tasks_of("u/j")) == 70
    s2 = submit(s, Job("u", "k", 100, 3, SMALL))
    assert s2 is not None
    assert len(s2.tasks_of("u/k")) == 3 and len(s2.tasks_of("u/j")) == 70


def _parity(key: int, value: int) -> str:
    _parity.calls += 1  # type: ignore[attr-defined]
    return "even" if value % 2 == 0 else "odd"


_parity.calls = 0  # type: ignore[attr-defined]


def test_a_derived_maps_index_is_updated_from_the_changed_keys_not_rebuilt() -> None:
    # model.py:166, the index update returning None: the derived map still answered right
    # (a lost index is rebuilt on the next read), so only the cost shows it.
    m = FMap({i: i for i in range(100)})
    assert len(m.group(_parity)["even"]) == 50
    _parity.calls = 0  # type: ignore[attr-defined]
    m2 = m.set(3, 4)  # one changed key: its old and new entries are looked at, nothing else
    assert m2.group(_parity)["even"] == m.group(_parity)["even"] | {3}
    assert 3 not in m2.group(_parity)["odd"]
    assert _parity.calls <= 2  # type: ignore[attr-defined]


def test_prod_never_preempts_prod_judges_only_steps_whose_tasks_exist() -> None:
    # invariants.py:171: returning None (not "no violation") for a preemption whose victim
    # or preemptor is absent survived.
    from spec.actions import EvictReason
    from spec.invariants import prod_never_preempts_prod

    s = _cell_with_job(2)
    ghost = TaskId("u/ghost", 0)
    real = next(iter(s.tasks))
    for victim, preemptor in ((ghost, real), (real, ghost)):
        step = Step("evict", (victim, EvictReason.PREEMPTION, preemptor))
        assert prod_never_preempts_prod(s, step, s) == []
