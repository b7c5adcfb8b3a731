"""The API's job routes: submit a job (or ask whether it would fit), list, read, update and kill jobs and tasks, a task's logs, a job's endpoints, the cell's events, and what a machine's removal would move."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi import Body, FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool

from reference.master import access, contract, dryrun, guard, logs, rollout, views
from reference.master import watch as watches
from reference.master.contract import detail
from reference.master.jobhistory import Write
from reference.master.mutations import ApiError, kill_job, kill_task, submit_job, update_job
from reference.master.replica import Replica

LARGE_LIST = 500  # a read of a job of this many tasks or more is rendered off the event loop

# A list that can also be watched (`watch=true`): its 200 is JSON, or a stream of server-sent events.
EVENTS = contract.text("text/event-stream", "the list as JSON; with watch=true, server-sent events")


def register(
    app: FastAPI, replica: Replica, write: Write, read: Callable[..., Any], stamped: Callable[..., JSONResponse],
    task_logs: logs.LogProxy,
) -> None:  # fmt: skip
    """Add the routes; `write`, `read` and `stamped` are api.py's, `task_logs` its proxy to the borglets' logs."""
    cell_name = replica.config.cell_name
    metrics = replica.metrics

    # --- jobs ----------------------------------------------------------------------------------

    @app.post("/v1/jobs", status_code=201, responses={
        **contract.answers(403, 404, 409, 503),
        200: {"model": dryrun.DryRun, "description": "with dry_run=true: where the job would go; nothing is written"},
    })  # fmt: skip
    async def post_job(request: Request, payload: Any = Body(None), dry_run: bool = False) -> Response:
        who = guard.identity_of(request.scope)
        owner = payload.get("user") if isinstance(payload, dict) else None
        if who is not None and isinstance(owner, str) and (refusal := access.may_act_for(who, owner)) is not None:
            return JSONResponse(status_code=403, content=detail("user", refusal))
        if dry_run:
            return await run_in_threadpool(would, lambda cell: dryrun.submit(cell, payload))
        return await write(
            request,
            payload,
            lambda d: submit_job(d, payload),
            lambda key, rev: stamped(
                {"job": views.job_view(replica.cache.cell(), replica.cache.cell().state.jobs[key])}
                if key in replica.cache.cell().state.jobs
                else {"job": {"key": key}},
                rev,
                201,
            ),
        )

    @read("/v1/jobs", response_model=None, responses={**contract.answers(410, 503), **EVENTS})
    async def list_jobs(
        request: Request, user: str | None = None, watch: bool = False, since: contract.Since = None,
        timeout_s: contract.WatchTimeout = watches.DEFAULT_TIMEOUT_S,
    ) -> Response:  # fmt: skip
        if (refused := watches.refuse_out_of_bounds(timeout_s, since)) is not None:
            return refused
        if watch:
            select, render, initial = watches.job_messages(replica.cache, user)
            return watches.stream(request, replica.cache, since=since, timeout_s=timeout_s, select=select,
                                  render=render, initial=initial, streams=metrics.streams, kind="jobs")  # fmt: skip
        cell = replica.cache.cell()
        jobs = [
            views.job_view(cell, j)
            for k, j in sorted(cell.state.jobs.items())
            if user is None or j.user == user
        ]
        return stamped({"jobs": jobs}, cell.revision)

    @read("/v1/jobs/{user}/{name}", responses=contract.answers(404, 503))
    async def get_job(user: str, name: str) -> JSONResponse:
        cell = replica.cache.cell()
        job = cell.state.jobs.get(f"{user}/{name}")
        if job is None:
            return JSONResponse(status_code=404, content=detail("job", f"no job {user}/{name}"))

        def render() -> JSONResponse:
            return stamped(
                {
                    "job": views.job_view(cell, job),
                    "tasks": views.task_counts(cell, job.key),
                    "pending": views.pending_reasons(cell, job.key),
                    "crash_loops": views.crash_loops(cell, job.key),
                    "rollout": rollout.status(cell, job.key, time.time(), replica.ready_word()),
                },
                cell.revision,
            )

        if job.task_count < LARGE_LIST:
            return render()
        # Its pending reasons, crash loops and rollout each walk the job's tasks: about 50 ms of
        # one core for 10,000 tasks, which on the event loop held every other read behind it.
        return await run_in_threadpool(render)

    @app.patch("/v1/jobs/{user}/{name}", responses=contract.answers(403, 404, 503))
    async def patch_job(user: str, name: str, request: Request, payload: Any = Body(None)) -> Response:
        key = f"{user}/{name}"
        return await write(
            request,
            payload,
            lambda d: update_job(d, key, payload),
            lambda _, rev: stamped(
                {"job": views.job_view(replica.cache.cell(), replica.cache.cell().state.jobs[key])}, rev
            ),
        )

    @app.delete("/v1/jobs/{user}/{name}", responses=contract.answers(404, 503))
    async def delete_job(user: str, name: str, request: Request) -> Response:
        key = f"{user}/{name}"
        return await write(request, None, lambda d: kill_job(d, key), lambda n, rev: stamped({"killed": n}, rev))

    @read("/v1/jobs/{user}/{name}/tasks", response_model=None, responses={**contract.answers(404, 410, 503), **EVENTS})
    async def get_tasks(
        user: str, name: str, request: Request, watch: bool = False, since: contract.Since = None,
        timeout_s: contract.WatchTimeout = watches.DEFAULT_TIMEOUT_S,
    ) -> Response:  # fmt: skip
        cell = replica.cache.cell()
        key = f"{user}/{name}"
        if (refused := watches.refuse_out_of_bounds(timeout_s, since)) is not None:
            return refused
        if watch:
            select, render, initial = watches.task_messages(replica.cache, key, cell_name)
            return watches.stream(request, replica.cache, since=since, timeout_s=timeout_s, select=select,
                                  render=render, initial=initial, streams=metrics.streams, kind="tasks")  # fmt: skip
        tasks = views.job_tasks(cell, key)
        if key not in cell.state.jobs and not tasks:
            return JSONResponse(status_code=404, content=detail("job", f"no job {key}"))

        def render() -> JSONResponse:
            return stamped({"tasks": [views.task_view(cell, t, cell_name) for t in tasks]}, cell.revision)

        if len(tasks) < LARGE_LIST:
            return render()
        # A job of thousands of tasks takes a second to render: off the event loop, so the
        # reads queued behind it are answered meanwhile.
        return await run_in_threadpool(render)

    @app.delete("/v1/jobs/{user}/{name}/tasks/{index}", responses=contract.answers(404, 409, 503))
    async def delete_task(user: str, name: str, index: contract.Index, request: Request) -> Response:
        key = f"{user}/{name}"
        return await write(
            request,
            None,
            lambda d: kill_task(d, key, index),
            lambda tid, rev: stamped(
                {"task": views.task_view(replica.cache.cell(), replica.cache.cell().state.tasks[tid], cell_name)},
                rev,
            ),
        )

    @read("/v1/jobs/{user}/{name}/tasks/{index}", responses=contract.answers(404, 503))
    async def get_task(user: str, name: str, index: contract.Index, incarnation: int | None = None) -> JSONResponse:
        cell = replica.cache.cell()
        found = logs.find_task(cell, f"{user}/{name}", index, incarnation)
        if isinstance(found, JSONResponse):
            return found
        return stamped({"task": views.task_view(cell, found, cell_name)}, cell.revision)

    @read(
        "/v1/jobs/{user}/{name}/tasks/{index}/logs", response_model=None, response_class=PlainTextResponse,
        responses=contract.answers(404, 502, 503),
    )
    async def get_task_logs(
        user: str, name: str, index: contract.Index, stream: contract.LogStream = "stdout", tail: contract.Tail = 100,
        follow: bool = False, incarnation: int | None = None, max_s: contract.FollowFor = 300.0,
    ) -> Response:  # fmt: skip
        return await task_logs.fetch(
            replica.cache.cell(), f"{user}/{name}", index, incarnation,
            stream=stream, tail=tail, follow=follow, max_s=max_s,
        )  # fmt: skip

    @read("/v1/jobs/{user}/{name}/endpoints", responses=contract.answers(404, 503))
    async def get_endpoints(user: str, name: str) -> JSONResponse:
        cell = replica.cache.cell()
        key = f"{user}/{name}"
        if key not in cell.state.jobs:
            return JSONResponse(status_code=404, content=detail("job", f"no job {key}"))
        return stamped({"endpoints": views.endpoints(cell, key, cell_name)}, cell.revision)

    @read("/v1/events", response_model=None, response_class=contract.EventStream,
          responses=contract.answers(410, 503))
    async def cell_events(
        request: Request, since: contract.Since = None, job: str | None = None,
        timeout_s: contract.WatchTimeout = watches.DEFAULT_TIMEOUT_S, tail: contract.EventTail = 0,
    ) -> Response:
        """Task events, jobs submitted and removed, machines down and up: server-sent events.
        `tail`: of the replay since `since`, only the newest this many (0: all)."""
        if not 0 <= tail <= watches.MAX_EVENT_TAIL:
            return JSONResponse(status_code=422, content=detail("tail", f"must be between 0 and {watches.MAX_EVENT_TAIL} events"))
        select, render = watches.event_messages(job)
        return watches.stream(request, replica.cache, since=since, timeout_s=timeout_s, select=select,
                              render=render, initial=None, streams=metrics.streams, kind="events", tail=tail)  # fmt: skip

    # --- would it fit? (one leader pass on a draft of the cached cell; nothing is written) -----

    def would(answer: Callable[[Any], dict[str, Any]]) -> JSONResponse:
        cell = replica.cache.cell()
        try:
            return stamped(answer(cell), cell.revision)
        except ApiError as err:
            return JSONResponse(status_code=err.status, content={"detail": err.errors})
        except (ValueError, TypeError, OverflowError) as err:
            return JSONResponse(status_code=422, content=detail("", f"the body cannot be read: {err}"))

    @read("/v1/whatif", responses={**contract.answers(404, 503), 200: {"model": dryrun.WhatIf, "description": "what would move"}})
    async def what_if(remove_machine: str) -> JSONResponse:
        """Which tasks would move (to where) or wait if machine `remove_machine` were removed."""
        return await run_in_threadpool(would, lambda cell: dryrun.remove_machine(cell, remove_machine))
