"""Writes sent to a follower, passed on to the leader named in the leader key; 503 with Retry-After when there is none.

Read-your-writes through a follower: before it answers a forwarded write, the follower
waits (at most `CATCH_UP_S`) until its own watch cache holds the revision the leader's answer
names in `X-Minborg-Revision`, so a client that reads from the same replica next sees its
write. If the cache does not get there in time the answer goes out anyway (the write was
made); the client can still ask for that revision with `X-Minborg-Min-Revision`.

A forward that fails on a kept-alive connection the leader had closed is sent once more on a
fresh one (`retry_safe`), and only that failure: the request went out on a reused connection
(no connect for it) and the connection closed with no byte of an answer. The leader's server
(uvicorn) closes an idle kept-alive connection only when no request is in progress on it, and
finishes the answer to every request it has read before it shuts down; so a request met by
that close was never read, and sending it again cannot apply it twice. (A leader that died
while handling it refuses the fresh connection, and the client gets the 503 as before.) Any
other failure, a timeout above all, may follow a write the leader made: it is not retried.

Every forward carries a deadline (`DEADLINE_HEADER`): a partition can hold a forward for
seconds and deliver it, by TCP's retransmission or by the send once more above, after its
client gave up and retried the write on another master. The leader refuses a write that reaches
it after its deadline (`late`, in api.py's `write`), so the copy held up is not made after the
retry and the writes the client made since.
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import TYPE_CHECKING, Any

import httpx
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from reference import channel

if TYPE_CHECKING:
    from reference.master.replica import Replica

log = logging.getLogger(__name__)

FORWARD_TIMEOUT_S = 10.0
HOP_HEADER = "X-Minborg-Forwarded-By"
# A write's deadline, in seconds since the epoch: a master that gets it later answers 503 and
# makes nothing (`late`). A client may set it; a follower sets it on every write it forwards,
# to when it got the write plus FORWARD_BUDGET_S, or the client's if sooner.
DEADLINE_HEADER = "X-Minborg-Deadline"
# How long a forwarded write may take to reach the leader. A forward held up by a partition
# and delivered after its client gave up (and perhaps retried the write elsewhere, where it was
# made) must not be made a second time, after writes the client made since: a DELETE of a job
# by name would kill the job submitted again under that name. Under the 3 s after which the
# register clients of the chaos suite retry, and under the command line's; a forward takes
# milliseconds when nothing is cut. Measured on the masters' clocks, which must agree within
# a second for it to hold (docs/decisions.md).
FORWARD_BUDGET_S = 2.0
REVISION_HEADER = "X-Minborg-Revision"
# What of the leader's answer goes back to the client (WWW-Authenticate with a 401).
FORWARDED_BACK = ("x-minborg-revision", "retry-after", "www-authenticate")
CATCH_UP_S = 2.0  # the longest a forwarded write's answer waits for this replica's cache


class Forwarder:
    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self.http = httpx.Client(timeout=httpx.Timeout(FORWARD_TIMEOUT_S, connect=1.0), verify=channel.peer_verify())

    def forward(self, request: Request, payload: Any, received: float | None = None) -> Response:
        """The leader's answer to the write `request` (body `payload`), which this replica got at
        `received` (now if not given): its deadline counts from then."""
        leader = self.replica.leader()
        if leader is None or leader.name == self.replica.name or request.headers.get(HOP_HEADER):
            # No leader, or the key still names us after we stepped down, or the leader we
            # forwarded to did not lead: one hop only, then the client retries.
            return _unavailable("no leader is elected right now; retry")
        url = leader.url.rstrip("/") + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        try:
            # json.dumps, not httpx's json=: a body with JSON's Infinity or NaN must reach the
            # leader to be refused there with a 422, not fail to encode here.
            body = None if payload is None else json.dumps(payload)
            headers = {HOP_HEADER: self.replica.name, "content-type": "application/json"}
            got_at = time.time() if received is None else received
            headers[DEADLINE_HEADER] = f"{forward_deadline(request.headers.get(DEADLINE_HEADER), got_at):.3f}"
            # The caller's token goes along: the leader checks who asks, as this replica did.
            if (auth := request.headers.get("authorization")) is not None:
                headers["Authorization"] = auth
            answer = send_once_more_if_unread(self.http, request.method, url, body, headers)
        except httpx.HTTPError as err:
            log.info("forward to %s failed: %s", leader.name, err)
            return _unavailable(f"the leader {leader.name} did not answer; retry")
        self.catch_up(answer)
        headers = {k: v for k, v in answer.headers.items() if k.lower() in FORWARDED_BACK}
        headers["X-Minborg-Leader"] = leader.name
        return Response(
            content=answer.content,
            status_code=answer.status_code,
            headers=headers,
            media_type=answer.headers.get("content-type", "application/json"),
        )

    def catch_up(self, answer: httpx.Response) -> bool:
        """Wait until this replica's cache reflects the revision a leader's answer names."""
        raw = answer.headers.get(REVISION_HEADER)
        if raw is None or answer.status_code >= 500:
            return True
        try:
            revision = int(raw)
        except ValueError:
            return True
        if self.replica.cache.wait_revision(revision, CATCH_UP_S):
            return True
        log.info("cache did not reach the forwarded write's revision %d in %.1f s", revision, CATCH_UP_S)
        return False


class ConnectTrace:
    """httpcore's `trace` extension, kept: whether the request opened a connection of its own,
    and whether any byte of the answer came."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def __call__(self, name: str, info: dict[str, Any]) -> None:
        self.events.append(name)

    @property
    def connected(self) -> bool:
        return any(e.startswith("connection.connect_tcp") for e in self.events)

    @property
    def answered(self) -> bool:
        return "http11.receive_response_headers.complete" in self.events


def retry_safe(err: Exception, connected: bool, answered: bool) -> bool:
    """Whether a forward that failed with `err` may be sent again: only when the leader closed a
    reused kept-alive connection before any answer (see the module's docstring)."""
    return isinstance(err, httpx.RemoteProtocolError) and not connected and not answered


def send_once_more_if_unread(
    http: httpx.Client, method: str, url: str, body: str | None, headers: dict[str, str]
) -> httpx.Response:
    """The leader's answer to the request, sent a second time on a fresh connection when the
    first went out on a kept-alive one the leader had just closed (`retry_safe`)."""
    trace = ConnectTrace()
    try:
        return http.request(method, url, content=body, headers=headers, extensions={"trace": trace})
    except httpx.HTTPError as err:
        if not retry_safe(err, trace.connected, trace.answered):
            raise
        log.info("forward to %s met a closed kept-alive connection (%s): sent once more", url, err)
    # The pool's other idle connections to the leader may be as stale: a fresh one for sure.
    with httpx.Client(timeout=http.timeout, verify=channel.peer_verify()) as fresh:
        return fresh.request(method, url, content=body, headers=headers)


def deadline_of(header: str | None) -> float | None:
    """A write's deadline from its header: None when there is none or it is no finite number."""
    if header is None:
        return None
    try:
        value = float(header)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def forward_deadline(client_header: str | None, now: float) -> float:
    """The deadline a follower puts on a write it forwards at `now`: its budget, or the
    client's own deadline where that is sooner."""
    own = now + FORWARD_BUDGET_S
    theirs = deadline_of(client_header)
    return own if theirs is None else min(own, theirs)


def late(header: str | None, now: float) -> JSONResponse | None:
    """The 503 for a write whose deadline (`header`) passed before it reached this master at
    `now`; None when it has none or is in time. The write is not made: the client may retry."""
    deadline = deadline_of(header)
    if deadline is None or now <= deadline:
        return None
    return JSONResponse(
        status_code=503,
        content={"detail": [{"field": DEADLINE_HEADER, "error": (
            f"this write reached the master {now - deadline:.1f} s after its deadline: it was not made; retry"
        )}]},
        headers={"Retry-After": "1"},
    )  # fmt: skip


def _unavailable(error: str) -> JSONResponse:
    return JSONResponse(
        status_code=503,
        content={"detail": [{"field": "", "error": error}]},
        headers={"Retry-After": "1"},
    )
