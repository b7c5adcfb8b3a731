"""A job of thousands of tiny tasks on a 2-machine cell, beside a service job, then killed.

Judged from a scan of /proc, not from what the cell says: every task process carries its task
id in its environment (TASK_ID), so the scan sees each process of each task index. The cell
must start them all without a borglet being declared down, never run two processes of one
index at once, leave none alive once the kill converged and start none afterwards, and
`cell down` must leave no task process behind. A job larger than the cell then waits PENDING.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loadtests.overload import write
from loadtests.procsample import ProcSampler, index_of, task_processes
from reference.cellfile import auth_headers, read_admin_token
from reference.waiting import wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FLOOD = ("load", "flood")
SERVICE = ("demo", "hello_world")
FLOOD_TASKS = int(os.environ.get("MINBORG_OVERLOAD_TASKS", "3000"))


def minborg(state_dir: Path, *args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINBORG_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "200"
    return subprocess.run(
        [sys.executable, "-m", "reference.cli", *args, "--state-dir", str(state_dir)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def admin(state: Path) -> dict[str, str]:
    """The Authorization header of the cell's admin token, which `cell up` wrote in its state dir."""
    return auth_headers(read_admin_token(state))


@pytest.fixture()
def cell(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    state = tmp_path / "cell"
    # --plain: the flood's figures stay comparable with the runs before cells served TLS by default.
    up = minborg(state, "cell", "up", "--replicas", "3", "--machines", "2", "--plain", "--json")
    assert up.returncode == 0, up.stdout + up.stderr
    info = json.loads((state / "cell.json").read_text())
    try:
        leader = httpx.get(f"{info['master_urls'][0]}/v1/cell", timeout=30, headers=admin(state)).json().get("leader_url")
        yield state, leader or info["master_urls"][0]
    finally:
        down = minborg(state, "cell", "down")
        leftovers = task_processes((f"{FLOOD[0]}/{FLOOD[1]}/", f"{SERVICE[0]}/{SERVICE[1]}/"))
        assert leftovers == {}, f"`cell down` left task processes: {sorted(leftovers.values())[:10]}"
        assert down.returncode == 0, down.stdout + down.stderr


def test_a_flood_job_starts_runs_once_and_dies_with_its_kill(cell: tuple[Path, str]) -> None:
    state, master = cell
    flood_prefix = f"{FLOOD[0]}/{FLOOD[1]}/"
    service_prefix = f"{SERVICE[0]}/{SERVICE[1]}/"
    http = httpx.Client(base_url=master, timeout=30.0, headers=admin(state))
    service = {
        "name": SERVICE[1], "user": SERVICE[0], "priority": 200, "task_count": 3,
        "request": {"cpu": "100m", "ram": "64MiB"}, "command": ["sleep", "600"],
        "restart_policy": "always",
    }  # fmt: skip
    flood = {
        "name": FLOOD[1], "user": FLOOD[0], "priority": 100, "task_count": FLOOD_TASKS,
        "request": {"cpu": "1m", "ram": "4MiB"}, "command": ["sleep", "600"],
        "restart_policy": "on_failure",
    }  # fmt: skip
    with ProcSampler((flood_prefix, service_prefix)) as sampler:
        assert write(http, "POST", "/v1/jobs", json=service) == 201
        began = time.monotonic()
        assert write(http, "POST", "/v1/jobs", json=flood) == 201
        wait_until(lambda: len(sampler.live(flood_prefix)) >= FLOOD_TASKS, 300, f"{FLOOD_TASKS} flood processes", 1.0)
        started_s = time.monotonic() - began
        # Every machine stayed up through the flood: busy borglets answered their polls.
        machines = http.get("/v1/machines").json()["machines"]
        assert [m["name"] for m in machines if m["state"] != "up"] == []
        counts = http.get(f"/v1/jobs/{FLOOD[0]}/{FLOOD[1]}").json()["tasks"]
        assert counts["RUNNING"] == FLOOD_TASKS

        killed_at = time.monotonic()
        assert write(http, "DELETE", f"/v1/jobs/{FLOOD[0]}/{FLOOD[1]}") == 200
        wait_until(lambda: not sampler.live(flood_prefix), 120, "the flood processes to end after the kill", 0.5)
        gone_s = time.monotonic() - killed_at
        quiet_from = time.monotonic()
        # A job larger than the cell: what fits runs, the rest waits PENDING; nothing goes down.
        big = {
            "name": "big", "user": FLOOD[0], "priority": 100, "task_count": 10,
            "request": {"cpu": "3", "ram": "64MiB"}, "command": ["sleep", "600"],
        }  # fmt: skip
        assert write(http, "POST", "/v1/jobs", json=big) == 201
        time.sleep(10)  # nothing of the killed job may start again meanwhile
        counts = http.get(f"/v1/jobs/{FLOOD[0]}/big").json()["tasks"]
        assert (counts["RUNNING"], counts["PENDING"]) == (2, 8), counts  # 4 cores a machine
        machines = http.get("/v1/machines").json()["machines"]
        assert [m["name"] for m in machines if m["state"] != "up"] == []
        service_live = sampler.live(service_prefix)
    late = sampler.started_after(quiet_from, flood_prefix)
    print(f"\n{FLOOD_TASKS} tasks: all processes in {started_s:.1f} s, none left {gone_s:.1f} s after the kill")
    assert late == [], f"flood processes started after the kill converged: {late[:1]}"
    assert sampler.doubles == [], f"two live processes of one index: {sampler.doubles[:5]}"
    assert len({index_of(t) for t in service_live}) == 3  # the service kept running
    assert len(sampler.samples) > 10
