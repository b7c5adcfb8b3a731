"""When a lease refreshed from its own process may be refreshed on the parent's behalf (`should_refresh`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from reference.store.keeper import parent_activity, should_refresh

TTL, HUNG = 2.0, 15.0


@pytest.mark.parametrize(
    ("stopped", "beat_age", "cpu_advanced", "refresh"),
    [
        (False, 0.5, False, True),  # a fresh heartbeat is enough, busy or idle
        (True, 0.5, True, False),  # stopped (SIGSTOP): never, however fresh the heartbeat
        (False, 5.0, True, True),  # heartbeat late but the CPU moves: busy, its threads starved
        (False, 5.0, False, False),  # heartbeat late and the CPU stands still: deadlocked
        (False, 16.0, True, False),  # late past hung_s: one thread spins while the others starve
        (False, 2.0, False, False),  # the TTL itself is the line for an idle parent
    ],
)
def test_should_refresh(stopped: bool, beat_age: float, cpu_advanced: bool, refresh: bool) -> None:
    assert should_refresh(stopped, beat_age, cpu_advanced, TTL, HUNG) is refresh


def test_parent_activity_sees_a_stopped_process_and_its_cpu_time() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        stopped, cpu = parent_activity(child.pid)
        assert not stopped and cpu is not None and cpu >= 0
        os.kill(child.pid, signal.SIGSTOP)
        for _ in range(500):  # the state changes when the signal is delivered: bounded, 5 s at most
            stopped, _cpu = parent_activity(child.pid)
            if stopped:
                break
            time.sleep(0.01)
        assert stopped
    finally:
        child.kill()
        child.wait()
    assert parent_activity(child.pid) == (False, None)
