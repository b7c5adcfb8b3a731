"""The overload bench's API reader, in a process of its own, as a user's client would be.

`GET /v1/cell` every READ_EVERY_S, round robin over the masters; latencies in ms. The bench's
own process also scans /proc for the flood's 10,000 processes every second and samples every
cell process's CPU: a reader thread beside that work waits for its own interpreter's lock, and
what it measured was partly the bench. Here the reader shares nothing with the bench but the
host: it runs in a session of its own (the kernel's autogroup gives each session an equal share
of the CPU, so the bench's scans are not taken from the reader's share), at the default weight.
The bench starts it with `ReadProbe` and reads its figures when the `with` block ends.

    python -m loadtests.readprobe URL [URL ...]   (headers as JSON in MINBORG_READ_HEADERS)

reads until its stdin closes (the bench closes it, or the bench died), then prints one JSON
object: latencies, started (CLOCK_MONOTONIC, the bench's clock too), errors, error_kinds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Self

import httpx

from loadtests.periodic import Periodic

READ_EVERY_S = 0.2
HEADERS_ENV = "MINBORG_READ_HEADERS"  # not in argv: the token would show in `ps`


class Reader(Periodic):
    """GET /v1/cell every READ_EVERY_S, round robin over the masters; latencies in ms."""

    def __init__(self, urls: list[str], headers: dict[str, str]) -> None:
        super().__init__(READ_EVERY_S, "reader")
        self.urls = urls
        self.latencies: list[float] = []
        self.started: list[float] = []  # time.monotonic() at which each read in `latencies` was sent
        self.errors = 0
        self.error_kinds: dict[str, int] = {}  # "HTTP 503", "ReadTimeout", ...: what each failed read got
        self._reads = 0
        self._http = httpx.Client(timeout=10.0, headers=headers)

    def tick(self) -> None:
        url = self.urls[self._reads % len(self.urls)]
        self._reads += 1
        began = time.monotonic()
        try:
            status = self._http.get(f"{url}/v1/cell").status_code
            kind = "" if status == 200 else f"HTTP {status}"
        except httpx.HTTPError as err:
            kind = type(err).__name__
        if not kind:
            self.latencies.append((time.monotonic() - began) * 1000)
            self.started.append(began)
        else:
            self.errors += 1
            self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1

    def close(self) -> None:
        self._http.close()

    def figures(self) -> dict[str, Any]:
        return {
            "latencies": self.latencies, "started": self.started,
            "errors": self.errors, "error_kinds": self.error_kinds,
        }  # fmt: skip


class ReadProbe:
    """Runs `python -m loadtests.readprobe` for the `with` block; then holds what it measured
    (`latencies`, `started`, `errors`, `error_kinds`, as Reader's)."""

    def __init__(self, urls: list[str], headers: dict[str, str], stop_timeout_s: float = 30.0) -> None:
        self.urls, self.headers, self.stop_timeout_s = urls, headers, stop_timeout_s
        self.latencies: list[float] = []
        self.started: list[float] = []
        self.errors = 0
        self.error_kinds: dict[str, int] = {}
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Self:
        env = {**os.environ, HEADERS_ENV: json.dumps(self.headers)}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "loadtests.readprobe", *self.urls],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
            start_new_session=True,  # its own login session, so its own CPU group: not the bench's
        )  # fmt: skip
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            out, _ = proc.communicate(timeout=self.stop_timeout_s)  # closes its stdin: it stops
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RuntimeError("the read probe did not stop within its timeout") from None
        if proc.returncode != 0:
            raise RuntimeError(f"the read probe exited {proc.returncode}")
        doc = json.loads(out)
        self.latencies, self.started = doc["latencies"], doc["started"]
        self.errors, self.error_kinds = doc["errors"], doc["error_kinds"]


def main(argv: list[str] | None = None) -> None:
    urls = list(argv if argv is not None else sys.argv[1:])
    if not urls:
        raise SystemExit("usage: python -m loadtests.readprobe URL [URL ...]")
    headers = json.loads(os.environ.get(HEADERS_ENV, "{}"))
    with Reader(urls, headers) as reader:
        sys.stdin.read()  # until the bench closes the pipe (or dies)
    json.dump(reader.figures(), sys.stdout)


if __name__ == "__main__":
    main()
