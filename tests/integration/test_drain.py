"""A machine drained on a real cell: a job of 4 tasks with budget 1 never has more than 1 task down, as its API samples show, the machine ends empty, refuses new work until uncordoned, and bad requests are 4xx naming what is wrong."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from loadtests.maintenance import Sampler, Samples, tasks_up
from tests.integration.cellkit import LocalCell, sleeper_job, wait_for

pytestmark = pytest.mark.integration

JOB = "bob/web"


def test_a_drain_keeps_a_job_within_its_budget_and_empties_the_machine(tmp_path: Path) -> None:
    with LocalCell(tmp_path, masters=1, borglets=3) as cell:
        cell.wait_leader(20)
        assert cell.submit(sleeper_job("web", count=4, max_unavailable=1)).status_code == 201
        wait_for(lambda: tasks_up(cell.tasks("bob", "web"), 4) == 4, 40, "4 tasks started")
        placed = Counter(t["machine"] for t in cell.live_tasks("bob", "web"))
        target, on_it = placed.most_common(1)[0]
        assert on_it >= 2  # 4 tasks on 3 machines: one holds two, so the budget has something to hold back

        # Bad input: a 4xx naming the field, and nothing drained.
        r = cell.request("POST", f"/v1/machines/{target}/drain", json={"deadline_s": -5})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "deadline_s", r.text
        r = cell.request("POST", "/v1/machines/no-such/drain", json={})
        assert r.status_code == 404 and r.json()["detail"][0]["field"] == "name"
        r = cell.request("POST", f"/v1/machines/{target}/uncordon")
        assert r.status_code == 409, r.text  # not drained
        token = cell.add_user("carol")
        r = cell.request("POST", f"/v1/machines/{target}/drain", json={}, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 403, r.text  # the admin's

        samples = Samples({JOB: {"count": 4, "budget": 1}})
        sampler = Sampler(lambda job: cell.get(f"/v1/jobs/{job}/tasks")["tasks"], samples, 0.05).start()
        try:
            r = cell.request("POST", f"/v1/machines/{target}/drain", json={})
            assert r.status_code == 200, r.text
            assert r.json()["machine"]["schedulable"] is False
            drained = wait_for(
                lambda: (m := next(x for x in cell.get("/v1/machines")["machines"] if x["name"] == target))["drain"]
                and m["drain"]["state"] == "drained" and m,
                45, f"{target} drained",
            )  # fmt: skip
            wait_for(lambda: tasks_up(cell.tasks("bob", "web"), 4) == 4, 30, "every task up again")
            time.sleep(0.3)
        finally:
            sampler.stop()
        assert drained["tasks"] == [] and drained["drain"]["tasks_left"] == 0
        assert all(t["machine"] != target for t in cell.live_tasks("bob", "web"))
        # The budget held in every sample, and the drain was seen taking a task down.
        assert len(samples.at) > 20, samples.at
        assert samples.worst_down()[JOB] == 1, samples.up[JOB]

        # A drained machine takes no new task; uncordoned, it does again.
        assert cell.submit(sleeper_job("extra", count=6)).status_code == 201
        wait_for(lambda: tasks_up(cell.tasks("bob", "extra"), 6) == 6, 30, "extra started")
        assert all(t["machine"] != target for t in cell.live_tasks("bob", "extra"))
        r = cell.request("POST", f"/v1/machines/{target}/uncordon")
        assert r.status_code == 200 and r.json()["machine"]["schedulable"] is True, r.text
        # Removing a drained machine evicts nothing: drained again (empty, or emptied), then removed.
        assert cell.request("POST", f"/v1/machines/{target}/drain", json={}).status_code == 200
        wait_for(lambda: not next(x for x in cell.get("/v1/machines")["machines"] if x["name"] == target)["tasks"],
                 30, f"{target} drained again")  # fmt: skip
        r = cell.request("DELETE", f"/v1/machines/{target}")
        assert r.status_code == 200 and r.json()["evicted"] == 0, r.text
