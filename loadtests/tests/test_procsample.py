"""The /proc scanner on real processes: it finds task processes by their environment, knows a
process again by pid and start time, and its cheap liveness check agrees with a fresh scan."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from loadtests.procsample import Scanner, task_processes

PREFIX = "scan-test/job/"


@pytest.fixture
def tasks() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = []
    for i in range(5):
        env = {**os.environ, "TASK_ID": f"{PREFIX}{i}#0@1"}
        procs.append(subprocess.Popen(["sleep", "60"], env=env))
    procs.append(subprocess.Popen(["sleep", "60"], env={**os.environ, "TASK_ID": "other/job/0#0@1"}))
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_scan_finds_tasks_by_prefix_and_still_live_follows_their_deaths(tasks: list[subprocess.Popen[bytes]]) -> None:
    scanner = Scanner()
    found = scanner.scan((PREFIX,))
    assert found == {p.pid: f"{PREFIX}{i}#0@1" for i, p in enumerate(tasks[:5])}
    assert scanner.scan((PREFIX,)) == found  # the second scan, from what it knows, agrees
    assert task_processes((PREFIX,)) == found  # and so does a scanner that knows nothing
    tasks[0].kill()
    tasks[0].wait()  # reaped: gone
    tasks[1].kill()
    os.waitid(os.P_PID, tasks[1].pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped: a zombie runs nothing
    left = scanner.still_live(found)
    assert set(left) == {p.pid for p in tasks[2:5]}
    assert left == scanner.scan((PREFIX,))
    # Above the exact threshold only the signal check runs: the zombie still counts.
    assert tasks[1].pid in scanner.still_live(found, exact_below=0)
