"""Applying reservation estimates in a Draft: through the spec's reserve, evicting non-prod work a growing one needs back."""

from __future__ import annotations

from reference.elastic.reclaimer import apply_reservations
from reference.master.cell import Cell, Draft
from spec.actions import reserve, schedule, submit
from spec.fmap import FMap
from spec.model import CellState, Job, Machine, Resources, TaskId, TaskState

M = Machine("m0", Resources.of(cpu=1000, ram=1000))
WEB = TaskId("u/web", 0)
BATCH = TaskId("u/batch", 0)


def cell_with_batch_in_reclaimed_room() -> CellState:
    s: CellState | None = CellState(machines=FMap({"m0": M}))
    s = submit(s, Job("u", "web", 200, 1, Resources.of(cpu=800, ram=100)))
    s = schedule(s, WEB, "m0") if s else None
    s = reserve(s, WEB, Resources.of(cpu=200, ram=100)) if s else None
    s = submit(s, Job("u", "batch", 100, 1, Resources.of(cpu=700, ram=100))) if s else None
    s = schedule(s, BATCH, "m0") if s else None  # fits only beside web's reservation
    assert s is not None
    return s


def test_a_falling_reservation_is_written() -> None:
    s = cell_with_batch_in_reclaimed_room()
    d = Draft(Cell(state=s), 0.0)
    assert apply_reservations(d, {WEB: Resources.of(cpu=150, ram=100)}) == 1
    assert d.state.tasks[WEB].reserved == Resources.of(cpu=150, ram=100)
    assert d.state.tasks[BATCH].state is TaskState.RUNNING


def test_a_growing_reservation_evicts_batch_work_from_reclaimed_room() -> None:
    s = cell_with_batch_in_reclaimed_room()
    d = Draft(Cell(state=s), 0.0)
    assert apply_reservations(d, {WEB: Resources.of(cpu=600, ram=100)}) == 1
    assert d.state.tasks[WEB].reserved == Resources.of(cpu=600, ram=100)
    assert d.state.tasks[BATCH].state is TaskState.PENDING  # evicted for reclamation
    assert any("reclaimed resources" in reason for _, _, reason in d.tasks[BATCH].history)
