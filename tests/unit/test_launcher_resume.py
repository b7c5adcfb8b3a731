"""What `cell up` and `cell restart` refuse before they start anything, from the cell file alone."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reference import launcher

GONE = 4194305  # above any pid_max: never a live process


def stopped_cell(root: Path, command: tuple[str, ...]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    record = launcher.ProcessRecord(launcher.Role.MASTER, "master0", GONE, 1.0, "http://127.0.0.1:1", "/log", command)
    launcher.CellInfo(
        "local", str(root), str(root), time.time(), ("http://127.0.0.1:1",), (), {}, (record,), stopped_at=time.time()
    ).save()


def test_a_cell_file_without_commands_cannot_be_resumed(tmp_path: Path) -> None:
    stopped_cell(tmp_path, ())
    with pytest.raises(launcher.LauncherError, match="does not record how master0 were started.*--fresh"):
        launcher.up(tmp_path)
    with pytest.raises(launcher.LauncherError, match="--fresh"):
        launcher.restart(tmp_path)


def test_a_cell_without_etcd_data_cannot_be_resumed(tmp_path: Path) -> None:
    stopped_cell(tmp_path, ("python", "-m", "reference.master"))
    with pytest.raises(launcher.LauncherError, match="no etcd data in .*--fresh"):
        launcher.up(tmp_path)


def test_the_command_survives_the_cell_file(tmp_path: Path) -> None:
    stopped_cell(tmp_path, ("python", "-m", "reference.master", "--name", "master0"))
    (record,) = launcher.CellInfo.load(tmp_path).processes
    assert record.command == ("python", "-m", "reference.master", "--name", "master0")
