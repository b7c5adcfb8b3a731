"""The link shard's bare HTTP/1.1 client (reference/master/http11.py), against servers that send
exactly the bytes each test names: the answers a borglet's server gives (Content-Length,
chunked, 304, a close), and the ones a hostile or broken machine could send instead, each of
which must be an error the shard counts as no answer, never a hang or a crash of its round."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from reference import channel, fastjson
from reference.master.borgletreads import KeptAlive, Refused
from reference.master.http11 import MAX_HEADERS, BadAnswer, Connection


@contextlib.contextmanager
def raw_server(answers: Callable[[bytes, int], bytes | tuple[bytes, bool] | None]) -> Iterator[tuple[int, list[bytes]]]:
    """A loopback server that reads each request (head and body, by Content-Length) on a kept
    connection and writes `answers(request, n)`, n counting requests over all connections;
    (bytes, True) closes the connection after them, None closes it without answering.
    Yields (port, the requests read)."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        buf = b""
        with conn:
            while not stop.is_set():
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buf) < length:
                    buf += conn.recv(65536)
                request, buf = head + b"\r\n\r\n" + buf[:length], buf[length:]
                seen.append(request)
                out = answers(request, len(seen))
                if out is None:
                    return
                data, close = out if isinstance(out, tuple) else (out, False)
                conn.sendall(data)
                if close:
                    return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1], seen
    finally:
        stop.set()
        listener.close()


def ok(body: bytes, *extra: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in extra)
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + head.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body


def test_a_kept_connection_carries_many_requests_with_their_headers_and_bodies() -> None:
    with raw_server(lambda req, n: ok(b'{"n": %d}' % n)) as (port, seen):
        conn = Connection("127.0.0.1", port, 2.0)
        first = conn.request("GET", "/m/a/v1/state", {"X-Minborg-Machine": "a"})
        second = conn.request("POST", "/m/a/v1/sync", {"Content-Type": "application/json"}, b'{"x":1}')
        conn.close()
    assert (first.status, fastjson.loads(first.body), first.will_close) == (200, {"n": 1}, False)
    assert fastjson.loads(second.body) == {"n": 2}
    assert seen[0].startswith(b"GET /m/a/v1/state HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % port)
    assert b"\r\nX-Minborg-Machine: a\r\n" in seen[0] and b"Content-Length" not in seen[0]
    assert seen[1].endswith(b'Content-Length: 7\r\n\r\n{"x":1}')


def test_chunked_bodies_trailers_and_answers_without_a_body() -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\n{\"a\"\r\n3\r\n: 1\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n"
    plays = [chunked, b"HTTP/1.1 304 Not Modified\r\nETag: \"7\"\r\n\r\n", b"HTTP/1.1 204 No Content\r\n\r\n", ok(b"{}")]
    with raw_server(lambda req, n: plays[n - 1]) as (port, _):
        conn = Connection("127.0.0.1", port, 2.0)
        answers = [conn.request("GET", "/") for _ in plays]
    assert answers[0].body == b'{"a": 1}'
    assert (answers[1].status, answers[1].body, answers[1].headers["etag"]) == (304, b"", '"7"')
    assert (answers[2].status, answers[2].body) == (204, b"")
    assert answers[3].body == b"{}"  # the same connection, still in step after all three


def test_a_close_or_an_http_1_0_answer_ends_the_connection() -> None:
    plays = {1: ok(b"1", "Connection: close"), 2: b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n2"}
    with raw_server(lambda req, n: plays[n]) as (port, _):
        conn = Connection("127.0.0.1", port, 2.0)
        a = conn.request("GET", "/")
        assert a.will_close and conn._sock is None
        b = conn.request("GET", "/")  # opened afresh
        assert (a.body, b.body, b.will_close) == (b"1", b"2", True)
    # A body without a length runs to the close.
    with raw_server(lambda req, n: (b"HTTP/1.1 200 OK\r\n\r\nto the end", True)) as (port, _):
        c = Connection("127.0.0.1", port, 2.0).request("GET", "/")
        assert (c.body, c.will_close) == (b"to the end", True)
    # One that never closes is a slow server: a timeout, not a hang.
    with raw_server(lambda req, n: b"HTTP/1.1 200 OK\r\n\r\nand on") as (port, _):
        with pytest.raises(TimeoutError):
            Connection("127.0.0.1", port, 0.3).request("GET", "/")


@pytest.mark.parametrize(
    "reply, match",
    [
        (b"SSH-2.0-OpenSSH\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "without a colon"),
        (b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * (MAX_HEADERS + 1) + b"\r\n", "more than 100 headers"),
        (b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n", "too long"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", "not a number"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "before the body's end"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + b"T: x\r\n" * (MAX_HEADERS + 2), "trailers"),
        (b"HTTP/1.1 200 OK\r\nContent-Le", "within the headers"),
    ],
)
def test_a_broken_answer_is_an_error_and_the_connection_is_dropped(reply: bytes, match: str) -> None:
    with raw_server(lambda req, n: (reply, True)) as (port, _):  # its bytes, then the close
        conn = Connection("127.0.0.1", port, 2.0)
        with pytest.raises(BadAnswer, match=match):
            conn.request("GET", "/")
        assert conn._sock is None


def test_a_header_value_with_a_line_break_is_not_sent() -> None:
    with raw_server(lambda req, n: ok(b"{}")) as (port, seen):
        with pytest.raises(ValueError, match="line break"):
            Connection("127.0.0.1", port, 2.0).request("GET", "/", {"X-Evil": "a\r\nX-Injected: 1"})
    assert not seen


def test_kept_alive_reads_tags_refusals_and_a_closed_connection() -> None:
    """KeptAlive over http11: an ETag sent back and a 304 answered by the object read before, a
    401 a Refused with its reason, a kept connection the server closed tried once afresh, a
    non-object no answer."""
    doc = {"tasks": [], "usage": {"cpu": 1}}

    def answers(req: bytes, n: int) -> bytes | None:
        if n == 1:
            return ok(fastjson.dumps(doc), 'ETag: "e1"')
        if n == 2:
            assert b'If-None-Match: "e1"' in req
            return b'HTTP/1.1 304 Not Modified\r\nETag: "e1"\r\n\r\n'
        if n == 3:
            return None  # the server drops the kept connection: the read is made again, fresh
        if n == 4:
            return b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 27\r\n\r\n" + b'{"detail": "wrong cell key"}'[:27]
        if n == 5:
            return ok(b"[1, 2]", f"{channel.SKEW_HEADER}: 61.5")
        return ok(b"{}", f"{channel.SKEW_HEADER}: 61.5")

    with raw_server(answers) as (port, seen):
        reads = KeptAlive(timeout=2.0)
        url = f"http://127.0.0.1:{port}/m/a/v1/state"
        first = reads.get_json(url)
        assert first == doc
        assert reads.get_json(url) is first and reads.not_modified == 1
        refused = reads.get_json(url)  # n=3 dropped, n=4 on a fresh connection
        assert isinstance(refused, Refused) and refused.status == 401
        assert reads.get_json(url) is None  # a list, not an object
        assert reads.get_json(url) == {"channel_skew_s": 61.5}
        assert reads.connects == 2 and len(seen) == 6


def test_a_peer_that_never_finishes_its_handshake_is_given_up_at_the_connect_timeout() -> None:
    """A listener that accepts and says nothing (a hung peer): the TLS handshake is bounded by
    the connect timeout, not by the far longer time an answer may take."""
    import ssl
    import time

    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    accepter = threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True)
    accepter.start()
    try:
        conn = Connection("127.0.0.1", listener.getsockname()[1], 30.0, ssl.create_default_context(), connect_timeout=0.3)
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            conn.request("GET", "/")
        assert time.monotonic() - began < 3.0
    finally:
        for s in held:
            s.close()
        listener.close()


def test_an_answer_may_take_longer_than_the_connect_timeout() -> None:
    import time

    def slow(request: bytes, n: int) -> bytes:
        time.sleep(0.5)
        return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    with raw_server(slow) as (port, _):
        answer = Connection("127.0.0.1", port, 5.0, connect_timeout=0.1).request("GET", "/")
    assert (answer.status, answer.body) == (200, b"ok")


def test_kept_alive_close_closes_its_idle_connections() -> None:
    with raw_server(lambda request, n: b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}") as (port, _):
        reads = KeptAlive(5.0)
        assert reads.exchange("GET", f"http://127.0.0.1:{port}/a").status == 200
        (idle,) = [c for conns in reads._idle.values() for c in conns]
        reads.close()
        assert idle._sock is None and reads._idle == {}
