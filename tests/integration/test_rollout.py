"""A rolling update on a real cell: a job of 3 tasks with max_unavailable 1 gets a new command
and never has more than 1 task down in its API samples; a command that cannot start stops the
rollout after one task, the job says why, and a revert brings every task back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadtests.maintenance import Sampler, Samples, tasks_up
from tests.integration.cellkit import LocalCell, sleeper_job, wait_for

pytestmark = pytest.mark.integration

JOB = "bob/web"


def rollout(cell: LocalCell) -> dict[str, Any]:
    return cell.get(f"/v1/jobs/{JOB}")["rollout"]


def newest(cell: LocalCell) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for t in cell.tasks("bob", "web"):
        if t["index"] not in out or t["incarnation"] > out[t["index"]]["incarnation"]:
            out[t["index"]] = t
    return out


def test_a_new_command_rolls_within_budget_a_bad_one_stops_and_revert_restores(tmp_path: Path) -> None:
    v0 = sleeper_job("web", count=3, max_unavailable=1)
    with LocalCell(tmp_path, masters=1, borglets=2) as cell:
        cell.wait_leader(20)
        r = cell.request("PUT", f"/v1/jobs/{JOB}", json=v0)
        assert r.status_code == 201 and r.json()["created"], r.text
        wait_for(lambda: tasks_up(cell.tasks("bob", "web"), 3) == 3, 40, "3 tasks started")
        r = cell.request("PUT", f"/v1/jobs/{JOB}", json=v0)  # the same file again: a no-op
        assert r.status_code == 200 and r.json()["unchanged"] and r.json()["version"] == 0, r.text
        r = cell.request("PUT", f"/v1/jobs/{JOB}", json={**v0, "max_unavailable": 0})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "max_unavailable", r.text

        samples = Samples({JOB: {"count": 3, "budget": 1}})
        sampler = Sampler(lambda job: cell.get(f"/v1/jobs/{job}/tasks")["tasks"], samples, 0.05).start()
        try:
            v1 = {**v0, "command": [*v0["command"][:-1], "import time; time.sleep(3601)"]}
            r = cell.request("PUT", f"/v1/jobs/{JOB}", json=v1)
            assert r.status_code == 200, r.text
            assert r.json()["version"] == 1 and r.json()["changed"] == ["command"]
            assert r.json()["plan"]["replaced"] == [0, 1, 2]
            wait_for(lambda: (ro := rollout(cell))["state"] == "complete" and not ro["down"], 60, "version 1 rolled out")
            assert all(t["incarnation"] == 1 for t in newest(cell).values())
            assert samples.worst_down()[JOB] == 1, samples.up[JOB]  # one at a time, and seen down

            # A command that cannot start: the first replacement fails and the rollout stops there.
            r = cell.request("PUT", f"/v1/jobs/{JOB}", json={**v0, "command": ["/no/such/program"]})
            assert r.status_code == 200 and r.json()["version"] == 2, r.text
            stopped = wait_for(lambda: (ro := rollout(cell))["state"] == "stopped" and ro, 40, "the rollout stopped")
            assert "task 0" in stopped["reason"] and len(stopped["stale"]) == 2, stopped
            assert sum(t["state"] == "RUNNING" and t["incarnation"] == 1 for t in newest(cell).values()) == 2
        finally:
            sampler.stop()
        assert samples.over_budget() == {}, samples.up[JOB]

        r = cell.request("POST", f"/v1/jobs/{JOB}/revert", json={"version": 1})
        assert r.status_code == 200 and r.json()["version"] == 3 and r.json()["changed"] == ["command"], r.text
        wait_for(lambda: (ro := rollout(cell))["state"] == "complete" and not ro["down"], 60, "reverted to version 1")
        assert tasks_up(cell.tasks("bob", "web"), 3) == 3
        history = cell.get(f"/v1/jobs/{JOB}/history")
        assert [v["version"] for v in history["versions"]] == [3, 2, 1, 0]
        assert history["versions"][0]["file"]["command"] == v1["command"]
        r = cell.request("POST", f"/v1/jobs/{JOB}/revert", json={"version": 7})
        assert r.status_code == 404 and r.json()["detail"][0]["field"] == "version", r.text
