"""The command line trusts a state dir's cell file and CA only when another user could not have
put them there. The state dir defaults to ./.minborg: run from a shared directory (/tmp), a
`.minborg` another local user made there named her masters and her CA, and the command line
sent them the caller's own token (--token, $MINBORG_TOKEN) over a TLS link it took for the
cell's. A state dir owned by another user (root aside) or writable by others is now refused,
naming --state-dir, before any connection."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reference import cellfile
from reference.cli import http
from reference.client import ClientError


def state_dir(tmp_path: Path, mode: int = 0o755) -> Path:
    root = tmp_path / ".minborg"
    (root / "pki").mkdir(parents=True)
    (root / cellfile.CELL_FILE).write_text(json.dumps({"master_urls": ["https://127.0.0.1:8443"]}))
    (root / "pki" / "ca.crt").write_text("a CA of the directory's maker\n")
    os.chmod(root, mode)
    return root


def test_ones_own_state_dir_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = state_dir(tmp_path)
    monkeypatch.delenv(http.CA_ENV, raising=False)
    assert cellfile.master_urls(None, root) == ["https://127.0.0.1:8443"]
    assert http.ca_file(root) == str(root / "pki" / "ca.crt")


def test_a_state_dir_others_may_write_is_refused_naming_the_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = state_dir(tmp_path, 0o777)
    monkeypatch.delenv(http.CA_ENV, raising=False)
    with pytest.raises(ClientError, match=r"other users may write it.*--state-dir"):
        cellfile.master_urls(None, root)
    with pytest.raises(ClientError, match=r"other users may write it.*--state-dir"):
        http.ca_file(root)


def test_another_users_state_dir_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = state_dir(tmp_path)
    owner = os.stat(root).st_uid
    monkeypatch.delenv(http.CA_ENV, raising=False)
    if owner == 0:  # root's dirs are trusted by everyone: make the caller another user and the owner not root
        monkeypatch.setattr(os, "geteuid", lambda: 4242)
        real_stat = os.stat

        def stat_as_mallory(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            st = real_stat(path, *args, **kwargs)
            if Path(path) == root:
                return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, 2_000_000_001, *st[5:]))
            return st

        monkeypatch.setattr(os, "stat", stat_as_mallory)
    else:
        monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    with pytest.raises(ClientError, match=r"belongs to uid \d+.*--state-dir"):
        cellfile.master_urls(None, root)
    with pytest.raises(ClientError, match=r"belongs to uid \d+.*--state-dir"):
        http.ca_file(root)


def test_a_ca_named_by_the_environment_is_not_the_state_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = state_dir(tmp_path, 0o777)
    monkeypatch.setenv(http.CA_ENV, "/etc/minborg/ca.crt")
    assert http.ca_file(root) == "/etc/minborg/ca.crt"
