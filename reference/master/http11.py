"""One kept-alive HTTP/1.1 connection, read and written with bytes operations only: what a link shard's polls and relayed syncs go over.

A shard of 5,000 machines polled every 2 s makes 2,500 requests a second; with the standard
library's `http.client` a third of a replica's CPU went into the client itself, most of it
parsing each answer's headers through the `email` package. This client does what those
requests need and no more: a request with its headers and body, an answer's status line,
headers (at most `MAX_HEADERS` lines of at most `MAX_LINE` bytes each, as `http.client`
allows), and a body by Content-Length, chunked, or up to the close; a 1xx, 204 or 304 has none.
Anything else malformed raises `BadAnswer` (an `OSError`), and the connection is dropped.
"""

from __future__ import annotations

import socket
import ssl
from typing import NamedTuple

MAX_LINE = 65536
MAX_HEADERS = 100


class BadAnswer(OSError):
    """The server's bytes are not an HTTP/1.x answer (or the connection closed mid-answer)."""


class Answer(NamedTuple):
    status: int
    headers: dict[str, str]  # names lower-cased; a repeated header keeps its last value
    body: bytes
    will_close: bool  # the server closes the connection after this answer


class Connection:
    """A connection to one host, opened on first use (over TLS with `context`); a request
    after the server closed it raises (an `OSError`), and the caller opens a fresh one."""

    def __init__(
        self, host: str, port: int, timeout: float, context: ssl.SSLContext | None = None, connect_timeout: float | None = None
    ) -> None:
        self.host, self.port, self.timeout, self.context = host, port, timeout, context
        # Connecting (and the TLS handshake) may be bounded tighter than an answer: a peer
        # that is not there is known in a second, a busy one may take its time to answer.
        self.connect_timeout = timeout if connect_timeout is None else min(connect_timeout, timeout)
        self._sock: socket.socket | None = None
        self._rfile = None
        self._host_header = f"Host: {host}:{port}\r\n".encode("latin-1")

    def close(self) -> None:
        if self._rfile is not None:
            self._rfile.close()
        if self._sock is not None:
            self._sock.close()
        self._sock = self._rfile = None

    def _open(self) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.context is not None:
                sock = self.context.wrap_socket(sock, server_hostname=self.host)
            sock.settimeout(self.timeout)
        except BaseException:
            sock.close()
            raise
        self._sock, self._rfile = sock, sock.makefile("rb")

    def request(self, method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b"") -> Answer:
        """Send one request and read its answer whole. Raises OSError (TimeoutError for a slow
        server, BadAnswer for a broken answer) and leaves the connection closed."""
        try:
            if self._sock is None:
                self._open()
            head = [f"{method} {target} HTTP/1.1\r\n".encode("latin-1"), self._host_header]
            for name, value in (headers or {}).items():
                if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
                    raise ValueError(f"header {name!r} holds a line break")
                head.append(f"{name}: {value}\r\n".encode("latin-1"))
            if body or method not in ("GET", "HEAD"):
                head.append(b"Content-Length: %d\r\n" % len(body))
            head += (b"\r\n", body)
            assert self._sock is not None
            self._sock.sendall(b"".join(head))
            answer = self._read(method)
        except BaseException:
            self.close()
            raise
        if answer.will_close:
            self.close()
        return answer

    def _line(self) -> bytes:
        assert self._rfile is not None
        line = self._rfile.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise BadAnswer("a line of the answer is too long")
        return line

    def _read(self, method: str) -> Answer:
        status_line = self._line()
        if not status_line:
            raise BadAnswer("the connection closed before an answer")
        version, _, rest = status_line.partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise BadAnswer(f"not an HTTP/1.x status line: {status_line[:80]!r}")
        status = int(code)
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            line = self._line()
            if line in (b"\r\n", b"\n"):
                break
            if not line.endswith(b"\n"):
                raise BadAnswer("the connection closed within the headers")
            name, sep, value = line.partition(b":")
            if not sep:
                raise BadAnswer(f"a header line without a colon: {line[:80]!r}")
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        else:
            raise BadAnswer(f"more than {MAX_HEADERS} headers")
        connection = headers.get("connection", "").lower()
        will_close = connection == "close" or (version == b"HTTP/1.0" and connection != "keep-alive")
        if status < 200 or status in (204, 304) or method == "HEAD":
            return Answer(status, headers, b"", will_close)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return Answer(status, headers, self._chunked(), will_close)
        length = headers.get("content-length")
        if length is None:
            assert self._rfile is not None
            return Answer(status, headers, self._rfile.read(), True)  # to the close
        if not length.isdigit():
            raise BadAnswer(f"Content-Length is not a number: {length[:40]!r}")
        return Answer(status, headers, self._exactly(int(length)), will_close)

    def _exactly(self, n: int) -> bytes:
        assert self._rfile is not None
        data = self._rfile.read(n)
        if len(data) != n:
            raise BadAnswer(f"the connection closed {n - len(data)} bytes before the body's end")
        return data

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size_line = self._line().split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise BadAnswer(f"a chunk size that is not a number: {size_line[:40]!r}") from None
            if size < 0:
                raise BadAnswer("a negative chunk size")
            if size == 0:
                for _ in range(MAX_HEADERS + 1):  # trailers, then the end
                    if self._line() in (b"\r\n", b"\n", b""):
                        return b"".join(parts)
                raise BadAnswer(f"more than {MAX_HEADERS} trailers")
            parts.append(self._exactly(size))
            self._exactly(2)  # the chunk's CRLF
