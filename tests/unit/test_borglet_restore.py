"""A borglet restarted after a rolling update restores each task with the file of its own incarnation, never the file a later sync carries for the same task id."""

import pytest

from reference.borglet.isolation import RlimitIsolation
from reference.borglet.protocol import SyncRequest
from reference.borglet.supervisor import Borglet, MachineConfig

OLD = {"task_id": "u/j/0#0@1", "job": "u/j", "index": 0, "incarnation": 0, "command": ["/bin/echo", "version 1"]}
NEW = {**OLD, "command": ["/bin/echo", "version 2"]}  # the job's file after the update: same task id


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sync(borglet: Borglet, seq: int, *tasks: dict) -> dict:
    return borglet.sync(SyncRequest.model_validate({"epoch": 1, "seq": seq, "revision": seq, "tasks": list(tasks)}))


@pytest.mark.timeout(30)
def test_a_task_queued_before_a_restart_keeps_the_file_it_was_sent(tmp_path):
    clock = FakeClock()  # never moves: no save is due by the clock, only by what happened
    config = MachineConfig(name="m", capacity={"cpu": 1000, "ram": 2**30}, state_dir=str(tmp_path))
    first = Borglet(config, RlimitIsolation(), clock=clock)
    sync(first, 1)  # the table's first save
    sync(first, 2, OLD)  # queued; the borglet dies before its starter takes it (no stop, no pass)
    # The master sends the job's current file for every task of it, stale ones too: after the
    # update the same task id comes with version 2's command.
    second = Borglet(config, RlimitIsolation(), clock=clock)
    try:
        second.load()
        assert "u/j/0#0@1" in second.tasks, "the queued task was not on disk when the sync was answered"
        sync(second, 3, NEW)
        task = second.tasks["u/j/0#0@1"]
        assert task.spec.command == OLD["command"] and task.phase == "QUEUED"
    finally:
        second.stop(kill_tasks=True, timeout_s=2)
