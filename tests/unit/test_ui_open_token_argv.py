"""`minborg ui --open` signs the browser in without the token on a command line. It handed the
browser `https://.../ui#token=...` as an argument: every local user reads a process's
arguments (`ps`, /proc/PID/cmdline), for as long as the browser it started runs, so the token
(the cell's admin token, by default) was everyone's. The browser now opens a page readable by
its user alone that sends it on to that URL."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from reference.cli import ui as cli_ui

TARGET = "https://127.0.0.1:7001/ui#token=mbt_secret-token"


class Browser:
    def __init__(self) -> None:
        self.opened: list[str] = []

    def open(self, url: str) -> bool:
        self.opened.append(url)
        return True


def test_the_token_is_not_in_what_the_browser_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    browser = Browser()
    monkeypatch.setattr("webbrowser.get", lambda *a: browser)
    assert cli_ui.open_in_browser(TARGET)
    (given,) = browser.opened
    assert "mbt_secret-token" not in given
    page = Path(unquote(urlsplit(given).path))
    assert given.startswith("file://") and page.is_file()
    try:
        assert stat.S_IMODE(page.stat().st_mode) == 0o600 and page.stat().st_uid == os.geteuid()
        assert stat.S_IMODE(page.parent.stat().st_mode) == 0o700
        assert '"https://127.0.0.1:7001/ui#token=mbt_secret-token"' in page.read_text()
    finally:
        page.unlink()
        page.parent.rmdir()


def test_a_target_cannot_close_the_pages_script(monkeypatch: pytest.MonkeyPatch) -> None:
    browser = Browser()
    monkeypatch.setattr("webbrowser.get", lambda *a: browser)
    cli_ui.open_in_browser("https://h/ui#token=</script><script>alert(1)</script>")
    page = Path(unquote(urlsplit(browser.opened[0]).path))
    try:
        assert "</script><script>" not in page.read_text()
    finally:
        page.unlink()
        page.parent.rmdir()
