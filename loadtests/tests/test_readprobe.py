"""The overload bench's reader runs in a process of its own and hands back what it measured."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from loadtests.readprobe import READ_EVERY_S, ReadProbe


def serve(status: int, seen: list[str]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server name)
            seen.append(f"{self.path} {self.headers.get('Authorization')}")
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_the_probe_reads_round_robin_from_its_own_process_and_reports_each_answer() -> None:
    ok_seen: list[str] = []
    busy_seen: list[str] = []
    ok, busy = serve(200, ok_seen), serve(503, busy_seen)
    urls = [f"http://127.0.0.1:{s.server_address[1]}" for s in (ok, busy)]
    try:
        began = time.monotonic()
        with ReadProbe(urls, {"Authorization": "Bearer t0ken"}) as probe:
            # Until both replicas were read 3 times (the probe's interpreter may start slowly).
            deadline = time.monotonic() + 60
            while min(len(ok_seen), len(busy_seen)) < 3 and time.monotonic() < deadline:
                time.sleep(READ_EVERY_S)
        ended = time.monotonic()
    finally:
        ok.shutdown()
        busy.shutdown()
    # Every other read went to the replica that answers 503: an error of that kind, no latency.
    assert len(probe.latencies) >= 3 and probe.errors >= 3
    assert abs(len(probe.latencies) - probe.errors) <= 1
    assert probe.error_kinds == {"HTTP 503": probe.errors}
    assert len(probe.started) == len(probe.latencies) == len(ok_seen)
    # Its clock is the bench's (CLOCK_MONOTONIC): each read was sent within the block.
    assert all(began <= at <= ended for at in probe.started)
    assert all(0 < ms < 5000 for ms in probe.latencies)
    assert set(ok_seen) == {"/v1/cell Bearer t0ken"}  # the headers came through the environment
