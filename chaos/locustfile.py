"""Locust load of the chaos experiments: a per-key register through the API, hello_world via BNS, a cell watcher.

Every API operation goes to the history JSONL ($CHAOS_RUN_DIR/history.jsonl); hello_world
calls to hello.jsonl; the watcher's samples (leader, roles, machines down, task copies on
the borglets) to timeline.jsonl. Run only through chaos.load, which bounds the run time.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import requests
from locust import User, between, constant, task

from chaos import cellfile, jobs
from chaos.history import HistoryFile, Op, Outcome, read_result
from reference.cellfile import auth_headers, read_admin_token
from reference.launcher import CellInfo, Role
from reference.master.forward import DEADLINE_HEADER
from spec.taskid import running_twice

STATE_DIR = os.environ.get("CHAOS_STATE_DIR", ".minborg")
RUN_DIR = Path(os.environ.get("CHAOS_RUN_DIR", "reports/chaos/scratch"))
RUN_ID = os.environ.get("CHAOS_RUN_ID", str(int(time.time())))
KEYS_PER_USER = 3
OP_DEADLINE_S = 8.0  # a client gives up on one operation after this long
HISTORY = HistoryFile(RUN_DIR / "history.jsonl")
# The highest etcd revision any answer to this client carried (writes and reads). Every read
# sends it as its revision floor (docs/api.md, "Revision floor"): a replica behind it waits or
# answers 503, and the read goes to another one. A read answered below it all the same is
# recorded as it came, marked stale, for the checker to judge: the client never retries a read
# that answered, whatever it showed.
FLOOR = {"revision": 0}
MIN_REVISION_HEADER = "X-Minborg-Min-Revision"
READ_TIMEOUT_S = 3.0  # an attempt with no answer by then is given up and tried on the next master
_INFO = CellInfo.load(STATE_DIR)
ADMIN = auth_headers(read_admin_token(_INFO.state_dir))  # every simulated client is the cell's admin
_ids = itertools.count()


def _append(name: str, doc: dict[str, Any]) -> None:
    with open(RUN_DIR / name, "a") as out:
        out.write(json.dumps(doc) + "\n")


class KVUser(User):
    """Writes increasing values to a few keys of its own and reads them back, through any
    master (round robin, failing over on refusal), as a Borg client would."""

    wait_time = between(0.1, 0.3)
    weight = 3

    def on_start(self) -> None:
        self.uid = next(_ids)
        self.name_ = f"u{self.uid}"
        self.http = requests.Session()
        self.http.headers.update(ADMIN)
        self.urls = list(_INFO.master_urls)
        self.turn = self.uid
        self.keys = {f"kv-{RUN_ID}-{self.uid}-{n}": 0 for n in range(KEYS_PER_USER)}
        self.created: set[str] = set()  # submitted, perhaps: later writes are updates
        self.acked: set[str] = set()  # surely exists: its submit was acknowledged

    def on_stop(self) -> None:
        self.http.close()

    @task(1)
    def write(self) -> None:
        name = random.choice(list(self.keys))
        self.keys[name] += 1
        value = self.keys[name]
        if name in self.created:
            op = HISTORY.invoke("update", f"chaos/{name}", {"cpu": value})
            method, path, body = "PATCH", f"/v1/jobs/chaos/{name}", jobs.register_patch(value)
        else:
            op = HISTORY.invoke("submit", f"chaos/{name}", {"cpu": value})
            method, path, body = "POST", "/v1/jobs", jobs.register_job(name, value)
        outcome, status = self._call(op, method, path, body)
        if method == "POST" and (outcome != Outcome.FAILED or status == 409):
            self.created.add(name)  # created now, or by an earlier attempt whose answer was lost
        if outcome == Outcome.OK:
            self.acked.add(name)

    @task(1)
    def read(self) -> None:
        name = random.choice(list(self.keys))
        op = HISTORY.invoke("read", f"chaos/{name}", None)
        self._call(op, "GET", f"/v1/jobs/chaos/{name}", None)

    def _call(self, op: Op, method: str, path: str, body: Any) -> tuple[Outcome, int]:
        """One operation with failover; returns its outcome and the last HTTP status."""
        started = time.monotonic()
        uncertain = False
        status, error = 0, "no attempt"
        while time.monotonic() - started < OP_DEADLINE_S:
            url = self.urls[self.turn % len(self.urls)]
            self.turn += 1
            floor = FLOOR["revision"]
            if method == "GET":
                headers = {MIN_REVISION_HEADER: str(floor)}
            else:
                # This attempt is given up after its read timeout, and perhaps retried on another
                # master: a copy of it that reaches a master later must not be made.
                headers = {DEADLINE_HEADER: f"{time.time() + READ_TIMEOUT_S:.3f}"}
            try:
                response = self.http.request(method, url + path, json=body, headers=headers, timeout=(1.0, READ_TIMEOUT_S))
            except requests.RequestException as err:
                error = f"{url}: {type(err).__name__}"
                # Refused or unconnected: the request never left; anything else may have.
                sent = not (
                    "NewConnectionError" in str(err) or isinstance(err, requests.ConnectTimeout)
                )
                uncertain = uncertain or (sent and method != "GET")
                time.sleep(0.05)
                continue
            status = response.status_code
            if status == 503:
                text = response.text
                # "did not confirm"/"did not answer": the write may have been made.
                uncertain = uncertain or "did not confirm" in text or "did not answer" in text
                error = f"{url}: 503"
                time.sleep(0.2)
                continue
            if status == 404 and method == "GET":
                if op.key.split("/", 1)[1] in self.acked:
                    # No job, though this client's submit of it was acknowledged: recorded as
                    # read, and the checker fails it.
                    _append("stale_reads.jsonl", {"t": time.time(), "url": url, "key": op.key,
                                                  "revision": None, "floor": floor})  # fmt: skip
                return self._done(op, Outcome.OK, None, started, status), status
            if status >= 400:
                outcome = Outcome.UNKNOWN if uncertain else Outcome.FAILED
                return self._done(op, outcome, {"status": status}, started, status), status
            doc = response.json()
            revision = int(doc.get("revision") or 0)
            FLOOR["revision"] = max(FLOOR["revision"], revision)
            if method == "GET":
                result: Any = read_result(jobs.register_value(doc["job"]), revision, floor)
                if revision < floor:
                    _append("stale_reads.jsonl", {"t": time.time(), "url": url, "key": op.key,
                                                  "revision": revision, "floor": floor})  # fmt: skip
            else:
                result = {"status": status, "revision": revision}
            return self._done(op, Outcome.OK, result, started, status), status
        outcome = Outcome.UNKNOWN if uncertain else Outcome.FAILED
        return self._done(op, outcome, {"error": error}, started, status, error), status

    def _done(
        self, op: Op, outcome: Outcome, result: Any, started: float, status: int, error: str = ""
    ) -> Outcome:
        HISTORY.complete(op, outcome, result)
        self.environment.events.request.fire(
            request_type="read" if op.op == "read" else "write", name=op.op, response_time=(time.monotonic() - started) * 1000,
            response_length=0, exception=None if outcome == Outcome.OK else RuntimeError(error or str(status)),
            context={},
        )  # fmt: skip
        return outcome


class HelloUser(User):
    """Calls hello_world through its BNS endpoints, balancing over them client-side; keeps
    the last endpoints it resolved when no master answers (tasks run without masters)."""

    fixed_count = 1
    wait_time = constant(0.25)

    def on_start(self) -> None:
        self.http = requests.Session()
        self.http.headers.update(ADMIN)
        self.endpoints: list[str] = []
        self.resolved_at = 0.0
        self.turn = 0

    def on_stop(self) -> None:
        self.http.close()

    def _resolve(self) -> None:
        for url in _INFO.master_urls:
            try:
                response = self.http.get(url + "/v1/jobs/demo/hello_world/endpoints", timeout=1.0)
                found = response.json()["endpoints"]
            except (requests.RequestException, ValueError, KeyError):
                continue
            if found:
                self.endpoints = [f"http://{e['host']}:{e['port']}" for e in found]
            self.resolved_at = time.monotonic()
            return

    @task
    def hello(self) -> None:
        if time.monotonic() - self.resolved_at > 2.0:
            self._resolve()
        t, ok, served, error = time.time(), False, "", "no endpoint"
        for _ in range(len(self.endpoints)):
            endpoint = self.endpoints[self.turn % len(self.endpoints)]
            self.turn += 1
            try:
                if self.http.get(endpoint + "/", timeout=(0.5, 1.0)).status_code == 200:
                    ok, served = True, endpoint
                    break
                error = f"{endpoint}: status"
            except requests.RequestException as err:
                error = f"{endpoint}: {type(err).__name__}"
        _append("hello.jsonl", {"t": t, "ok": ok, "endpoint": served, "error": "" if ok else error})
        self.environment.events.request.fire(
            request_type="hello", name="hello", response_time=(time.time() - t) * 1000,
            response_length=0, exception=None if ok else RuntimeError(error), context={},
        )  # fmt: skip


class WatchUser(User):
    """Samples the cell every half second: each master's role, the leader, machines down,
    and how many borglets run a copy of each task (more than one is a double run)."""

    fixed_count = 1
    wait_time = constant(0.5)

    def on_start(self) -> None:
        self.http = requests.Session()
        self.http.headers.update(ADMIN)

    def on_stop(self) -> None:
        self.http.close()

    def _get(self, url: str) -> Any:
        try:
            response = self.http.get(url, timeout=(0.3, 0.8))
            return response.json() if response.status_code == 200 else None
        except (requests.RequestException, ValueError):
            return None

    @task
    def sample(self) -> None:
        t = time.time()
        roles = {}
        for record in _INFO.of_role(Role.MASTER):
            health = self._get(record.url + "/healthz")
            roles[record.name] = health.get("role") if health else None
        status = next(
            (
                s
                for r in _INFO.of_role(Role.MASTER)
                if roles[r.name] and (s := self._get(r.url + "/v1/cell"))
            ),
            None,
        )
        live = cellfile.live_task_ids(_INFO, timeout=0.8)
        _append("timeline.jsonl", {
            "t": t, "roles": roles, "leader": status.get("leader") if status else None,
            "machines_down": (status or {}).get("machines", {}).get("down"),
            "double": sorted(f"{job}/{index}" for job, index in running_twice(live)), "running": len(live),
        })  # fmt: skip
