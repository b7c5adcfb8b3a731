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
