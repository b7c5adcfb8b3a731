"""A cell of 200 hollow machines: a job of 300 tasks all RUNNING as the hollow borglets report it, then killed, no task index ever running twice, and the machines obeying only requests signed for them."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from reference import launcher
from reference.cellfile import read_admin_token
from reference.client import CellClient
from reference.master.reports import parse_borglet_task_id
from reference.waiting import wait_until

pytestmark = pytest.mark.integration

MACHINES = 200
TASKS = 300


class Sampler:
    """Reads what every hollow machine runs, every 0.1 s, and records any task index found
    running under two task ids at once, or any task id started twice."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples = 0
        self.most_running = 0
        self.twice: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        with httpx.Client(timeout=5.0) as http:
            while not self._stop.wait(0.1):
                summary = http.get(f"{self.url}/v1/hollow").json()
                by_index: dict[tuple[str, int], set[str]] = {}
                for ids in summary["running"].values():
                    for tid in ids:
                        parsed = parse_borglet_task_id(tid)
                        assert parsed is not None, tid
                        by_index.setdefault(parsed[:2], set()).add(tid)
                self.twice += [f"{k}: {sorted(v)}" for k, v in by_index.items() if len(v) > 1]
                self.twice += summary["started_twice"]
                self.most_running = max(self.most_running, sum(map(len, by_index.values())))
                self.samples += 1


def http_status(url: str, auth: httpx.Auth | None = None) -> int:
    with httpx.Client(timeout=5.0, auth=auth) as http:
        return http.get(url).status_code


def test_a_job_runs_on_hollow_machines_and_is_killed(state_dir: Path) -> None:
    info = launcher.up(state_dir, replicas=1, machines=0, hollow=MACHINES, hollow_start_delay_s=0.05)
    (served,) = [p for p in info.of_role(launcher.Role.BORGLET)]
    assert len(info.borglet_urls) == MACHINES
    job = {
        "name": "scale", "user": "hollow", "priority": 100, "task_count": TASKS,
        "request": {"cpu": "100m", "ram": "64MiB"}, "command": ["server"],
    }  # fmt: skip
    with CellClient(list(info.master_urls), token=read_admin_token(info.state_dir)) as client, Sampler(served.url) as sampler:
        machines = client.machines()
        assert len(machines) == MACHINES
        assert all(m["attrs"].get("hollow") == "true" for m in machines)
        client.submit(job)

        def confirmed() -> bool:
            tasks = client.tasks("hollow/scale")
            return len(tasks) == TASKS and all(
                t["state"] == "RUNNING" and t.get("borglet_state") == "RUNNING" for t in tasks
            )

        wait_until(confirmed, 30.0, f"{TASKS} tasks reported RUNNING by their hollow borglets", 0.2)
        wait_until(lambda: sampler.most_running == TASKS, 5.0, "the hollow machines to run every task", 0.1)
        client.kill("hollow/scale")
        with httpx.Client(timeout=5.0) as http:
            wait_until(
                lambda: not http.get(f"{served.url}/v1/hollow").json()["running"],
                15.0,
                "every hollow task killed",
                0.2,
            )
        time.sleep(0.3)  # a few more samples after the kill
        # The machines obey the cell's masters only: a read not signed for the machine is refused.
        address = info.borglet_urls["hollow0000"]
        assert http_status(f"{address}/v1/state") == 401
        assert http_status(f"{address}/v1/state", launcher.borglet_auth(state_dir, "hollow0001")) == 401
        assert http_status(f"{address}/v1/state", launcher.borglet_auth(state_dir, "hollow0000")) == 200
    assert sampler.samples > 10
    assert sampler.twice == []
    launcher.down(state_dir)
