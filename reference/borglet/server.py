"""The borglet's HTTP API: /v1/sync for the master, /v1/state, task logs, task exec, /healthz and /metrics.

With a channel key, every endpoint but /healthz and /metrics answers only requests signed
with it (reference/channel.py): a 401 otherwise, before any handler runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST

from reference import channel, fastjson, wirelimits
from reference.borglet import execute, logs
from reference.borglet.metrics import make_registry, render
from reference.borglet.protocol import SyncRequest
from reference.borglet.supervisor import IDLE_TICK_S, Borglet, SyncRefused

log = logging.getLogger(__name__)

# Every body the borglet takes is a master's signed sync, up to the channel's own bound on
# what it reads before checking a signature (reference/wirelimits.py).
WIRE_LIMITS = wirelimits.BORGLET


def make_app(
    borglet: Borglet, kill_tasks_on_exit: bool = False, channel_key: bytes | None = None
) -> FastAPI:
    """An app whose lifespan runs the supervisor loop; shutting it down leaves tasks running
    unless kill_tasks_on_exit. With `channel_key`, it obeys only requests signed with it;
    without one, anyone who reaches its port (only hand-run experiments: --insecure-channel)."""
    registry = make_registry(borglet)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        borglet.start()
        rotator = logs.Rotator(borglet.config.state_dir, borglet.log_keys)
        rotator.start()
        woken = wake_on_child_exit(borglet)
        try:
            yield
        finally:
            if woken:
                asyncio.get_running_loop().remove_signal_handler(signal.SIGCHLD)
            rotator.stop()
            borglet.stop(kill_tasks=kill_tasks_on_exit)

    reports = StateReports()
    app = FastAPI(title=f"minborg borglet {borglet.config.name}", lifespan=lifespan)
    if channel_key is not None:
        app.add_middleware(
            channel.Verifier, key=channel_key, machine=borglet.config.name, on_stand_down=borglet.stand_down
        )

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
    def state(request: Request) -> Any:
        """The machine's report, with an ETag of its content: a poller that sends the tag it
        last read (If-None-Match) gets 304 and no body while nothing changed."""
        return reports.response(borglet.report(), request.headers.get("if-none-match"))

    @app.get("/v1/tasks/{task_id:path}/logs", response_model=None)
    async def task_logs(
        task_id: str, stream: str = "stdout", tail: int = 100, follow: bool = False, max_s: float = 300.0
    ) -> Any:
        """A task's stdout or stderr: its last `tail` lines, then with follow=true what it
        writes next, until it ends or `max_s` seconds pass (at most an hour)."""
        problem = _log_params(stream, tail, max_s)
        if problem is not None:
            return JSONResponse(status_code=422, content={"detail": [problem]})
        key = borglet.log_key(task_id)
        text = logs.tail(borglet.config.state_dir, key, stream, tail)
        if text is None:
            return JSONResponse(
                status_code=404,
                content={"detail": [{"field": "task_id", "error": _no_log(borglet, task_id)}]},
            )
        if not follow:
            return Response(content=text, media_type="text/plain; charset=utf-8")

        async def body() -> Any:
            yield text
            async for chunk in logs.follow(
                borglet.config.state_dir, key, stream, ended=lambda: borglet.task_ended(task_id),
                max_s=max_s, clock=time.monotonic,
            ):  # fmt: skip
                yield chunk

        return StreamingResponse(body(), media_type="text/plain; charset=utf-8")

    execute.register(app, borglet)  # POST /v1/tasks/{task_id}/exec: task exec

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"ok": True, "machine": borglet.config.name}

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(content=render(registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _log_params(stream: str, tail: int, max_s: float) -> dict[str, str] | None:
    if stream not in logs.STREAMS:
        return {"field": "stream", "error": f"must be stdout or stderr, not {stream!r}"}
    if not 0 <= tail <= logs.MAX_TAIL_LINES:
        return {"field": "tail", "error": f"must be between 0 and {logs.MAX_TAIL_LINES} lines"}
    if not 0 < max_s <= logs.MAX_FOLLOW_S:
        return {"field": "max_s", "error": f"must be above 0 and at most {logs.MAX_FOLLOW_S:.0f} seconds"}
    return None


def _no_log(borglet: Borglet, task_id: str) -> str:
    state = borglet.task_state(task_id)
    if state is None:
        return f"machine {borglet.config.name} has no log of task {task_id}: it never ran here"
    return f"task {task_id} has no log on machine {borglet.config.name}: it is {state}, its process never started"


def _json(report: dict[str, Any]) -> Response:
    # A report of thousands of tasks is plain JSON already: skip FastAPI's generic encoder,
    # which costs more than the rest of a poll.
    return Response(content=_body(report), media_type="application/json")


def _body(report: dict[str, Any]) -> bytes:
    return fastjson.dumps(report)


def state_tag(body: bytes) -> str:
    """The ETag of a report's JSON: its content's hash, so equal reports have equal tags,
    also across a restart of the borglet."""
    return '"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"'


def wake_on_child_exit(borglet: Borglet) -> bool:
    """A task's exit wakes the supervisor loop at once (its idle passes are a second apart).
    Only the main thread's event loop can take a signal: served otherwise (a test's client),
    exits are seen on the next pass. A loop that keeps SIGCHLD for itself (uvloop) refuses it,
    said in the log: the borglet's server runs asyncio's loop (cli.py). Whether the handler was
    installed."""
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGCHLD, borglet.wake)
    except RuntimeError as err:
        log.warning("task exits are seen on the supervisor's next pass, up to %.0f s late: %s", IDLE_TICK_S, err)
        return False
    except (ValueError, NotImplementedError):
        return False
    return True


class StateReports:
    """The machine's report with an ETag of its content, 304 with no body to a request that
    names that tag. The report last served is kept with its JSON and tag: an idle machine's
    report is most often equal to the last one (its master polls it every second), and
    comparing two reports costs a fraction of encoding and hashing one."""

    def __init__(self) -> None:
        self._last: tuple[dict[str, Any], bytes, str] | None = None
        self.reused = 0

    def response(self, report: dict[str, Any], if_none_match: str | None) -> Response:
        last = self._last
        if last is not None and last[0] == report:
            self.reused += 1
            body, tag = last[1], last[2]
        else:
            body = _body(report)
            tag = state_tag(body)
            self._last = (report, body, tag)
        if if_none_match == tag:
            return Response(status_code=304, headers={"ETag": tag})
        return Response(content=body, media_type="application/json", headers={"ETag": tag})
