"""A small HTTP client for API v1 that records every job operation in a History."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from harness.history import History, OpKind, Outcome
from reference.endpoints import Endpoints, attempt_order

TIMEOUT_S = 5.0


@dataclass
class Reply:
    status: int  # 0 when no answer came (connection refused, timeout)
    body: Any
    outcome: Outcome


def tracked(job: dict[str, Any] | None) -> dict[str, Any] | None:
    """The fields of a job view the history's register compares: task count and CPU."""
    if job is None:
        return None
    return {"task_count": job.get("task_count"), "cpu": cpu_milli(job.get("request", {}).get("cpu", 0))}


def cpu_milli(value: Any) -> int:
    """'250m' -> 250, 0.5 -> 500, '2' -> 2000 (the job file's CPU forms)."""
    text = str(value)
    if text.endswith("m"):
        return int(float(text[:-1]))
    return int(round(float(text) * 1000))


class Api:
    """Talks to the masters by URL, rotating over them; never follows a redirect to `reference/`."""

    def __init__(
        self, urls: list[str], history: History | None = None,
        borglet_auth: Callable[[str], httpx.Auth] | None = None, token: str | None = None,
    ) -> None:  # fmt: skip
        self.urls = list(urls)
        # How to sign a read of a machine's borglet, by machine name (a cell that authenticates
        # its borglets' callers); None sends them unsigned.
        self._borglet_auth = borglet_auth
        self.history = history if history is not None else History()
        # The cell's bearer token: given, else $MINBORG_TOKEN (a cell of another implementation
        # may take none).
        token = token or os.environ.get("MINBORG_TOKEN")
        self._http = httpx.Client(timeout=TIMEOUT_S, headers={"Authorization": f"Bearer {token}"} if token else {})
        # Requests spread over the masters, each from the next one round; reads of one
        # revision stay on the master that answered last (`read_together`).
        self._rr = itertools.cycle(range(len(self.urls)))
        self._readers = Endpoints(self.urls)
        # The highest revision a poll was read at: every later poll is read at it or after,
        # whichever master answers it (`read_together`).
        self.revision_seen = 0

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, body: Any = None, write: bool = False) -> Reply:
        """One attempt per live master until one answers; a write answered 5xx or cut mid-way is unknown."""
        for url in attempt_order(self.urls, next(self._rr)):
            try:
                r = self._http.request(method, url + path, json=body)
            except httpx.ConnectError:
                continue  # nothing was sent: try the next master
            except httpx.HTTPError as err:
                return Reply(0, str(err), Outcome.UNKNOWN if write else Outcome.FAILED)
            try:
                data = r.json()
            except ValueError:
                data = r.text
            if r.status_code < 300:
                return Reply(r.status_code, data, Outcome.OK)
            if r.status_code >= 500:
                return Reply(r.status_code, data, Outcome.UNKNOWN if write else Outcome.FAILED)
            return Reply(r.status_code, data, Outcome.FAILED)
        return Reply(0, "no master answered", Outcome.FAILED)

    def read_together(self, paths: list[str], tries: int = 5) -> list[Any] | None:
        """GET every path from one master at one cache revision: each answer is stamped with
        the revision it was read at, and a set of answers at different revisions (the cell
        moved between them) is read again. A 404 reads as None. None if no master gave a
        consistent set in `tries`.

        Polls never go back in time: each read carries the highest revision a poll was read
        at as its floor (`X-Minborg-Min-Revision`; a replica behind it waits a moment, then
        refuses), and an answer below it (a cell that ignores the floor) is read elsewhere.
        Without the floor, the poll after a failover could be read from a replica whose
        watch cache is behind the last poll's: the cell seen moving backwards, which the
        checker would judge as moves the cell never made."""
        for _ in range(tries):
            # The master that answered last: polls of one master never go back in time.
            url = self._readers.current()
            out: list[Any] = []
            revisions = set()
            floor = {"X-Minborg-Min-Revision": str(self.revision_seen)} if self.revision_seen else None
            try:
                for path in paths:
                    r = self._http.get(url + path, headers=floor)
                    if r.status_code == 404:
                        out.append(None)
                        continue
                    if r.status_code != 200:
                        raise ValueError(f"{path}: {r.status_code}")
                    body = r.json()
                    revision = body.get("revision")
                    if isinstance(revision, int) and revision < self.revision_seen:
                        raise ValueError(f"{path}: revision {revision}, behind {self.revision_seen}")
                    revisions.add(revision)
                    out.append(body)
            except (httpx.HTTPError, ValueError):
                self._readers.failed(url)  # down, not serving or behind: the next one
                continue
            if len(revisions) <= 1:
                seen = next(iter(revisions), None)
                if isinstance(seen, int):
                    self.revision_seen = max(self.revision_seen, seen)
                return out
        return None

    def machine_events(self, since: int) -> tuple[list[tuple[str, str]], int] | None:
        """The machines the cell declared down, up or removed after revision `since`, in order
        ([(machine, kind)]), and the revision they reach: a short read of `GET /v1/events`,
        which replays every change after `since`, so a machine down and up again between two
        polls is seen too. None when no master answered; revision -1 when `since` is older than it keeps."""
        url = self._readers.current()
        try:
            r = self._http.get(url + "/v1/events", params={"since": since, "timeout_s": 0.05})
        except httpx.HTTPError:
            self._readers.failed(url)
            return None
        if r.status_code == 410:
            return [], -1  # fell behind what the master keeps: the caller reads on from its latest revision
        if r.status_code != 200:
            return None
        return parse_machine_events(r.text, since)

    def get(self, path: str) -> Any:
        r = self.request("GET", path)
        return r.body if r.outcome is Outcome.OK else None

    # --- recorded job operations ----------------------------------------------------------------

    def _recorded(self, kind: OpKind, key: str, value: Any, method: str, path: str, body: Any) -> Reply:
        op = self.history.invoke(kind, key, value)
        r = self.request(method, path, body, write=True)
        self.history.complete(op, r.outcome, r.status)
        return r

    def submit(self, doc: dict[str, Any]) -> Reply:
        key = f"{doc['user']}/{doc['name']}"
        value = {"task_count": doc["task_count"], "cpu": cpu_milli(doc["request"]["cpu"])}
        return self._recorded(OpKind.SUBMIT, key, value, "POST", "/v1/jobs", doc)

    def update(self, key: str, task_count: int | None = None, cpu: int | None = None) -> Reply:
        body: dict[str, Any] = {}
        value: dict[str, Any] = {}
        if task_count is not None:
            body["task_count"] = value["task_count"] = task_count
        if cpu is not None:
            body["request"] = {"cpu": f"{cpu}m"}
            value["cpu"] = cpu
        return self._recorded(OpKind.UPDATE, key, value, "PATCH", f"/v1/jobs/{key}", body)

    def put_job(self, doc: dict[str, Any]) -> Reply:
        """A whole job file sent again with some field changed (`PUT /v1/jobs/{user}/{name}`):
        recorded as an update of its tracked fields, which it keeps or changes as the file says."""
        key = f"{doc['user']}/{doc['name']}"
        value = {"task_count": doc["task_count"], "cpu": cpu_milli(doc["request"]["cpu"])}
        return self._recorded(OpKind.UPDATE, key, value, "PUT", f"/v1/jobs/{key}", doc)

    def kill(self, key: str) -> Reply:
        return self._recorded(OpKind.KILL, key, None, "DELETE", f"/v1/jobs/{key}", None)

    def kill_task(self, key: str, index: int) -> Reply:
        return self._recorded(OpKind.KILL_TASK, key, index, "DELETE", f"/v1/jobs/{key}/tasks/{index}", None)

    def read_job(self, key: str) -> tuple[bool, dict[str, Any] | None]:
        """(answered, tracked fields or None when the job does not exist)."""
        op = self.history.invoke(OpKind.READ, key)
        r = self.request("GET", f"/v1/jobs/{key}")
        if r.status == 404:
            self.history.complete(op, Outcome.OK, None)
            return True, None
        if r.outcome is Outcome.OK:
            value = tracked(r.body["job"])
            self.history.complete(op, Outcome.OK, value)
            return True, value
        self.history.complete(op, Outcome.FAILED, None)
        return False, None

    # --- plain reads ------------------------------------------------------------------------------

    def machines(self) -> list[dict[str, Any]] | None:
        body = self.get("/v1/machines")
        return None if body is None else body["machines"]

    def jobs(self) -> list[dict[str, Any]] | None:
        body = self.get("/v1/jobs")
        return None if body is None else body["jobs"]

    def tasks(self, key: str) -> list[dict[str, Any]] | None:
        r = self.request("GET", f"/v1/jobs/{key}/tasks")
        if r.status == 404:
            return []
        return r.body["tasks"] if r.outcome is Outcome.OK else None

    def borglet_state(self, address: str, machine: str = "") -> dict[str, Any] | None:
        auth = self._borglet_auth(machine) if self._borglet_auth is not None else None
        try:
            r = self._http.get(address.rstrip("/") + "/v1/state", timeout=2.0, auth=auth)
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None


def parse_machine_events(text: str, since: int) -> tuple[list[tuple[str, str]], int]:
    """(machine, kind) of each `machine` server-sent event in `text`, and the highest event id
    (revision) seen, at least `since`."""
    events: list[tuple[str, str]] = []
    cursor = since
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if fields.get("id", "").isdigit():
            cursor = max(cursor, int(fields["id"]))
        if fields.get("event") == "machine":
            data = json.loads(fields.get("data", "{}"))
            events.append((str(data.get("machine")), str(data.get("kind"))))
    return events, cursor
