"""The supervisor shell on injected clocks and events: restart backoff timing with real, short
processes, the pace of its table saves and of its loop's passes."""

import os
import shutil
import threading

import pytest

from reference.borglet import store
from reference.borglet.isolation import RlimitIsolation
from reference.borglet.protocol import SyncRequest
from reference.borglet.supervisor import IDLE_TICK_S, SAVE_EVERY_S, Borglet, MachineConfig

FALSE = shutil.which("false")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def wait_for_exit(borglet: Borglet, task_id: str) -> None:
    """Block until the task's real process has exited (left for its Popen to collect), then
    have one pass (without moving the fake clock) observe it."""
    pid = borglet.tasks[task_id].pid
    assert pid is not None
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    borglet.tick()
    assert borglet.tasks[task_id].pid is None


@pytest.mark.timeout(30)
@pytest.mark.skipif(FALSE is None, reason="needs the `false` program")
def test_restart_backoff_follows_the_injected_clock(tmp_path):
    clock = FakeClock()
    config = MachineConfig(name="m", capacity={"cpu": 1000, "ram": 2**30}, state_dir=str(tmp_path))
    borglet = Borglet(config, RlimitIsolation(), wall_clock=clock)
    spec = {"task_id": "t#0", "command": [FALSE], "restart_policy": "on_failure"}
    try:
        borglet.sync(SyncRequest.model_validate({"epoch": 1, "seq": 1, "tasks": [spec]}))
        assert borglet.tasks["t#0"].phase == "QUEUED" and borglet.tasks["t#0"].pid is None
        assert borglet.start_queued() == 1
        for restarts, delay in [(0, 0.1), (1, 0.2), (2, 0.4)]:
            wait_for_exit(borglet, "t#0")
            task = borglet.tasks["t#0"]
            assert (task.phase, task.exit_code, task.restarts) == ("STARTING", 1, restarts)
            assert task.restart_at == pytest.approx(clock.now + delay)
            clock.now += delay * 0.9  # not yet
            borglet.tick()
            assert task.pid is None
            clock.now += delay * 0.2  # now past the backoff
            borglet.tick()
            assert task.pid is not None and task.restarts == restarts + 1
        # The sync that drops it kills it for good: no restart after that.
        borglet.sync(SyncRequest.model_validate({"epoch": 1, "seq": 2, "tasks": []}))
        wait_for_exit(borglet, "t#0")
        clock.now += 60
        borglet.tick()
        assert borglet.tasks["t#0"].phase == "KILLED"
        assert borglet.sync(SyncRequest.model_validate({"epoch": 1, "seq": 3, "tasks": []}))["tasks"] == []
    finally:
        borglet.stop(kill_tasks=True, timeout_s=2)


def saved_seq(borglet: Borglet) -> int:
    return store.load(borglet.table_path)["fence"]["seq"]


def test_table_saves_follow_the_injected_clock(tmp_path):
    clock = FakeClock()
    config = MachineConfig(name="m", capacity={"cpu": 1000, "ram": 2**30}, state_dir=str(tmp_path))
    borglet = Borglet(config, RlimitIsolation(), clock=clock)
    try:
        borglet.sync(SyncRequest.model_validate({"epoch": 1, "seq": 1, "tasks": []}))
        assert saved_seq(borglet) == 1  # 1000 s since no save at all: written
        borglet.sync(SyncRequest.model_validate({"epoch": 1, "seq": 2, "tasks": []}))
        clock.now += SAVE_EVERY_S * 0.9
        borglet.tick()
        assert saved_seq(borglet) == 1  # 0.9 s after the last save: not yet
        clock.now += SAVE_EVERY_S * 0.1
        borglet.tick()
        assert saved_seq(borglet) == 2  # 1 s after it: written
    finally:
        borglet.stop()


SLEEP = shutil.which("sleep")


@pytest.mark.skipif(SLEEP is None, reason="needs the `sleep` program")
def test_idle_passes_are_a_second_apart_and_busy_ones_a_tick(tmp_path):
    clock = FakeClock()
    config = MachineConfig(name="m", capacity={"cpu": 1000, "ram": 2**30}, state_dir=str(tmp_path))
    borglet = Borglet(config, RlimitIsolation(), wall_clock=clock, clock=clock)
    try:
        assert borglet._next_pass_in() == IDLE_TICK_S  # nothing at all
        spec = {"task_id": "t#0", "command": [SLEEP, "30"]}
        borglet.sync(SyncRequest.model_validate({"epoch": 1, "seq": 1, "tasks": [spec]}))
        assert borglet._next_pass_in() == config.tick_s  # a start is queued
        assert borglet.start_queued() == 1
        clock.now += SAVE_EVERY_S
        borglet.tick()  # saves the start
        assert borglet._next_pass_in() == IDLE_TICK_S  # a running task, nothing under way
        borglet.tasks["t#0"].restart_at = clock.now + 0.5
        assert borglet._next_pass_in() == pytest.approx(0.5)  # a backoff due sooner
        borglet.tasks["t#0"].restart_at = None
        borglet.sync(SyncRequest.model_validate({"epoch": 1, "seq": 2, "tasks": []}))
        assert borglet._next_pass_in() == config.tick_s  # a kill waits for its exit
    finally:
        borglet.stop(kill_tasks=True, timeout_s=2)


class Waits(threading.Event):
    """The loop's wake event, recording how long each wait would be; `passes` waits in,
    it stops the loop. Every wait returns at once: the test runs on no real time."""

    def __init__(self, borglet: Borglet, passes: int) -> None:
        super().__init__()
        self.borglet, self.passes, self.timeouts = borglet, passes, []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        if len(self.timeouts) > self.passes:
            self.borglet._stop.set()
        return True


def test_an_idle_loop_waits_a_second_between_passes(tmp_path):
    config = MachineConfig(name="m", capacity={"cpu": 1000, "ram": 2**30}, state_dir=str(tmp_path))
    borglet = Borglet(config, RlimitIsolation())
    passes = []
    tick = borglet.tick
    borglet.tick = lambda: (passes.append(1), tick())[1]
    borglet._wake = waits = Waits(borglet, passes=3)
    try:
        borglet._loop()
        # The first wait is a tick; then, idle, a pass a second, not one a tick_s (0.2 s).
        assert waits.timeouts == [config.tick_s] + [pytest.approx(IDLE_TICK_S)] * 3
        assert len(passes) == 3
    finally:
        borglet.stop()


@pytest.mark.timeout(30)
def test_a_wake_runs_a_pass_at_once(tmp_path):
    config = MachineConfig(name="m", capacity={"cpu": 1000, "ram": 2**30}, state_dir=str(tmp_path))
    borglet = Borglet(config, RlimitIsolation())
    passed = threading.Semaphore(0)
    tick = borglet.tick
    borglet.tick = lambda: (tick(), passed.release())[0]
    borglet._next_pass_in = lambda: 3600.0  # idle for an hour: only a wake makes the next pass
    borglet.start()
    try:
        assert passed.acquire(timeout=10)  # the first pass, a tick_s after the start
        borglet.wake()
        assert passed.acquire(timeout=10)  # woken: long before the hour is out
    finally:
        borglet.stop()
