"""Limits on the wire of a live cell's master and borglet: headers past 32 KiB are a 431, a body
past its limit a 413, headers unfinished after 10 s close the connection, one address holds at
most 512 connections, and a flood of all of these from one client leaves another user's reads
p99 under 250 ms.

The attacks this replays, on a master without limits: 20 connections sending 10 MB headers for
12 s raised its RSS from 88 to 287 MiB and another user's read p50 from 5 to 190 ms (max 2.5 s);
a 10 MB dry-run body was read whole; 1,500 connections that never finished their headers were
all held open for the whole 20 s test. The attacker connects from 127.0.0.2 and the victim from
127.0.0.1 (both loopback), so the server can tell them apart as it would two hosts.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import multiprocessing
import os
import selectors
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psutil
import pytest

from reference import wirelimits
from tests.integration.cellkit import LocalCell, sleeper_job, wait_for

pytestmark = pytest.mark.integration

ATTACKER, VICTIM = "127.0.0.2", "127.0.0.1"
LIMITS = wirelimits.MASTER
assert wirelimits.BORGLET.max_header_bytes == LIMITS.max_header_bytes
assert wirelimits.BORGLET.header_timeout_s == LIMITS.header_timeout_s
P99_TARGET_S = 0.250


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCell]:
    c = LocalCell(tmp_path_factory.mktemp("wire"), masters=1, borglets=1)
    with c:
        assert c.submit(sleeper_job("web", user="alice")).status_code == 201
        yield c
    assert c.leftovers() == [], "processes of the cell are still running"


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def targets(cell: LocalCell) -> dict[str, int]:
    return {"master": port_of(cell.masters[0].url), "borglet": port_of(cell.borglets[0].url)}


def connect(port: int, source: str = ATTACKER, timeout: float = 5.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))
    return s


def read_until_closed(s: socket.socket, timeout: float) -> bytes:
    """What the server sent before it closed the connection (or `timeout` passed)."""
    s.settimeout(timeout)
    out = b""
    with contextlib.suppress(OSError):
        while chunk := s.recv(65536):
            out += chunk
    return out


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split(b" ", 2)[1])


def exchange(port: int, request: bytes, timeout: float = 10.0) -> bytes:
    with connect(port) as s:
        with contextlib.suppress(OSError):  # refused before all of it was sent
            s.sendall(request)
        return read_until_closed(s, timeout)


def get_with_header(path: str, pad: int) -> bytes:
    return b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: " + b"a" * pad + b"\r\n\r\n"


# --- headers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("server", ["master", "borglet"])
def test_headers_past_the_limit_are_431(cell: LocalCell, server: str) -> None:
    port = targets(cell)[server]
    assert status_of(exchange(port, get_with_header("/healthz", 16 * 1024))) == 200  # within the limit
    answer = exchange(port, get_with_header("/healthz", 2 * LIMITS.max_header_bytes))
    assert status_of(answer) == 431
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["detail"][0]["field"] == "headers"


@pytest.mark.parametrize("server", ["master", "borglet"])
def test_a_10_mb_header_is_cut_off_early(cell: LocalCell, server: str) -> None:
    """The header the attack streamed: answered 431 and closed long before 10 MB are sent."""
    port = targets(cell)[server]
    sent = 0
    started = time.monotonic()
    with connect(port) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: ")
        with contextlib.suppress(OSError):
            while sent < 10_000_000:
                s.sendall(b"a" * 65536)
                sent += 65536
        answer = read_until_closed(s, 10)
    assert status_of(answer) == 431
    assert sent < 10_000_000, "the server took the whole 10 MB header"
    assert time.monotonic() - started < LIMITS.linger_s + 3


# --- bodies --------------------------------------------------------------------------------------


def job_of_size(size: int) -> dict[str, Any]:
    return sleeper_job("big", user="alice", task_count=0, env={"PAD": "a" * size})


def test_a_body_past_1_mib_is_413_and_one_below_is_read(cell: LocalCell) -> None:
    url = cell.masters[0].url + "/v1/jobs"
    below = cell.http.post(url, params={"dry_run": "true"}, json=job_of_size(900 * 1024))
    assert below.status_code == 200, below.text  # a large job file, still read
    above = cell.http.post(url, params={"dry_run": "true"}, json=job_of_size(2 * 1024 * 1024))
    assert above.status_code == 413, above.text
    assert above.json()["detail"][0]["field"] == "body"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(40):
            yield b"a" * 65536

    chunked = cell.http.post(url, params={"dry_run": "true"}, content=chunks())
    assert chunked.status_code == 413, chunked.text
    assert "big" not in [j["name"] for j in cell.get("/v1/jobs")["jobs"]]


def test_a_10_mb_body_is_refused_before_it_is_sent(cell: LocalCell) -> None:
    """Content-Length says 10 MB: 413 at once, with not one byte of the body read."""
    port = targets(cell)["master"]
    head = (
        b"POST /v1/jobs?dry_run=true HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + cell.admin_token.encode() + b"\r\nContent-Length: 10000000\r\n\r\n"
    )
    started = time.monotonic()
    assert status_of(exchange(port, head, timeout=5)) == 413
    assert time.monotonic() - started < LIMITS.linger_s + 1


def test_a_borglet_refuses_a_sync_past_its_limit(cell: LocalCell) -> None:
    port = targets(cell)["borglet"]
    small = b"POST /v1/sync HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
    assert status_of(exchange(port, small)) == 401  # unsigned: the channel's refusal, past the wire
    too_large = wirelimits.BORGLET.max_signed_body_bytes + 1
    head = b"POST /v1/sync HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(too_large).encode() + b"\r\n\r\n"
    assert status_of(exchange(port, head, timeout=5)) == 413


# --- unfinished headers --------------------------------------------------------------------------


def test_unfinished_headers_are_closed_after_the_timeout(cell: LocalCell) -> None:
    """Silent connections, ones that stop mid-header and ones that trickle a byte every half
    second: each is closed about `header_timeout_s` after it opened, on master and borglet."""
    opened: dict[socket.socket, tuple[str, float]] = {}
    trickling = []
    for server, port in targets(cell).items():
        for kind in ("silent", "stopped", "trickling"):
            for _ in range(20):
                s = connect(port)
                s.setblocking(False)
                if kind != "silent":
                    s.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                if kind == "trickling":
                    trickling.append(s)
                opened[s] = (f"{server}/{kind}", time.monotonic())
    closed_after: dict[str, list[float]] = {}
    selector = selectors.DefaultSelector()
    for s in opened:
        selector.register(s, selectors.EVENT_READ)
    deadline = time.monotonic() + LIMITS.header_timeout_s + 10
    next_byte = time.monotonic()
    while opened and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.1):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if data:  # the 408 comes first, then the close
                assert data.startswith(b"HTTP/1.1 408"), data[:100]
                continue
            kind, since = opened.pop(s)
            closed_after.setdefault(kind, []).append(time.monotonic() - since)
            selector.unregister(s)
            s.close()
        if time.monotonic() >= next_byte:
            next_byte += 0.5
            for s in trickling:
                if s in opened:
                    with contextlib.suppress(OSError):
                        s.send(b"X")
    for s in opened:
        s.close()
    assert not opened, f"{len(opened)} connections still open {LIMITS.header_timeout_s + 10:g} s after they began"
    for kind, times in sorted(closed_after.items()):
        print(f"{kind}: closed after {min(times):.2f}-{max(times):.2f} s")
        assert len(times) == 20
        assert LIMITS.header_timeout_s - 1 <= min(times) and max(times) <= LIMITS.header_timeout_s + 4, (kind, times)


# --- connections per client ----------------------------------------------------------------------


@pytest.mark.parametrize("server", ["master", "borglet"])
def test_one_address_holds_at_most_the_cap(cell: LocalCell, server: str) -> None:
    port = targets(cell)[server]
    cap, extra = LIMITS.max_connections_per_client, 60
    socks = [connect(port) for _ in range(cap + extra)]
    try:
        # The refused are answered at once; the held hear nothing (until the header timeout).
        time.sleep(1.5)
        selector = selectors.DefaultSelector()
        for s in socks:
            selector.register(s, selectors.EVENT_READ)
        answered = [key.fileobj for key, _ in selector.select(timeout=0)]
        selector.close()
        for s in answered:
            assert isinstance(s, socket.socket)
            data = read_until_closed(s, 2)
            assert data.startswith(b"HTTP/1.1 503"), data[:100]
            assert b"retry-after: 1" in data
        refused, held = len(answered), len(socks) - len(answered)
        assert (held, refused) == (cap, extra)
        # Another address is not affected.
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        for s in socks:
            s.close()

    def served() -> bool:
        return status_of(exchange(port, get_with_header("/healthz", 10), timeout=5)) == 200

    wait_for(served, 10, "the attacker's address served again once its connections closed")


# --- the flood, and another user's reads ---------------------------------------------------------


def flood(port: int, seconds: float, token: str, counts: Any) -> None:
    """The attack from ATTACKER for `seconds`: 20 connections streaming 10 MB headers, 10
    sending 10 MB dry-run bodies, and 1,500 connections kept open with unfinished headers
    (reopened as they are closed), all at once. Runs in its own process, niced: on a network
    the attacker's own CPU (and the kernel's sending for it) would be another host's, not the
    cell's two cores."""
    os.nice(19)
    stop = time.monotonic() + seconds

    def big_headers() -> None:
        while time.monotonic() < stop:
            with contextlib.suppress(OSError), connect(port, timeout=2) as s:
                s.sendall(b"GET /v1/cell HTTP/1.1\r\nHost: x\r\nX-Pad: ")
                for _ in range(160):
                    s.sendall(b"a" * 65536)
            counts["headers"] += 1

    def big_bodies() -> None:
        head = (
            b"POST /v1/jobs?dry_run=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\n\r\n"
        )  # fmt: skip
        while time.monotonic() < stop:
            with contextlib.suppress(OSError), connect(port, timeout=2) as s:
                s.sendall(head)
                for _ in range(160):
                    s.sendall(b" " * 65536)
            counts["bodies"] += 1

    def unfinished() -> None:
        held: list[socket.socket] = []
        while time.monotonic() < stop:
            alive = []
            for s in held:
                try:
                    gone = s.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) is not None
                except BlockingIOError:
                    alive.append(s)
                    continue
                except OSError:
                    gone = True
                if gone:
                    s.close()
            held = alive
            while len(held) < 1500 and time.monotonic() < stop:
                try:
                    s = connect(port, timeout=2)
                    s.setblocking(False)
                    s.send(b"GET /v1/cell HTTP/1.1\r\nHost: x\r\n")
                except OSError:
                    break
                held.append(s)
                counts["unfinished"] += 1
            time.sleep(0.05)
        for s in held:
            s.close()

    threads = [threading.Thread(target=big_headers) for _ in range(20)]
    threads += [threading.Thread(target=big_bodies) for _ in range(10)]
    threads.append(threading.Thread(target=unfinished))
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def read_latencies(port: int, token: str, seconds: float, rss: list[int], pid: int) -> list[float]:
    """Another user's reads from VICTIM, each on a new connection, 20 a second."""
    out = []
    proc = psutil.Process(pid)
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(VICTIM, 0))
        try:
            conn.request("GET", "/v1/jobs/alice/web", headers={"Authorization": f"Bearer {token}"})
            answer = conn.getresponse()
            answer.read()
        finally:
            conn.close()
        out.append(time.monotonic() - started)
        assert answer.status == 200, answer.status
        rss.append(proc.memory_info().rss)
        time.sleep(max(0.0, 0.05 - (time.monotonic() - started)))
    return out


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[98]


def test_a_flood_from_one_client_leaves_another_users_reads_fast(cell: LocalCell) -> None:
    port, pid = targets(cell)["master"], cell.masters[0].pid
    assert pid is not None
    bob = cell.add_user("bob")  # the victim: an ordinary user reading alice's job
    rss: list[int] = []
    calm = read_latencies(port, bob, 4, rss, pid)
    rss_before = max(rss)
    manager = multiprocessing.get_context("spawn").Manager()
    counts = manager.dict(headers=0, bodies=0, unfinished=0)
    attacker = multiprocessing.get_context("spawn").Process(target=flood, args=(port, 14, cell.admin_token, counts))
    attacker.start()
    try:
        time.sleep(1)  # the flood under way
        rss.clear()
        cpu_before = sum(psutil.Process(pid).cpu_times()[:2])
        flooded = read_latencies(port, bob, 12, rss, pid)
        cpu_used = sum(psutil.Process(pid).cpu_times()[:2]) - cpu_before
    finally:
        attacker.join(30)
        if attacker.is_alive():
            attacker.kill()
    seen = dict(counts)
    manager.shutdown()
    line = (
        f"victim reads: calm p50 {statistics.median(calm) * 1000:.1f} ms p99 {p99(calm) * 1000:.1f} ms ({len(calm)}); "
        f"under the flood p50 {statistics.median(flooded) * 1000:.1f} ms p99 {p99(flooded) * 1000:.1f} ms "
        f"max {max(flooded) * 1000:.0f} ms ({len(flooded)}); master RSS {rss_before / 2**20:.0f} -> "
        f"{max(rss) / 2**20:.0f} MiB, {cpu_used / 12:.0%} of a core; attacker connections {seen}"
    )
    print(line)
    # The attack really ran: every oversized stream at least once a connection, and more unfinished
    # connections opened than the per-address cap lets stay (the attacker aims at 1,500 held at once;
    # on a calm host its connects past the cap wait in a full accept queue, 750-900 in 14 s here).
    cap = LIMITS.max_connections_per_client
    assert seen["headers"] > 20 and seen["bodies"] > 10 and seen["unfinished"] > cap, line
    assert p99(flooded) < P99_TARGET_S, line
    assert max(rss) - rss_before < 64 * 2**20, line
