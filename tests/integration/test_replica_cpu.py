"""A cell started with --replica-cpu 0.2: its master runs in its own CPU group with a 20% quota, and a busy loop in that group is held near 20% of a core."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from reference import launcher
from reference.launcher import cpubudget
from tests.integration.cellkit import NEEDS_CPU_GROUPS

pytestmark = [pytest.mark.integration, NEEDS_CPU_GROUPS]

BUDGET = 0.2


def test_a_replica_is_held_to_its_budget(state_dir: Path) -> None:
    info = launcher.up(state_dir, replicas=1, machines=0, replica_cpu=BUDGET)
    (master,) = info.of_role(launcher.Role.MASTER)
    group = cpubudget.process_group(info.cell, info.state_dir, master.name)
    dirs = cpubudget.group_dirs(group)
    assert str(master.pid) in (dirs["cpu"] / "cgroup.procs").read_text().split()
    period = int((dirs["cpu"] / "cpu.cfs_period_us").read_text())
    assert int((dirs["cpu"] / "cpu.cfs_quota_us").read_text()) == round(BUDGET * period)
    status = launcher.status(state_dir)
    (shown,) = [p for p in status["processes"] if p["role"] == "master"]
    assert status["replica_cpu"] == BUDGET and shown["cpu_budget"] == BUDGET and shown["cpu_s"] > 0

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        cpubudget.limit_cpu(busy.pid, group, BUDGET)
        time.sleep(0.5)  # past the first period, when the loop may still have had a full one
        before, began = cpubudget.cpu_used_s(group), time.monotonic()
        time.sleep(2.0)
        after, ended = cpubudget.cpu_used_s(group), time.monotonic()
    finally:
        busy.kill()
        busy.wait()
    assert before is not None and after is not None
    cores = (after - before) / (ended - began)
    # The loop and the idle master together: 0.2 cores at most by the quota, well above 0 by the
    # loop; the margin is for a two-core host shared with other work.
    assert 0.08 <= cores <= BUDGET * 1.5, f"the group used {cores:.3f} cores"

    launcher.down(state_dir)
    assert not dirs["cpu"].exists() and not dirs["cpuacct"].exists()
