"""`task exec` attacked on a live cell whose borglet runs as root with cgroup isolation: a command exec'd into one's own task reads none of the cell's keys nor another user's files, cannot signal another user's task nor the borglet, and the borglet's exec endpoint obeys no one but its masters (unsigned, or signed with another key: 401); a terminal session (`task exec -it`) is opened and driven by its owner alone, at the master and at the borglet, whose session answers only the user who opened it.

The cell's directory is made passable by other users (0711), as in tests/security/test_spawn.py,
so that only each file's own protection stands between the command and it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from reference import channel
from reference.borglet import cgroups
from reference.client import CellClient
from tests.integration.cellkit import TASK_PYTHON, LocalCell, sleeper_job, wait_for
from tests.security.taskio import REACH, SIGNALS, cell_secrets

ROOT = os.geteuid() == 0
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not (ROOT and cgroups.CgroupTree("probe-security").usable() is None),
        reason="the sandbox is a root borglet's with cgroup v1 isolation: run as root on a host with cgroup v1",
    ),
]


@pytest.fixture(scope="module")
def cell() -> Iterator[LocalCell]:
    sandbox = Path(tempfile.mkdtemp(prefix="minborg-exec-sandbox-", dir="/tmp"))
    sandbox.chmod(0o711)
    c = LocalCell(sandbox / "cell", masters=1, borglets=1, poll_interval=0.3, isolation="cgroup")
    try:
        c.start()
        (sandbox / "cell").chmod(0o711)
        assert c.submit(sleeper_job("shell", user="mallory")).status_code == 201
        wait_for(lambda: c.running("mallory", "shell", 1), 30, "mallory/shell to run")
        yield c
    finally:
        c.stop()
        shutil.rmtree(sandbox, ignore_errors=True)
    assert c.leftovers() == [], "processes of the cell are still running"


@pytest.fixture(scope="module")
def api(cell: LocalCell) -> Iterator[CellClient]:
    with CellClient([m.url for m in cell.masters], retry_s=15, token=cell.admin_token) as client:
        yield client


def python_job(name: str, user: str, code: str, *args: str, **extra: Any) -> dict[str, Any]:
    return sleeper_job(name, user=user, command=[TASK_PYTHON, "-c", textwrap.dedent(code), *args],
                       restart_policy="never", request={"cpu": "500m", "ram": "64MiB"}, **extra)  # fmt: skip


def mallory_runs(cell: LocalCell, token: str, code: str, *args: str) -> dict[str, Any]:
    """The one JSON line `code` prints, exec'd by mallory into her own task."""
    r = httpx.post(
        f"{cell.masters[0].url}/v1/jobs/mallory/shell/tasks/0/exec",
        json={"command": [TASK_PYTHON, "-c", textwrap.dedent(code), *args]},
        headers={"Authorization": f"Bearer {token}"}, timeout=60,
    )  # fmt: skip
    assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text
    return json.loads(r.json()["stdout"].strip().splitlines()[-1])


def test_an_exec_cannot_read_the_cells_keys_nor_another_users_files(cell: LocalCell, api: CellClient) -> None:
    secrets = cell_secrets(cell, api, python_job)
    seen = mallory_runs(cell, api_token(cell, "mallory"), REACH, *map(str, secrets))
    assert seen["paths"] == {str(p): "PermissionError" for p in secrets}


def test_an_exec_cannot_signal_another_users_task_nor_the_borglet(cell: LocalCell, api: CellClient) -> None:
    assert cell.submit(sleeper_job("victim", user="victor")).status_code == 201
    victim = wait_for(lambda: cell.running("victor", "victim", 1), 30, "victor/victim to run")[0]
    borglet = cell.borglets[0].pid
    assert borglet is not None
    seen = mallory_runs(cell, api_token(cell, "mallory"), SIGNALS, str(victim["pid"]), str(borglet))
    assert seen == {"victim": "PermissionError", "borglet": "PermissionError"}
    assert cell.tasks("victor", "victim")[0]["state"] == "RUNNING"


_TOKENS: dict[str, str] = {}


def api_token(cell: LocalCell, user: str) -> str:
    """The user's token, made once for the module (a second `user add` of one name is refused)."""
    if user not in _TOKENS:
        _TOKENS[user] = cell.add_user(user)
    return _TOKENS[user]


@pytest.mark.parametrize("key", [None, b"\x01" * channel.KEY_BYTES, "cell"], ids=["unsigned", "another-key", "the-cells-key"])
def test_the_borglets_exec_endpoint_obeys_only_its_masters(cell: LocalCell, key: bytes | str | None) -> None:
    task = cell.tasks("mallory", "shell")[0]
    # The cell's own key passes the channel: the endpoint is there (404, no task of that id),
    # so the 401s below are the channel's refusals, not a missing route's.
    expected = 404 if key == "cell" else 401
    key = cell.channel_key if key == "cell" else key
    address = cell.borglets[0].url
    auth = channel.ClientAuth(key) if isinstance(key, bytes) else None
    with httpx.Client(auth=auth, timeout=10) as http:
        r = http.post(
            f"{address}/v1/tasks/{quote('mallory/shell/0#0', safe='')}/exec", json={"command": ["id"]},
            headers=channel.to_machine(task["machine"]),
        )  # fmt: skip
    assert r.status_code == expected, r.text


# --- task exec -it: terminal sessions -----------------------------------------------------------


def test_a_terminal_session_is_refused_to_another_user_at_every_step(cell: LocalCell) -> None:
    master = cell.masters[0].url
    mallory = {"Authorization": f"Bearer {api_token(cell, 'mallory')}"}
    victor = {"Authorization": f"Bearer {api_token(cell, 'victor')}"}
    assert cell.submit(sleeper_job("own", user="victor")).status_code == 201
    wait_for(lambda: cell.running("victor", "own", 1), 30, "victor/own to run")
    opened = httpx.post(f"{master}/v1/jobs/mallory/shell/tasks/0/terminal", json={"command": ["/bin/sh"]}, headers=mallory, timeout=30)
    assert opened.status_code == 200, opened.text
    session = opened.json()["session"]
    try:
        # Victor may not open a session in mallory's task, nor drive hers through her job's path...
        r = httpx.post(f"{master}/v1/jobs/mallory/shell/tasks/0/terminal", json={"command": ["/bin/sh"]}, headers=victor, timeout=30)
        assert r.status_code == 403, r.text
        for action in ("input", "output", "close"):
            r = httpx.post(f"{master}/v1/jobs/mallory/shell/tasks/0/terminal/{session}/{action}", json={}, headers=victor, timeout=30)
            assert r.status_code == 403, r.text
        # ...nor through his own job's path, with her session's id: the borglet knows no such
        # session of his task (the same answer as for an id that never was).
        for action in ("input", "output", "close"):
            r = httpx.post(f"{master}/v1/jobs/victor/own/tasks/0/terminal/{session}/{action}", json={}, headers=victor, timeout=30)
            assert r.status_code == 404 and r.json()["detail"][0]["field"] == "session", r.text
        # Her session still runs: her keys reach it.
        r = httpx.post(f"{master}/v1/jobs/mallory/shell/tasks/0/terminal/{session}/output", json={"offset": 0, "wait_s": 0},
                       headers=mallory, timeout=30)  # fmt: skip
        assert r.status_code == 200 and not r.json()["exited"], r.text
    finally:
        httpx.post(f"{master}/v1/jobs/mallory/shell/tasks/0/terminal/{session}/close", json={}, headers=mallory, timeout=30)


@pytest.mark.parametrize("key", [None, b"\x01" * channel.KEY_BYTES, "cell"], ids=["unsigned", "another-key", "the-cells-key"])
def test_the_borglets_terminal_endpoints_obey_only_its_masters(cell: LocalCell, key: bytes | str | None) -> None:
    """An unsigned or forged request to open or drive a session is refused by the channel
    (401); one signed with the cell's key but for a session and user that do not match (a
    forged `by`) finds no session (404), and opens none for a task that is not there."""
    task = cell.tasks("mallory", "shell")[0]
    expected = (404, 404) if key == "cell" else (401, 401)
    key = cell.channel_key if key == "cell" else key
    auth = channel.ClientAuth(key) if isinstance(key, bytes) else None
    base = f"{cell.borglets[0].url}/v1/tasks/{quote('mallory/shell/0#0', safe='')}/terminal"
    with httpx.Client(auth=auth, timeout=10, headers=channel.to_machine(task["machine"])) as http:
        opened = http.post(base, params={"by": "mallory"}, json={"command": ["/bin/sh"]})
        driven = http.post(f"{base}/{'0' * 32}/input", params={"by": "victor"}, json={"data": "aWQK"})
    assert (opened.status_code, driven.status_code) == expected, (opened.text, driven.text)


def test_a_signed_request_naming_another_user_cannot_drive_a_session(cell: LocalCell) -> None:
    """Even with the channel's key, a session answers only the user who opened it (the `by` its
    master signed), in the task it runs in."""
    master = cell.masters[0].url
    mallory = {"Authorization": f"Bearer {api_token(cell, 'mallory')}"}
    opened = httpx.post(f"{master}/v1/jobs/mallory/shell/tasks/0/terminal", json={"command": ["/bin/sh"]},
                        headers=mallory, timeout=30).json()  # fmt: skip
    session, task_id, machine = opened["session"], opened["task"], opened["machine"]
    url = f"{cell.borglets[0].url}/v1/tasks/{quote(task_id, safe='')}/terminal/{session}/output"
    try:
        with httpx.Client(auth=channel.ClientAuth(cell.channel_key), timeout=10, headers=channel.to_machine(machine)) as http:
            seen = {who: http.post(url, params={"by": who}, json={"offset": 0, "wait_s": 0}).status_code
                    for who in ("victor", "admin", "", "mallory")}  # fmt: skip
    finally:
        httpx.post(f"{master}/v1/jobs/mallory/shell/tasks/0/terminal/{session}/close", json={}, headers=mallory, timeout=30)
    assert seen == {"victor": 404, "admin": 404, "": 404, "mallory": 200}
