"""The HTTP API v1 of docs/api.md: reads from the watch cache on any replica, writes on the leader (forwarded there from followers)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import Body, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reference import channel, fastjson
from reference.jobspec import validation_errors
from reference.master import (
    access,
    contract,
    drain,
    execute,
    freshness,
    guard,
    jobhistory,
    jobroutes,
    logs,
    quotas,
    ui,
    users,
    views,
    whoami,
)
from reference.master import allocs as alloc_sets
from reference.master import watch as watches
from reference.master.cell import Draft
from reference.master.contract import detail
from reference.master.forward import DEADLINE_HEADER, HOP_HEADER, Forwarder, late
from reference.master.linkshard import RELAY_PATH, REPORTS_PATH, replica_peer
from reference.master.machines import MachineBody, capacity_error, machine_from_body
from reference.master.mutations import ApiError, remove_machine
from reference.master.querycheck import freshness_query, known_query
from reference.master.readgate import ReadGate
from reference.master.replica import Replica
from reference.master.writer import NotLeader, WriteFailed
from reference.scheduler.wire import PLANS_PATH, plan_from_json

log = logging.getLogger(__name__)

RETRY_AFTER_S = "1"
EVENTS = jobroutes.EVENTS


def _settle(answer: asyncio.Future[Any], r: Any) -> None:
    if answer.done():
        return
    if r.error is not None:
        answer.set_exception(r.error)
    else:
        answer.set_result((r.result, r.revision))


class Observe:
    """Counts and times every request by route, method and status.

    A plain ASGI wrapper rather than `@app.middleware("http")`: Starlette runs such a
    middleware through an extra task and memory streams per request, which costs more CPU
    than a read handler itself.
    """

    def __init__(self, app: ASGIApp, metrics: Any) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client sees if the app raises before answering
        # A stream (a watch, followed logs) lasts as long as its client wants: counted, not timed.
        streaming = b"follow=true" in scope.get("query_string", b"")

        async def send_status(message: Message) -> None:
            nonlocal status, streaming
            if message["type"] == "http.response.start":
                status = message["status"]
                streaming = streaming or any(
                    k == b"content-type" and v.startswith(b"text/event-stream") for k, v in message.get("headers", ())
                )
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            # The router put the matched route in the scope on the way in.
            path = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(path, scope["method"], str(status)).inc()
            if not streaming:
                self.metrics.latency.labels(path, scope["method"]).observe(time.perf_counter() - started)


class InternalOnly:
    """ASGI middleware: requests under /internal/ (link shards, the scheduler process) must be
    signed with the cell's channel key for this replica (`channel.Verifier`), or get 401."""

    def __init__(self, app: ASGIApp, key: bytes, peer: str) -> None:
        self.app = app
        self.verifier = channel.Verifier(app, key, peer, open_paths=())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/internal/"):
            await self.verifier(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def make_app(replica: Replica, access_config: access.AccessConfig | None = None) -> FastAPI:
    """The API of `replica`; `access_config` says how callers are checked (default: tokens
    required, no admin token but those of users stored in etcd, the default rate limit)."""
    # Every operation refuses query parameters it does not declare.
    app = FastAPI(title=f"minborg master {replica.name}", version="1", dependencies=[Depends(known_query)])
    access_config = access_config if access_config is not None else access.AccessConfig()
    cell_name = replica.config.cell_name
    if replica.config.channel_key is not None:
        # Between replicas and from the scheduler: signed with the cell's channel key, for
        # this replica, like a master's requests to a borglet.
        app.add_middleware(
            InternalOnly, key=replica.config.channel_key, peer=replica_peer(replica.name)
        )
    forwarder = Forwarder(replica)
    task_logs = logs.LogProxy(auth=channel.client_auth(replica.config.channel_key))
    metrics = replica.metrics

    # Added first, so it runs inside Observe: refused reads are counted too.
    app.add_middleware(
        ReadGate,
        age=replica.cache_age,
        revision=lambda: replica.cache.revision,
        wait_revision=replica.cache.wait_revision,
        bound_s=replica.max_staleness,
    )
    # Outside the read gate, inside Observe: a refused caller costs no cache wait, and is counted.
    app.add_middleware(guard.Guard, **guard.make(access_config, replica.cache, ui.shell_page))
    app.add_middleware(Observe, metrics=metrics)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = []
        for err in exc.errors():
            loc = [str(p) for p in err.get("loc", ()) if p not in ("body",)]
            errors.append({"field": ".".join(loc), "error": str(err.get("msg", "invalid"))})
        return JSONResponse(status_code=422, content={"detail": errors})

    @app.exception_handler(StarletteHTTPException)
    async def refused(request: Request, exc: StarletteHTTPException) -> Response:
        """Starlette's own refusals in the API's error shape: a body that is not JSON at all is a
        422 like any invalid body, and a 405 names every method the path takes, not one route's."""
        status, headers = exc.status_code, dict(exc.headers or {})
        if status == 400:
            status, error = 422, f"the body cannot be read as JSON: {exc.detail}"
        else:
            error = str(exc.detail)
        if status == 405:
            methods = sorted({m for r in app.routes if isinstance(r, APIRoute) and r.matches(request.scope)[0] is not Match.NONE
                              for m in r.methods})  # fmt: skip
            headers["Allow"] = ", ".join(methods)
        if status in (204, 304):
            return Response(status_code=status, headers=headers)
        return JSONResponse(status_code=status, content=detail("", error), headers=headers)

    def stamped(body: dict[str, Any], revision: int, status: int = 200) -> JSONResponse:
        body["revision"] = revision
        return JSONResponse(status_code=status, content=body, headers={"X-Minborg-Revision": str(revision)})

    async def write(
        request: Request, payload: Any, change: Callable[[Draft], Any], render: Callable[[Any, int], JSONResponse]
    ) -> Response:
        """Run a write here if leading, else forward it; errors become 4xx/503, never a 500.

        The handler stays on the event loop: the writer's thread commits the change (with
        whatever else is queued) and calls back. Handing each write to the thread pool
        instead cost a thread hop per request (docs/decisions.md)."""
        received = time.time()
        if (refused := late(request.headers.get(DEADLINE_HEADER), received)) is not None:
            # Held up on the way (a partition): its client may have retried it since.
            log.info("%s %s refused: it came after its deadline (%s)", request.method, request.url.path,
                     f"forwarded by {request.headers[HOP_HEADER]}" if HOP_HEADER in request.headers else "from a client")
            return refused
        if not replica.is_leader:
            return await run_in_threadpool(forwarder.forward, request, payload, received)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = loop.create_future()

        def done(r: Any) -> None:
            loop.call_soon_threadsafe(_settle, answer, r)

        replica.writer.submit(change, done)
        try:
            result, revision = await answer
        except ApiError as err:
            return JSONResponse(status_code=err.status, content={"detail": err.errors})
        except (ValueError, TypeError, OverflowError) as err:
            # A body the change could not read (every check it knows raises ApiError): the
            # client's to fix, so a 422 naming what was wrong, not a 500.
            return JSONResponse(status_code=422, content=detail("", f"the body cannot be read: {err}"))
        except NotLeader:
            return JSONResponse(
                status_code=503,
                content=detail("", "this replica lost the leadership; retry"),
                headers={"Retry-After": RETRY_AFTER_S},
            )
        except WriteFailed as err:
            return JSONResponse(
                status_code=503,
                content=detail("", f"the store did not confirm the write: {err}"),
                headers={"Retry-After": RETRY_AFTER_S},
            )
        return render(result, revision)

    def read(path: str, **kw: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """`app.get` for a `GET /v1/...` read, which also takes ReadGate's freshness controls."""
        responses = {**contract.answers(503), **kw.pop("responses", {})}
        return app.get(path, dependencies=[Depends(freshness_query)], responses=responses, **kw)

    # --- health, metrics, cell ---------------------------------------------------------------
    # Reads are `async def`: they only look at the in-memory watch cache, so they run on the
    # event loop instead of paying a hop to the thread pool and back on every request.

    # Kubernetes' split: /healthz is liveness (200 while the process serves: restarting a
    # replica because etcd is away would not bring etcd back) and says whether reads would be
    # answered; /readyz is readiness (503 while the cache is too old, so a load balancer stops
    # sending reads here).
    def readiness() -> dict[str, Any]:
        return freshness.readiness(replica.cache_age(), replica.max_staleness, replica.cache.revision)

    @app.get("/healthz", responses=contract.answers())
    async def healthz() -> dict[str, Any]:
        return {
            "ok": True,
            "name": replica.name,
            "role": "leader" if replica.is_leader else "follower",
            **readiness(),
        }

    @app.get("/readyz", responses={
        **contract.answers(),
        200: {"model": contract.Readiness, "description": "reads would be answered"},
        503: {"model": contract.Readiness, "headers": contract.RETRY_AFTER,
              "description": "the cache is older than the staleness bound; `reason` says by how much"},
    })  # fmt: skip
    async def readyz() -> JSONResponse:
        body = {"name": replica.name, **readiness()}
        if body["ready"]:
            return JSONResponse(content=body)
        return JSONResponse(status_code=503, content=body, headers={"Retry-After": str(freshness.RETRY_AFTER_S)})

    @app.get("/metrics", response_class=PlainTextResponse, responses=contract.answers())
    def metrics_text() -> Response:
        return Response(content=metrics.render(), media_type=CONTENT_TYPE_LATEST)

    def cell_overview(cell: Any) -> dict[str, Any]:
        leader = replica.named_leader()
        known = {**replica.peers, **cell.replicas, replica.name: replica.url}
        replicas = [
            {"name": n, "url": u, "role": "leader" if leader and leader.name == n else "follower",
             "live": n in cell.replicas}
            for n, u in sorted(known.items())
        ]  # fmt: skip
        return {
            "cell": cell_name,
            "leader": leader.name if leader else None,
            "leader_url": leader.url if leader else None,
            "replicas": replicas,
            "machines": {
                "up": sum(1 for m in cell.state.machines.values() if m.up),
                "down": sum(1 for m in cell.state.machines.values() if not m.up),
            },
            "jobs": len(cell.state.jobs),
            "tasks": views.task_counts(cell),
            # Who plans placements, as the leader sees it (a follower does not know).
            "scheduler": scheduler_view(),
        }

    def scheduler_view() -> dict[str, Any] | None:
        term = replica.term
        if term is None or not replica.is_leader:
            return None
        if not term.scheduler_active():
            return {"by": "leader", **term.proposals}
        return {"by": "process", "name": term.scheduler_name, **term.proposals}

    @read("/v1/cell", responses=contract.answers(503))
    async def cell_status() -> JSONResponse:
        cell = replica.cache.cell()
        return stamped(cell_overview(cell), cell.revision)

    @read("/v1/shard", responses=contract.answers(503))
    async def shard_status() -> JSONResponse:
        """This replica's link shard: its machines, polling intervals and what it sent."""
        relay = replica.relay
        return JSONResponse(content={
            "link_shards": True, **replica.shard.stats(),
            # This replica's syncs (while it leads) sent through their owners' shards, and those
            # sent through its own because the owner did not take them.
            "relayed": {"through_owners": relay.through_owners, "fallbacks": relay.fallbacks},
        })  # fmt: skip

    # --- link shards (between replicas; not part of API v1) ------------------------------------

    # Their bodies are the leader's largest (a shard's batch of reports, a scheduler's plan),
    # so they are decoded and their answers encoded by fastjson, not the standard library.

    async def internal_body(request: Request) -> tuple[Any, JSONResponse | None]:
        try:
            return fastjson.loads(await request.body()), None
        except ValueError as err:
            return None, JSONResponse(status_code=422, content={"detail": [detail("body", f"not JSON: {err}")]})

    def fast_json(content: Any) -> Response:
        return Response(fastjson.dumps(content), media_type="application/json")

    @app.post(REPORTS_PATH, include_in_schema=False)
    async def shard_reports(request: Request) -> Response:
        payload, refused = await internal_body(request)
        if refused is not None:
            return refused
        if not isinstance(payload, dict) or not isinstance(payload.get("reports", {}), dict):
            return JSONResponse(status_code=422, content={"detail": [detail("body", "expected a shard batch")]})
        answer = await run_in_threadpool(replica.accept_batch, payload)
        if answer is None:
            return JSONResponse(status_code=409, content={"detail": [detail("", "this replica does not lead")]})
        return fast_json(answer)

    @app.post(RELAY_PATH, include_in_schema=False)
    async def shard_relay(request: Request) -> Response:
        payload, refused = await internal_body(request)
        if refused is not None:
            return refused
        items = payload.get("items") if isinstance(payload, dict) else None
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            return JSONResponse(status_code=422, content={"detail": [detail("items", "expected a list of syncs")]})
        return fast_json({"replies": await run_in_threadpool(replica.shard.relay, items)})

    @app.post(PLANS_PATH, include_in_schema=False)
    async def scheduler_plan(request: Request) -> Response:
        payload, refused = await internal_body(request)
        if refused is not None:
            return refused
        return await run_in_threadpool(accept_plan, payload)

    def accept_plan(payload: Any) -> Response:
        try:
            plan = plan_from_json(payload.get("plan") if isinstance(payload, dict) else None)
        except (ValueError, TypeError) as err:
            return JSONResponse(status_code=422, content={"detail": [detail("plan", str(err))]})
        sender = payload.get("scheduler")
        if not isinstance(sender, str) or not sender:
            return JSONResponse(status_code=422, content={"detail": [detail("scheduler", "name the scheduler process")]})
        term = replica.term
        if term is None or not replica.is_leader:
            return JSONResponse(status_code=409, content={"detail": [detail("", "this replica does not lead")]})
        try:
            return fast_json(term.accept_plan(plan, by=sender))
        except (NotLeader, WriteFailed) as err:
            return JSONResponse(status_code=503, content={"detail": [detail("", f"not committed: {err}")]})

    ui.install(app, replica, task_logs, cell_overview)
    users.install(app, replica)
    whoami.register(app)  # GET /v1/whoami: the token's user
    quotas.install(app, replica, write, read)
    alloc_sets.install(app, replica, write, read, stamped)
    jobhistory.register(app, replica, write, read, stamped)
    drain.register(app, replica, write, stamped, views.machine_view)
    execute.register(app, replica)  # POST /v1/jobs/{user}/{name}/tasks/{index}/exec: task exec
    contract.install(app)
    jobroutes.register(app, replica, write, read, stamped, task_logs)  # jobs, tasks, events, would it fit

    # --- machines ------------------------------------------------------------------------------

    @read("/v1/machines", response_model=None, responses={**contract.answers(410, 503), **EVENTS})
    async def list_machines(
        request: Request, watch: bool = False, since: contract.Since = None,
        timeout_s: contract.WatchTimeout = watches.DEFAULT_TIMEOUT_S,
    ) -> Response:
        if (refused := watches.refuse_out_of_bounds(timeout_s, since)) is not None:
            return refused
        if watch:
            select, render, initial = watches.machine_messages(replica.cache)
            return watches.stream(request, replica.cache, since=since, timeout_s=timeout_s, select=select,
                                  render=render, initial=initial, streams=metrics.streams, kind="machines")  # fmt: skip
        cell = replica.cache.cell()
        return stamped(
            {"machines": [views.machine_view(cell, n) for n in sorted(cell.state.machines)]},
            cell.revision,
        )

    @app.post("/v1/machines", status_code=201, responses=contract.answers(409, 503))
    async def post_machine(request: Request, payload: Any = Body(None)) -> Response:
        if not isinstance(payload, dict):
            return JSONResponse(status_code=422, content=detail("", "the body must be a JSON object"))
        try:
            body = MachineBody.model_validate(payload)
            machine, info = machine_from_body(body)
        except ValidationError as exc:
            return JSONResponse(status_code=422, content={"detail": validation_errors(exc)})
        except ValueError as err:
            return JSONResponse(status_code=422, content={"detail": [capacity_error(payload.get("capacity"), err)]})

        def change(d: Draft) -> str:
            if machine.name in d.state.machines:
                raise ApiError(409, "name", f"machine {machine.name} is already in the cell")
            d.machines[machine.name] = info
            d.step("machine_add", machine, reason="machine added")
            return machine.name

        return await write(
            request,
            payload,
            change,
            lambda n, rev: stamped({"machine": views.machine_view(replica.cache.cell(), n)}, rev, 201),
        )

    @app.delete("/v1/machines/{name}", responses=contract.answers(404, 409, 503))
    async def delete_machine(name: str, request: Request) -> Response:
        return await write(
            request, None, lambda d: remove_machine(d, name), lambda n, rev: stamped({"removed": name, "evicted": n}, rev)
        )

    # --- quotas (read-only: the leader writes the configured defaults) ---------------------------

    @read("/v1/quotas", responses=contract.answers(503))
    async def list_quotas() -> JSONResponse:
        cell = replica.cache.cell()
        return stamped({"quotas": views.quota_views(cell)}, cell.revision)

    # --- BNS -------------------------------------------------------------------------------------

    @read("/v1/bns/{bns_name}", responses=contract.answers(404, 503))
    async def bns(bns_name: str) -> JSONResponse:
        cell = replica.cache.cell()
        found = views.resolve(cell, bns_name, cell_name)
        if found is None:
            if views.parse_bns(bns_name, cell_name) is None:
                error = f"not a BNS name of this cell: want <index>.<job>.<user>.{cell_name}.minborg"
            else:
                error = f"{bns_name} has no running, healthy task"
            return JSONResponse(status_code=404, content=detail("bns_name", error))
        return stamped(found, cell.revision)

    return app
