"""Crash loops on a live cell of one master replica and one borglet: a job whose command does
not exist and one that exits 3 back off, show as BACKOFF with their reason everywhere, fail
`job submit`, and `task logs` of a task that never started says so."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference.borglet import decisions
from reference.client import CellClient
from reference.master import backoff
from tests.integration.cellkit import REPO, TASK_PYTHON, LocalCell, sleeper_job, wait_for

pytestmark = pytest.mark.integration

WINDOW_S = 20.0


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCell]:
    c = LocalCell(tmp_path_factory.mktemp("cell"), masters=1, borglets=1, poll_interval=0.3)
    with c:
        yield c
    assert c.leftovers() == [], "processes of the cell are still running"


@pytest.fixture(scope="module")
def api(cell: LocalCell) -> Iterator[CellClient]:
    with CellClient([m.url for m in cell.masters], retry_s=15, token=cell.admin_token) as client:
        yield client


def minborg(cell: LocalCell, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINBORG_")}
    env["MINBORG_TOKEN"] = cell.admin_token
    return subprocess.run(
        [sys.executable, "-m", "reference.cli", *args, "--master", cell.masters[0].url],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def job_file(tmp_path: Path, job: dict) -> str:
    path = tmp_path / f"{job['name']}.yaml"
    path.write_text(json.dumps(job))  # JSON is YAML
    return str(path)


def borglet_most_restarts(window_s: float) -> int:
    """In-place restarts a process that exits at once gets within `window_s` (decisions.py)."""
    n, waited = 0, 0.0
    while waited + decisions.backoff_delay(n) <= window_s:
        waited += decisions.backoff_delay(n)
        n += 1
    return n


def test_the_bounds_the_live_tests_hold(tmp_path: Path) -> None:
    # Master: new incarnations at 0, 1, 1 + 2, 3 + 4 and 7 + 8 = 15 s; the sixth would come at 31 s.
    assert backoff.most_restarts(WINDOW_S) == 5
    # Borglet: restarts after 0.1 + 0.2 + ... + 6.4 = 12.7 s; the eighth would come at 22.7 s.
    assert borglet_most_restarts(WINDOW_S) == 7


def test_a_command_that_does_not_exist_backs_off_and_says_why(cell: LocalCell, api: CellClient, tmp_path: Path) -> None:
    job = sleeper_job("nocmd", user="ivy", command=["/nonexistent/minborg-crash"], restart_policy="on_failure")
    began = time.monotonic()
    submitted = minborg(cell, "job", "submit", job_file(tmp_path, job), "--wait-timeout", "30")
    # `job submit` waits, and fails as soon as the task fails, naming it and the error.
    assert submitted.returncode == 1, (submitted.stdout, submitted.stderr)
    assert "task 0 of ivy/nocmd" in submitted.stderr and "/nonexistent/minborg-crash" in submitted.stderr
    assert time.monotonic() - began < 15

    # A death the leader has not counted yet already shows the back-off it will get (BACKOFF),
    # before the leader's next pass writes that wait and its event: wait for the counted one.
    def counted() -> dict | None:
        t = api.task("ivy/nocmd", 0)
        return t if t["status"] == "BACKOFF" and any(e["kind"] == "backoff" for e in t["events"]) else None

    task = wait_for(counted, 15, "a BACKOFF the leader counted, with its backoff event")
    loop = task["crash_loop"]
    assert loop["by"] == "master" and loop["kind"] == "spawn_failed", loop
    assert loop["last_exit"].startswith("spawn:") and "/nonexistent/minborg-crash" in loop["reason"], loop
    assert loop["failures"] >= 1 and loop["retry_at"] > 0, loop

    # BACKOFF while it waits; between two waits, its next try shows as the loop's too.
    listed = minborg(cell, "task", "list", "ivy/nocmd")
    assert listed.returncode == 0 and "crash loop" in listed.stdout and "new incarnation" in listed.stdout, listed.stdout
    shown = minborg(cell, "job", "show", "ivy/nocmd")
    assert shown.returncode == 0 and "crash loop" in shown.stdout and "task 0:" in shown.stdout, shown.stdout

    logs = minborg(cell, "task", "logs", "ivy/nocmd", "0")
    assert logs.returncode != 0 and "never started" in logs.stderr, (logs.stdout, logs.stderr)
    assert "/nonexistent/minborg-crash" in logs.stderr

    time.sleep(max(0.0, WINDOW_S - (time.monotonic() - began)))
    # Without a back-off, a new incarnation every second or so (about 20 by now); with it, 5.
    assert api.task("ivy/nocmd", 0)["incarnation"] <= backoff.most_restarts(WINDOW_S)
    api.request("DELETE", "/v1/jobs/ivy/nocmd")


def test_a_task_that_exits_3_backs_off_in_place_and_fails_the_submission(
    cell: LocalCell, api: CellClient, tmp_path: Path
) -> None:
    code = "import sys; print('trying', flush=True); sys.exit(3)"
    job = sleeper_job("exit3", user="ivy", command=[TASK_PYTHON, "-c", code], restart_policy="on_failure",
                      request={"cpu": "500m", "ram": "64MiB"})  # fmt: skip
    began = time.monotonic()
    submitted = minborg(cell, "job", "submit", job_file(tmp_path, job), "--wait-timeout", "30")
    assert submitted.returncode == 1, (submitted.stdout, submitted.stderr)
    assert "task 0 of ivy/exit3" in submitted.stderr and "exit 3" in submitted.stderr.replace("exit code 3", "exit 3"), submitted.stderr
    # The last line is the failure, not "all 1 task(s) ... started" ("restarted in place" may be in it).
    assert not re.search(r"\bstarted\b", submitted.stdout.splitlines()[-1]), submitted.stdout

    task = wait_for(lambda: (t := api.task("ivy/exit3", 0))["status"] == "BACKOFF" and t, 15, "a BACKOFF")
    loop = task["crash_loop"]
    assert loop["by"] == "borglet" and loop["last_exit"] == "exit 3" and loop["reason"] == "exit code 3", loop
    assert not task["confirmed"]  # a crash loop does not count as started
    # BACKOFF but for the few milliseconds its process runs between two waits.
    shown = wait_for(
        lambda: (r := minborg(cell, "task", "show", "ivy/exit3", "0")).returncode == 0 and "BACKOFF" in r.stdout and r,
        20, "task show to say BACKOFF",
    )  # fmt: skip
    assert "exit code 3" in shown.stdout and "last exit" in shown.stdout, shown.stdout

    time.sleep(max(0.0, WINDOW_S - (time.monotonic() - began)))
    task = api.task("ivy/exit3", 0)
    # Restarted in place by its borglet (one incarnation), at most as often as its back-off allows.
    assert task["incarnation"] == 0 and 1 <= task["restarts"] <= borglet_most_restarts(WINDOW_S), task
    exits = [e for e in task["events"] if e["kind"] == "exited"]
    assert exits and all(e["detail"].startswith("exit code 3") for e in exits), task["events"]
    assert not any("pid ?" in e["detail"] for e in task["events"]), task["events"]
    # Every restart in place follows an exit event (several exits between two reports: one event).
    assert len([e for e in task["events"] if e["kind"] == "restarted"]) <= task["restarts"]
    assert minborg(cell, "task", "logs", "ivy/exit3", "0").stdout.startswith("trying")
    api.request("DELETE", "/v1/jobs/ivy/exit3")
