"""Locust load of the elastic campaign: service users calling hello_world's tasks directly, users rising in steps, holding, falling.

Configured by environment (the campaign sets it):

    ELASTIC_MASTER     master URL, for the job's endpoints
    ELASTIC_JOB        USER/NAME of the service job
    ELASTIC_STAGES     "at_s:users,..." e.g. "0:2,30:6,60:10,90:1,150:0" (0 users ends the run)
    ELASTIC_RATE       requests per second of one user (constant throughput)
    ELASTIC_COST_MS    CPU each request burns in the task (?cost_ms=)
    ELASTIC_REFRESH_S  how often a user refetches the endpoints (as BNS clients do)
    ELASTIC_LOG        CSV written here: one line per request (wall time, ms, ok, endpoint, error)

Each user balances round-robin over the endpoints and, when a connection fails, retries
once on another endpoint, as reference.client.RoundRobin does.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from typing import Any

from locust import FastHttpUser, LoadTestShape, constant_throughput, events, task

from loadtests.elastic.analysis import parse_stages

MASTER = os.environ.get("ELASTIC_MASTER", "http://127.0.0.1:7000").rstrip("/")
JOB = os.environ.get("ELASTIC_JOB", "demo/hello_world")
RATE = float(os.environ.get("ELASTIC_RATE", "4"))
COST_MS = float(os.environ.get("ELASTIC_COST_MS", "10"))
REFRESH_S = float(os.environ.get("ELASTIC_REFRESH_S", "2"))
LOG = os.environ.get("ELASTIC_LOG", "")
TIMEOUT_S = 5.0


STAGES = parse_stages(os.environ.get("ELASTIC_STAGES", "0:2,30:6,60:10,90:1,150:0"))
_log = open(LOG, "a", buffering=1) if LOG else None  # noqa: SIM115 (open for the whole run)


@events.request.add_listener
def _record(request_type: str, name: str, response_time: float, response_length: int,
            exception: Any = None, context: Any = None, **_: Any) -> None:  # fmt: skip
    if _log is not None and name == "hello":
        endpoint = (context or {}).get("endpoint", "")
        error = "" if exception is None else str(exception).replace(",", ";").replace("\n", " ")[:200]
        _log.write(f"{time.time():.3f},{response_time:.1f},{int(exception is None)},{endpoint},{error}\n")


class StageShape(LoadTestShape):
    """Users by stage: each stage's count holds until the next; a stage of 0 users ends the run."""

    def tick(self) -> tuple[int, float] | None:
        now = self.get_run_time()
        users = STAGES[0][1]
        for at, n in STAGES:
            if now >= at:
                users = n
        if users == 0:
            return None
        return users, 50.0


class ServiceUser(FastHttpUser):
    host = MASTER
    default_headers = {"Authorization": f"Bearer {os.environ['MINBORG_TOKEN']}"} if os.environ.get("MINBORG_TOKEN") else {}
    wait_time = constant_throughput(RATE)
    network_timeout = TIMEOUT_S
    connection_timeout = TIMEOUT_S

    def on_start(self) -> None:
        self.endpoints: list[str] = []
        self.fetched_at = float("-inf")
        self.next = id(self) % 7  # users start at different tasks
        # Tasks are called with urllib (gevent-patched sockets): Locust's own client would
        # record each attempt, and a retried attempt is one request, recorded once below.

    def _refresh(self) -> None:
        if self.endpoints and time.monotonic() - self.fetched_at < REFRESH_S:
            return
        with self.client.get(f"{MASTER}/v1/jobs/{JOB}/endpoints", name="endpoints", catch_response=True) as r:
            if r.status_code == 200 and r.json():
                self.endpoints = [f"http://{e['host']}:{e['port']}" for e in r.json()["endpoints"]]
                self.fetched_at = time.monotonic()
                r.success()
            else:
                r.failure(f"endpoints: HTTP {r.status_code}")

    @task
    def hello(self) -> None:
        self._refresh()
        if not self.endpoints:
            events.request.fire(request_type="GET", name="hello", response_time=0.0, response_length=0,
                                exception=RuntimeError("no endpoint"), context={})  # fmt: skip
            return
        started = time.perf_counter()
        error: Exception | None = None
        for attempt in range(2):  # one retry, on another endpoint, after a connection error
            endpoint = self.endpoints[self.next % len(self.endpoints)]
            self.next += 1
            try:
                with urllib.request.urlopen(f"{endpoint}/?cost_ms={COST_MS:g}", timeout=TIMEOUT_S) as r:
                    body_len = len(r.read())
                error = None
                break
            except urllib.error.HTTPError as err:  # the task answered: not a connection error
                error, body_len = RuntimeError(f"HTTP {err.code}"), 0
                break
            except OSError as err:  # refused, reset, timed out: another task, once
                error, body_len = err, 0
                self.fetched_at = float("-inf")  # the list is stale: refetch next time
                if attempt == 0 and len(self.endpoints) > 1:
                    continue
                break
        events.request.fire(
            request_type="GET", name="hello", response_time=(time.perf_counter() - started) * 1000.0,
            response_length=body_len, exception=error, context={"endpoint": endpoint},
        )  # fmt: skip
