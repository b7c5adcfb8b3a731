"""The borglet's HTTP API: /v1/sync for the master, /v1/state, /healthz and /metrics."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from reference.borglet.metrics import make_registry, render
from reference.borglet.protocol import SyncRequest
from reference.borglet.supervisor import Borglet, SyncRefused


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
            return _json(borglet.sync(request))
        except SyncRefused as refused:
            return JSONResponse(
                status_code=409,
                content={
                    "error": str(refused),
                    "reason": refused.reason,
                    "epoch": refused.fence.epoch,
                    "seq": refused.fence.seq,
                    "revision": refused.fence.revision,
                    "machine": borglet.config.name,
                },
            )

    @app.get("/v1/state", response_model=None)
    def state() -> Any:
        return _json(borglet.report())

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"ok": True, "machine": borglet.config.name}

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(content=render(registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _json(report: dict[str, Any]) -> Response:
    # A report of thousands of tasks is plain JSON already: skip FastAPI's generic encoder,
    # which costs more than the rest of a poll.
    return Response(content=json.dumps(report, separators=(",", ":")), media_type="application/json")
