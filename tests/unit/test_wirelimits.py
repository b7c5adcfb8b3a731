"""The limits on the wire (reference/wirelimits.py), driven through uvicorn's protocol with a
transport that records what is written: the refusals, their statuses and what the app sees."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from bench.memtransport import MemoryTransport as Transport
from reference import wirelimits
from reference.wirelimits import WireLimits

SMALL = WireLimits(max_header_bytes=1024, max_body_bytes=100, max_signed_body_bytes=1000, header_timeout_s=5.0,
                   max_connections_per_client=2)  # fmt: skip


class Seen:
    """The app: records the bodies it read whole, answers 200."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]) -> None:
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":  # a refused body ends so, never complete
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


def run(scenario: Callable[[Callable[..., Any], Seen], Awaitable[None]], limits: WireLimits = SMALL) -> Seen:
    seen = Seen()

    async def main() -> None:
        config = uvicorn.Config(seen, lifespan="off", log_level="warning", access_log=False)
        config.load()
        cls, state, loop = wirelimits.limited(limits), ServerState(), asyncio.get_running_loop()

        def connect(transport: Transport) -> Any:
            protocol = cls(config=config, server_state=state, app_state={}, _loop=loop)
            protocol.connection_made(transport)
            return protocol

        await scenario(connect, seen)

    asyncio.run(main())
    return seen


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def request(path: str = "/v1/jobs", body: bytes = b"", headers: bytes = b"") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n".encode() + headers + b"\r\n" + body)


def test_a_request_within_the_limits_reaches_the_app() -> None:
    async def scenario(connect: Callable[..., Any], seen: Seen) -> None:
        t = Transport()
        connect(t).data_received(request(body=b"x" * 100, headers=b"X-Pad: " + b"a" * 900 + b"\r\n"))
        await settle()
        assert t.status() == 200 and not t.closed

    assert run(scenario).bodies == [b"x" * 100]


def test_headers_past_the_limit_in_one_chunk_are_431() -> None:
    async def scenario(connect: Callable[..., Any], seen: Seen) -> None:
        t = Transport()
        connect(t).data_received(request(headers=b"X-Pad: " + b"a" * 1100 + b"\r\n"))
        await settle()
        assert (t.status(), t.error()["field"], t.eof) == (431, "headers", True)

    assert run(scenario).bodies == []


def test_an_unfinished_header_is_cut_off_once_the_chunks_pass_the_limit() -> None:
    async def scenario(connect: Callable[..., Any], seen: Seen) -> None:
        t = Transport()
        p = connect(t)
        p.data_received(b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * 600)
        assert t.written == b""
        p.data_received(b"a" * 600)  # 1,224 bytes and no end of headers
        assert t.status() == 431
        p.data_received(b"a" * 600)  # drained, not parsed
        assert t.status() == 431

    run(scenario)


def test_a_body_past_its_content_length_limit_is_413_before_the_app_runs() -> None:
    async def scenario(connect: Callable[..., Any], seen: Seen) -> None:
        t = Transport()
        connect(t).data_received(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n")
        await settle()
        assert (t.status(), t.error()["field"]) == (413, "body")
        assert "101 bytes" in t.error()["error"]

    assert run(scenario).bodies == []


def test_a_chunked_body_is_counted_as_it_arrives() -> None:
    async def scenario(connect: Callable[..., Any], seen: Seen) -> None:
        t = Transport()
        p = connect(t)
        p.data_received(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        p.data_received(b"3c\r\n" + b"x" * 60 + b"\r\n")
        await settle()
        assert t.written == b""
        p.data_received(b"3c\r\n" + b"x" * 60 + b"\r\n")  # 120 bytes: past 100
        await settle()
        assert t.status() == 413

    assert run(scenario).bodies == []


def test_signed_paths_take_the_larger_body_limit() -> None:
    assert SMALL.body_limit(b"/internal/v1/plans") == 1000
    assert SMALL.body_limit(b"/v1/jobs?dry_run=true") == 100
    assert wirelimits.BORGLET.body_limit(b"/v1/sync") == wirelimits.BORGLET.max_signed_body_bytes

    async def scenario(connect: Callable[..., Any], seen: Seen) -> None:
        t = Transport()
        connect(t).data_received(request("/internal/v1/plans", body=b"x" * 900))
        await settle()
        assert t.status() == 200

    assert run(scenario).bodies == [b"x" * 900]


def test_past_the_cap_an_address_is_answered_503_and_another_is_not() -> None:
    async def scenario(connect: Callable[..., Any], seen: Seen) -> None:
        first, second, third, other = Transport(), Transport(), Transport(), Transport("127.0.0.1")
        p1 = connect(first)
        connect(second)
        connect(third)
        assert (third.status(), third.closed) == (503, True)
        assert b"retry-after: 1" in third.written
        third_protocol = connect(Transport())  # still refused
        third_protocol.connection_lost(None)  # a refused connection's end changes no count
        connect(other)
        assert other.written == b"" and not other.closed
        p1.connection_lost(None)
        again = Transport()
        connect(again)
        assert again.written == b"" and not again.closed

    run(scenario)


def test_headers_late_after_the_timeout_close_with_408_or_nothing() -> None:
    async def scenario(connect: Callable[..., Any], seen: Seen) -> None:
        silent, partial, done = Transport(), Transport(), Transport()
        ps, pp, pd = connect(silent), connect(partial), connect(Transport("127.0.0.3"))
        pd.transport = done
        pp.data_received(b"GET / HTTP/1.1\r\nHost")
        pd.data_received(request())
        await settle()
        now = asyncio.get_running_loop().time()
        assert not ps.headers_late(now + SMALL.header_timeout_s - 0.5)
        assert ps.headers_late(now + SMALL.header_timeout_s + 0.5)
        assert pp.headers_late(now + SMALL.header_timeout_s + 0.5)
        assert not pd.headers_late(now + SMALL.header_timeout_s + 0.5)  # its headers came
        ps.close_late()
        pp.close_late()
        assert (silent.written, silent.closed) == (b"", True)
        assert (partial.status(), partial.closed) == (408, True)

    run(scenario)


def test_limits_from_the_environment() -> None:
    limits = wirelimits.from_env(wirelimits.MASTER, {"MINBORG_MAX_BODY_BYTES": "2097152", "MINBORG_HEADER_TIMEOUT_S": "2.5"})
    assert (limits.max_body_bytes, limits.header_timeout_s) == (2097152, 2.5)
    assert limits.max_header_bytes == wirelimits.MASTER.max_header_bytes
    with pytest.raises(ValueError, match="MINBORG_MAX_BODY_BYTES"):
        wirelimits.from_env(wirelimits.MASTER, {"MINBORG_MAX_BODY_BYTES": "1MiB"})
    with pytest.raises(ValueError, match="above 0"):
        wirelimits.from_env(wirelimits.MASTER, {"MINBORG_MAX_CONNECTIONS_PER_CLIENT": "0"})
