"""When a borglet says a task's process started and when it sees it end: its start time
(processes.start_time) is the wall-clock time the process started, to the kernel's tick, where
psutil's create_time read up to a second early; its exit wakes the supervisor at once (SIGCHLD,
server.wake_on_child_exit) on the asyncio loop the borglet serves on, where uvloop refused the
handler and exits were seen up to a second late. Either made a crashing replacement look up to
a rolling update (docs/decisions.md)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import pytest

from reference.borglet import processes, server


def test_a_process_start_time_is_when_it_was_spawned_to_the_tick():
    before = time.time()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    after = time.time()
    try:
        started = processes.start_time(proc.pid)
        assert started is not None
        # One tick (10 ms) of rounding down, and a little for the two clock reads. psutil's
        # create_time, counted from a boot time in whole seconds, read 0.97 s early on a host
        # booted 0.97 s past a second: the rollout counted a replacement 30 ms old as up.
        assert before - 0.03 <= started <= after + 0.03, (before, started, after)
        # Read again, it is the same process's same start: what a restarted borglet reads back.
        assert abs(processes.start_time(proc.pid) - started) < 0.02
    finally:
        proc.kill()
        proc.wait()


def test_a_process_that_is_gone_has_no_start_time():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert processes.start_time(proc.pid) is None


class Woken:
    def __init__(self) -> None:
        self.at: float | None = None

    def wake(self) -> None:
        self.at = self.at or time.monotonic()


async def _exit_seen(borglet: Woken) -> tuple[bool, float | None]:
    installed = server.wake_on_child_exit(borglet)  # type: ignore[arg-type]
    try:
        ended = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        for _ in range(100):  # up to 2 s, on the loop, which runs the handler
            if borglet.at is not None:
                break
            await asyncio.sleep(0.02)
        proc.wait()
        return installed, None if borglet.at is None else borglet.at - ended
    finally:
        if installed:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGCHLD)


def test_a_child_exit_wakes_the_supervisor_on_the_borglets_loop():
    installed, after = asyncio.run(_exit_seen(Woken()))
    assert installed and after is not None and after < 1.0, (installed, after)


def test_uvloop_refuses_the_wake_and_says_so(caplog: pytest.LogCaptureFixture):
    uvloop = pytest.importorskip("uvloop")
    installed, after = uvloop.run(_exit_seen(Woken()))
    assert not installed and after is None
    assert "task exits are seen on the supervisor's next pass" in caplog.text


def test_the_borglet_serves_on_asyncio_s_loop(tmp_path, monkeypatch: pytest.MonkeyPatch):
    from reference import serve
    from reference.borglet import cli

    served: dict = {}
    monkeypatch.setattr(serve, "run", lambda app, **options: served.update(options))
    cli.main(["--name", "b9", "--state-dir", str(tmp_path / "state"), "--insecure-channel",
              "--isolation", "rlimit", "--run-tasks-as", "borglet", "--listen", "127.0.0.1:0", "--capacity", "cpu=1000m,ram=1GiB"])  # fmt: skip
    assert served.get("loop") == "asyncio", served


def test_a_process_reads_the_same_start_at_every_call_and_on_the_tick(monkeypatch) -> None:
    # A restarted borglet re-adopts its tasks with the starts they had: the start is whole ticks
    # of the boot and of the process's own ticks, whatever microseconds the wall clock and
    # CLOCK_BOOTTIME read apart at the moment it is asked.
    import os
    import time as _time

    from reference.borglet import processes

    first = processes.start_time(os.getpid())
    real = _time.time
    for skew in (0.0000004, -0.0000009, 0.000002):
        monkeypatch.setattr(processes.time, "time", lambda s=skew: real() + s)
        assert processes.start_time(os.getpid()) == first
    assert first is not None and abs(first * processes.CLOCK_TICKS - round(first * processes.CLOCK_TICKS)) < 1e-3
