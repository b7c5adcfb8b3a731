"""The launcher options that let one class start both the tests' cell and `cell up`'s: process names, the borglets' flags, two replicas on a 3-member etcd."""

from __future__ import annotations

from pathlib import Path

import pytest

from reference.launcher import LauncherError, Names
from reference.launcher.roles import borglet_flags, start_borglet
from reference.launcher.statedir import check_arguments
from reference.launcher.testcell import NAMES

CAPACITY = "cpu=4000m,ram=4GiB"


def test_names_are_cell_ups_unless_the_caller_gives_its_own() -> None:
    assert [Names().master(0), Names().machine(1), Names().scheduler(2)] == ["master0", "machine1", "scheduler2"]
    assert [NAMES.master(0), NAMES.machine(1), NAMES.scheduler(2)] == ["m0", "b1", "s2"]


def test_borglet_flags_leave_the_borglets_defaults_where_none_is_given() -> None:
    assert borglet_flags() == []
    assert borglet_flags("rlimit", 1.0, ("--runtime", "docker")) == [
        "--isolation", "rlimit", "--kill-grace", "1", "--runtime", "docker",
    ]  # fmt: skip
    assert borglet_flags(None, 0.5) == ["--kill-grace", "0.5"]


def test_a_borglet_is_started_with_the_cells_flags_after_its_own(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    started: list[list[str]] = []
    monkeypatch.setattr("reference.launcher.roles.spawn", lambda role, name, command, *a: started.append(command))
    start_borglet(tmp_path, "b0", 5, CAPACITY, 0, str(tmp_path), {}, extra=borglet_flags("rlimit", 1.0))
    start_borglet(tmp_path, "machine0", 6, CAPACITY, 0, str(tmp_path), {})
    with_flags, plain = started
    assert with_flags[-4:] == ["--isolation", "rlimit", "--kill-grace", "1"]
    assert "--isolation" not in plain and "--kill-grace" not in plain
    assert with_flags[: plain.index("--name")] == plain[: plain.index("--name")]


def test_any_number_of_replicas_runs_on_an_etcd_of_its_own_size() -> None:
    check_arguments("test", 2, 3, CAPACITY, 3)  # two masters elect through a 3-member etcd
    check_arguments("test", 3, 3, CAPACITY, 3)
    with pytest.raises(LauncherError, match="--replicas must be one of"):
        check_arguments("test", 2, 3, CAPACITY, 2)  # `cell up --replicas 2`: etcd would have 2 members
    with pytest.raises(LauncherError, match="--replicas must be one of"):
        check_arguments("test", 0, 3, CAPACITY, 3)
