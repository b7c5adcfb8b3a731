"""The cell's admin token is never used from a file others may read. `cell up` writes it 0600;
docs/security.md tells an operator to rotate it by writing a new file, and one written so
under umask 022 is 0644: the masters took it, and every task of every user (the state dir is
0755, tasks run as their job users) could read the cell's admin credential. `cell up`, resume
and `cell restart` now refuse it, naming the chmod, as they refuse such a channel key."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from reference.cellfile import ADMIN_TOKEN_FILE
from reference.launcher.cellfile import LauncherError
from reference.launcher.statedir import ensure_admin_token


def test_a_new_token_is_written_for_its_owner_only(tmp_path: Path) -> None:
    path = ensure_admin_token(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_admin_token(tmp_path) == path  # kept


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_token_file_others_may_read_is_refused_naming_the_chmod(tmp_path: Path, mode: int) -> None:
    path = tmp_path / ADMIN_TOKEN_FILE
    path.write_text("mbt_rotated\n")
    os.chmod(path, mode)
    with pytest.raises(LauncherError, match=r"admin token .* open to other users .*chmod 600"):
        ensure_admin_token(tmp_path)
    os.chmod(path, 0o600)
    assert ensure_admin_token(tmp_path) == path


def test_resume_and_restart_refuse_it_too(tmp_path: Path) -> None:
    from reference import launcher
    from reference.launcher.cellfile import CellInfo

    CellInfo("local", str(tmp_path), str(tmp_path), 0.0, (), (), {}).save()
    (tmp_path / ADMIN_TOKEN_FILE).write_text("mbt_rotated\n")
    os.chmod(tmp_path / ADMIN_TOKEN_FILE, 0o644)
    for start in (launcher.resume, launcher.restart):
        with pytest.raises(LauncherError, match="open to other users"):
            start(tmp_path)
