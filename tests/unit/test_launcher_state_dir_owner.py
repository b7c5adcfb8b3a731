"""`cell up` refuses a state dir that another local user could have filled or may change: one
owned by another user, or writable by others. Before, it started (or resumed) on it: whoever
could write the directory could put there, or swap in later, a `channel.key` of their own (0600
and theirs, which the mode check took), a CA and a cell file of their own, and then command the
cell's root borglets, or be the master the command line trusts and sends its token to."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reference import launcher
from reference.launcher.cellfile import CellInfo, LauncherError
from reference.launcher.statedir import check_private


def test_a_fresh_or_own_private_dir_is_taken(tmp_path: Path) -> None:
    check_private(tmp_path / "new")  # not there yet: up makes it
    own = tmp_path / "own"
    own.mkdir(mode=0o755)
    os.chmod(own, 0o755)
    check_private(own)


def test_a_dir_others_may_write_is_refused_naming_the_flag(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)
    with pytest.raises(LauncherError, match=r"--state-dir.*writable by other users.*chmod o-w"):
        check_private(loose)


def test_a_dir_of_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    real = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real + 1)
    with pytest.raises(LauncherError, match=r"--state-dir.*owned by uid"):
        check_private(theirs)


def test_up_refuses_before_it_writes_anything(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)
    with pytest.raises(LauncherError, match="writable by other users"):
        launcher.up(loose, machines=0)
    assert list(loose.iterdir()) == []  # no key, no CA, no token, no cell file


def test_resume_and_restart_refuse_it_too(tmp_path: Path) -> None:
    # A stopped cell's state dir made writable by others afterwards: its keys may be swapped.
    loose = tmp_path / "loose"
    loose.mkdir()
    CellInfo("local", str(loose), str(tmp_path), 0.0, (), (), {}).save()
    os.chmod(loose, 0o777)
    for start in (launcher.resume, launcher.restart):
        with pytest.raises(LauncherError, match="writable by other users"):
            start(loose)
