"""The logsaver example's web server: answers on $PORT and appends each request to the access log of its alloc."""

from __future__ import annotations

import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def log_path(root: str, index: str) -> Path:
    """The access log of alloc `index`: task i of every job in the set runs in alloc i, on one machine."""
    return Path(root) / f"alloc-{index}" / "access.log"


class Handler(BaseHTTPRequestHandler):
    log: Path

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b"ok\n" if self.path == "/healthz" else f"hello from web task {os.environ.get('TASK_INDEX')}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with self.log.open("a") as f:
            f.write(f"{time.time():.3f} {self.client_address[0]} GET {self.path} 200\n")

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
        pass  # the access log above is the log


def main() -> None:
    Handler.log = log_path(os.environ.get("LOGSAVER_ROOT", "/tmp/minborg-logsaver"), os.environ.get("TASK_INDEX", "0"))
    Handler.log.parent.mkdir(parents=True, exist_ok=True)
    ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT", "0"))), Handler).serve_forever()


if __name__ == "__main__":
    main()
