"""The guard in front of the master's API: authenticates each request's bearer token, applies its user's rate limit, and refuses what its user may not do (401, 429, 403).

An ASGI wrapper rather than a FastAPI dependency, so a refusal costs no routing or body
parsing, and one place answers for every route, those added later included. The decisions
are `access.py`'s; this module reads the header, the clock and the watch cache, and answers.
A page of the dashboard asked for without a token gets the page's shell, whose script asks
for the data again with the token the user gave (ui.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from starlette.responses import HTMLResponse, JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from reference.master import access
from reference.master.access import AccessConfig, Identity, UserRecord

IDENTITY = "identity"  # the key of the caller's Identity in the request's state
REALM = 'Bearer realm="minborg"'


def identity_of(scope: Scope) -> Identity | None:
    """The identity the guard let through (None when the guard checks nothing)."""
    state = scope.get("state") or {}
    return state.get(IDENTITY)


def _error(status: int, field: str, error: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"detail": [{"field": field, "error": error}]}, headers=headers)


class Guard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        config: AccessConfig,
        user_by_hash: Callable[[str], UserRecord | None],
        ui_shell: Callable[[], str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app, self.config = app, config
        self.user_by_hash, self.ui_shell, self.clock = user_by_hash, ui_shell, clock
        # One event loop runs every request, so the buckets need no lock.
        self.limit = access.RateLimit(config.rate, config.burst)

    def authenticate(self, header: str | None) -> Identity | None:
        token = access.bearer(header)
        if token is None:
            return None
        h = access.hash_token(token)
        return access.identify(h, self.config.admin_hash, self.user_by_hash(h))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.config.enforce:
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if not access.needs_token(path, metrics_open=self.config.metrics_open):
            await self.app(scope, receive, send)
            return
        header = _header(scope, b"authorization")
        method: str = scope["method"]
        if header is None and access.is_ui(path) and method in ("GET", "HEAD"):
            await HTMLResponse(self.ui_shell())(scope, receive, send)
            return
        who = self.authenticate(header)
        if who is None:
            if header is None:
                error = "this API needs a token: send `Authorization: Bearer <token>` (see `minborg user add`)"
                challenge = REALM
            else:
                error = "the token is not valid: it is unknown, revoked, or not a Bearer token"
                challenge = REALM + ', error="invalid_token"'
            await _error(401, "Authorization", error, {"WWW-Authenticate": challenge})(scope, receive, send)
            return
        wait = self.limit.take(who.name, self.clock())
        if wait > 0:
            seconds = access.retry_after(wait)
            error = (
                f"user {who.name} is over its rate limit of {self.config.rate:g} requests/s "
                f"(burst {self.config.burst:g}) on this replica; retry in {seconds} s"
            )
            await _error(429, "", error, {"Retry-After": str(seconds)})(scope, receive, send)
            return
        refusal = access.authorise(who, method, path)
        if refusal is not None:
            await _error(403, "", refusal)(scope, receive, send)
            return
        scope.setdefault("state", {})[IDENTITY] = who
        await self.app(scope, receive, send)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def make(config: AccessConfig, cache: Any, ui_shell: Callable[[], str]) -> dict[str, Any]:
    """The keyword arguments of `app.add_middleware(Guard, ...)` for a replica's watch cache."""
    return {"config": config, "user_by_hash": cache.user_by_hash, "ui_shell": ui_shell}
