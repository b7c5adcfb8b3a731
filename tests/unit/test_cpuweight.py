"""A master's session weighs more than a borglet's on a crowded host (`reference.cpuweight`):
set by the launcher's spawn, where the kernel has autogroups and root may lower a nice value."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from reference import cpuweight
from reference.launcher import processes
from reference.launcher.cellfile import ProcessRecord, Role

needs_autogroups = pytest.mark.skipif(
    not os.path.exists("/proc/self/autogroup") or os.geteuid() != 0,
    reason="the kernel has no autogroups here, or lowering a nice value needs root",
)


def _spawn(role: Role, tmp_path: Path) -> ProcessRecord:
    return processes.spawn(
        role, role.value, [sys.executable, "-c", "import time; time.sleep(30)"], "", tmp_path / f"{role.value}.log",
        str(tmp_path), dict(os.environ),
    )  # fmt: skip


@needs_autogroups
def test_a_master_is_spawned_in_a_heavier_session_than_a_borglet(tmp_path: Path) -> None:
    records = [_spawn(Role.MASTER, tmp_path), _spawn(Role.BORGLET, tmp_path)]
    try:
        master, borglet = (r.pid for r in records)
        assert os.getsid(master) == master and os.getsid(borglet) == borglet  # each its own session
        assert cpuweight.session_nice(master) == cpuweight.CONTROL_PLANE_NICE
        assert cpuweight.session_nice(borglet) == 0
    finally:
        assert processes.stop_processes(records, timeout=5.0) == []


def test_a_missing_process_is_refused_without_an_error() -> None:
    assert cpuweight.weigh_session(2**22 + 1) is False  # above any pid the kernel hands out
    assert cpuweight.session_nice(2**22 + 1) is None
