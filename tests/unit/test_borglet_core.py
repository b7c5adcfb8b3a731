"""The borglet's core on its own: events in, the table and what the shell must do out (no process)."""

from __future__ import annotations

import signal
from dataclasses import replace
from typing import Any

import pytest

from reference.borglet import decisions
from reference.borglet.core import (
    FIRST_PROBE_DELAY_S,
    STARTUP_PROBE_INTERVAL_S,
    SyncRefused,
    TaskTable,
)
from reference.borglet.protocol import SyncRequest


def spec(tid: str, **extra: Any) -> dict[str, Any]:
    return {"task_id": tid, "job": "a/j", "index": int(tid.split("#")[0][-1]), "command": ["x"], **extra}


def sync(table: TaskTable, seq: int, *specs: dict[str, Any], now: float = 100.0, revision: int = 0) -> None:
    request = {"epoch": 1, "seq": seq, "revision": revision or seq, "tasks": list(specs)}
    table.apply_sync(SyncRequest.model_validate(request), now)


def test_a_sync_queues_new_tasks_and_asks_for_a_start() -> None:
    table = TaskTable(kill_grace_s=3)
    sync(table, 1, spec("j/0#0"), spec("j/1#0"))
    ready = table.take()
    assert (ready.start, ready.signals, ready.release) == (["j/0#0", "j/1#0"], [], [])
    assert list(table.queue) == ["j/0#0", "j/1#0"] and table.dirty
    assert table.take().start == []  # taken once
    with pytest.raises(SyncRefused) as refused:
        sync(table, 1)
    assert refused.value.reason == "stale_seq" and table.refused["stale_seq"] == 1


def test_the_started_phase_is_decided_once_by_the_health_check() -> None:
    # decisions.started: a health-checked task is STARTING and not yet healthy; any other RUNNING.
    assert decisions.started(True) == ("STARTING", False)
    assert decisions.started(False) == ("RUNNING", None)
    table = TaskTable()
    sync(table, 1, spec("j/0#0"), spec("j/1#0", health_check={"interval_s": 5}))
    assert table.take_batch(None, lambda taken: 40000 + len(taken)) == ["j/0#0", "j/1#0"]
    assert table.take().save  # the write-ahead before any spawn
    plain, checked = table.tasks["j/0#0"], table.tasks["j/1#0"]
    assert (plain.port, checked.port) == (40000, 40001) and plain.launching
    table.launched(plain, 11, 9000, 100.0, started_at=90.0)  # its start: 9000 ticks since boot, 90.0 on the wall clock
    table.launched(checked, 12, None, 100.0)  # no start read: now
    assert (plain.phase, plain.healthy, plain.started_at, plain.launching) == ("RUNNING", None, 90.0, False)
    assert (plain.start_ticks, checked.start_ticks) == (9000, None)
    assert (checked.phase, checked.healthy, checked.started_at) == ("STARTING", False, 100.0)
    assert checked.next_probe_at == 100.0 + FIRST_PROBE_DELAY_S
    assert table.probes_due(100.0) == [] and table.probes_due(100.2) == [checked]
    table.probed(checked, 12, False, 100.2)  # not yet: probed again after the startup interval
    assert (checked.phase, checked.next_probe_at) == ("STARTING", 100.2 + STARTUP_PROBE_INTERVAL_S)
    table.probes_due(100.5)
    table.probed(checked, 99, True, 100.5)  # about another process: dropped
    assert checked.phase == "STARTING" and not checked.probing
    table.probes_due(100.5)
    table.probed(checked, 12, True, 100.5)
    assert (checked.phase, checked.healthy, checked.next_probe_at) == ("RUNNING", True, 105.5)
    assert table.take().save  # RUNNING is on disk before it is reported


@pytest.mark.parametrize(
    "policy, code, oom, phase, reason, restart_at, released",
    [
        ("never", 0, False, "FINISHED", None, None, True),
        ("never", 3, False, "FAILED", "exit 3", None, True),
        ("on_failure", 3, False, "STARTING", "exit 3", 110.1, False),  # backoff 0.1 s
        ("on_failure", 0, True, "STARTING", "oom", 110.1, False),  # an OOM kill is a failure
        ("always", 0, False, "STARTING", "exit 0", 110.1, False),
    ],
)
def test_an_exit_restarts_by_policy_or_ends(policy, code, oom, phase, reason, restart_at, released) -> None:
    table = TaskTable()
    sync(table, 1, spec("j/0#0", restart_policy=policy))
    task = table.tasks["j/0#0"]
    table.take_batch(None, lambda taken: 1)
    table.launched(task, 11, 100.0, 100.0)
    table.take()
    table.exited(task, code, oom, 110.0)
    assert (task.phase, task.reason, task.restart_at, task.pid) == (phase, reason, restart_at, None)
    assert (table.take().release == [task]) is released
    if restart_at is not None:
        assert not table.restart_due(task, 110.05) and table.restart_due(task, 110.1)
        assert task.restarts == 1


def test_a_kill_signals_a_process_and_ends_a_task_without_one() -> None:
    table = TaskTable(kill_grace_s=3)
    sync(table, 1, spec("j/0#0"), spec("j/1#0"))
    running, queued = table.tasks["j/0#0"], table.tasks["j/1#0"]
    table.take_batch(1, lambda taken: 1)
    table.launched(running, 11, 100.0, 100.0)
    table.take()
    sync(table, 2, now=200.0)  # neither is desired any more
    ready = table.take()
    assert ready.signals == [(running, 11, signal.SIGTERM)] and ready.release == [queued]
    assert (queued.phase, queued.reason) == ("KILLED", "not_desired")
    assert (running.phase, running.kill_deadline) == ("RUNNING", 203.0)
    assert table.stopping_indexes() == {("a/j", 0)}
    table.escalate(running, 202.0)
    assert table.take().signals == []
    table.escalate(running, 203.0)
    assert table.take().signals == [(running, 11, signal.SIGKILL)]
    table.exited(running, -9, False, 204.0)
    assert (running.phase, running.reason) == ("KILLED", "not_desired")  # never restarted
    sync(table, 3, now=205.0)
    assert table.tasks == {} and set(table.tombstones) == {"j/0#0", "j/1#0"}
    assert table.state_of("j/0#0") == "KILLED (not_desired)" and table.state_of("x") is None


def test_memory_pressure_kills_the_lowest_priority_at_once() -> None:
    table = TaskTable()
    sync(table, 1, spec("j/0#0", priority=100), spec("j/1#0", priority=200))
    low, high = table.tasks["j/0#0"], table.tasks["j/1#0"]
    table.take_batch(None, lambda taken: 1)
    for pid, task in enumerate((low, high), 11):
        table.launched(task, pid, 100.0, 100.0)
        task.ram_bytes = 600
    table.take()
    assert table.relieve_memory_pressure(1000, 101.0) == ["j/0#0"]  # 1,200 over 1,000: one goes
    assert table.take().signals == [(low, 11, signal.SIGKILL)]
    table.exited(low, -9, False, 102.0)
    assert (low.phase, low.reason) == ("KILLED", "memory_pressure")
    assert table.relieve_memory_pressure(1000, 102.0) == []  # 600 of 1,000


def test_a_restored_table_readopts_by_the_verdict() -> None:
    table = TaskTable()
    sync(table, 1, spec("j/0#0"), spec("j/1#0"), spec("j/2#0", health_check={}))
    table.take_batch(None, lambda taken: 1)
    table.launched(table.tasks["j/0#0"], 11, 100.0, 100.0)
    saved = table.snapshot()
    assert not table.dirty and saved["fence"] == {"epoch": 1, "seq": 1, "revision": 1}
    again = TaskTable()
    lost, launching, found = again.restore(saved)
    assert again.fence == decisions.Fence(1, 1, 1)
    assert again.readopt(lost, again.saved(lost), 300.0).verdict == "lost"
    assert (lost.phase, lost.reason, again.take().release) == ("FAILED", "lost_on_restart", [lost])
    assert again.readopt(launching, again.saved(launching), 300.0).verdict == "queue"
    assert list(again.queue) == ["j/1#0"]
    view = again.saved(found)
    found.pid, found.launching = 13, False  # the shell found its process by its marker
    verdict = again.readopt(found, replace(view, found=True, alive=True), 300.0)
    assert (verdict.verdict, found.phase, found.next_probe_at) == ("adopt", "STARTING", 300.0)


def test_the_report_says_which_queued_tasks_wait_for_their_index() -> None:
    table = TaskTable(kill_grace_s=3)
    sync(table, 1, {**spec("j/0#0"), "incarnation": 0})
    old = table.tasks["j/0#0"]
    table.take_batch(None, lambda taken: 1)
    table.launched(old, 11, 100.0, 100.0)
    sync(table, 2, {**spec("j/0#1"), "index": 0, "incarnation": 1})
    report = table.report({"machine": "m"})
    assert (report["machine"], report["queued"], report["waiting"]) == ("m", 1, ["j/0#1"])
    assert {t["task_id"]: (t["state"], t["phase"]) for t in report["tasks"]} == {
        "j/0#0": ("RUNNING", "running"),
        "j/0#1": ("QUEUED", "queued"),
    }
    assert table.take_batch(None, lambda taken: 2) == []  # its index is still stopping
    table.exited(old, -15, False, 101.0)
    assert table.report({})["waiting"] == [] and table.take_batch(None, lambda taken: 2) == ["j/0#1"]
