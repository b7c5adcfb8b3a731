"""A cell started as a user starts one, `minborg cell up` with no flag (1 replica, 2 machines, on loopback; TLS is the default): the API, Sigma and the borglets answer HTTPS only, with certificates of the cell's CA; the command line finds that CA in the state dir without a flag; a job is submitted, listed, read, exec'd into, its logs and events fetched (master -> borglet over the channel's HTTPS); plain HTTP gets no HTTP answer; a client trusting another CA is refused in one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from reference import channel, launcher, pki
from reference.launcher import tls as cell_tls
from tests.integration.cellkit import REPO, hello_job, wait_for

pytestmark = pytest.mark.integration

MINBORG = Path(sys.executable).with_name("minborg")  # the fast path's entry point


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[launcher.CellInfo, str]]:
    """The cell `minborg cell up` starts without a flag, and what that command printed."""
    state_dir = tmp_path_factory.mktemp("tls") / "cell"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MINBORG_")}
    up = subprocess.run(
        [sys.executable, "-m", "reference.cli", "cell", "up", "--replicas", "1", "--machines", "2",
         "--state-dir", str(state_dir)],
        env={**clean, "NO_COLOR": "1", "COLUMNS": "200"}, cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield launcher.CellInfo.load(state_dir), up.stdout
    finally:
        launcher.down(state_dir)


@pytest.fixture(scope="module")
def cell(started: tuple[launcher.CellInfo, str]) -> launcher.CellInfo:
    return started[0]


def minborg(info: launcher.CellInfo, *args: str, full: bool = False, **env: str) -> subprocess.CompletedProcess[str]:
    """The command line on the cell's state dir, no CA named: the fast path, or the full one."""
    clean = {k: v for k, v in os.environ.items() if k not in ("MINBORG_MASTER", "MINBORG_CA", "MINBORG_CONTEXT")}
    command = [sys.executable, "-m", "reference.cli"] if full else [str(MINBORG)]
    return subprocess.run(
        [*command, *args], env={**clean, "MINBORG_STATE_DIR": info.state_dir, "NO_COLOR": "1", **env},
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def plain_http_answer(url: str) -> bytes:
    """What a plain HTTP request to `url`'s port gets back (b"" if the server just closes)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5.0) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return got


def test_cell_up_says_where_its_https_and_its_ca_are(started: tuple[launcher.CellInfo, str]) -> None:
    cell, printed = started
    lines = {key: value for key, _, value in (line.strip().partition(" ") for line in printed.splitlines())}
    assert cell.master_urls[0].startswith("https://") and lines["masters"].strip() == cell.master_urls[0]
    assert lines["sigma"].strip().startswith(f"{cell.master_urls[0]}/ui ")
    assert lines["tls"].strip().startswith(f"HTTPS only, certificates of the cell's CA {cell_tls.ca_file(cell.state_dir)} ")


def test_a_tls_cell_serves_https_with_the_cells_ca_and_nothing_in_clear(cell: launcher.CellInfo, tmp_path: Path) -> None:
    ca = cell_tls.ca_file(cell.state_dir)
    urls = [*cell.master_urls, *cell.borglet_urls.values()]
    assert urls and all(u.startswith("https://127.0.0.1:") for u in urls)

    # Plain HTTP to any of them: the TLS handshake fails, no HTTP answer comes back.
    for url in urls:
        assert not plain_http_answer(url).startswith(b"HTTP/"), url
    # The command line told to use plain http gets no answer either, on either path.
    plain = cell.master_urls[0].replace("https://", "http://")
    for full in (False, True):
        refused = minborg(cell, "job", "list", "--master", plain, full=full)
        assert refused.returncode != 0 and plain in refused.stderr, refused.stdout + refused.stderr

    # Every certificate chains to the cell's CA and names the address it is reached at.
    for name in ("master0", "machine0", "machine1"):
        cert = Path(cell.state_dir) / cell_tls.PKI_DIR / f"{name}{cell_tls.CERT_SUFFIX}.crt"
        assert pki.signed_by(cert, ca)

    # Both command lines read and write the cell with the state dir's CA, no flag.
    job = tmp_path / "hello.yaml"
    job.write_text(json.dumps(hello_job("hello", user="alice", count=2)))
    submitted = minborg(cell, "job", "submit", "--detach", str(job))
    assert submitted.returncode == 0, submitted.stderr
    wait_for(lambda: minborg(cell, "job", "list").stdout.count("RUNNING") == 1, 30, "alice/hello RUNNING")
    shown = minborg(cell, "job", "show", "alice/hello", "--json", full=True)
    assert shown.returncode == 0, shown.stderr
    assert "hello" in json.dumps(json.loads(shown.stdout))

    # A task's logs: the master fetches them from its borglet over the channel's HTTPS.
    def logs() -> str:
        answer = minborg(cell, "task", "logs", "alice/hello", "0")
        return answer.stdout if answer.returncode == 0 else ""

    wait_for(lambda: "serving" in logs(), 30, "task 0's log")

    # Exec into a task (master -> borglet over HTTPS), and the job's events, listed and followed.
    ran = minborg(cell, "task", "exec", "alice/hello", "0", "--", "echo", "over-tls")
    assert ran.returncode == 0 and "over-tls" in ran.stdout, ran.stdout + ran.stderr
    events = minborg(cell, "events", "--job", "alice/hello", "-o", "json")
    assert events.returncode == 0 and "alice/hello" in events.stdout, events.stdout + events.stderr
    followed = minborg(cell, "events", "--job", "alice/hello", "-f", "--for", "1", "-o", "json")
    assert followed.returncode == 0 and "alice/hello" in followed.stdout, followed.stdout + followed.stderr

    # Sigma's URL and the cell's status name the https replicas.
    assert minborg(cell, "ui").stdout.splitlines()[0] == f"{cell.master_urls[0]}/ui"
    status = minborg(cell, "cell", "status", full=True)
    assert status.returncode == 0, status.stderr
    assert f"{cell.master_urls[0]}/ui" in status.stdout and "leader" in status.stdout

    # Machines are up: the poller reads each borglet over HTTPS, verified with the CA.
    listed = minborg(cell, "machine", "list", "--json", full=True)
    assert listed.returncode == 0, listed.stderr
    assert sorted(m["state"] for m in json.loads(listed.stdout)) == ["up", "up"]

    # Sigma over HTTPS, trusting the cell's CA only.
    with httpx.Client(verify=cell_tls.client_verify(cell.state_dir), timeout=10.0) as http:
        page = http.get(f"{cell.master_urls[0]}/ui")
    assert page.status_code == 200 and "<html" in page.text.lower()


def test_a_client_trusting_another_ca_is_refused_in_one_line(cell: launcher.CellInfo, tmp_path: Path) -> None:
    stranger = str(pki.create_ca(tmp_path / "stranger", "stranger").cert)
    for full in (False, True):
        answer = minborg(cell, "job", "list", full=full, MINBORG_CA=stranger)
        assert answer.returncode != 0
        lines = answer.stderr.strip().splitlines()
        assert len(lines) == 1, answer.stderr
        assert "not trusted" in lines[0] and "$MINBORG_CA=FILE" in lines[0] and cell.master_urls[0] in lines[0]
    with pytest.raises(httpx.ConnectError), httpx.Client(verify=channel.ca_context(stranger), timeout=5.0) as http:
        http.get(f"{cell.master_urls[0]}/healthz")


def test_a_stopped_tls_cell_resumes_on_its_certificates(cell: launcher.CellInfo) -> None:
    before = {p.name: p.read_bytes() for p in (Path(cell.state_dir) / cell_tls.PKI_DIR).glob("*-https.crt")}
    launcher.down(cell.state_dir)
    resumed = launcher.up(cell.state_dir)  # a stopped cell: resumed on its data, TLS and all
    assert resumed.master_urls == cell.master_urls and resumed.borglet_urls == cell.borglet_urls
    after = {p.name: p.read_bytes() for p in (Path(cell.state_dir) / cell_tls.PKI_DIR).glob("*-https.crt")}
    assert after == before and set(before) == {"master0-https.crt", "machine0-https.crt", "machine1-https.crt"}
    assert not plain_http_answer(resumed.master_urls[0]).startswith(b"HTTP/")
    listed = minborg(resumed, "machine", "list", "--json", full=True)
    assert listed.returncode == 0, listed.stderr
    wait_for(lambda: [m["state"] for m in json.loads(minborg(resumed, "machine", "list", "--json", full=True).stdout)]
             == ["up", "up"], 30, "both machines up again")  # fmt: skip


def test_a_machine_added_to_a_tls_cell_serves_https_only_too(cell: launcher.CellInfo) -> None:
    from reference.client import CellClient
    from reference.elastic.provider import LocalProvider

    with CellClient.discover(state_dir=cell.state_dir) as client:  # the state dir's CA, as the cell autoscaler's
        added = LocalProvider(cell.state_dir, client).add()  # as `--autoscale-machines` adds one
    assert added.address.startswith("https://127.0.0.1:")
    assert not plain_http_answer(added.address).startswith(b"HTTP/")
    cert = Path(cell.state_dir) / cell_tls.PKI_DIR / f"{added.name}{cell_tls.CERT_SUFFIX}.crt"
    assert pki.signed_by(cert, cell_tls.ca_file(cell.state_dir))

    def state() -> str | None:
        listed = minborg(cell, "machine", "list", "--json", full=True)
        return next((m["state"] for m in json.loads(listed.stdout) if m["name"] == added.name), None)

    wait_for(lambda: state() == "up", 30, f"{added.name} polled over HTTPS")
