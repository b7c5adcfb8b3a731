"""Writes sent to a follower, passed on to the leader named in the leader key; 503 with Retry-After when there is none."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import httpx
from fastapi import Request
from fastapi.responses import JSONResponse, Response

if TYPE_CHECKING:
    from reference.master.replica import Replica

log = logging.getLogger(__name__)

FORWARD_TIMEOUT_S = 10.0
HOP_HEADER = "X-Minborg-Forwarded-By"


class Forwarder:
    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self.http = httpx.Client(timeout=httpx.Timeout(FORWARD_TIMEOUT_S, connect=1.0))

    def forward(self, request: Request, payload: Any) -> Response:
        leader = self.replica.leader()
        if leader is None or leader.name == self.replica.name or request.headers.get(HOP_HEADER):
            # No leader, or the key still names us after we stepped down, or the leader we
            # forwarded to did not lead: one hop only, then the client retries.
            return _unavailable("no leader is elected right now; retry")
        url = leader.url.rstrip("/") + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        try:
            answer = self.http.request(
                request.method, url, json=payload, headers={HOP_HEADER: self.replica.name}
            )
        except httpx.HTTPError as err:
            log.info("forward to %s failed: %s", leader.name, err)
            return _unavailable(f"the leader {leader.name} did not answer; retry")
        headers = {k: v for k, v in answer.headers.items() if k.lower() in ("x-minborg-revision", "retry-after")}
        headers["X-Minborg-Leader"] = leader.name
        return Response(
            content=answer.content,
            status_code=answer.status_code,
            headers=headers,
            media_type=answer.headers.get("content-type", "application/json"),
        )


def _unavailable(error: str) -> JSONResponse:
    return JSONResponse(
        status_code=503,
        content={"detail": [{"field": "", "error": error}]},
        headers={"Retry-After": "1"},
    )
