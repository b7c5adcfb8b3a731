"""procscan finds task processes by MINBORG_BORGLET_DIR and kills only those under its directory."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference import procscan


def lone_sleep(borglet_dir: Path, task_id: str, *, shell: str = "exec sleep 60") -> subprocess.Popen[bytes]:
    env = {**os.environ, procscan.BORGLET_DIR_ENV: str(borglet_dir), procscan.TASK_ID_ENV: task_id}
    return subprocess.Popen(["sh", "-c", shell], env=env, start_new_session=True)


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, 9)
        p.wait(5)


def wait_found(root: Path, count: int) -> list[procscan.TaskProcess]:
    # A child's environ is its parent's until it execs: wait until every exec has happened.
    deadline = time.monotonic() + 5
    while True:
        found = procscan.scan(root)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("path", "root", "under"),
    [
        ("/c/machines/m0", "/c", True),
        ("/c", "/c", True),
        ("/c/machines/../machines/m0", "/c/", True),
        ("/cell-other/machines/m0", "/cell", False),  # a sibling with the same prefix
        ("/", "/c", False),
        ("machines/m0", "/c", False),  # a relative path is no borglet dir
        ("", "/c", False),
    ],
)
def test_lies_under(path: str, root: str, under: bool) -> None:
    assert procscan.lies_under(path, root) is under


def test_parse_environ() -> None:
    raw = b"A=1\0MINBORG_BORGLET_DIR=/x/y\0EMPTY=\0junk\0B=c=d\0"
    assert procscan.parse_environ(raw) == {"A": "1", "MINBORG_BORGLET_DIR": "/x/y", "EMPTY": "", "B": "c=d"}


def test_scan_finds_only_processes_under_the_dir_and_kill_spares_the_rest(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    cell = tmp_path / "cell"
    inside = lone_sleep(cell / "machines" / "m0", "alice/web/0/0")
    # A task with a child of its own: the child inherits the environment.
    parent = lone_sleep(cell / "machines" / "m1", "alice/web/1/0", shell="sleep 60 & exec sleep 61")
    outside = lone_sleep(tmp_path / "cell-other" / "machines" / "m0", "bob/db/0/0")
    spawned += [inside, parent, outside]

    found = wait_found(cell, 3)
    assert inside.pid in {p.pid for p in found} and parent.pid in {p.pid for p in found}
    assert len(found) == 3, found
    assert {p.task_id for p in found} == {"alice/web/0/0", "alice/web/1/0"}
    assert all(p.borglet_dir.startswith(str(cell) + "/") for p in found)
    assert outside.pid not in {p.pid for p in procscan.scan(cell)}

    left = procscan.kill(cell, timeout_s=5.0)
    assert left == []
    assert procscan.scan(cell) == []
    assert inside.wait(5) == -9 and parent.wait(5) == -9
    assert outside.poll() is None, "a process outside the dir is never signalled"
    assert [p.pid for p in procscan.scan(tmp_path / "cell-other")] == [outside.pid]


def test_kill_of_nothing_returns_at_once(tmp_path: Path) -> None:
    slept: list[float] = []
    assert procscan.kill(tmp_path, found=[], sleep=slept.append) == []
    assert slept == []


def test_kill_gives_up_after_its_timeout(tmp_path: Path) -> None:
    # A fake /proc whose one process never goes away (a pid above any pid_max, so no real
    # process is signalled): kill rescans until its deadline.
    proc = tmp_path / "proc"
    (proc / "4194305").mkdir(parents=True)
    (proc / "4194305" / "environ").write_bytes(f"{procscan.BORGLET_DIR_ENV}={tmp_path}/m0\0".encode())
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    left = procscan.kill(tmp_path, timeout_s=0.2, proc=proc, sleep=sleep, clock=lambda: now[0])
    assert [p.pid for p in left] == [4194305]
    assert len(slept) == 4  # 0.05 s a round until 0.2 s have passed
