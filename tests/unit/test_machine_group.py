"""The machines' CPU group of a local cell (`cell up --machine-cpu-shares`): its weight, and the borglet joining it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reference.borglet.cli import join_cgroups
from reference.launcher import cpubudget
from reference.launcher.cellfile import CellInfo


def test_the_group_is_made_with_its_weight(tmp_path: Path) -> None:
    group = cpubudget.machines_group("local", "/tmp/cell")
    assert group == f"{cpubudget.cell_group('local', '/tmp/cell')}/machines"
    dirs = cpubudget.share_cpu(group, 2048, root=tmp_path)
    cpu = cpubudget.group_dirs(group, tmp_path)["cpu"]
    assert cpu in dirs and (cpu / "cpu.shares").read_text() == "2048"


@pytest.mark.parametrize("shares", [0, 1, cpubudget.MAX_SHARES + 1])
def test_a_weight_the_kernel_would_refuse_is_named(shares: int, tmp_path: Path) -> None:
    assert "must be a CPU weight from 2" in (cpubudget.shares_problem(shares) or "")
    with pytest.raises(ValueError, match="must be a CPU weight"):
        cpubudget.share_cpu("minborg/x/machines", shares, root=tmp_path)


def test_the_borglet_joins_each_directory_it_is_given(tmp_path: Path) -> None:
    dirs = [tmp_path / "cpu", tmp_path / "cpuacct"]
    for d in dirs:
        d.mkdir()
    join_cgroups([str(d) for d in dirs])
    assert all((d / "cgroup.procs").read_text() == str(os.getpid()) for d in dirs)
    with pytest.raises(OSError):
        join_cgroups([str(tmp_path / "missing")])


def test_the_cell_file_keeps_the_weight_only_when_there_is_one(tmp_path: Path) -> None:
    info = CellInfo("local", str(tmp_path), str(tmp_path), 0.0, (), (), {})
    assert "machine_shares" not in info.to_json()
    grouped = CellInfo("local", str(tmp_path), str(tmp_path), 0.0, (), (), {}, machine_shares=2048)
    assert CellInfo.from_json(grouped.to_json()).machine_shares == 2048
