"""The borglet applies only newer syncs and never starts an incarnation twice, across restarts too."""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest

from reference.borglet import decisions, processes, store
from reference.borglet.isolation import RlimitIsolation
from reference.borglet.protocol import SyncRequest
from reference.borglet.supervisor import Borglet, MachineConfig, SyncRefused

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def spec(tid: str, index: int = 0) -> dict[str, Any]:
    inc = int(tid.partition("#")[2].partition("@")[0] or 0)
    return {"task_id": tid, "job": "a/j", "index": index, "incarnation": inc, "command": SLEEP}


def request(seq: int, *tasks: dict[str, Any], epoch: int = 1, revision: int = 0, **extra: Any) -> SyncRequest:
    return SyncRequest.model_validate(
        {"master": "m", "epoch": epoch, "seq": seq, "revision": revision, "tasks": list(tasks), **extra}
    )


def make(tmp_path) -> Borglet:
    config = MachineConfig(name="m1", capacity={"cpu": 1000, "ram": 2**30}, state_dir=str(tmp_path), kill_grace_s=1)
    return Borglet(config, RlimitIsolation())


def settle(borglet: Borglet, until, what: str) -> None:
    deadline = time.monotonic() + 10
    while not until():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        borglet.tick()
        borglet.start_queued()
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("fence", "epoch", "seq", "revision", "want"),
    [
        ((1, 5, 100), 1, 6, 100, None),  # the next sync of the same leader
        ((1, 5, 100), 1, 5, 100, "stale_seq"),  # a replay
        ((1, 5, 100), 1, 3, 100, "stale_seq"),  # delayed past a newer one
        ((1, 5, 100), 0, 9, 200, "stale_epoch"),  # an older leader
        ((1, 5, 100), 2, 1, 100, None),  # a new leader starts its own order
        ((1, 5, 100), 2, 1, 99, "stale_revision"),  # ... but not on an older view of the cell
    ],
)
def test_refusal_rule(fence, epoch, seq, revision, want) -> None:
    assert decisions.refusal(decisions.Fence(*fence), epoch, seq, revision) == want


def test_expired_tombstones_are_those_behind_the_applied_revision() -> None:
    # Forgotten at revisions 7 and 9; a sync at revision 9 applied: only 7 can no longer matter.
    assert decisions.expired_tombstones({"a": 7, "b": 9}, 9) == ["a"]
    assert decisions.expired_tombstones({"a": 7, "b": 9}, 10) == ["a", "b"]


def test_a_delayed_sync_cannot_bring_back_a_killed_incarnation(tmp_path) -> None:
    borglet = make(tmp_path)
    try:
        borglet.sync(request(1, spec("a/j/0#0@0"), revision=10))
        borglet.start_queued()
        pid = borglet.tasks["a/j/0#0@0"].pid
        assert pid is not None
        borglet.sync(request(2, revision=11))  # the master dropped it
        settle(borglet, lambda: borglet.tasks["a/j/0#0@0"].ended, "the kill")
        borglet.sync(request(3, revision=11))  # ended and not listed: forgotten, tombstoned
        assert "a/j/0#0@0" not in borglet.tasks and "a/j/0#0@0" in borglet.table.tombstones
        # The first sync, given up on by its master, arrives now: refused, nothing changes.
        with pytest.raises(SyncRefused) as refused:
            borglet.sync(request(1, spec("a/j/0#0@0"), revision=10))
        assert refused.value.reason == "stale_seq"
        # A newer sync that still lists it (a master working from an old view) restores it
        # as what it was, never as a new process.
        report = borglet.sync(request(4, spec("a/j/0#0@0"), revision=11))
        assert borglet.start_queued() == 0
        (entry,) = report["tasks"]
        assert (entry["state"], entry["pid"], entry["phase"]) == ("KILLED", None, "exited")
        assert borglet.table.refused["stale_seq"] == 1
    finally:
        borglet.stop(kill_tasks=True, timeout_s=2)


def test_fence_and_tombstones_survive_a_borglet_restart(tmp_path) -> None:
    first = make(tmp_path)
    first.sync(request(1, spec("a/j/0#0@0"), revision=10))
    first.start_queued()
    first.sync(request(2, revision=11))
    settle(first, lambda: first.tasks["a/j/0#0@0"].ended, "the kill")
    first.sync(request(3, revision=11))
    first.stop()
    second = make(tmp_path)
    second.load()
    try:
        assert second.table.fence == decisions.Fence(1, 3, 11)
        with pytest.raises(SyncRefused):
            second.sync(request(1, spec("a/j/0#0@0"), revision=10))
        second.sync(request(1, spec("a/j/0#0@0"), epoch=2, revision=11))  # a new leader, old view
        assert second.start_queued() == 0
        assert second.tasks["a/j/0#0@0"].phase == "KILLED"
    finally:
        second.stop(kill_tasks=True, timeout_s=2)


def test_tombstones_go_once_a_newer_revision_is_applied(tmp_path) -> None:
    borglet = make(tmp_path)
    try:
        borglet.sync(request(1, spec("a/j/0#0@0"), revision=10))
        borglet.start_queued()
        borglet.sync(request(2, revision=11))
        settle(borglet, lambda: borglet.tasks["a/j/0#0@0"].ended, "the kill")
        borglet.sync(request(3, revision=11))
        borglet.sync(request(4, revision=11))  # same revision: the tombstone still matters
        assert "a/j/0#0@0" in borglet.table.tombstones
        borglet.sync(request(5, revision=12))
        assert borglet.table.tombstones == {}
    finally:
        borglet.stop(kill_tasks=True, timeout_s=2)


def test_a_process_spawned_before_a_crash_is_adopted_not_started_again(tmp_path) -> None:
    borglet = make(tmp_path)
    borglet.sync(request(1, spec("a/j/0#0@0"), revision=10))
    borglet.start_queued()
    task = borglet.tasks["a/j/0#0@0"]
    pid = task.pid
    assert processes.marked_processes(str(tmp_path)) == {"a/j/0#0@0": [pid]}
    # The table as a crash right after the spawn left it: launching, no pid yet.
    record = task.to_record()
    record.update(pid=None, start_ticks=None, launching=True, state="QUEUED", started_at=0.0)
    store.save(borglet.table_path, {"epoch": 1, "fence": {"epoch": 1, "seq": 1, "revision": 10},
                                    "tasks": {"a/j/0#0@0": record}, "tombstones": {}})  # fmt: skip
    borglet.tasks.clear()  # the crashed borglet's memory is gone; its process is not
    restarted = make(tmp_path)
    restarted.load()
    try:
        adopted = restarted.tasks["a/j/0#0@0"]
        assert (adopted.pid, adopted.phase, adopted.launching) == (pid, "RUNNING", False)
        # The port was chosen before the write-ahead, so the adopted task keeps the one its
        # process listens on; its start time is the process's.
        assert adopted.port == task.port and adopted.port > 0
        assert adopted.started_at == pytest.approx(processes.start_time(pid))
        restarted.sync(request(2, spec("a/j/0#0@0"), revision=10))
        assert restarted.start_queued() == 0
        assert processes.marked_processes(str(tmp_path)) == {"a/j/0#0@0": [pid]}
    finally:
        restarted.stop(kill_tasks=True, timeout_s=2)
    assert processes.marked_processes(str(tmp_path)) == {}


def test_a_large_sync_only_queues_and_deltas_apply_on_their_base(tmp_path) -> None:
    borglet = make(tmp_path)
    try:
        many = [spec(f"a/j/{i}#0@0", index=i) for i in range(3000)]
        report = borglet.sync(request(1, *many, revision=5))
        assert report["queued"] == 3000 and all(t["pid"] is None for t in report["tasks"])
        assert {t["phase"] for t in report["tasks"]} == {"queued"}
        delta = {"base_seq": 1, "add": [spec("a/j/3000#0@0", index=3000)], "remove": ["a/j/0#0@0"]}
        borglet.sync(request(2, revision=6, delta=delta))
        assert borglet.tasks["a/j/0#0@0"].phase == "KILLED"  # dropped before it ever started
        assert borglet.tasks["a/j/3000#0@0"].phase == "QUEUED"
        assert len(borglet.table.desired or {}) == 3000
        # A delta on a base this borglet did not apply last is refused: the master sends all.
        stale = {"base_seq": 1, "add": [], "remove": []}
        with pytest.raises(SyncRefused) as refused:
            borglet.sync(request(3, revision=6, delta=stale))
        assert refused.value.reason == "need_full"
        assert borglet.start_queued(10) == 10
        assert sum(1 for t in borglet.tasks.values() if t.pid is not None) == 10
    finally:
        borglet.stop(kill_tasks=True, timeout_s=5)
    assert processes.marked_processes(str(tmp_path)) == {}
