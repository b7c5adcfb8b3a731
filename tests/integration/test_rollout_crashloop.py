"""A rolling update to a version that crashes stops after its first replacement, in the cell
Sigma's test runs (3 machines, two master replicas, jobs of 2 tasks with max_unavailable 1):
the other task keeps its older version and runs on, and the rollout reads `stopped` naming
the failing task.

One version exits at once (Sigma's `raise SystemExit(3)`); the other exits 0.2 s after it
starts, long enough for a poll of its borglet (every 0.3 s here) to find it RUNNING most
times, and short enough to be seen exiting well within MIN_READY_S (1 s). Two faults of the
borglet made such a replacement look up and the next task replaced (docs/decisions.md, "A
crash-looping version replaced two tasks"): its start time read up to a second early
(psutil's create_time counts from a boot time rounded down to the second), and its exit seen
up to a second late (uvloop refused the SIGCHLD handler that wakes the supervisor), reported
RUNNING meanwhile.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.integration.cellkit import TASK_PYTHON, LocalCell, sleeper_job, wait_for

pytestmark = pytest.mark.integration

JOBS = {
    "batch": (sleeper_job("batch", count=2, request={"cpu": "1500m", "ram": "256MiB"}), "raise SystemExit(3)"),
    "late": (sleeper_job("late", count=2), "import time; time.sleep(0.2); raise SystemExit(3)"),
}


def newest(cell: LocalCell, name: str) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for t in cell.tasks("bob", name):
        if t["index"] not in out or t["incarnation"] > out[t["index"]]["incarnation"]:
            out[t["index"]] = t
    return out


def test_a_crashing_version_replaces_one_task_and_the_rollout_stops(tmp_path: Any) -> None:
    with LocalCell(tmp_path, masters=2, borglets=3, poll_interval=0.3) as cell:
        cell.wait_leader(20)
        for job, _ in JOBS.values():
            assert cell.submit(job).status_code == 201
        wait_for(lambda: all(cell.running("bob", name, 2) for name in JOBS), 40, "both jobs running")
        # Each task up (run MIN_READY_S) before the change: a stale task not yet up is down
        # anyway, and replacing it at once is the design (it adds no outage).
        wait_for(lambda: all(not cell.get(f"/v1/jobs/bob/{n}")["rollout"]["down"] for n in JOBS), 20, "every task up")
        for name, (job, crash) in JOBS.items():
            r = cell.request("PUT", f"/v1/jobs/bob/{name}", json={**job, "command": [TASK_PYTHON, "-c", crash]})
            assert r.status_code == 200 and r.json()["version"] == 1 and r.json()["plan"]["replaced"] == [0, 1], r.text

        replaced: dict[str, int] = {}
        for name in JOBS:
            stopped = wait_for(
                lambda n=name: (ro := cell.get(f"/v1/jobs/bob/{n}")["rollout"])["state"] == "stopped" and ro,
                45, f"{name}'s rollout to stop",
            )  # fmt: skip
            # The first replaced is a task the leader's borglet word counts down, else task 0:
            # either way exactly one, named, and the other stale.
            found = re.match(r"task ([01]) of version 1 fails \(exit 3\)", stopped["reason"])
            assert found, stopped
            replaced[name] = first = int(found[1])
            assert stopped["stale"] == [1 - first], (name, stopped, newest(cell, name))
        for name in JOBS:
            # Restarted in place three times, each run read as the crash loop it is: the
            # replacement had every chance to be counted up, and the other task still runs
            # its older version.
            first, other = replaced[name], 1 - replaced[name]
            tasks = wait_for(lambda n=name, i=first: (ts := newest(cell, n))[i]["restarts"] >= 3 and ts, 30, f"{name}'s restarts")
            assert tasks[first]["incarnation"] == 1 and tasks[first]["last_exit"] == "exit 3", (name, tasks[first])
            assert tasks[other]["incarnation"] == 0 and tasks[other]["state"] == "RUNNING", (name, tasks[other])
            ro = cell.get(f"/v1/jobs/bob/{name}")["rollout"]
            assert ro["state"] == "stopped" and ro["stale"] == [other], (name, ro)
