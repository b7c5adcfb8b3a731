"""The borglet's HTTP API: /v1/sync for the master, /v1/state, /healthz and /metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from reference.borglet.metrics import make_registry, render
from reference.borglet.protocol import SyncRequest
from reference.borglet.supervisor import Borglet, StaleEpoch


def make_app(borglet: Borglet, kill_tasks_on_exit: bool = False) -> FastAPI:
    """An app whose lifespan runs the supervisor loop; shutting it down leaves tasks running
    unless kill_tasks_on_exit."""
    registry = make_registry(borglet)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        borglet.start()
        try:
            yield
        finally:
            borglet.stop(kill_tasks=kill_tasks_on_exit)

    app = FastAPI(title=f"minborg borglet {borglet.config.name}", lifespan=lifespan)

    # Handlers are sync (def): FastAPI runs them in its thread pool, and the borglet's own lock
    # serializes them with the supervisor loop.
    @app.post("/v1/sync", response_model=None)
    def sync(request: SyncRequest) -> Any:
        try:
            return borglet.sync(request)
        except StaleEpoch as stale:
            return JSONResponse(
                status_code=409,
                content={
                    "error": str(stale),
                    "epoch": stale.highest,
                    "machine": borglet.config.name,
                },
            )

    @app.get("/v1/state")
    def state() -> dict[str, Any]:
        return borglet.report()

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"ok": True, "machine": borglet.config.name}

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(content=render(registry), media_type=CONTENT_TYPE_LATEST)

    return app
