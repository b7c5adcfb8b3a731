"""The master's API over HTTP/1.1 (plain, or HTTPS with the cell's CA) with the standard library alone: the requests, streams and server-sent events of the `minborg` fast path (cli_fast.py).

A few lines of socket code instead of urllib or http.client, whose imports cost more than the
request. `PlainCell` answers as the full client (reference/client.py) does for what the fast
path asks: replicas tried in turn, a 503 (no leader yet) retried for a while, a write that
may have been applied never sent twice, and the same ClientError for a refusal.

An https URL is verified with the cell's CA (`ca_file`: $MINBORG_CA, which a context's `ca`
sets, else the local cell's `<state dir>/pki/ca.crt`, else the system's CAs); a certificate that
CA did not sign, or not for the address called, fails at once with one line saying what to do
(`untrusted`).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator

from reference.cellfile import (
    MASTER_ENV,
    NO_ANSWER,
    ClientError,
    check_trusted,
    format_detail,
    master_urls,
    read_cell_file,
    state_dir_path,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is imported by type checkers only: it costs the fast path's start
    from typing import Any

RETRY_S = 12.0  # as the full client: 503s (no leader yet) are retried this long
# How long a write's answer is waited for: a follower waits up to forward.FORWARD_TIMEOUT_S (10 s)
# for the leader's answer and forward.CATCH_UP_S (2 s) for its own cache before it answers, and
# a write of 10,000 tasks on a busy cell takes several seconds. A client that gave up sooner
# would say "may or may not have been made" of a write the cell was still answering in time.
WRITE_TIMEOUT_S = 15.0
# The CA a client of the cell trusts; a context's `ca` sets it. Not $SSL_CERT_FILE: many hosts
# set that to the system's bundle for every program, which would hide the cell's own CA.
CA_ENV = "MINBORG_CA"
CELL_CA = ("pki", "ca.crt")  # a local cell's CA, in its state dir (reference/pki.py)


def ca_file(state_dir: Any = None) -> str | None:
    """The CA a client of the cell trusts for https: $MINBORG_CA, else the local cell's own in
    its state dir (--state-dir, $MINBORG_STATE_DIR, ./.minborg) when it has one, else None (the
    system's CAs, $SSL_CERT_FILE among them)."""
    import os

    if os.environ.get(CA_ENV):
        return os.environ[CA_ENV]
    check_trusted(state_dir_path(state_dir))
    path = state_dir_path(state_dir).joinpath(*CELL_CA)
    return str(path) if path.is_file() else None


def tls_context(ca: str | None) -> Any:
    """An ssl.SSLContext trusting `ca` alone (None: the system's CAs), checking the server's
    name. `ssl` is imported here: the fast path's plain http never pays for it."""
    import ssl

    try:
        return ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as err:
        raise unreadable_ca(ca, err) from None


def unreadable_ca(ca: str | None, err: Exception) -> ClientError:
    """The one line for a CA file that cannot be read (either TLS client of the command line)."""
    return ClientError(NO_ANSWER, f"cannot read the CA {ca}: {err}; give the cell's CA with "
                       f"${CA_ENV}=FILE or `minborg config set-context NAME --ca FILE`")  # fmt: skip


class LeanTLS:
    """The fast path's TLS client on the C module `_ssl` alone: `ssl.py`, with the `socket`,
    `enum` work and `base64` it brings, costs more than the C module itself (7 of 10 ms per
    command on this project's hosts). The checks are ssl.create_default_context's: the
    certificate chain to `ca` (None: the system's CAs) and the server's name or address, made
    by OpenSSL during the handshake (PROTOCOL_TLS_CLIENT: CERT_REQUIRED and check_hostname)."""

    def __init__(self, ca: str | None) -> None:
        import _ssl
        import sys

        self.errors = _ssl
        context = _ssl._SSLContext(_ssl.PROTOCOL_TLS_CLIENT)
        if not (context.check_hostname and context.verify_mode == _ssl.CERT_REQUIRED):
            raise RuntimeError("_ssl's client context does not verify: use tls_context")  # never on CPython 3.7+
        if sys.version_info >= (3, 13):  # what create_default_context adds there
            context.verify_flags |= _ssl.VERIFY_X509_PARTIAL_CHAIN | _ssl.VERIFY_X509_STRICT
        try:
            if ca:
                context.load_verify_locations(ca)
            else:
                context.set_default_verify_paths()
        except (OSError, _ssl.SSLError) as err:
            raise unreadable_ca(ca, err) from None
        self.context = context

    def wrap(self, sock: Any, host: str) -> LeanSocket:
        """`sock` (connected by `connect(..., weak=True)`, with its timeout) after a verified
        handshake. _ssl holds its socket by a weak reference, which a bare _socket.socket lacks."""
        tls = self.context._wrap_socket(sock, False, host)
        tls.do_handshake()
        return LeanSocket(sock, tls, self.errors)


class LeanSocket:
    """The part of a socket that Response and open_request use, over an _ssl connection."""

    def __init__(self, sock: Any, tls: Any, errors: Any) -> None:
        self.sock, self.tls, self.errors = sock, tls, errors

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self.tls.write(view) :]

    def recv(self, size: int) -> bytes:
        try:
            return self.tls.read(size)
        except (self.errors.SSLZeroReturnError, self.errors.SSLEOFError):
            return b""  # the server closed (with or without close_notify), as ssl.py's suppress_ragged_eofs

    def close(self) -> None:
        self.sock.close()


def untrusted(url: str, ca: str | None, why: str) -> ClientError:
    """The one line for a replica whose certificate the client's CA does not vouch for."""
    trusted = f"the CA in {ca}" if ca else "the system's CAs"
    return ClientError(
        NO_ANSWER,
        f"{url}: its TLS certificate is not trusted by {trusted} ({why}): give the cell's CA with "
        f"${CA_ENV}=FILE or `minborg config set-context NAME --ca FILE` (a local cell's is "
        "<state dir>/pki/ca.crt, used by default)",
        url,
    )


# One server-sent event of a watch: its type (str), the revision it reflects (int), its JSON
# data (dict). A named tuple: importing dataclasses (and inspect) costs the fast path as much
# as all the rest, and typing.NamedTuple compiles its annotations.
Message = namedtuple("Message", ["event", "revision", "data"])


def parse_sse(chunks: Iterable[bytes]) -> Iterator[Message]:
    """Server-sent events from the raw chunks of a stream, as each completes."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        # Every complete block at once: splitting the rest off block by block copies the rest
        # of a replay (one chunk of thousands of events) once per event.
        *blocks, buffer = buffer.split(b"\n\n")
        for block in blocks:
            fields: dict[str, str] = {}
            for line in block.decode(errors="replace").split("\n"):
                if line and not line.startswith(":"):
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
            if "data" in fields:
                try:
                    data = json.loads(fields["data"])
                except ValueError:
                    data = {"raw": fields["data"]}
                rev = fields.get("id", "0")
                yield Message(fields.get("event", "message"), int(rev) if rev.isdigit() else 0, data)


class NotSent(OSError):
    """The request never reached the replica (no connection): safe to send elsewhere."""


class Response:
    """An HTTP answer being read: status, headers, then the body (whole, or chunk by chunk)."""

    def __init__(self, sock: Any) -> None:  # a socket, or an ssl.SSLSocket
        self.sock = sock
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            data = sock.recv(65536)
            if not data:
                raise ValueError("an incomplete HTTP answer")
            self.buffer += data
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}

    def _recv(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise ValueError("the answer was cut short")
        return data

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives (chunked or not)."""
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                while b"\r\n" not in self.buffer:
                    self.buffer += self._recv()
                size_line, _, self.buffer = self.buffer.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                while len(self.buffer) < size + 2:
                    self.buffer += self._recv()
                if size == 0:
                    return
                yield self.buffer[:size]
                self.buffer = self.buffer[size + 2 :]
        length = self.headers.get("content-length")
        left = int(length) if length is not None else None
        if self.buffer:
            yield self.buffer[:left] if left is not None else self.buffer
            left = None if left is None else left - len(self.buffer)
        while left is None or left > 0:
            data = self.sock.recv(65536 if left is None else min(left, 65536))
            if not data:
                if left:
                    raise ValueError("the answer was cut short")
                return
            yield data
            left = None if left is None else left - len(data)

    def read(self) -> bytes:
        return b"".join(self.chunks())


_weak_socket: Any = None  # _socket.socket with a weak-reference slot, made on the first https connection


def connect(address: tuple[Any, int], timeout: float, weak: bool = False) -> Any:
    """A connected TCP socket (the C module's: `socket` builds its enums on import, a few ms
    of every command), as socket.create_connection makes it: each address in turn. An https
    connection wraps it with LeanTLS, which needs it `weak`: a socket a weak reference can name."""
    import _socket

    global _weak_socket
    if weak and _weak_socket is None:
        _weak_socket = type("WeakSocket", (_socket.socket,), {"__slots__": ("__weakref__",)})
    kind_of = _weak_socket if weak else _socket.socket

    problem: OSError | None = None
    for family, kind, proto, _, where in _socket.getaddrinfo(*address, 0, _socket.SOCK_STREAM):
        sock = kind_of(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(where)
            return sock
        except OSError as err:
            problem = err
            sock.close()
    raise problem or OSError(f"no address for {address[0]!r}")


def open_request(
    url: str, method: str, target: str, *, body: bytes | None = None, token: str | None = None, timeout: float = 5.0,
    tls: Any = None, ca: str | None = None,
) -> Response:  # fmt: skip
    """Send one request on a fresh connection (Connection: close) and read the answer's head.
    NotSent when no connection could be made. An https URL goes over TLS with `tls` (a
    LeanTLS; default: one trusting `ca`); a certificate it does not trust is the
    ClientError of `untrusted`."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"the fast path speaks http and https only, not {url}")
    host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    try:
        # An ASCII name as bytes: a str is encoded by the idna codec, whose import costs more than the request.
        address = (host.encode() if host.isascii() else host, port)
        sock = connect(address, timeout, weak=parts.scheme == "https")
    except OSError as err:
        raise NotSent(err.errno, err.strerror or str(err)) from None
    if parts.scheme == "https":
        lean = tls or LeanTLS(ca)
        try:
            sock = lean.wrap(sock, host)
        except lean.errors.SSLCertVerificationError as err:
            sock.close()
            raise untrusted(url, ca, err.verify_message or str(err)) from None
        except BaseException:
            sock.close()
            raise
    try:
        head = f"{method} {target} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: application/json\r\nConnection: close\r\n"
        if token:
            head += f"Authorization: Bearer {token}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        sock.sendall(head.encode() + b"\r\n" + (body or b""))
        return Response(sock)
    except BaseException:
        sock.close()
        raise


def cell_urls(master: str | None, state_dir: str | None) -> list[str]:
    """The masters to ask, as master_urls finds them; for a local cell that `minborg cell down`
    stopped (its cell file says when), a ClientError at once instead of connections refused
    for the client's whole retry time."""
    import os

    urls = master_urls(master, state_dir)
    if not (master or os.environ.get(MASTER_ENV)) and read_cell_file(state_dir).get("stopped_at"):
        raise ClientError(NO_ANSWER, "no master replica could serve the request: the cell was stopped "
                          "(minborg cell down)", ", ".join(urls))  # fmt: skip
    return urls


def detail_of(body: bytes) -> Any:
    try:
        doc = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip()
    return doc.get("detail", doc) if isinstance(doc, dict) else doc


class PlainCell:
    """The cell's API as the fast path reads and changes it: the subset of CellClient it needs."""

    def __init__(
        self, urls: list[str], token: str | None, *, retry_s: float = RETRY_S,
        sleep: Callable[[float], None] = time.sleep, timeout: float = 5.0, state_dir: Any = None,
    ) -> None:  # fmt: skip
        self.urls, self.token, self.retry_s, self.sleep, self.timeout = list(urls), token, retry_s, sleep, timeout
        https = any(url.startswith("https://") for url in self.urls)
        self.ca = ca_file(state_dir) if https else None
        self.tls = LeanTLS(self.ca) if https else None

    def __enter__(self) -> PlainCell:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def open(self, method: str, path: str, params: dict[str, Any] | None = None, json_body: Any = None,
             timeout: float | None = None) -> Response:  # fmt: skip
        """The first 2xx answer's head, from the first replica that serves it; ClientError else."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        body = json.dumps(json_body).encode() if json_body is not None else None
        deadline = time.monotonic() + self.retry_s
        idempotent = method in ("GET", "HEAD")
        if timeout is None:
            timeout = self.timeout if idempotent else max(self.timeout, WRITE_TIMEOUT_S)
        while True:
            failures: list[str] = []
            for url in self.urls:
                try:
                    answer = open_request(url, method, path + query, body=body, token=self.token,
                                          timeout=timeout, tls=self.tls, ca=self.ca)  # fmt: skip
                except NotSent as err:
                    failures.append(f"{url}: {err.strerror or err}")
                    continue
                except (OSError, ValueError) as err:
                    if not idempotent:
                        raise ClientError(
                            NO_ANSWER,
                            f"{url} did not answer {method} {path} ({err}); "
                            "the change may or may not have been made: check before retrying",
                            url,
                        ) from None
                    failures.append(f"{url}: {err}")
                    continue
                if answer.status == 503:
                    failures.append(f"{url}: 503 {format_detail(detail_of(answer.read()))}")
                    answer.sock.close()
                    continue
                if answer.status >= 400:
                    try:
                        raise ClientError(answer.status, detail_of(answer.read()), url)
                    finally:
                        answer.sock.close()
                return answer
            if time.monotonic() + 0.5 > deadline:
                status = 503 if any(": 503" in f for f in failures) else NO_ANSWER
                unanswered = ", ".join(self.urls) if status == NO_ANSWER else None
                raise ClientError(status, "no master replica could serve the request: " + "; ".join(failures), unanswered)
            self.sleep(0.5)

    def raw(self, method: str, path: str, params: dict[str, Any] | None = None, json_body: Any = None) -> bytes:
        answer = self.open(method, path, params, json_body)
        try:
            return answer.read()
        finally:
            answer.sock.close()

    def request(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """One API call; the decoded JSON body of its 2xx answer."""
        body = self.raw(method, path, params, json)
        if not body:
            return {}
        doc = _json_loads(body)
        return doc if isinstance(doc, dict) else {"result": doc}

    def watch(self, path: str, *, since: int | None = None, timeout_s: float = 300.0, **params: Any) -> Iterator[Message]:
        """The messages of a watch, as CellClient.watch gives them."""
        query: dict[str, Any] = {"timeout_s": timeout_s, **{k: v for k, v in params.items() if v is not None}}
        if path != "/v1/events":
            query["watch"] = "true"
        if since is not None:
            query["since"] = since
        answer = self.open("GET", path, query, timeout=timeout_s + 30.0)
        try:
            yield from parse_sse(answer.chunks())
        except (OSError, ValueError):
            return  # cut after it began: the stream just ends, as the full client's does
        finally:
            answer.sock.close()


def _json_loads(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise ClientError(200, f"not JSON: {body[:200]!r}") from None
