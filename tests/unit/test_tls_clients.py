"""Clients of a TLS cell: both command lines' clients find the cell's CA without a flag and refuse, in one line that says what to do, a server whose certificate that CA did not sign; a master's poller verifies an https borglet with the CA it was given."""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from reference import channel, pki
from reference.cellfile import NO_ANSWER, ClientError
from reference.cli import http as plain_http
from reference.client import CellClient
from reference.launcher import tls as cell_tls
from reference.master.linkshard import KeptAlive


class Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # kept alive, as uvicorn keeps them

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b'{"ok": true, "path": "%s"}' % self.path.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def https_server(tls: channel.ServerTLS) -> Iterator[str]:
    """Answer JSON over TLS with `tls` on 127.0.0.1 and a free port; yield its https URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state dir with a CA, as `cell up` leaves one; no CA named in the environment."""
    monkeypatch.delenv(plain_http.CA_ENV, raising=False)
    pki.create_ca(tmp_path / cell_tls.PKI_DIR, "t")
    return tmp_path


@pytest.fixture
def stranger(tmp_path: Path) -> str:
    """Another cell's CA."""
    return str(pki.create_ca(tmp_path / "stranger", "stranger").cert)


def test_the_ca_comes_from_minborg_ca_else_the_state_dir(cell: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert plain_http.ca_file(cell) == str(cell_tls.ca_file(cell))
    assert plain_http.ca_file(tmp_path / "no-cell") is None  # the system's CAs
    monkeypatch.setenv("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")  # set for every program on many hosts
    assert plain_http.ca_file(cell) == str(cell_tls.ca_file(cell))
    monkeypatch.setenv(plain_http.CA_ENV, "/etc/context-ca.pem")  # a context's `ca`
    assert plain_http.ca_file(cell) == "/etc/context-ca.pem"


def test_the_fast_path_reads_an_https_cell_with_the_state_dirs_ca(cell: Path) -> None:
    with https_server(cell_tls.server_certificate(cell, "master0", ["127.0.0.1"])) as url:
        answer = plain_http.PlainCell([url], None, retry_s=0.0, state_dir=cell).request("GET", "/v1/cell")
    assert answer == {"ok": True, "path": "/v1/cell"}


def test_the_fast_path_refuses_another_cas_server_in_one_line(cell: Path, stranger: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(plain_http.CA_ENV, stranger)
    slept: list[float] = []
    with https_server(cell_tls.server_certificate(cell, "master0", ["127.0.0.1"])) as url:
        with pytest.raises(ClientError) as caught:
            plain_http.PlainCell([url], None, retry_s=5.0, sleep=slept.append, state_dir=cell).request("GET", "/v1/cell")
    message = str(caught.value)
    assert caught.value.status == NO_ANSWER and "\n" not in message
    assert url in message and stranger in message and "$MINBORG_CA=FILE" in message and "--ca FILE" in message
    assert slept == []  # not retried: every replica would fail it alike


def test_the_full_client_reads_with_the_cas_and_refuses_another_in_one_line(cell: Path, stranger: str) -> None:
    with https_server(cell_tls.server_certificate(cell, "master0", ["127.0.0.1"])) as url:
        with CellClient([url], ca=str(cell_tls.ca_file(cell)), retry_s=0.0) as client:
            assert client.request("GET", "/v1/jobs")["path"] == "/v1/jobs"
        slept: list[float] = []
        with CellClient([url], ca=stranger, retry_s=5.0, sleep=slept.append) as client, pytest.raises(ClientError) as caught:
            client.cell()
        with CellClient.discover(url, state_dir=cell, retry_s=0.0) as found:  # the state dir's CA, no flag
            assert found.cell()["ok"] is True
    message = str(caught.value)
    assert "\n" not in message and stranger in message and "$MINBORG_CA=FILE" in message
    assert slept == []


def test_a_certificate_for_another_address_is_refused(cell: Path) -> None:
    made = pki.issue(cell / cell_tls.PKI_DIR, "elsewhere", hosts=["10.9.9.9"], server=True)
    with https_server(channel.ServerTLS(str(made.cert), str(made.key))) as url:
        with pytest.raises(ClientError, match="IP address mismatch"):
            plain_http.PlainCell([url], None, retry_s=0.0, state_dir=cell).request("GET", "/v1/cell")


def test_the_pollers_kept_alive_reads_verify_an_https_borglet_with_the_cells_ca(cell: Path, stranger: str) -> None:
    with https_server(cell_tls.server_certificate(cell, "machine0", ["127.0.0.1"])) as url:
        try:
            channel.trust_ca(cell_tls.ca_file(cell))
            reads = KeptAlive(2.0)
            assert reads.get_json(f"{url}/v1/state") == {"ok": True, "path": "/v1/state"}
            assert reads.get_json(f"{url}/v1/state") == {"ok": True, "path": "/v1/state"}
            assert reads.connects == 1  # the TLS connection is kept alive between polls
            channel.trust_ca(stranger)
            assert KeptAlive(2.0).get_json(f"{url}/v1/state") is None  # another cell's borglet: no answer
        finally:
            channel.trust_ca(None)


def test_the_fast_path_reads_https_without_importing_ssl_py(cell: Path) -> None:
    """Its TLS is the C module's alone (LeanTLS): `ssl`, `socket` and `base64` cost each
    command more than the C module itself."""
    probe = (
        "import sys; from reference.cli import http; "
        f"answer = http.PlainCell([sys.argv[1]], None, retry_s=0.0, state_dir={str(cell)!r}).request('GET', '/v1/x'); "
        "print(answer['path'], sorted(m for m in ('ssl', 'socket', 'base64') if m in sys.modules))"
    )
    with https_server(cell_tls.server_certificate(cell, "master0", ["127.0.0.1"])) as url:
        done = subprocess.run([sys.executable, "-c", probe, url], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["/v1/x", "[]"], done.stdout
