"""Optimistic concurrency: the leader commits a scheduler process's placement only if the cell still allows every step of it."""

from __future__ import annotations

from reference.jobspec import parse_job
from reference.master.cell import Cell, Draft, JobInfo
from reference.master.leader import commit_plan
from reference.scheduler.plan import Placement, Plan
from reference.scheduler.wire import plan_from_json, plan_to_json
from spec.actions import submit
from spec.model import TaskId, TaskState
from tests.unit.master_cells import T0, placed_cell

BIG = parse_job({"name": "big", "user": "bob", "task_count": 2, "request": {"cpu": "3000m"},
                 "command": ["sleep", "100"], "priority": 100})  # fmt: skip
B0, B1 = TaskId("bob/big", 0, 0), TaskId("bob/big", 1, 0)


def _cell() -> Cell:
    """alice/web's two 100m tasks on m1 (4000m), bob/big's two 3000m tasks pending."""
    cell = placed_cell()
    state = submit(cell.state, BIG.to_spec_job())
    assert state is not None
    return Cell(state, cell.machines, {**cell.jobs, "bob/big": JobInfo(BIG)}, cell.tasks)


def test_a_placement_that_still_fits_is_committed() -> None:
    d = Draft(_cell(), 0.0)
    assert commit_plan(d, Plan(placements=[Placement(B0, "m1")])) == (1, 0)
    assert d.state.tasks[B0].state is TaskState.RUNNING and d.state.tasks[B0].machine == "m1"


def test_a_placement_made_on_out_of_date_state_is_a_conflict_and_changes_nothing() -> None:
    d = Draft(_cell(), 0.0)
    # Planned on a view where m1 was empty: both fit there; now only one does.
    plan = Plan(placements=[Placement(B0, "m1"), Placement(B1, "m1")])
    assert commit_plan(d, plan) == (1, 1)
    assert d.state.tasks[B1].state is TaskState.PENDING


def test_a_task_placed_twice_or_on_a_gone_machine_is_a_conflict() -> None:
    d = Draft(_cell(), 0.0)
    plan = Plan(placements=[Placement(B0, "m1"), Placement(B0, "m1"), Placement(B1, "nowhere")])
    assert commit_plan(d, plan) == (1, 2)
    assert d.state.tasks[B1].state is TaskState.PENDING


def test_a_conflicting_preemption_evicts_no_victim() -> None:
    d = Draft(_cell(), 0.0)
    # Evicting alice/web/0 would not make room for two 3000m tasks on one 4000m machine: the
    # second placement's schedule step fails, so its eviction must not happen either.
    assert commit_plan(d, Plan(placements=[Placement(B0, "m1")])) == (1, 0)
    assert commit_plan(d, Plan(placements=[Placement(B1, "m1", victims=(T0,))])) == (0, 1)
    assert d.state.tasks[T0].state is TaskState.RUNNING
    assert d.state.tasks[B1].state is TaskState.PENDING


def test_a_plan_survives_its_trip_as_json() -> None:
    plan = Plan(placements=[Placement(B0, "m1", victims=(T0,), score=1.5)])
    again = plan_from_json(plan_to_json(plan))
    assert again.placements == plan.placements
