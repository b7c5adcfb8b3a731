"""The borglet starts a new incarnation only once an older one of its index has stopped on this machine."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from reference.borglet import decisions
from reference.borglet.isolation import RlimitIsolation
from reference.borglet.protocol import SyncRequest
from reference.borglet.supervisor import Borglet, MachineConfig

# Ignores SIGTERM for a while, so its kill takes most of the grace; says so on the FIFO named
# by READY (if any) once its handler is in place.
SLOW_STOP = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.6), exit(0)))\n"
    "if os.environ.get('READY'):\n"
    "    with open(os.environ['READY'], 'w') as ready: ready.write('ready')\n"
    "time.sleep(60)\n"
)


def test_only_an_index_with_a_process_still_stopping_blocks_a_start() -> None:
    stopping = decisions.stopping_indexes([
        ("a/j", 0, True),    # killed, its process not yet gone
        ("a/j", 1, False),   # running
        ("", 0, True),       # a hand-made spec with no job: tied to no index
    ])  # fmt: skip
    assert stopping == {("a/j", 0)}
    assert decisions.start_blocked("a/j", 0, stopping)
    assert not decisions.start_blocked("a/j", 1, stopping)
    assert not decisions.start_blocked("a/k", 0, stopping)
    assert not decisions.start_blocked("", 0, stopping)


def task(inc: int, ready: Path | None = None) -> dict[str, Any]:
    return {
        "task_id": f"a/j/0#{inc}@0", "job": "a/j", "index": 0, "incarnation": inc,
        "command": [sys.executable, "-c", SLOW_STOP], "restart_policy": "never",
        "env": {"READY": str(ready)} if ready else {},
    }  # fmt: skip


def started_slow_stop(borglet: Borglet, tmp_path: Path) -> None:
    """Start incarnation 0 and block until its SIGTERM handler is in place."""
    ready = tmp_path / "ready"
    os.mkfifo(ready)
    sync(borglet, task(0, ready))
    assert ready.read_text() == "ready"  # opens once the task opens its end


def exited(pid: int | None) -> None:
    """Block until the child `pid` has exited, leaving it for its Popen to collect."""
    assert pid is not None
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


def sync(borglet: Borglet, *tasks: dict[str, Any]) -> dict[str, Any]:
    seq = borglet.table.fence.seq + 1
    report = borglet.sync(SyncRequest.model_validate({"epoch": 1, "seq": seq, "tasks": list(tasks)}))
    borglet.start_queued()
    return report


@pytest.mark.timeout(60)
def test_new_incarnation_waits_for_the_old_one_then_starts_without_a_sync(tmp_path) -> None:
    config = MachineConfig(
        name="m", capacity={"cpu": 1000, "ram": 2**30}, state_dir=str(tmp_path / "state"), kill_grace_s=5
    )
    borglet = Borglet(config, RlimitIsolation())
    try:
        started_slow_stop(borglet, tmp_path)
        sync(borglet, task(1))  # the old one is killed, the new one must wait
        report = borglet.report()
        assert borglet.tasks["a/j/0#1@0"].pid is None
        assert report["waiting"] == ["a/j/0#1@0"]
        assert {t["task_id"]: t["phase"] for t in report["tasks"]} == {
            "a/j/0#0@0": "running",
            "a/j/0#1@0": "queued",
        }
        old = borglet.tasks["a/j/0#0@0"]
        exited(old.pid)  # its handler's 0.6 s are over
        assert borglet.start_queued() == 0  # no pass has seen it go yet: still stopping here
        borglet.tick()
        assert (old.phase, old.pid) == ("KILLED", None)
        assert borglet.start_queued() == 1  # no sync needed
        assert borglet.tasks["a/j/0#1@0"].pid is not None
        assert borglet.report()["waiting"] == []
    finally:
        borglet.stop(kill_tasks=True, timeout_s=2)


@pytest.mark.timeout(60)
def test_a_waiting_task_the_master_drops_never_starts(tmp_path) -> None:
    config = MachineConfig(
        name="m", capacity={"cpu": 1000, "ram": 2**30}, state_dir=str(tmp_path / "state"), kill_grace_s=5
    )
    borglet = Borglet(config, RlimitIsolation())
    try:
        started_slow_stop(borglet, tmp_path)
        sync(borglet, task(1))
        assert sync(borglet)["waiting"] == []
        exited(borglet.tasks["a/j/0#0@0"].pid)
        borglet.tick()
        assert borglet.tasks["a/j/0#0@0"].ended
        assert borglet.start_queued() == 0
        dropped = borglet.tasks["a/j/0#1@0"]
        assert (dropped.pid, dropped.phase, dropped.reason) == (None, "KILLED", "not_desired")
    finally:
        borglet.stop(kill_tasks=True, timeout_s=2)
