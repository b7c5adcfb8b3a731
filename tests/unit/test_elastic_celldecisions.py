"""Table tests of the cell autoscaler's decisions: machines to add for waiting tasks, idle machines to remove."""

from __future__ import annotations

import pytest

from reference.elastic.celldecisions import (
    CellPolicy,
    Need,
    fits_new_machine,
    machines_to_add,
    machines_to_remove,
)
from spec.model import Constraint, ConstraintOp, Machine, Resources

GiB = 2**30
NEW = Machine("new", Resources.of(cpu=1000, ram=2 * GiB), (("rack", "r0"),), "r0")
P = CellPolicy(min=1, max=4, pending_grace_s=2.0, add_cooldown_s=8.0, idle_cooldown_s=30.0)


def need(cpu: int, since: float = 0.0, *constraints: Constraint) -> Need:
    return Need(Resources.of(cpu=cpu, ram=GiB // 4), tuple(constraints), since)


def test_fits_new_machine() -> None:
    assert fits_new_machine(need(1000), NEW)
    assert not fits_new_machine(need(1001), NEW)
    assert fits_new_machine(need(10, 0.0, Constraint("rack", ConstraintOp.EQ, ("r0",))), NEW)
    assert not fits_new_machine(need(10, 0.0, Constraint("rack", ConstraintOp.EQ, ("none",))), NEW)


@pytest.mark.parametrize(
    ("needs", "current", "now", "last_add", "want"),
    [
        ([], 1, 100.0, None, 0),
        ([need(250, 99.0)], 1, 100.0, None, 0),  # waited 1 s: inside the grace
        ([need(250, 90.0)], 1, 100.0, None, 1),
        ([need(250, 90.0)] * 4, 1, 100.0, None, 1),  # four fit on one new machine
        ([need(250, 90.0)] * 5, 1, 100.0, None, 2),
        ([need(600, 90.0)] * 3, 1, 100.0, None, 3),  # one per machine
        ([need(600, 90.0)] * 9, 1, 100.0, None, 3),  # at most max - current
        ([need(250, 90.0)], 4, 100.0, None, 0),  # at max
        ([need(250, 90.0)], 1, 100.0, 95.0, 0),  # within the add cooldown
        ([need(250, 90.0)], 1, 100.0, 91.0, 1),
        ([need(2000, 90.0)], 1, 100.0, None, 0),  # fits no machine of this size
        ([need(10, 90.0, Constraint("rack", ConstraintOp.EQ, ("gpu",)))], 1, 100.0, None, 0),
    ],
)
def test_machines_to_add(needs: list[Need], current: int, now: float, last_add: float | None, want: int) -> None:
    assert machines_to_add(needs, NEW, current, now, last_add, P) == want


@pytest.mark.parametrize(
    ("idle", "current", "waiting", "want"),
    [
        ({"machine0": None, "machine1": 50.0}, 2, 0, ["machine1"]),  # idle 50 s
        ({"machine0": None, "machine1": 80.0}, 2, 0, []),  # idle 20 s: not yet
        ({"machine0": 10.0, "machine1": 10.0, "machine2": 10.0}, 3, 0, ["machine2", "machine1"]),  # keep min
        ({"machine9": 10.0, "machine10": 10.0}, 2, 0, ["machine10"]),  # numeric order
        ({"machine0": 10.0}, 1, 0, []),  # at min
        ({"machine0": None, "machine1": 10.0}, 2, 3, []),  # tasks wait: keep every machine
    ],
)
def test_machines_to_remove(idle: dict, current: int, waiting: int, want: list[str]) -> None:
    assert machines_to_remove(idle, 100.0, current, waiting, P) == want
