"""The master-borglet channel on a cell started as `cell up` starts it: a forged sync (no
credential, a foreign key, an old signature) is a 401 that changes nothing on the machine, the
real leader's syncs still apply, and a borglet without a key refuses to start."""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from reference import channel, launcher
from reference.cellfile import auth_headers, read_admin_token
from reference.launcher import CellInfo
from reference.waiting import wait_until
from tests.integration.cellkit import REPO, sleeper_job

pytestmark = pytest.mark.integration

ATTACK_EPOCH = 10**12


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CellInfo]:
    root = tmp_path_factory.mktemp("cell")
    info = launcher.up(root, replicas=1, machines=1, master_args=("--poll-interval", "0.3"))
    try:
        yield info
    finally:
        launcher.down(root)


def key_of(info: CellInfo) -> bytes:
    return channel.load_key(Path(info.state_dir) / channel.KEY_FILE)


def borglet_state(info: CellInfo) -> dict[str, Any]:
    """machine0's /v1/state, read as its masters read it."""
    with httpx.Client(auth=channel.ClientAuth(key_of(info)), timeout=5) as http:
        answer = http.get(info.borglet_urls["machine0"] + "/v1/state", headers=channel.to_machine("machine0"))
    answer.raise_for_status()
    return answer.json()


def master(info: CellInfo, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = auth_headers(read_admin_token(info.state_dir))
    return httpx.request(method, info.master_urls[0] + path, timeout=10, headers=headers, **kw)


def running_pids(info: CellInfo, user: str, name: str, count: int) -> dict[str, int] | None:
    """task id -> pid once `count` tasks of the job run on machine0, as the borglet reports them."""
    view = master(info, "GET", f"/v1/jobs/{user}/{name}/tasks").json()["tasks"]
    if sum(t["borglet_state"] == "RUNNING" for t in view) < count:
        return None
    pids = {t["task_id"]: t["pid"] for t in borglet_state(info)["tasks"] if t["state"] == "RUNNING"}
    return pids or None


def submit(info: CellInfo, job: dict[str, Any]) -> None:
    wait_until(lambda: master(info, "POST", "/v1/jobs", json=job).status_code in (201, 409), 15, "submit")


def test_cell_up_makes_a_private_key_and_hands_it_to_every_master_and_borglet(cell: CellInfo) -> None:
    path = Path(cell.state_dir) / channel.KEY_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    for process in cell.processes:
        if process.role in (launcher.Role.MASTER, launcher.Role.BORGLET):
            assert "--channel-key-file" in process.command and str(path) in process.command


def test_a_forged_sync_is_refused_and_changes_nothing(cell: CellInfo, tmp_path: Path) -> None:
    submit(cell, sleeper_job("victim"))
    before = wait_until(lambda: running_pids(cell, "bob", "victim", 1), 30, "the victim task to run")
    fence = borglet_state(cell)["fence"]
    marker = tmp_path / "ran-as-mallory"
    forged = {
        "master": "mallory", "epoch": ATTACK_EPOCH, "seq": 1, "revision": 0,
        "tasks": [{"task_id": "mallory/evil/0#0", "command": ["sh", "-c", f"id > {marker}"]}],
    }  # fmt: skip
    body = json.dumps(forged).encode()
    url = cell.borglet_urls["machine0"] + "/v1/sync"
    attempts = {
        "no credential": {},
        "another key": channel.sign(secrets.token_bytes(32), "POST", b"/v1/sync", body, "machine0", time.time()),
        "an old signature": channel.sign(key_of(cell), "POST", b"/v1/sync", body, "machine0", time.time() - 120),
        "another machine's": channel.sign(key_of(cell), "POST", b"/v1/sync", body, "machine9", time.time()),
    }
    for what, headers in attempts.items():
        answer = httpx.post(url, content=body, headers={"content-type": "application/json", **headers}, timeout=5)
        assert answer.status_code == 401, (what, answer.text)
        detail = answer.json()["detail"][0]
        assert detail["field"].startswith("X-Minborg-Channel-") and detail["error"], what
    # Reads of the machine's state and of its tasks' logs need the key as well.
    assert httpx.get(cell.borglet_urls["machine0"] + "/v1/state", timeout=5).status_code == 401
    task_id = next(iter(before))
    logs_url = f"{cell.borglet_urls['machine0']}/v1/tasks/{task_id.replace('/', '%2F').replace('#', '%23')}/logs"
    assert httpx.get(logs_url, timeout=5).status_code == 401
    # /healthz and /metrics stay open.
    assert httpx.get(cell.borglet_urls["machine0"] + "/healthz", timeout=5).status_code == 200

    # Nothing changed: no epoch raised, no task started or killed, nothing persisted. (The
    # leader sends no sync the borglet does not need: the fence moves with the next change below.)
    time.sleep(2.0)
    state = borglet_state(cell)
    assert state["fence"]["epoch"] == fence["epoch"] < ATTACK_EPOCH and state["fence"]["seq"] >= fence["seq"]
    assert {t["task_id"] for t in state["tasks"]} == set(before)
    assert all(psutil.pid_exists(pid) for pid in before.values())
    assert not marker.exists()
    table = json.loads((Path(cell.state_dir) / "machines" / "machine0" / "tasks.json").read_text())
    assert table["fence"]["epoch"] == fence["epoch"] and "mallory" not in json.dumps(table)
    machines = master(cell, "GET", "/v1/machines").json()["machines"]
    assert [m["state"] for m in machines] == ["up"]

    # The real leader's syncs still apply: a new job starts, a killed one stops, and its logs
    # are fetched through the master (signed by the master too).
    submit(cell, sleeper_job("after", user="carol"))
    wait_until(lambda: running_pids(cell, "carol", "after", 1), 30, "a job submitted after the attack to run")
    now = borglet_state(cell)["fence"]  # the leader's next sync, over the attack: same epoch, a newer seq
    assert now["epoch"] == fence["epoch"] and now["seq"] > fence["seq"]
    assert master(cell, "GET", "/v1/jobs/bob/victim/tasks/0/logs").status_code == 200
    assert master(cell, "DELETE", "/v1/jobs/bob/victim").status_code == 200
    wait_until(lambda: not any(psutil.pid_exists(p) for p in before.values()), 15, "the victim to be killed")


def test_a_borglet_without_a_key_refuses_to_start(tmp_path: Path) -> None:
    argv = [
        sys.executable, "-m", "reference.borglet", "--name", "nokey", "--capacity", "cpu=1,ram=1GiB",
        "--state-dir", str(tmp_path / "state"),
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--channel-key-file is required" in done.stderr and "--insecure-channel" in done.stderr
