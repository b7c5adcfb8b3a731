"""A cell started with `cell up --tls` (1 replica, 2 machines, on loopback): the API, Sigma and the borglets answer HTTPS only, with certificates of the cell's CA; the command line finds that CA in the state dir without a flag; a job is submitted, read and its logs fetched (master -> borglet over the channel's HTTPS); plain HTTP gets no HTTP answer; a client trusting another CA is refused in one line."""

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
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[launcher.CellInfo]:
    state_dir = tmp_path_factory.mktemp("tls") / "cell"
    info = launcher.up(state_dir, replicas=1, machines=2, tls=True)
    try:
        yield info
    finally:
        launcher.down(state_dir)


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


def test_a_tls_cell_serves_https_with_the_cells_ca_and_nothing_in_clear(cell: launcher.CellInfo, tmp_path: Path) -> None:
    ca = cell_tls.ca_file(cell.state_dir)
    urls = [*cell.master_urls, *cell.borglet_urls.values()]
    assert urls and all(u.startswith("https://127.0.0.1:") for u in urls)

    # Plain HTTP to any of them: the TLS handshake fails, no HTTP answer comes back.
    for url in urls:
        assert not plain_http_answer(url).startswith(b"HTTP/"), url

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
