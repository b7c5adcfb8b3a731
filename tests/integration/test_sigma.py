"""Sigma, the dashboard at /ui, in headless Chromium (Debian's chromium and chromedriver, driven
through the WebDriver protocol): what the pages of a live cell show after a job is submitted
and a task is killed, and that an open page follows the cell without a reload.

Screenshots go to $MINBORG_SCREENSHOT_DIR (docs/img when regenerating the ones the docs show),
else to the test's temporary directory.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reference.client import CellClient
from reference.ports import free_port
from tests.integration.cellkit import LocalCell, hello_job, sleeper_job, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


class Browser:
    """A headless Chromium behind chromedriver, spoken to in plain W3C WebDriver over HTTP."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.log = open(workdir / "chromedriver.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [CHROMEDRIVER, f"--port={self.port}"], stdout=self.log, stderr=subprocess.STDOUT  # type: ignore[list-item]
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(timeout=60)
        wait_for(lambda: self.http.get(f"{self.url}/status").json()["value"]["ready"], 20, "chromedriver")
        options = {
            "binary": CHROMIUM,
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000",
                     f"--user-data-dir={workdir / 'chromium-profile'}"],
        }  # fmt: skip
        answer = self.http.post(
            f"{self.url}/session", json={"capabilities": {"alwaysMatch": {"goog:chromeOptions": options}}}
        ).json()
        self.session = f"{self.url}/session/{answer['value']['sessionId']}"

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self.http.request(method, self.session + path, json=body)
        value = response.json()["value"]
        if response.status_code != 200:
            raise AssertionError(f"webdriver {path}: {value}")
        return value

    def open(self, url: str) -> None:
        self.call("POST", "/url", {"url": url})

    def text(self) -> str:
        return self.call("POST", "/execute/sync", {"script": "return document.body.innerText;", "args": []})

    def screenshot(self, path: Path, height: int = 1000) -> None:
        self.call("POST", "/window/rect", {"width": 1280, "height": height})
        path.write_bytes(base64.b64decode(self.call("GET", "/screenshot")))

    def close(self) -> None:
        try:
            self.http.delete(self.session)
        except httpx.HTTPError:
            pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.http.close()
        self.log.close()


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCell]:
    c = LocalCell(tmp_path_factory.mktemp("cell"), masters=2, borglets=3, poll_interval=0.3)
    with c:
        yield c
    assert c.leftovers() == [], "processes of the cell are still running"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
    b = Browser(tmp_path_factory.mktemp("browser"))
    try:
        yield b
    finally:
        b.close()


def shots(tmp_path: Path) -> Path:
    out = Path(os.environ.get("MINBORG_SCREENSHOT_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_the_dashboard_shows_the_cell_a_job_and_a_task_and_follows_changes(
    cell: LocalCell, browser: Browser, tmp_path: Path
) -> None:
    assert cell.submit(hello_job("web", user="alice", count=3)).status_code == 201
    batch = sleeper_job("batch", user="bob", count=2, request={"cpu": "1500m", "ram": "256MiB"})
    assert cell.submit(batch).status_code == 201
    nowhere = sleeper_job("nowhere", user="carol", constraints=[{"attr": "rack", "op": "eq", "value": "r9"}])
    assert cell.submit(nowhere).status_code == 201
    wait_for(lambda: cell.running("alice", "web", 3) and cell.running("bob", "batch", 2), 30, "the jobs to run")
    out = shots(tmp_path)
    # Every replica serves the dashboard; the follower's is opened here.
    follower = next(m for m in cell.masters if m is not cell.leader())
    leader = cell.leader()
    assert leader is not None

    # The token is given once, in the URL's fragment (never sent to the server); the page
    # keeps it for the tab and sends it with every request it makes.
    browser.open(f"{follower.url}/ui#token={cell.admin_token}")
    text = wait_for(lambda: (t := browser.text()) and "live, revision" in t and t, 15, "the live cell page")
    for expected in (f"leader\t{leader.name}", "b0", "b1", "b2", "alice", "production", "bob", "batch", "carol"):
        assert expected in text, (expected, text)
    assert "reserved" in text and "of 4000m" in text  # the machines' bars say what they show
    browser.screenshot(out / "sigma-cell.png", 1100)

    browser.open(f"{follower.url}/ui/jobs/carol/nowhere")
    text = wait_for(lambda: (t := browser.text()) and "0 of 3 machines fit" in t and t, 15, "a pending reason")
    assert "rack" in text and "PENDING" in text

    # Kill a task with the job page open: the page follows without a reload.
    browser.open(f"{follower.url}/ui/jobs/alice/web")
    wait_for(lambda: "live, revision" in browser.text(), 15, "the job page to connect")
    assert cell.request("DELETE", "/v1/jobs/alice/web/tasks/1").status_code == 200
    text = wait_for(lambda: (t := browser.text()) and "killed: task killed" in t and t, 15, "the page to follow the kill")
    assert "DEAD" in text and text.count("RUNNING") == 2
    browser.screenshot(out / "sigma-job.png", 760)

    browser.open(f"{follower.url}/ui/jobs/alice/web/tasks/1")
    text = wait_for(lambda: (t := browser.text()) and "hello_world serving" in t and t, 15, "the task page")
    for expected in ("killed\ttask killed", "started\tpid", "scheduled\ton b", "stdout (last 40 lines)", "stderr"):
        assert expected in text, (expected, text)
    browser.screenshot(out / "sigma-task.png", 1080)


def test_a_down_machine_is_red_and_an_unknown_job_is_a_404(cell: LocalCell, browser: Browser, tmp_path: Path) -> None:
    since = cell.get("/v1/cell")["revision"]
    b2 = next(b for b in cell.borglets if b.name == "b2")
    on_b2 = [m for m in cell.get("/v1/machines")["machines"] if m["name"] == "b2"][0]["tasks"]
    assert on_b2, "the scheduler spread the jobs: b2 runs tasks"
    b2.kill()
    wait_for(lambda: any(m["state"] == "down" for m in cell.get("/v1/machines")["machines"]), 15, "b2 down")
    # Its tasks were lost with it: the cell's event stream says so, task by task.
    with CellClient([cell.masters[0].url], token=cell.admin_token) as api:
        lost = wait_for(
            lambda: [m.data for m in api.watch("/v1/events", since=since, timeout_s=1)
                     if m.event == "task" and m.data["kind"] == "lost"],
            15, "the lost events",
        )  # fmt: skip
        down = [m.data for m in api.watch("/v1/events", since=since, timeout_s=1) if m.event == "machine"]
    assert {e["task"] for e in lost} == set(on_b2), (lost, on_b2)
    # The reason names every replica's misses: "no replica reached machine b2 (polls missed in a row: m0 3) (was on b2)".
    details = [e["detail"] for e in lost]
    assert all(d.startswith("no replica reached machine b2 (") and d.endswith(" (was on b2)") for d in details), details
    assert {"machine": "b2", "kind": "down"} in down
    browser.open(f"{cell.masters[0].url}/ui#token={cell.admin_token}")
    text = wait_for(lambda: (t := browser.text()) and "1 down" in t and t, 15, "the down machine")
    color = browser.call(
        "POST", "/execute/sync",
        {"script": "return getComputedStyle(document.querySelector('tr.down td')).backgroundColor;", "args": []},
    )  # fmt: skip
    assert color == "rgb(253, 232, 232)", color  # the down machine's row is red
    assert "b2\tdown" in text
    assert httpx.get(f"{cell.masters[0].url}/ui/jobs/nobody/ghost", headers=cell.auth).status_code == 404
    # Without a token a page is its shell, with no data of the cell in it.
    shell = httpx.get(f"{cell.masters[0].url}/ui/jobs/alice/web")
    assert shell.status_code == 200 and "alice" not in shell.text and "Loading" in shell.text
    time.sleep(0.1)
