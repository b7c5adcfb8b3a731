"""`minborg ui`: Sigma's URL from the cell file, where to find a token, and --open signed in (the browser injected)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reference.cli import ui as cli_ui
from reference.cli.app import app


def cell_dir(tmp_path: Path, **extra: object) -> Path:
    (tmp_path / "cell.json").write_text(json.dumps({"master_urls": ["http://127.0.0.1:7001/", "http://127.0.0.1:7002"], **extra}))
    return tmp_path


def test_ui_prints_the_first_master_s_sigma_and_where_to_get_a_token(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["ui", "--state-dir", str(cell_dir(tmp_path))])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "http://127.0.0.1:7001/ui"
    text = " ".join(lines[1:])
    assert "minborg user add NAME" in text and str(tmp_path / "admin.token") in text


def test_ui_open_signs_in_with_the_token_in_the_fragment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    monkeypatch.setattr(cli_ui, "open_in_browser", lambda url: opened.append(url) or True)
    (cell_dir(tmp_path) / "admin.token").write_text("mbt_secret\n")
    monkeypatch.delenv("MINBORG_TOKEN", raising=False)
    result = CliRunner().invoke(app, ["ui", "--open", "--state-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert opened == ["http://127.0.0.1:7001/ui#token=mbt_secret"]
    assert "mbt_secret" not in result.output  # the token is never printed
    assert "opened in the browser" in result.output


def test_ui_open_without_a_browser_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_ui, "open_in_browser", lambda url: False)
    result = CliRunner().invoke(app, ["ui", "--open", "--state-dir", str(cell_dir(tmp_path))])
    assert result.exit_code == 0, result.output
    assert "no browser to open here: open http://127.0.0.1:7001/ui where you have one" in result.output


def test_ui_of_a_stopped_cell_says_so(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["ui", "--state-dir", str(cell_dir(tmp_path, stopped_at=1.0))])
    assert result.exit_code == 1
    assert "no cell answers at http://127.0.0.1:7001/" in result.output and "minborg cell up" in result.output


def test_cell_status_names_sigma_at_the_leader() -> None:
    from reference.cli.views import cell_text

    overview = {"cell": "local", "leader": "m1", "leader_url": "http://127.0.0.1:7002/", "revision": 5, "jobs": 0,
                "tasks": {"RUNNING": 0, "PENDING": 0, "DEAD": 0, "running_confirmed": 0}, "replicas": []}  # fmt: skip
    text, _ = cell_text(None, overview, {"up": 1, "down": 0})
    assert "sigma" in text and "http://127.0.0.1:7002/ui" in text
    replicas = [{"name": "m0", "url": "http://127.0.0.1:7001", "role": "follower"}]
    text, _ = cell_text(None, {**overview, "leader": None, "leader_url": None, "replicas": replicas}, {"up": 1, "down": 0})
    assert "http://127.0.0.1:7001/ui" in text  # no leader: any replica serves it
