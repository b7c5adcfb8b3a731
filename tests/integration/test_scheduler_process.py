"""The scheduler as its own process: it places the cell's tasks, one process at a time by its
lease, and the leader takes scheduling back when no scheduler process is left."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.cellkit import LocalCell, sleeper_job, wait_for

pytestmark = pytest.mark.integration


def _scheduler(cell: LocalCell) -> dict[str, Any] | None:
    return cell.get("/v1/cell", master=cell.wait_leader()).get("scheduler")


def test_the_scheduler_process_places_tasks_and_hands_over(tmp_path: Path) -> None:
    with LocalCell(tmp_path, masters=3, borglets=3, schedulers=2) as cell:
        wait_for(lambda: (s := _scheduler(cell)) is not None and s["by"] == "process" or None, 20, "a scheduler process")
        assert cell.submit(sleeper_job("a", count=15)).status_code == 201
        wait_for(lambda: cell.running("bob", "a", 15), 60, "15 tasks placed by the process")
        first = _scheduler(cell)
        assert first is not None and first["placed"] >= 15
        # The leader names the process whose plans it takes. On a busy machine the first lease
        # can lapse while the cell starts, so both logs may say "schedules the cell" by now.
        active = [s for s in cell.schedulers if s.name == first["name"]]
        assert len(active) == 1, first

        # The active process dies: the standby one takes its lease and goes on.
        active[0].kill()
        standby = [s for s in cell.schedulers if s is not active[0]][0]
        wait_for(lambda: (s := _scheduler(cell)) is not None and s.get("name") == standby.name or None, 30,
                 "the standby plans")  # fmt: skip
        assert "schedules the cell" in standby.log.read_text()
        before = _scheduler(cell)["placed"]  # type: ignore[index]
        assert cell.submit(sleeper_job("b", count=6)).status_code == 201
        wait_for(lambda: cell.running("bob", "b", 6), 60, "6 tasks placed after the hand-over")
        assert _scheduler(cell)["placed"] >= before + 6  # type: ignore[index]

        # No scheduler process left: the leader schedules again by itself.
        standby.kill()
        wait_for(lambda: (s := _scheduler(cell)) is not None and s["by"] == "leader" or None, 20, "the leader again")
        assert cell.submit(sleeper_job("c", count=3)).status_code == 201
        wait_for(lambda: cell.running("bob", "c", 3), 60, "3 tasks placed by the leader")
        # Nothing ran twice: one RUNNING task per index of each job.
        for job in ("a", "b", "c"):
            running = [t["index"] for t in cell.tasks("bob", job) if t["state"] == "RUNNING"]
            assert sorted(running) == sorted(set(running))
