"""QuietServer: uvicorn that looks for an exit once a second, yet stops at once when asked."""

import signal
import socket
import threading
import time

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from reference import serve


def app() -> FastAPI:
    made = FastAPI()

    @made.get("/ping")
    def ping() -> dict[str, bool]:
        return {"ok": True}

    return made


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_it_serves_and_stops_at_once_when_asked():
    port = free_port()
    server = serve.QuietServer(uvicorn.Config(app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    assert httpx.get(f"http://127.0.0.1:{port}/ping").json() == {"ok": True}
    time.sleep(0.1)  # into a one-second wait of its main loop
    asked = time.monotonic()
    server.handle_exit(signal.SIGTERM, None)
    thread.join(5)
    assert not thread.is_alive()
    assert time.monotonic() - asked < serve.TICK_S / 2  # not the rest of its tick


def test_a_server_that_cannot_start_ends_the_process_with_uvicorns_status():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(SystemExit) as ended:
            serve.run(app(), host="127.0.0.1", port=taken.getsockname()[1], log_level="critical")
    assert ended.value.code == 3
