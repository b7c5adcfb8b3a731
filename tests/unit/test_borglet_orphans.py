"""A task's processes die with it, even one that left the task's session."""

from __future__ import annotations

import sys
import time

from reference.borglet import processes
from reference.borglet.isolation import RlimitIsolation
from reference.borglet.protocol import SyncRequest
from reference.borglet.supervisor import Borglet, MachineConfig

# The task forks a child that starts a session of its own (as a daemon does), then both sleep.
ESCAPES = "import os, time\nif os.fork() == 0:\n    os.setsid()\ntime.sleep(60)\n"


def test_kill_all_leaves_no_process_of_any_task_even_outside_its_session(tmp_path) -> None:
    config = MachineConfig(name="m", capacity={"cpu": 1000, "ram": 2**30}, state_dir=str(tmp_path), kill_grace_s=1)
    borglet = Borglet(config, RlimitIsolation())
    spec = {"task_id": "a/d/0#0@0", "job": "a/d", "index": 0, "command": [sys.executable, "-c", ESCAPES]}
    borglet.sync(SyncRequest.model_validate({"epoch": 1, "seq": 1, "tasks": [spec]}))
    borglet.start_queued()
    deadline = time.monotonic() + 10
    while len(processes.marked_processes(str(tmp_path)).get("a/d/0#0@0", [])) < 2:
        assert time.monotonic() < deadline, "the task and its escaped child never both ran"
        time.sleep(0.05)
    borglet.stop(kill_tasks=True, timeout_s=3)
    deadline = time.monotonic() + 5
    while processes.marked_processes(str(tmp_path)):
        assert time.monotonic() < deadline, processes.marked_processes(str(tmp_path))
        time.sleep(0.05)
