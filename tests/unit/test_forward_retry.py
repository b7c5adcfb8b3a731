"""A follower's forward is sent once more only when the leader closed a reused kept-alive connection before any answer; against a real socket server."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from reference.master.forward import retry_safe, send_once_more_if_unread

REQ = httpx.Request("DELETE", "http://x/")


@pytest.mark.parametrize(
    ("err", "connected", "answered", "safe"),
    [
        # The kept-alive connection closed under the request, nothing came back: never read.
        (httpx.RemoteProtocolError("Server disconnected without sending a response", request=REQ), False, False, True),
        # A connection of its own closed with no answer: the leader may have read and died mid-write.
        (httpx.RemoteProtocolError("Server disconnected without sending a response", request=REQ), True, False, False),
        # Part of an answer came: the request was read.
        (httpx.RemoteProtocolError("peer closed connection", request=REQ), False, True, False),
        # A timeout may follow a write the leader made.
        (httpx.ReadTimeout("timed out", request=REQ), False, False, False),
        (httpx.ConnectError("refused", request=REQ), True, False, False),
    ],
)
def test_retry_safe(err: Exception, connected: bool, answered: bool, safe: bool) -> None:
    assert retry_safe(err, connected, answered) is safe


class _Leader:
    """A tiny HTTP/1.1 server. Its first connection answers one request kept alive, then closes
    on the next without answering (an idle close racing a new request); later connections
    answer every request. `served` lists the requests answered, `dropped` the ones closed on."""

    def __init__(self, drop_fresh: bool = False) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.served: list[str] = []
        self.dropped: list[str] = []
        self.connections = 0
        self.drop_fresh = drop_fresh
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn, self.connections), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        with conn:
            f = conn.makefile("rb")
            served_here = 0
            while True:
                line = f.readline()
                if not line:
                    return
                while f.readline() not in (b"\r\n", b""):
                    pass
                request = line.decode().split()[0]
                if (number == 1 and served_here == 1) or (self.drop_fresh and number > 1):
                    self.dropped.append(request)
                    return  # closed with no byte of an answer
                served_here += 1
                self.served.append(request)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def leader() -> Iterator[_Leader]:
    server = _Leader()
    yield server
    server.close()


def test_a_delete_on_a_closed_kept_alive_connection_is_sent_once_more_fresh(leader: _Leader) -> None:
    url = f"http://127.0.0.1:{leader.port}/v1/jobs/a"
    with httpx.Client() as http:
        assert send_once_more_if_unread(http, "GET", url, None, {}).status_code == 200
        answer = send_once_more_if_unread(http, "DELETE", url, None, {})
    assert answer.status_code == 200
    assert leader.dropped == ["DELETE"]  # closed on the kept-alive connection, never answered
    assert leader.served == ["GET", "DELETE"]  # then answered once, on a connection of its own
    assert leader.connections == 2


def test_a_fresh_connection_closed_without_an_answer_is_not_sent_again() -> None:
    server = _Leader(drop_fresh=True)
    try:
        url = f"http://127.0.0.1:{server.port}/v1/jobs/a"
        with httpx.Client() as http:
            assert send_once_more_if_unread(http, "GET", url, None, {}).status_code == 200
            with pytest.raises(httpx.RemoteProtocolError):
                send_once_more_if_unread(http, "DELETE", url, None, {})  # kept-alive: once more, fresh...
        # ...and the fresh one closed too: no third try.
        assert server.dropped == ["DELETE", "DELETE"] and server.connections == 2
    finally:
        server.close()
