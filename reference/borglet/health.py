"""HTTP health probes of tasks, run off the supervisor thread so a slow task cannot stall it."""

from __future__ import annotations

import http.client
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


def probe(port: int, path: str, timeout_s: float, host: str = "127.0.0.1") -> bool:
    """True when GET http://<host>:<port><path> answers 2xx within the timeout: the task's
    machine's address (MachineConfig.host), where it was told to listen and BNS sends clients."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        return 200 <= conn.getresponse().status < 300
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


class Prober:
    """Runs probes on a small pool and hands each result to a callback."""

    def __init__(self, workers: int = 4):
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="health")

    def submit(self, port: int, path: str, timeout_s: float, done: Callable[[bool], None], host: str = "127.0.0.1") -> None:
        future = self._pool.submit(probe, port, path, timeout_s, host)
        future.add_done_callback(lambda f: done(bool(f.result()) if not f.exception() else False))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
