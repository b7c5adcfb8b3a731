"""Refuse `GET /v1/...` reads a replica cannot answer freshly: a cache older than its bound, or below the client's revision floor."""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import parse_qs

import anyio.to_thread
from starlette.types import ASGIApp, Receive, Scope, Send

from reference.master import freshness


class ReadGate:
    """ASGI middleware in front of the read routes.

    A plain ASGI wrapper (like `api.Observe`), so a fresh read pays two comparisons. Only
    `GET` under `/v1/` is gated: `/healthz`, `/readyz` and `/metrics` must answer from a
    cut-off replica, and writes are fenced in etcd and forwarded, so they need no gate.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        age: Callable[[], float],
        revision: Callable[[], int],
        wait_revision: Callable[[int, float], bool],
        bound_s: float,
        wait_s: float = freshness.MIN_REVISION_WAIT_S,
    ) -> None:
        self.app = app
        self.age, self.revision, self.wait_revision = age, revision, wait_revision
        self.bound_s, self.wait_s = bound_s, wait_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))

        def first(name: str) -> str | None:
            return query.get(name, [None])[0]

        try:
            floor = freshness.parse_min_revision(
                headers.get(freshness.MIN_REVISION_HEADER.lower()), first(freshness.MIN_REVISION_QUERY)
            )
        except ValueError as err:
            await _answer(send, 422, freshness.MIN_REVISION_QUERY, str(err), None)
            return
        stale_ok = freshness.allows_stale(
            headers.get(freshness.ALLOW_STALE_HEADER.lower()), first(freshness.ALLOW_STALE_QUERY)
        )
        refusal = None if stale_ok else freshness.too_old(self.age(), self.bound_s)
        if refusal is None and freshness.needs_wait(self.revision(), floor):
            assert floor is not None
            # The wait blocks on the cache's condition: off the event loop.
            await anyio.to_thread.run_sync(self.wait_revision, floor, self.wait_s)
            refusal = freshness.below_floor(self.revision(), floor)
        if refusal is not None:
            await _answer(send, 503, refusal.field, refusal.error, refusal.retry_after_s)
            return
        await self.app(scope, receive, send)


async def _answer(send: Send, status: int, field: str, error: str, retry_after_s: int | None) -> None:
    body = json.dumps({"detail": [{"field": field, "error": error}]}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if retry_after_s is not None:
        headers.append((b"retry-after", str(retry_after_s).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
