"""The cell's lifecycle on its data: a cold restart of the whole control plane with tasks running
through it, `cell down` then `cell up` (resume) and `--fresh`, and `cell down` finding every
task process, orphans of a SIGKILLed borglet included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reference import launcher, procscan
from reference.cellfile import auth_headers
from reference.launcher import tls as cell_tls
from tests.integration.cellkit import REPO, sleeper_job, wait_for

pytestmark = pytest.mark.integration


def minborg(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINBORG_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "200"
    return subprocess.run(
        [sys.executable, "-m", "reference.cli", *args], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "cell"
    yield path
    if (path / "cell.json").exists():
        launcher.shut_down(path)
    procscan.kill(path)


class Api:
    """Requests to whichever master of the cell answers."""

    def __init__(self, urls: list[str], token: str | None = None, verify: Any = True) -> None:
        self.urls = urls
        self.http = httpx.Client(timeout=3.0, headers=auth_headers(token), verify=verify)

    @classmethod
    def of(cls, info: launcher.CellInfo) -> Api:
        """As the cell's admin, with the token `cell up` wrote in its state dir and its CA (`cell up` serves https)."""
        return cls(list(info.master_urls), launcher.read_admin_token(info.state_dir), cell_tls.client_verify(info.state_dir))

    def call(self, method: str, path: str, **kw: Any) -> httpx.Response | None:
        for url in self.urls:
            try:
                r = self.http.request(method, url + path, **kw)
            except httpx.HTTPError:
                continue
            if r.status_code != 503:
                return r
        return None

    def jobs(self) -> set[str]:
        r = self.call("GET", "/v1/jobs")
        assert r is not None and r.status_code == 200, r and r.text
        return {j["key"] for j in r.json()["jobs"]}

    def running(self, key: str, n: int) -> list[dict[str, Any]] | None:
        r = self.call("GET", f"/v1/jobs/{key}/tasks")
        if r is None or r.status_code != 200:
            return None
        tasks = [t for t in r.json()["tasks"] if t["state"] == "RUNNING" and t["borglet_state"] == "RUNNING"]
        return tasks if len(tasks) >= n else None


def tiny_job(name: str) -> dict[str, Any]:
    return {
        "name": name, "user": "carol", "priority": 100, "task_count": 0,
        "request": {"cpu": "10m", "ram": "8MiB"}, "command": ["true"],
    }  # fmt: skip


def task_processes(root: Path, count: int) -> dict[int, str]:
    """pid -> task id of the cell's task processes, once `count` of them run."""
    found = wait_for(lambda: f if len(f := procscan.scan(root)) >= count else None, 60, f"{count} task processes")
    return {p.pid: p.task_id for p in found}


def test_cold_restart_of_the_control_plane_keeps_acknowledged_jobs_and_running_tasks(state_dir: Path) -> None:
    info = launcher.up(state_dir, replicas=3, machines=2, etcd_members=3)
    api = Api.of(info)
    r = api.call("POST", "/v1/jobs", json=sleeper_job("steady", count=2))
    assert r is not None and r.status_code == 201, r and r.text
    wait_for(lambda: api.running("bob/steady", 2), 30, "the running job's tasks")
    before = task_processes(state_dir, 2)

    # Small jobs submitted without pause; only a 201 counts as acknowledged.
    acked: list[str] = []
    stop = threading.Event()

    def submit() -> None:
        client = Api.of(info)
        for i in range(10_000):
            if stop.is_set():
                return
            r = client.call("POST", "/v1/jobs", json=tiny_job(f"j{i}"))
            if r is not None and r.status_code == 201:
                acked.append(f"carol/j{i}")
            elif r is None:
                time.sleep(0.05)

    submitter = threading.Thread(target=submit, daemon=True)
    submitter.start()
    wait_for(lambda: len(acked) >= 10, 30, "ten acknowledged submissions")

    # Every etcd member and every master at once: a power cut of the control plane.
    plane = info.of_role(launcher.Role.ETCD) + info.of_role(launcher.Role.MASTER)
    for record in plane:
        os.kill(record.pid, signal.SIGKILL)
    wait_for(lambda: not any(launcher.is_alive(p) for p in plane), 10, "the control plane to die")
    time.sleep(0.5)  # the submitter keeps trying against a dead control plane
    stop.set()
    submitter.join(10)
    assert not submitter.is_alive()
    during = {p.pid: p.task_id for p in procscan.scan(state_dir)}
    assert during == before, "tasks run on while the control plane is down"

    began = time.monotonic()
    restarted = launcher.restart(state_dir, control_plane=True)
    api = Api.of(restarted)
    first = wait_for(
        lambda: (r := api.call("POST", "/v1/jobs", json=tiny_job("after"))) is not None and r.status_code == 201,
        30, "a write accepted after the restart",  # fmt: skip
    )
    assert first
    to_write = time.monotonic() - began
    print(f"\ncold restart: {len(acked)} acknowledged jobs; first accepted write {to_write:.2f} s after `cell restart --control-plane` began")

    leader = launcher.wait_for_leader(restarted, 10)
    assert leader in {m.name for m in restarted.of_role(launcher.Role.MASTER)}
    jobs = api.jobs()
    lost = [key for key in acked if key not in jobs]
    assert lost == [], f"acknowledged jobs lost in the cold restart: {lost}"
    assert "bob/steady" in jobs and "carol/after" in jobs

    # The running tasks went on untouched: same processes, same incarnations, none added, and
    # still so after the new leader's polls have reached both borglets a few times.
    time.sleep(3.0)
    after = {p.pid: p.task_id for p in procscan.scan(state_dir)}
    assert after == before, f"task processes changed across the restart: {before} -> {after}"
    tasks = wait_for(lambda: api.running("bob/steady", 2), 15, "the job's tasks seen running")
    assert sorted((t["index"], t["incarnation"]) for t in tasks) == [(0, 0), (1, 0)]


def test_down_then_up_resumes_the_cell_and_fresh_wipes_it(state_dir: Path) -> None:
    flags = ("--state-dir", str(state_dir))
    up = minborg("cell", "up", "--replicas", "1", "--machines", "1", *flags)
    assert up.returncode == 0, up.stdout + up.stderr
    info = launcher.CellInfo.load(state_dir)
    api = Api.of(info)
    r = api.call("POST", "/v1/jobs", json=sleeper_job("kept", count=2))
    assert r is not None and r.status_code == 201, r and r.text
    wait_for(lambda: api.running("bob/kept", 2), 60, "the job's tasks")
    task_processes(state_dir, 2)

    down = minborg("cell", "down", *flags)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "0 left" in down.stdout and procscan.scan(state_dir) == []

    # A running cell is never wiped nor started twice: `up` says what to do instead.
    again = minborg("cell", "up", *flags)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming cell local" in again.stdout and "up again on its data" in again.stdout
    for refused in (minborg("cell", "up", *flags), minborg("cell", "up", "--fresh", *flags)):
        assert refused.returncode == 1
        assert "already running" in refused.stderr and "cell restart" in refused.stderr
    assert (state_dir / "etcd").is_dir()

    info = launcher.CellInfo.load(state_dir)
    api = Api.of(info)
    assert "bob/kept" in api.jobs()
    tasks = wait_for(lambda: api.running("bob/kept", 2), 30, "the job's tasks back after the resume")
    assert sorted(t["index"] for t in tasks) == [0, 1]
    task_processes(state_dir, 2)

    assert minborg("cell", "down", *flags).returncode == 0
    fresh = minborg("cell", "up", "--fresh", "--replicas", "1", "--machines", "1", *flags)
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert f"deleting {state_dir / 'etcd'}" in fresh.stdout.replace("\n", "")
    info = launcher.CellInfo.load(state_dir)
    assert Api.of(info).jobs() == set()
    assert minborg("cell", "down", *flags).returncode == 0


def test_down_kills_the_tasks_a_sigkilled_borglet_left_behind(state_dir: Path) -> None:
    info = launcher.up(state_dir, replicas=1, machines=1)
    api = Api.of(info)
    r = api.call("POST", "/v1/jobs", json=sleeper_job("orphans", count=3))
    assert r is not None and r.status_code == 201, r and r.text
    wait_for(lambda: api.running("bob/orphans", 3), 60, "the job's tasks")
    pids = task_processes(state_dir, 3)

    # A borglet SIGKILLed leaves its tasks running, re-parented to PID 1.
    (borglet,) = info.of_role(launcher.Role.BORGLET)
    launcher.kill_process(borglet, signal.SIGKILL)
    assert set(pids) <= {p.pid for p in procscan.scan(state_dir)}

    down = minborg("cell", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    assert "3 stray task process(es) found and killed, 0 left" in down.stdout, down.stdout
    assert procscan.scan(state_dir) == []


def test_full_restart_leaves_tasks_running_and_the_borglets_readopt_them(state_dir: Path) -> None:
    info = launcher.up(state_dir, replicas=1, machines=1)
    api = Api.of(info)
    r = api.call("POST", "/v1/jobs", json=sleeper_job("adopted", count=2))
    assert r is not None and r.status_code == 201, r and r.text
    wait_for(lambda: api.running("bob/adopted", 2), 60, "the job's tasks")
    before = task_processes(state_dir, 2)
    old = {p.name: p.pid for p in info.processes}

    restart = minborg("cell", "restart", "--state-dir", str(state_dir))
    assert restart.returncode == 0, restart.stdout + restart.stderr
    assert "their tasks left running" in restart.stdout
    info = launcher.CellInfo.load(state_dir)
    assert all(launcher.is_alive(p) and p.pid != old[p.name] for p in info.processes), "every process is new"

    api = Api.of(info)
    time.sleep(3.0)  # a few polls of the new leader: a task started twice would show by now
    tasks = wait_for(lambda: api.running("bob/adopted", 2), 15, "the re-adopted tasks seen running")
    assert sorted((t["index"], t["incarnation"]) for t in tasks) == [(0, 0), (1, 0)]
    assert {p.pid: p.task_id for p in procscan.scan(state_dir)} == before
