"""A cell started with --machine-cpu-shares: its borglet, and the task groups it makes, live in the machines' CPU group of that weight; `cell down` removes the group."""

from __future__ import annotations

from pathlib import Path

import pytest

from reference import launcher, procscan
from reference.borglet.cgroups import parse_proc_cgroup
from reference.cellfile import read_admin_token
from reference.client import CellClient
from reference.launcher import cpubudget
from reference.waiting import wait_until
from tests.integration.cellkit import NEEDS_CPU_GROUPS, sleeper_job

pytestmark = [pytest.mark.integration, NEEDS_CPU_GROUPS]

SHARES = 2048


def test_the_machines_and_their_tasks_share_one_cpu_group(state_dir: Path) -> None:
    info = launcher.up(state_dir, replicas=1, machines=1, machine_shares=SHARES)
    assert info.machine_shares == SHARES
    (borglet,) = info.of_role(launcher.Role.BORGLET)
    (master,) = info.of_role(launcher.Role.MASTER)
    group = cpubudget.machines_group(info.cell, info.state_dir)
    cpu = cpubudget.group_dirs(group)["cpu"]
    assert (cpu / "cpu.shares").read_text().strip() == str(SHARES)
    members = (cpu / "cgroup.procs").read_text().split()
    assert str(borglet.pid) in members and str(master.pid) not in members
    assert launcher.status(state_dir)["machine_shares"] == SHARES

    with CellClient(list(info.master_urls), token=read_admin_token(info.state_dir)) as client:
        client.submit(sleeper_job("grouped"))
        wait_until(lambda: procscan.scan(info.state_dir), 30.0, "the task's process", 0.2)
    (task,) = procscan.scan(info.state_dir)

    def task_group() -> Path:
        own = parse_proc_cgroup(Path(f"/proc/{task.pid}/cgroup").read_text())["cpu"]
        return Path("/sys/fs/cgroup/cpu") / own.lstrip("/")

    # Between its fork and its exec a task is still in its borglet's group; then in its own,
    # which lies beneath the machines' group.
    wait_until(lambda: task_group() != cpu, 10.0, "the task in a group of its own", 0.05)
    assert task_group().is_relative_to(cpu), task_group()

    launcher.down(state_dir)
    assert not cpu.exists()
    # Resumed on its data, the cell makes the group again and its borglet joins it.
    resumed = launcher.up(state_dir)
    (borglet,) = resumed.of_role(launcher.Role.BORGLET)
    assert str(borglet.pid) in (cpu / "cgroup.procs").read_text().split()
    launcher.down(state_dir)
    assert not cpu.exists()


def test_a_weight_that_is_no_weight_is_refused_before_anything_starts(state_dir: Path) -> None:
    with pytest.raises(launcher.LauncherError, match="--machine-cpu-shares: must be a CPU weight"):
        launcher.up(state_dir, replicas=1, machines=1, machine_shares=1)
    assert not (state_dir / "cell.json").exists()
