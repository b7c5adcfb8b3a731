"""Task logs through any master replica: find the task's machine in the cell view and fetch its stdout or stderr from that borglet."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx
from fastapi.responses import JSONResponse, Response, StreamingResponse

from reference import channel
from reference.master import views
from reference.master.cell import Cell, borglet_task_id
from spec.model import Task, TaskId, TaskState

STREAMS = ("stdout", "stderr")
MAX_TAIL_LINES = 10_000
MAX_FOLLOW_S = 3600.0


def problem(status: int, field: str, error: str) -> JSONResponse:
    """The API's answer of one problem: `status`, the field, what to change."""
    return JSONResponse(status_code=status, content={"detail": [{"field": field, "error": error}]})


_error = problem


def find_task(cell: Cell, job: str, index: int, incarnation: int | None) -> Task | JSONResponse:
    """The task `index` of `job` (its latest incarnation, or `incarnation`), or a 404 saying why not."""
    if index < 0:
        return _error(422, "index", "must be 0 or more")
    if incarnation is not None:
        task = cell.state.tasks.get(TaskId(job, index, incarnation))
        if task is None:
            latest = views.latest_task(cell, job, index)
            if latest is None:
                return _error(404, "index", f"job {job} has no task {index}")
            return _error(
                404,
                "incarnation",
                f"task {index} of {job} has no incarnation {incarnation} in the cell: the cell keeps "
                f"only the latest, {latest.id.incarnation}",
            )
        return task
    task = views.latest_task(cell, job, index)
    if task is None:
        if job not in cell.state.jobs:
            return _error(404, "job", f"no job {job}")
        return _error(404, "index", f"job {job} has no task {index}")
    return task


def never_started(cell: Cell, task: Task) -> str:
    info = cell.task_info(task.id)
    why = f"it is {task.state.value}"
    if task.state is TaskState.PENDING:
        why += f": {info.pending}" if info.pending else ", not scheduled yet"
    elif task.cause is not None:
        why += f" ({task.cause.value})"
    return f"task {task.id} has never started on a machine, so it has no logs: {why}"


class LogProxy:
    """Fetches logs from borglets; one HTTP client for the replica's lifetime."""

    def __init__(
        self, timeout: float = 5.0, transport: httpx.AsyncBaseTransport | None = None,
        auth: httpx.Auth | None = None,
    ) -> None:  # fmt: skip
        self._timeout, self._auth = timeout, auth
        self._transport = transport
        self._http: httpx.AsyncClient | None = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:  # made on the event loop that uses it
            self._http = httpx.AsyncClient(
                timeout=self._timeout, transport=self._transport, auth=self._auth, verify=channel.peer_verify()
            )
        return self._http

    async def fetch(
        self, cell: Cell, job: str, index: int, incarnation: int | None, *, stream: str, tail: int,
        follow: bool, max_s: float,
    ) -> Response:  # fmt: skip
        if stream not in STREAMS:
            return _error(422, "stream", f"must be stdout or stderr, not {stream!r}")
        if not 0 <= tail <= MAX_TAIL_LINES:
            return _error(422, "tail", f"must be between 0 and {MAX_TAIL_LINES} lines")
        if not 0 < max_s <= MAX_FOLLOW_S:
            return _error(422, "max_s", f"must be above 0 and at most {MAX_FOLLOW_S:.0f} seconds")
        found = find_task(cell, job, index, incarnation)
        if isinstance(found, JSONResponse):
            return found
        task, info = found, cell.task_info(found.id)
        if not info.machine:
            return _error(404, "index", never_started(cell, task))
        machine = cell.machines.get(info.machine)
        if machine is None or not machine.address:
            return _error(404, "index", f"task {task.id} ran on machine {info.machine}, which is no longer in the cell")
        address = machine.address if "://" in machine.address else f"http://{machine.address}"
        url = f"{address}/v1/tasks/{quote(borglet_task_id(task.id, info), safe='')}/logs"
        params: dict[str, Any] = {"stream": stream, "tail": tail, "follow": str(follow).lower(), "max_s": max_s}
        headers = {
            "X-Minborg-Task": str(task.id),
            "X-Minborg-Machine": info.machine,
            "X-Minborg-Incarnation": str(task.id.incarnation),
        }
        http = self._client()
        try:
            # A followed log may be quiet for minutes: no read timeout shorter than the follow.
            timeout = httpx.Timeout(self._timeout, read=max_s + self._timeout) if follow else self._timeout
            request = http.build_request(
                "GET", url, params=params, headers=channel.to_machine(info.machine), timeout=timeout
            )
            upstream = await http.send(request, stream=True)
        except httpx.HTTPError as err:
            return _error(502, "machine", f"machine {info.machine} did not answer for the logs of {task.id}: {err}")
        if upstream.status_code != 200:
            body = await upstream.aread()
            await upstream.aclose()
            detail = upstream_detail(body) or f"HTTP {upstream.status_code}"
            if upstream.status_code == 404:
                return _error(404, "index", f"{detail} ({never_started(cell, task)})" if not info.seen else detail)
            return _error(502, "machine", f"machine {info.machine} refused the logs of {task.id}: {detail}")
        if not follow:
            body = await upstream.aread()
            await upstream.aclose()
            return Response(content=body, media_type="text/plain; charset=utf-8", headers=headers)

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            except httpx.HTTPError:
                return  # the machine went away mid-stream: the stream just ends
            finally:
                await upstream.aclose()

        return StreamingResponse(relay(), media_type="text/plain; charset=utf-8", headers=headers)


def upstream_detail(body: bytes) -> str:
    import json

    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError, RecursionError):  # RecursionError: nested past the reader's depth
        return body.decode(errors="replace")[:300]
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        return str(detail[0].get("error", ""))
    return str(detail or "")
