"""The job autoscaler on a live cell: hello_world grows under a short load and shrinks after it, without failed requests."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from reference.client import CellClient, ClientError, RoundRobin
from tests.integration.cellkit import LocalCell, hello_job, wait_for

pytestmark = pytest.mark.integration

AUTOSCALE = {
    "min": 1, "max": 3, "metric": "requests_per_task", "target": 8,
    "scale_up_cooldown": 2, "scale_down_cooldown": 8, "stabilization_s": 4, "drain_s": 3,
}  # fmt: skip


class Load:
    """Threads calling the job through RoundRobin at a settable total rate; counts failures."""

    def __init__(self, urls: list[str], job: str, token: str, threads: int = 4) -> None:
        self.urls, self.job, self.token = urls, job, token
        self.rate = 0.0
        self.ok = self.failed = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(threads,), daemon=True) for _ in range(threads)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)

    def _run(self, threads: int) -> None:
        with CellClient(self.urls, timeout=3.0, token=self.token) as client:
            balancer = RoundRobin(client, self.job, refresh_s=1.0, timeout=3.0)
            while not self._stop.is_set():
                rate = self.rate / threads
                if rate <= 0:
                    self._stop.wait(0.1)
                    continue
                started = time.monotonic()
                try:
                    _, response = balancer.get("/?cost_ms=5")
                    good = response.status_code == 200
                    error = "" if good else f"HTTP {response.status_code}"
                except ClientError as err:
                    good, error = False, str(err)
                with self._lock:
                    if good:
                        self.ok += 1
                    else:
                        self.failed += 1
                        self.errors.append(error)
                self._stop.wait(max(0.0, 1.0 / rate - (time.monotonic() - started)))
            balancer.close()


def job_state(cell: LocalCell) -> tuple[int, int]:
    """(the job's task count, tasks RUNNING and healthy)."""
    count = cell.get("/v1/jobs/alice/elastic")["job"]["task_count"]
    healthy = sum(1 for t in cell.tasks("alice", "elastic") if t["state"] == "RUNNING" and t["healthy"])
    return count, healthy


def test_job_grows_under_load_and_shrinks_after_without_failed_requests(tmp_path: Path) -> None:
    with LocalCell(tmp_path, masters=1, borglets=1, capacity="cpu=4000m,ram=4GiB") as cell:
        cell.wait_leader(30)
        assert cell.submit(hello_job("elastic", count=1, autoscale=AUTOSCALE)).status_code == 201
        wait_for(lambda: job_state(cell)[1] == 1, 30, "the first task healthy")
        urls = [m.url for m in cell.live_masters()]
        with Load(urls, "alice/elastic", cell.admin_token) as load:
            load.rate = 30.0  # about 4 tasks' worth at 8 req/s each: max is 3
            grown = time.monotonic()
            wait_for(lambda: job_state(cell) == (3, 3), 40, "3 healthy tasks under load", every=0.5)
            grown = time.monotonic() - grown
            time.sleep(5.0)  # hold the load on three tasks
            load.rate = 2.0  # near zero, but calls keep flowing while tasks are drained
            shrunk = time.monotonic()
            wait_for(lambda: job_state(cell) == (1, 1), 60, "back to 1 task after the load", every=0.5)
            shrunk = time.monotonic() - shrunk
            time.sleep(2.0)  # calls after the last stop
        tasks = cell.tasks("alice", "elastic")
        drained = [t for t in tasks if t["state"] == "DEAD" and t["index"] > 0]
        assert drained and all(t["draining"] for t in drained), "tasks leave through a drain"
        assert load.ok > 150
        assert load.failed == 0, f"{load.failed} failed requests: {load.errors[:5]}"
        print(f"grew to 3 in {grown:.1f}s, back to 1 in {shrunk:.1f}s, {load.ok} requests, 0 failed")
