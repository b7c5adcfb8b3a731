"""The hello_world service task: answers on $PORT with its BNS name, health and Prometheus metrics."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

_lock = threading.Lock()
_requests_total: dict[tuple[str, int], int] = {}
_inflight = 0
_started = time.time()


def burn_cpu(cost_ms: float) -> None:
    """Busy-loop for cost_ms of wall time: a stand-in for real per-request work."""
    deadline = time.perf_counter() + cost_ms / 1000.0
    while time.perf_counter() < deadline:
        pass


def info() -> dict[str, object]:
    return {
        "bns": os.environ.get("BNS_NAME", ""),
        "task_id": os.environ.get("TASK_ID", ""),
        "index": os.environ.get("TASK_INDEX", ""),
        "machine": os.environ.get("MINBORG_MACHINE", ""),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "port": int(os.environ.get("PORT", "0")),
        "uptime_s": round(time.time() - _started, 3),
    }


def metrics_text() -> str:
    with _lock:
        counts = dict(_requests_total)
        inflight = _inflight
    lines = [
        "# HELP hello_requests_total Requests served, by path and status code.",
        "# TYPE hello_requests_total counter",
    ]
    for (path, code), count in sorted(counts.items()):
        lines.append(f'hello_requests_total{{path="{path}",code="{code}"}} {count}')
    lines += [
        "# HELP hello_inflight Requests being served now.",
        "# TYPE hello_inflight gauge",
        f"hello_inflight {inflight}",
        "",
    ]
    return "\n".join(lines)


class Handler(BaseHTTPRequestHandler):
    server_version = "hello_world/1"

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        global _inflight
        url = urlparse(self.path)
        with _lock:
            _inflight += 1
        code = 500
        try:
            code = self._route(url.path, parse_qs(url.query))
        finally:
            # /metrics is not counted so scraping does not change what it reports.
            with _lock:
                _inflight -= 1
                key = (url.path if url.path in ("/", "/healthz") else "other", code)
                if url.path != "/metrics":
                    _requests_total[key] = _requests_total.get(key, 0) + 1

    def _route(self, path: str, query: dict[str, list[str]]) -> int:
        if path == "/":
            cost = float(query.get("cost_ms", [os.environ.get("CPU_COST_MS", "0")])[0] or 0)
            if cost > 0:
                burn_cpu(min(cost, 10_000.0))
            body = f"hello from {os.environ.get('BNS_NAME', 'nowhere')}\n" + json.dumps(info())
            return self._send(200, body + "\n", "text/plain; charset=utf-8")
        if path == "/healthz":
            return self._send(200, "ok\n", "text/plain; charset=utf-8")
        if path == "/metrics":
            return self._send(200, metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
        return self._send(404, "not found\n", "text/plain; charset=utf-8")

    def _send(self, code: int, body: str, content_type: str) -> int:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        return code

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # per-request lines would flood the task log under load


def main() -> None:
    port = int(os.environ.get("PORT", "8080"))
    host = os.environ.get("HOST", "127.0.0.1")
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True

    def stop(signum: int, frame: object) -> None:
        # shutdown() blocks until serve_forever returns, so it must run on another thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"hello_world serving {os.environ.get('BNS_NAME', '')} on {host}:{port}", flush=True)
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    print("hello_world stopped", flush=True)


if __name__ == "__main__":
    main()
