"""A command line pointed at a TLS cell's master by a plain URL (`--master 127.0.0.1:PORT`, a bare
address meaning http, or `http://...`, by flag, $MINBORG_MASTER or a context) must not send
the state dir's admin token in clear. It did: the token went to the port in a plain request,
retried for the client's whole retry time, to whatever listened there (a process of another
user that took the port while the cell was down, or a listener on the path). A plain URL of an
address the local cell file lists as https is now refused before any connection, naming the
https URL to give."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from reference import cellfile
from reference.cli.http import PlainCell, cell_urls
from reference.client import ClientError

TOKEN = "mbt_not-to-be-sent-in-clear"


def tls_state_dir(tmp_path: Path, port: int) -> Path:
    """A local TLS cell's state dir, as `cell up` leaves it: https masters, an admin token."""
    root = tmp_path / ".minborg"
    root.mkdir()
    (root / cellfile.CELL_FILE).write_text(json.dumps({"master_urls": [f"https://127.0.0.1:{port}"]}))
    (root / cellfile.ADMIN_TOKEN_FILE).write_text(TOKEN + "\n")
    return root


class Listener:
    """A plain TCP port that records the first bytes of each connection and closes it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.accepted = threading.Event()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2.0)
                try:
                    self.received.append(conn.recv(65536))
                except OSError:
                    pass
            self.accepted.set()

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize(
    "given, https",
    [
        ("127.0.0.1:8443", "https://127.0.0.1:8443"),
        ("http://127.0.0.1:8443", "https://127.0.0.1:8443"),
        ("http://localhost:8443/", "https://localhost:8443"),
    ],
)
def test_a_plain_url_of_a_tls_masters_address_is_refused_naming_the_https_one(
    tmp_path: Path, given: str, https: str
) -> None:
    root = tls_state_dir(tmp_path, 8443)
    with pytest.raises(ClientError, match=f"--master http://.*serves https only.*give {https}$"):
        cellfile.master_urls(given, root)
    assert cellfile.master_urls(https, root) == [https]


def test_the_same_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tls_state_dir(tmp_path, 8443)
    monkeypatch.setenv(cellfile.MASTER_ENV, "127.0.0.1:8443")
    with pytest.raises(ClientError, match=r"\$MINBORG_MASTER http://127.0.0.1:8443: .*give https://127.0.0.1:8443"):
        cellfile.master_urls(None, root)


def test_another_address_keeps_the_scheme_it_was_given(tmp_path: Path) -> None:
    root = tls_state_dir(tmp_path, 8443)
    assert cellfile.master_urls("127.0.0.1:9000, http://127.0.0.2:8443", root) == [
        "http://127.0.0.1:9000", "http://127.0.0.2:8443",
    ]
    # With no local cell file, a bare address means http, as before.
    assert cellfile.master_urls("127.0.0.1:8443", tmp_path / "none") == ["http://127.0.0.1:8443"]


@pytest.mark.parametrize("scheme", ["", "http://"])
def test_the_admin_token_never_crosses_in_clear_to_a_tls_cells_port(tmp_path: Path, scheme: str) -> None:
    listener = Listener()
    try:
        root = tls_state_dir(tmp_path, listener.port)
        with pytest.raises(ClientError, match="serves https only"):
            urls = cell_urls(f"{scheme}127.0.0.1:{listener.port}", str(root))
            PlainCell(urls, cellfile.find_token(None, root), retry_s=0.0, timeout=2.0, state_dir=str(root)).request(
                "GET", "/v1/jobs"
            )
        # A connection the client made would have been accepted by now; none was.
        assert not listener.accepted.wait(0.5)
    finally:
        listener.close()
    assert TOKEN.encode() not in b"".join(listener.received)
