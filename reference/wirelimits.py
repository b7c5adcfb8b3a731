"""Limits on the wire for the cell's HTTP servers (masters, borglets): header size, body size,
header-read time and connections per client, enforced in the HTTP protocol before the app runs.

uvicorn with httptools has none of them. Against a master without them, 20 connections sending
10 MB headers raised its RSS from 88 to 287 MiB and another user's read p50 from 5 to 190 ms; a
10 MB body was read whole; 1,500 connections that never finished their headers were held open
for as long as their client wanted. `LimitedProtocol` is uvicorn's `HttpToolsProtocol` with
the four limits added (the choices and the measured cost are in docs/decisions.md):

- headers (request line included) past `max_header_bytes`: 431, and the connection closes;
- a body past its path's limit, by Content-Length at once or as it arrives: 413;
- headers not complete `header_timeout_s` after the connection (or the request) began: 408
  (nothing at all when the client sent nothing), and the connection closes;
- past `max_connections_per_client` open connections from one address: 503 and closed at once.

A refused request is answered, then the connection is drained (read and discarded) for at most
`linger_s` before it closes, so the client reads the answer instead of a reset.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

KIB = 1024
MIB = 1024 * KIB
LINGER_BYTES = 64 * KIB  # drained after a refusal at most; past it the connection closes at once


@dataclass(frozen=True)
class WireLimits:
    """What one server takes from a connection; the figures are chosen in docs/decisions.md."""

    max_header_bytes: int = 32 * KIB  # request line and headers (nginx 32 KiB, Node 16 KiB)
    max_body_bytes: int = 1 * MIB  # a job file's realistic maximum
    # Bodies signed with the cell's channel key (a master's syncs, link shards, the scheduler's
    # plans) carry many tasks at once; the channel reads at most this much before checking.
    max_signed_body_bytes: int = 64 * MIB
    signed_prefixes: tuple[bytes, ...] = (b"/internal/",)
    header_timeout_s: float = 10.0
    max_connections_per_client: int = 512
    linger_s: float = 1.0

    def body_limit(self, target: bytes) -> int:
        """The most bytes of body a request to `target` (its path and query) may carry."""
        return self.max_signed_body_bytes if target.startswith(self.signed_prefixes) else self.max_body_bytes


# Every body a borglet takes is a master's signed sync (its /healthz and /metrics take none).
BORGLET = WireLimits(signed_prefixes=(b"/",))
MASTER = WireLimits()

# The environment variables that change a server's limits, by field.
ENV = {
    "max_header_bytes": "MINBORG_MAX_HEADER_BYTES",
    "max_body_bytes": "MINBORG_MAX_BODY_BYTES",
    "max_signed_body_bytes": "MINBORG_MAX_SIGNED_BODY_BYTES",
    "header_timeout_s": "MINBORG_HEADER_TIMEOUT_S",
    "max_connections_per_client": "MINBORG_MAX_CONNECTIONS_PER_CLIENT",
}


def from_env(base: WireLimits, env: Mapping[str, str] | None = None) -> WireLimits:
    """`base` with what the MINBORG_* variables of `env` (default os.environ) set; ValueError
    naming the variable for a figure that is not a positive number."""
    env = os.environ if env is None else env
    kinds = {f.name: f.type for f in fields(WireLimits)}
    changed: dict[str, Any] = {}
    for name, var in ENV.items():
        text = env.get(var)
        if text is None or text == "":
            continue
        try:
            value: float = float(text) if kinds[name] == "float" else int(text)
        except ValueError:
            raise ValueError(f"{var}={text!r}: must be a number") from None
        if value <= 0:
            raise ValueError(f"{var}={text!r}: must be above 0")
        changed[name] = value
    return replace(base, **changed)


def error_response(status: int, field: str, error: str, headers: bytes = b"") -> bytes:
    """A complete HTTP/1.1 answer in the API's error shape that closes the connection."""
    body = json.dumps({"detail": [{"field": field, "error": error}]}).encode()
    return b"".join([
        STATUS_LINE[status], b"content-type: application/json\r\n",
        b"content-length: ", str(len(body)).encode(), b"\r\n", b"connection: close\r\n", headers, b"\r\n", body,
    ])  # fmt: skip


class Refused(Exception):
    """Raised from a parser callback: the request breaks a limit; answered `status`."""

    def __init__(self, status: int, field: str, error: str) -> None:
        super().__init__(error)
        self.status, self.field, self.error = status, field, error


class LimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of `limits`; `limited(limits)` makes the
    subclass one server uses (its own count of connections per client).

    What a request pays is kept to a few attribute updates: the header-read timeout is not a
    timer per request but one sweep a second over the server's connections (so a late
    connection closes between `header_timeout_s` and a second after), and a connection over
    the cap is answered before uvicorn builds its parser."""

    limits: ClassVar[WireLimits] = MASTER
    per_client: ClassVar[dict[str, int]] = {}
    refused: ClassVar[dict[int, int]] = {}  # connections refused, by status
    busy: ClassVar[bytes] = b""  # the answer past the cap, made once: a flood of them costs little
    sweeping: ClassVar[bool] = False

    def __init__(
        self, config: Any, server_state: Any, app_state: dict[str, Any], _loop: asyncio.AbstractEventLoop | None = None
    ) -> None:  # fmt: skip
        # uvicorn's own state is built in connection_made, once the connection is admitted.
        self._arguments = (config, server_state, app_state, _loop)
        self._peer: str | None = None  # the address counted in per_client; None: not admitted

    # --- the connection ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        open_now = self.per_client.get(host, 0)
        if open_now >= self.limits.max_connections_per_client:
            self._count(503)
            transport.write(self.busy)
            transport.close()
            return
        self.per_client[host] = open_now + 1
        self._peer = host
        HttpToolsProtocol.__init__(self, *self._arguments)
        self._headers_since: float | None = self.loop.time()  # None: not reading headers
        # Bytes of the request line and headers so far, counted a chunk at a time; -1 while a
        # body is read (or after a refusal).
        self._header_bytes = 0
        self._body_bytes = 0
        self._body_limit = 0
        self._linger: asyncio.TimerHandle | None = None
        self._drained = 0
        self._refusal: Refused | None = None  # raised in a parser callback, answered by data_received
        HttpToolsProtocol.connection_made(self, transport)
        if not type(self).sweeping:
            type(self).sweeping = True
            self.loop.call_later(1.0, _sweep, type(self), self.connections, self.loop)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._peer is None:  # refused at once: uvicorn's state was never built
            return
        left = self.per_client.get(self._peer, 1) - 1
        if left > 0:
            self.per_client[self._peer] = left
        else:
            self.per_client.pop(self._peer, None)
        self._peer = None
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        HttpToolsProtocol.connection_lost(self, exc)

    def data_received(self, data: bytes) -> None:
        if self._linger is not None:  # answered and refused: drain, up to a bound
            self._drained += len(data)
            if self._drained > LINGER_BYTES:
                self.transport.close()
            return
        if self._header_bytes >= 0:  # reading a request's line and headers
            if self._headers_since is None:
                self._headers_since = self.loop.time()
            self._header_bytes += len(data)
        # uvicorn's data_received, but a limit's refusal (raised in a callback, which httptools
        # turns into a parser error) is answered with its own status instead of a 400.
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError:
            refusal, self._refusal = self._refusal, None
            if refusal is not None:
                # Its traceback holds this frame, which holds it (and `data`): a cycle that
                # only the collector would free, 100 KiB and more a refusal under a flood.
                refusal.__traceback__ = None
                self._refuse(refusal)
            else:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return
        # httptools holds a header until it is whole: an unfinished one is counted here, a
        # chunk at a time.
        if self._header_bytes > self.limits.max_header_bytes and not self.transport.is_closing():
            self._refuse(self._headers_too_large())

    # --- parser callbacks ---------------------------------------------------------------------

    def on_headers_complete(self) -> None:
        self._headers_since = None
        limits = self.limits
        limit = limits.max_signed_body_bytes if self.url.startswith(limits.signed_prefixes) else limits.max_body_bytes
        length = b""
        for name, value in self.headers:
            if name == b"content-length":
                length = value
        # The bytes counted are whole chunks, a body's start included: measured exactly only
        # when the count says they may be too many.
        if self._header_bytes > self.limits.max_header_bytes and self._exact_header_bytes() > self.limits.max_header_bytes:
            self._refusal = self._headers_too_large()
        elif length.isdigit() and int(length) > limit:
            self._refusal = Refused(413, "body", f"the body ({int(length)} bytes) is larger than {limit} bytes")
        if self._refusal is not None:
            raise self._refusal
        self._header_bytes = -1  # reading the body
        self._body_bytes, self._body_limit = 0, limit
        HttpToolsProtocol.on_headers_complete(self)

    def _exact_header_bytes(self) -> int:
        return len(self.url) + 16 + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self._body_limit:
            self._refusal = Refused(413, "body", f"the body is larger than {self._body_limit} bytes")
            raise self._refusal
        HttpToolsProtocol.on_body(self, body)

    def on_message_complete(self) -> None:
        HttpToolsProtocol.on_message_complete(self)
        self._header_bytes = 0  # the next request's headers come next

    # --- refusals -------------------------------------------------------------------------------

    def headers_late(self, now: float) -> bool:
        """Whether this connection has been reading one request's headers for too long."""
        since = self._headers_since
        return since is not None and now - since > self.limits.header_timeout_s and self._peer is not None

    def close_late(self) -> None:
        """Close a connection whose headers are late: 408 if it sent part of a request."""
        self._headers_since = None
        if self.transport.is_closing():
            return
        self._count(408)
        if self._header_bytes > 0:
            error = f"the headers did not arrive within {self.limits.header_timeout_s:g} s"
            self.transport.write(error_response(408, "headers", error))
        self.transport.close()

    def _headers_too_large(self) -> Refused:
        return Refused(431, "headers", f"the request line and headers are larger than {self.limits.max_header_bytes} bytes")

    def _refuse(self, refusal: Refused) -> None:
        """Answer `refusal` (unless the app already answered), then drain and close."""
        self._count(refusal.status)
        self._headers_since, self._header_bytes = None, -1
        cycle = self.cycle
        answered = cycle is not None and not cycle.response_complete and cycle.response_started
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app's receive() says so; its sends go nowhere
            cycle.message_event.set()
        if self.transport.is_closing():
            return
        if not answered:
            self.transport.write(error_response(refusal.status, refusal.field, refusal.error))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        if not self.transport.is_reading():
            self.transport.resume_reading()
        self._linger = self.loop.call_later(self.limits.linger_s, self.transport.close)

    def _count(self, status: int) -> None:
        self.refused[status] = self.refused.get(status, 0) + 1


def _sweep(cls: type[LimitedProtocol], connections: set[Any], loop: asyncio.AbstractEventLoop) -> None:
    """Once a second: close the connections of `cls` whose headers are late."""
    now = loop.time()
    for protocol in [c for c in connections if isinstance(c, cls) and c.headers_late(now)]:
        protocol.close_late()
    loop.call_later(1.0, _sweep, cls, connections, loop)


def limited(limits: WireLimits) -> type[LimitedProtocol]:
    """The protocol class of one server with `limits`: pass it to uvicorn as `http=`."""
    error = (f"this address has {limits.max_connections_per_client} connections open, the most one client "
             "may hold; retry later")  # fmt: skip
    busy = error_response(503, "", error, b"retry-after: 1\r\n")
    return type("LimitedProtocol", (LimitedProtocol,), {"limits": limits, "per_client": {}, "refused": {}, "busy": busy})
