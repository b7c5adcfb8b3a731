"""Sigma, the dashboard at /ui, in headless Chromium (Debian's chromium and chromedriver, driven
through the WebDriver protocol), on one live cell: signing in, the cell's jobs searched and
filtered, how outcomes are painted, a job and a task followed without a reload (its logs
streamed), a user's own job resized and killed from its page, the machines and events pages,
and the usage charts.

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
from reference.master.sigma.history import SAMPLE_ENV
from reference.ports import free_port
from tests.integration.cellkit import TASK_PYTHON, LocalCell, hello_job, sleeper_job, wait_for

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

    def run(self, script: str) -> Any:
        return self.call("POST", "/execute/sync", {"script": script, "args": []})

    def element(self, css: str) -> str:
        found = self.call("POST", "/element", {"using": "css selector", "value": css})
        return next(iter(found.values()))

    def on(self, css: str, *actions: tuple[str, dict[str, Any]]) -> None:
        """Act on the element `css` finds; found again if the page swapped its content in between
        (it does on every event of the cell)."""
        for attempt in range(5):
            element = self.element(css)
            try:
                for action, body in actions:
                    self.call("POST", f"/element/{element}/{action}", body)
                return
            except AssertionError as err:
                if "stale element" not in str(err) or attempt == 4:
                    raise

    def type(self, css: str, text: str) -> None:
        self.on(css, ("clear", {}), ("value", {"text": text}))

    def click(self, css: str) -> None:
        self.on(css, ("click", {}))

    def color(self, css: str) -> str:
        return self.run(f"return getComputedStyle(document.querySelector({css!r})).color;")

    def rows(self) -> list[str]:
        """The rows of the page's first listing, as text."""
        return self.run(f"return {LISTING}.map(r => r.innerText);")

    def shows(self, *expected: str, timeout: float = 15) -> str:
        """The page's text once it holds every one of `expected` (the page fills in after the
        token is sent, and again on each event)."""
        try:
            return wait_for(lambda: (t := self.text()) and all(x in t for x in expected) and t, timeout, repr(expected))
        except TimeoutError:
            raise AssertionError(f"the page never showed {expected}; it shows:\n{self.text()}") from None

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



RED, GREY = "rgb(195, 34, 31)", "rgb(91, 100, 117)"
ROWS = "table.listing tbody tr"  # CSS of the rows of a page's listing (jobs, machines, events, a job's tasks)
LISTING = "[...document.querySelector('table.listing').tBodies[0].rows]"  # the same rows in a script


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCell]:
    # The usage charts' samples a second apart instead of a minute: the charts draw within the test.
    before = os.environ.get(SAMPLE_ENV)
    os.environ[SAMPLE_ENV] = "1"
    c = LocalCell(tmp_path_factory.mktemp("cell"), masters=2, borglets=3, poll_interval=0.3)
    try:
        with c:
            yield c
    finally:
        if before is None:
            os.environ.pop(SAMPLE_ENV, None)
        else:
            os.environ[SAMPLE_ENV] = before
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


TICKER = "import itertools, time\nfor i in itertools.count():\n    print('tick', i, flush=True)\n    time.sleep(0.4)"


def test_the_dashboard_signs_in_lists_follows_and_acts(cell: LocalCell, browser: Browser, tmp_path: Path) -> None:
    assert cell.submit(hello_job("web", user="alice", count=3)).status_code == 201
    batch = sleeper_job("batch", user="bob", count=2, request={"cpu": "1500m", "ram": "256MiB"})
    assert cell.submit(batch).status_code == 201
    nowhere = sleeper_job("nowhere", user="carol", constraints=[{"attr": "rack", "op": "eq", "value": "r9"}])
    assert cell.submit(nowhere).status_code == 201
    assert cell.submit(sleeper_job("once", user="bob", command=[TASK_PYTHON, "-c", "print('done')"])).status_code == 201
    crashy = sleeper_job("crashy", user="dave", command=[TASK_PYTHON, "-c", "raise SystemExit(3)"], restart_policy="always")
    assert cell.submit(crashy).status_code == 201
    assert cell.submit(sleeper_job("ticker", user="bob", command=[TASK_PYTHON, "-c", TICKER])).status_code == 201
    assert cell.submit(sleeper_job("scratch", user="alice")).status_code == 201
    alice = cell.request("POST", "/v1/users", json={"name": "alice"}).json()["token"]
    wait_for(lambda: cell.running("alice", "web", 3) and cell.running("bob", "batch", 2), 30, "the jobs to run")
    out = shots(tmp_path)
    follower = next(m for m in cell.masters if m is not cell.leader())
    leader = cell.leader()
    assert leader is not None

    # Without a token: a sign-in page that says where to get one, no endless "Loading...".
    browser.open(f"{follower.url}/ui")
    text = browser.shows("Sign in to the cell", "minborg user add NAME", "admin.token")
    assert "alice" not in text and "Loading" not in text
    browser.type("#login-token", cell.admin_token)
    browser.click("#login-form button")
    text = browser.shows("live, revision", "signed in as admin", "alice")
    for expected in (f"leader\t{leader.name}", "alice", "production", "bob", "batch", "carol", "of 12000m"):
        assert expected in text, (expected, text)
    browser.screenshot(out / "sigma-cell.png", 1100)

    # Search and filter: the URL's query, kept by the page.
    browser.open(f"{follower.url}/ui?q=web")
    browser.shows("jobs 1-1 of 1 (7 in all)")
    assert [r.split("\t")[:3] for r in browser.rows()] == [["alice", "production", "web"]]
    # A crash loop is red, never green; a finished batch job is done, in grey.
    browser.open(f"{follower.url}/ui?status=crash+loop")
    browser.shows("dave", "BACKOFF 1", timeout=30)
    assert browser.color(f"{ROWS} td:last-child span") == RED
    browser.open(f"{follower.url}/ui?user=bob&sort=-wanted")
    text = browser.shows("jobs 1-3 of 3", "once", "done")
    assert text.index("batch") < text.index("once")  # 2 wanted before 1
    once = browser.run(f"return {LISTING}.find(r => r.innerText.includes('once')).lastChild.firstChild.className;")
    assert once == "done"

    browser.open(f"{follower.url}/ui/jobs/bob/once")
    browser.shows("DEAD (finished)")
    assert browser.color(f"{ROWS} td:nth-child(3) span") == GREY  # exit 0 is not red
    browser.open(f"{follower.url}/ui/jobs/carol/nowhere")
    text = browser.shows("0 of 3 machines fit")
    assert "rack" in text and "PENDING" in text

    # Kill a task with the job page open: the page follows without a reload.
    browser.open(f"{follower.url}/ui/jobs/alice/web")
    browser.shows("live, revision", "set task count", "Usage, last hour")
    assert cell.request("DELETE", "/v1/jobs/alice/web/tasks/1").status_code == 200
    text = browser.shows("killed: task killed")
    assert "DEAD" in text and text.count("RUNNING") == 2
    browser.screenshot(out / "sigma-job.png", 900)

    browser.open(f"{follower.url}/ui/jobs/alice/web/tasks/1")
    text = browser.shows("hello_world serving", "killed\ttask killed")
    for expected in ("started\tpid", "scheduled\ton b", "stdout (followed", "stderr"):
        assert expected in text, (expected, text)
    browser.screenshot(out / "sigma-task.png", 1080)
    # A running task's log is followed: new lines arrive without a reload.
    browser.open(f"{follower.url}/ui/jobs/bob/ticker/tasks/0")
    browser.shows("tick 1", "following")
    first = browser.run("return document.getElementById('log-stdout').textContent;")
    later = wait_for(lambda: (t := browser.run("return document.getElementById('log-stdout').textContent;"))
                     and t.count("tick") >= first.count("tick") + 5 and t, 20, "more ticks")  # fmt: skip
    assert later.startswith(first.strip()[:20])

    # A user acts on its own jobs only: alice resizes and kills hers; bob's has no controls for her.
    browser.open(f"{follower.url}/ui/jobs/alice/web#token={alice}")
    browser.shows("signed in as alice", "set task count")
    browser.type("#count-form input", "2")
    browser.click("#count-form button")
    browser.shows("task count changed")
    wait_for(lambda: cell.get("/v1/jobs/alice/web")["job"]["task_count"] == 2, 15, "the new count")
    # The index scaled down is done, in grey like the killed one, or gone from the job; no row is red.
    row_2 = (f"var r = {LISTING}.find(r => r.cells[0].innerText === '2');"
             "return r ? [r.cells[2].innerText, getComputedStyle(r.cells[2].firstChild).color] : ['gone'];")  # fmt: skip
    scaled = wait_for(lambda: (r := browser.run(row_2)) and r[0] != "RUNNING" and r, 15, "index 2 to go")
    assert scaled in (["DEAD (killed)", GREY], ["gone"]), scaled
    colours = browser.run(f"return {LISTING}.map(r => getComputedStyle(r.cells[2].firstChild).color);")
    assert RED not in colours and GREY in colours, colours
    browser.open(f"{follower.url}/ui/jobs/bob/batch")
    text = browser.shows("signed in as alice", "Tasks")
    assert "kill job" not in text and "set task count" not in text
    browser.open(f"{follower.url}/ui/jobs/alice/scratch")
    browser.shows("kill job")
    browser.click("#kill-job")
    browser.shows("click again to kill every task")
    browser.click("#kill-job")
    browser.shows("job killed")
    wait_for(lambda: cell.request("GET", "/v1/jobs/alice/scratch").status_code == 404, 15, "the job to go")
    # Counts add up: the rows' sum is the cell's line; the killed job's task is counted apart.
    browser.open(f"{follower.url}/ui")
    text = browser.shows("tasks of removed jobs\tDEAD 1", "jobs\t6")
    dead = sum(int(x) for x in browser.run(
        f"return {LISTING}.map(r => (r.cells[9].innerText.match(/\\d+/) || ['0'])[0]);"))
    assert f"DEAD {dead}" in text.split("tasks\t", 1)[1].split("\n", 1)[0], text

    # The machines page: searched, with bars; a machine's page with its usage chart.
    browser.open(f"{follower.url}/ui/machines")
    text = browser.shows("b0", "b1", "b2", "of 4000m", "machines 1-3 of 3")
    browser.open(f"{follower.url}/ui/machines?q=b1")
    browser.shows("machines 1-1 of 1 (3 in all)")
    browser.open(f"{follower.url}/ui/machines/b0")
    browser.shows("Machine b0", "cpu used: now", "Tasks running here")
    # Sampled every second here (a minute by default) since the master started: a line, not a dot.
    points = browser.run("return document.querySelector('svg polyline').getAttribute('points').split(' ').length;")
    assert points >= 3, points
    browser.screenshot(out / "sigma-machine.png", 900)
    # The events page: the cell's task events, newest first, filtered by kind.
    browser.open(f"{follower.url}/ui/events?kind=killed")
    browser.shows("alice/web/1#0", "task killed")
    kinds = {row.split("\t")[2] for row in browser.rows()}
    assert kinds == {"killed"}, kinds
    browser.screenshot(out / "sigma-events.png", 700)
    # Jobs submitted are there too, from the replica's change log, each linked to its job.
    browser.open(f"{follower.url}/ui/events?kind=submitted")
    rows = [row.split("\t") for row in browser.rows()]
    assert {r[1] for r in rows} >= {"job alice/web", "job bob/batch"} and {r[2] for r in rows} == {"submitted"}, rows
    browser.click('table.listing tbody a[href="/ui/jobs/bob/batch"]')
    browser.shows("Job bob/batch")
    browser.open(f"{follower.url}/ui/events")  # off the job's page: the next opens it anew, with a token

    # A rolling update that fails stops, and the job page says so, with the versions and which tasks are older.
    broken = {**batch, "command": [TASK_PYTHON, "-c", "raise SystemExit(3)"]}
    assert cell.request("PUT", "/v1/jobs/bob/batch", json=broken).status_code == 200
    browser.open(f"{follower.url}/ui/jobs/bob/batch#token={cell.admin_token}")
    # One task replaced, then stopped: the other still runs the older version.
    text = browser.shows("rollout\tstopped to version 1", "fails", "1 of 2 task(s) on version 1", "Versions (newest first)",
                         "older", timeout=45)  # fmt: skip
    assert "1\tcurrent" in text and "command" in text.split("Versions (newest first)", 1)[1], text
    browser.screenshot(out / "sigma-rollout.png", 900)


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
    # Sigma's events page says so too: the machine down, beside its tasks lost.
    browser.open(f"{cell.masters[0].url}/ui/events?q=b2#token={cell.admin_token}")
    text = browser.shows("machine b2\tdown", "lost")
    browser.screenshot(tmp_path / "sigma-events-machine.png", 700)
    assert all("b2" in row for row in browser.rows()), text
    browser.open(f"{cell.masters[0].url}/ui#token={cell.admin_token}")
    browser.shows("1 down")
    browser.click("a.bad")  # the cell's "1 down" leads to the machines down
    text = browser.shows("machines 1-1 of 1 (3 in all)")
    color = browser.run("return getComputedStyle(document.querySelector('tr.down td')).backgroundColor;")
    assert color == "rgb(253, 232, 232)", color  # the down machine's row is red
    assert "b2\tdown" in text
    assert httpx.get(f"{cell.masters[0].url}/ui/jobs/nobody/ghost", headers=cell.auth).status_code == 404
    # Without a token a page is its shell, with no data of the cell in it.
    shell = httpx.get(f"{cell.masters[0].url}/ui/jobs/alice/web")
    assert shell.status_code == 200 and "alice" not in shell.text and "Sign in to the cell" in shell.text
    time.sleep(0.1)
