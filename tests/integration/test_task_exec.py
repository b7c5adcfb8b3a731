"""`task exec` on a live cell: a command runs in a running task as its uid, in its cgroups, working directory and environment; its output and exit code come back through the master and the CLI; another user is refused, so is a task that is not running, an absent one and a bad command; a command past its limit is killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reference.borglet import cgroups
from tests.integration.cellkit import REPO, LocalCell, sleeper_job, wait_for

pytestmark = pytest.mark.integration

# cgroup isolation where this host can make groups (a root test run); rlimits elsewhere.
ISOLATION = "cgroup" if os.geteuid() == 0 and cgroups.CgroupTree("probe-exec").usable() is None else "rlimit"

# Printed by the command run in the task: what it is, where, as whom.
PROBE = 'echo "uid=$(id -u) cwd=$(pwd) task=$TASK_ID"; cat /proc/self/cgroup >&2; exit 7'


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCell]:
    c = LocalCell(
        tmp_path_factory.mktemp("exec"), masters=1, borglets=1, poll_interval=0.3, isolation=ISOLATION
    )
    with c:
        assert c.submit(sleeper_job("web", user="alice")).status_code == 201
        assert c.submit(sleeper_job("done", user="alice", command=["/bin/true"], restart_policy="never")).status_code == 201
        wait_for(lambda: c.running("alice", "web", 1), 30, "alice/web to run")
        yield c
    assert c.leftovers() == [], "processes of the cell are still running"


@pytest.fixture(scope="module")
def alice(cell: LocalCell) -> Iterator[httpx.Client]:
    token = cell.add_user("alice")
    with httpx.Client(base_url=cell.masters[0].url, timeout=30.0, headers={"Authorization": f"Bearer {token}"}) as c:
        yield c


def exec_(client: httpx.Client, job: str, index: int, body: object) -> httpx.Response:
    return client.post(f"/v1/jobs/{job}/tasks/{index}/exec", json=body)


def test_a_command_runs_as_the_task_in_its_cgroups_and_directory(cell: LocalCell, alice: httpx.Client) -> None:
    task = cell.tasks("alice", "web")[0]
    pid = task["pid"]
    r = exec_(alice, "alice/web", 0, {"command": ["sh", "-c", PROBE]})
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["exit_code"] == 7 and not result["timed_out"] and result["machine"] == task["machine"]
    said = dict(part.split("=", 1) for part in result["stdout"].split())
    assert said["task"].partition("@")[0] == "alice/web/0#0"  # the borglet's id of the task
    assert int(said["uid"]) == os.stat(f"/proc/{pid}").st_uid
    assert said["cwd"] == os.readlink(f"/proc/{pid}/cwd")
    if ISOLATION == "cgroup":
        assert os.stat(f"/proc/{pid}").st_uid != 0, "a root borglet runs tasks as their job user's uid"
        # The command's groups are the task's, line for line (the memory, cpu, pids ... groups).
        assert sorted(result["stderr"].split()) == sorted(Path(f"/proc/{pid}/cgroup").read_text().split())
    # The replica's log says who ran what, where.
    assert "exec by alice in alice/web/0#0 on " in (cell.workdir / "master-m0.log").read_text()


def test_the_command_line_prints_the_output_and_exits_with_the_code(cell: LocalCell) -> None:
    env = {**os.environ, "MINBORG_MASTER": cell.masters[0].url, "MINBORG_TOKEN": cell.admin_token}
    done = subprocess.run(
        [sys.executable, "-m", "reference.cli", "task", "exec", "alice/web", "0", "--", "sh", "-c", "echo hi; echo oops >&2; exit 3"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (3, "hi\n", "oops\n")


def test_another_user_is_refused(cell: LocalCell) -> None:
    token = cell.add_user("bob")
    r = httpx.post(
        f"{cell.masters[0].url}/v1/jobs/alice/web/tasks/0/exec", json={"command": ["id"]},
        headers={"Authorization": f"Bearer {token}"}, timeout=10,
    )  # fmt: skip
    assert r.status_code == 403 and "alice" in r.text


def test_what_cannot_run_is_refused_naming_why(cell: LocalCell, alice: httpx.Client) -> None:
    wait_for(lambda: cell.tasks("alice", "done")[0]["state"] == "DEAD", 30, "alice/done to end")
    r = exec_(alice, "alice/done", 0, {"command": ["id"]})
    assert r.status_code == 409 and "not running" in r.json()["detail"][0]["error"]
    assert exec_(alice, "alice/web", 5, {"command": ["id"]}).status_code == 404
    assert exec_(alice, "alice/nope", 0, {"command": ["id"]}).status_code == 404
    for body, field in (({"command": []}, "command"), ({"command": ["sh", "a\u0000b"]}, "command.1"),
                        ({"command": ["x" * 70_000, "y" * 70_000]}, "command"), ({"command": ["id"], "timeout_s": 601}, "timeout_s")):  # fmt: skip
        r = exec_(alice, "alice/web", 0, body)
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == field, r.text


def test_a_command_past_its_limit_is_killed(alice: httpx.Client) -> None:
    r = exec_(alice, "alice/web", 0, {"command": ["sh", "-c", "echo started; sleep 30"], "timeout_s": 1})
    result = r.json()
    assert r.status_code == 200 and result["timed_out"], r.text
    assert (result["exit_code"], result["signal"], result["stdout"]) == (137, 9, "started\n")
    assert result["duration_s"] < 5, json.dumps(result)
