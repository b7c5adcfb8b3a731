"""The read-only quota list and the request/reservation fields of the task view."""

from __future__ import annotations

from reference.master import views
from reference.master.cell import Cell
from spec.fmap import FMap
from spec.model import (
    Band,
    CellState,
    Job,
    Machine,
    QuotaKey,
    Resources,
    Task,
    TaskId,
    TaskState,
)


def _cell() -> Cell:
    job = Job("alice", "web", 100, 2, Resources.of(cpu=1000, ram=64))
    running = Task(TaskId(job.key, 0), TaskState.RUNNING, "m0", 100, job.request, None, Resources.of(cpu=300, ram=64))
    pending = Task(TaskId(job.key, 1), TaskState.PENDING, None, 100, job.request)
    state = CellState(
        machines=FMap({"m0": Machine("m0", Resources.of(cpu=4000, ram=1024))}),
        jobs=FMap({job.key: job}),
        tasks=FMap({running.id: running, pending.id: pending}),
        quotas=FMap({
            QuotaKey("*", Band.PRODUCTION): Resources.of(cpu=8000, ram=4096),
            QuotaKey("*", Band.BATCH): Resources.of(cpu=12000),
            QuotaKey("alice", Band.BATCH): Resources.of(cpu=2000),
        }),
    )  # fmt: skip
    return Cell(state=state)


def test_quota_views_list_every_entry_sorted() -> None:
    assert views.quota_views(_cell()) == [
        {"user": "*", "band": "batch", "limit": {"cpu": 12000}},
        {"user": "*", "band": "production", "limit": {"cpu": 8000, "ram": 4096}},
        {"user": "alice", "band": "batch", "limit": {"cpu": 2000}},
    ]


def test_quota_views_of_a_cell_without_quotas_is_empty() -> None:
    assert views.quota_views(Cell()) == []


def test_task_view_shows_request_and_reservation() -> None:
    cell = _cell()
    running = views.task_view(cell, cell.state.tasks[TaskId("alice/web", 0)], "c")
    pending = views.task_view(cell, cell.state.tasks[TaskId("alice/web", 1)], "c")
    assert running["request"] == {"cpu": 1000, "ram": 64}
    assert running["reservation"] == {"cpu": 300, "ram": 64}
    assert pending["request"] == {"cpu": 1000, "ram": 64}
    assert pending["reservation"] is None
