"""`minborg cell up` and `minborg demo` start a cell with TLS unless told --plain (--tls is
accepted and changes nothing); the combinations TLS cannot serve are refused naming the flag.
The launcher is replaced by a stand-in that records what it was asked: nothing is started."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from reference import launcher
from reference.cli import demo as cli_demo
from reference.cli.app import app
from reference.client import MASTER_ENV, STATE_DIR_ENV

runner = CliRunner()


@pytest.fixture()
def asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[dict[str, Any]]:
    """The keyword arguments of every launcher.up call; each answers a cell of one master
    whose URL's scheme is what was asked."""
    monkeypatch.delenv(MASTER_ENV, raising=False)
    monkeypatch.delenv(STATE_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    calls: list[dict[str, Any]] = []

    def up(state_dir: Any, **kwargs: Any) -> launcher.CellInfo:
        calls.append(kwargs)
        scheme = "https" if kwargs.get("tls") else "http"
        return launcher.CellInfo(
            cell="local", state_dir=str(state_dir), workdir=str(tmp_path), started_at=time.time(),
            master_urls=(f"{scheme}://127.0.0.1:7001",), etcd_urls=("https://127.0.0.1:2379",),
            borglet_urls={"machine0": f"{scheme}://127.0.0.1:7101"},
        )  # fmt: skip

    monkeypatch.setattr(launcher, "up", up)
    return calls


def cell_up(*args: str, state_dir: Path) -> Any:
    return runner.invoke(app, ["cell", "up", "--state-dir", str(state_dir), *args])


@pytest.mark.parametrize(("flags", "tls"), [((), True), (("--tls",), True), (("--plain",), False)])
def test_cell_up_serves_tls_unless_told_plain(asked: list[dict[str, Any]], tmp_path: Path, flags: tuple[str, ...],
                                              tls: bool) -> None:  # fmt: skip
    result = cell_up(*flags, state_dir=tmp_path / "cell")
    assert result.exit_code == 0, result.output
    assert [call["tls"] for call in asked] == [tls]
    scheme = "https" if tls else "http"
    assert f"{scheme}://127.0.0.1:7001/ui" in result.output, "Sigma's URL, in the cell's scheme"
    if tls:
        assert "HTTPS only" in result.output and str(tmp_path / "cell" / "pki" / "ca.crt") in result.output
    else:
        assert "plain http" in result.output


@pytest.mark.parametrize(
    ("flags", "names"),
    [(("--toxiproxy",), "--plain"), (("--tls", "--toxiproxy"), "--plain"), (("--plain", "--hosts", "netns"), "--hosts netns")],
)
def test_cell_up_refuses_what_its_tls_setting_cannot_serve(asked: list[dict[str, Any]], tmp_path: Path,
                                                           flags: tuple[str, ...], names: str) -> None:  # fmt: skip
    result = cell_up(*flags, state_dir=tmp_path / "cell")
    assert result.exit_code == 2, result.output
    assert names in result.output
    assert asked == [], "refused before anything starts"


def test_cell_up_toxiproxy_runs_plain_when_told(asked: list[dict[str, Any]], tmp_path: Path) -> None:
    result = cell_up("--toxiproxy", "--plain", state_dir=tmp_path / "cell")
    assert result.exit_code == 0, result.output
    assert [(call["tls"], call["toxiproxy"]) for call in asked] == [(False, True)]


@pytest.mark.parametrize(("flags", "tls"), [((), True), (("--tls",), True), (("--plain",), False)])
def test_the_demo_runs_its_cell_with_tls_unless_told_plain(
    asked: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flags: tuple[str, ...], tls: bool
) -> None:
    def stop(*_: Any, **kwargs: Any) -> None:
        asked.append(kwargs)
        raise launcher.LauncherError("no cell in a unit test")

    monkeypatch.setattr(launcher, "up", stop)
    monkeypatch.setattr(cli_demo.tempfile, "mkdtemp", lambda prefix: str(tmp_path / "demo"))
    result = runner.invoke(app, ["demo", *flags])
    assert result.exit_code == 1, result.output
    assert [call["tls"] for call in asked] == [tls]
    assert ("HTTPS with the cell's CA" if tls else "plain http") in result.output
