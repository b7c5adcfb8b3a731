"""Watches as server-sent events: jobs, a job's tasks, machines, and the cell's task events, resumable from a revision.

A stream replays the watch cache's change log (master/changes.py) after `since`, then follows
it. Each message's `id` is the etcd revision it reflects, so a client that reconnects with
`since` (or `Last-Event-ID`) set to the last id it saw misses nothing. Without `since`, a
watch first lists what exists now (`ADDED` at the current revision). A revision older than
the log holds is refused with 410: list again and watch from the list's revision. A stream
lasts at most `timeout_s` seconds (the client reconnects), sends a `bookmark` with the
current revision every few seconds, and a comment line to keep idle connections open.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from reference.master import codec, views
from reference.master.cache import WatchCache
from reference.master.changes import Change, ChangeLog, TooOld

POLL_S = 0.2
BOOKMARK_EVERY_S = 5.0
MAX_TIMEOUT_S = 3600.0
DEFAULT_TIMEOUT_S = 300.0
MAX_EVENT_TAIL = 100_000  # the most events `/v1/events?tail=` replays

# One message: (event type, revision, data).
Message = tuple[str, int, dict[str, Any]]


def sse(event: str, revision: int, data: dict[str, Any]) -> bytes:
    return f"id: {revision}\nevent: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def gone(since: int, floor: int) -> JSONResponse:
    return JSONResponse(
        status_code=410,
        content={
            "detail": [
                {
                    "field": "since",
                    "error": f"revision {since} is older than the oldest change this replica can replay "
                    f"(revision {floor}): list again without since, then watch from the list's revision",
                    "floor": floor,
                }
            ],
            "floor": floor,
        },
    )


def _since(request: Request, since: int | None) -> int | None:
    if since is not None:
        return since
    last = request.headers.get("last-event-id")
    return int(last) if last and last.isdigit() else None


def refuse_out_of_bounds(timeout_s: float, since: int | None = None) -> JSONResponse | None:
    """422 for a `timeout_s` outside (0, MAX_TIMEOUT_S] or a negative `since`, the bounds the
    API declares, whether or not the read watches; None when both are within them."""
    if since is not None and since < 0:
        return JSONResponse(status_code=422, content={"detail": [{"field": "since", "error": "must be 0 or more"}]})
    if 0 < timeout_s <= MAX_TIMEOUT_S:
        return None
    return JSONResponse(
        status_code=422,
        content={"detail": [{"field": "timeout_s", "error": f"must be above 0 and at most {MAX_TIMEOUT_S:.0f}"}]},
    )


def stream(
    request: Request,
    cache: WatchCache,
    *,
    since: int | None,
    timeout_s: float,
    select: Callable[[Change], bool],
    render: Callable[[Change], Iterable[Message]],
    initial: Callable[[], Iterable[Message]] | None,
    streams: Any = None,
    kind: str = "",
    tail: int = 0,
) -> Response:
    """A server-sent event stream of the changes `select` keeps, as `render` words them. With
    `tail`, the replay of what the log holds after `since` is only its newest `tail` messages,
    found from the log's end (the older changes are not rendered); what comes next is whole;
    and a `since` older than the log is refused only where the log lacks some of those
    (`replay_from`)."""
    since = _since(request, since)
    if (refused := refuse_out_of_bounds(timeout_s, since)) is not None:
        return refused
    log = cache.changes
    start = since
    first: list[Message] = []
    if since is None:
        cell = cache.cell()
        start = cell.revision
        first = list(initial()) if initial is not None else []
    try:
        start = replay_from(log, start, tail, select, render)  # type: ignore[arg-type]
    except TooOld as old:
        return gone(old.revision, old.floor)

    async def body() -> AsyncIterator[bytes]:
        if streams is not None:
            streams.labels(kind).inc()
        try:
            async for chunk in messages():
                yield chunk
        finally:
            if streams is not None:
                streams.labels(kind).dec()

    async def messages() -> AsyncIterator[bytes]:
        cursor: int = start  # type: ignore[assignment]
        # What one round has to say goes out as one chunk, not one per event: a replay of
        # thousands of events is one write here and one read for `minborg events`.
        batch = [sse(*message) for message in first]
        deadline = time.monotonic() + timeout_s
        bookmark_at = 0.0  # the first comes right after the replay: the client is caught up
        replayed = False  # the first round's changes are the replay
        while time.monotonic() < deadline:
            try:
                changes, reached = log.after(cursor)
            except TooOld as old:
                batch.append(sse("error", cursor, {"status": 410, "floor": old.floor,
                                                   "error": "this watch fell behind the change log: list again"}))  # fmt: skip
                yield b"".join(batch)
                return
            if tail and not replayed:  # the replay: its newest `tail` messages
                batch.extend(sse(*message) for message in newest(changes, select, render, tail))
            else:
                for change in changes:
                    if select(change):
                        batch.extend(sse(*message) for message in render(change))
            replayed = True
            if reached > cursor:
                cursor = reached
            if time.monotonic() >= bookmark_at:
                bookmark_at = time.monotonic() + BOOKMARK_EVERY_S
                batch.append(sse("bookmark", cursor, {"revision": cursor}))
            if batch:
                yield b"".join(batch)
                batch = []
            if await request.is_disconnected():
                return
            await asyncio.sleep(POLL_S)

    return StreamingResponse(
        body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


def replay_from(log: ChangeLog, since: int, tail: int, select: Callable[[Change], bool],
                render: Callable[[Change], Iterable[Message]]) -> int:  # fmt: skip
    """Where a stream's replay starts: `since`, or TooOld for a `since` older than the log holds.
    With `tail`, such a `since` starts from the log's floor when the log holds `tail` messages
    after it anyway: the newest `tail` after `since` are then all there (anything older than
    the floor is older than each of them), and `minborg events` (since 0) is answered at its
    first request instead of after a 410."""
    try:
        log.after(since)
    except TooOld as old:
        if tail and len(newest(log.after(old.floor)[0], select, render, tail)) >= tail:
            return old.floor
        raise
    return since


def newest(changes: list[Change], select: Callable[[Change], bool], render: Callable[[Change], Iterable[Message]],
           n: int) -> list[Message]:  # fmt: skip
    """The last `n` messages that rendering `changes` in order would give, rendering only the
    changes from the end back until `n` are found."""
    found: list[list[Message]] = []
    count = 0
    for change in reversed(changes):
        if count >= n:
            break
        if select(change):
            messages = list(render(change))
            found.append(messages)
            count += len(messages)
    ordered = [m for messages in reversed(found) for m in messages]
    return ordered[len(ordered) - n :] if len(ordered) > n else ordered


# --- what each watch selects and how it words a change -----------------------------------------


def job_messages(cache: WatchCache, user: str | None) -> tuple[Callable, Callable, Callable]:
    def select(c: Change) -> bool:
        return c.kind == "job" and (user is None or c.key.partition("/")[0] == user)

    def render(c: Change) -> Iterable[Message]:
        raw = c.value if c.value is not None else c.prev
        if raw is None:
            return []
        job, info = codec.decode_job(raw)
        return [(c.type, c.revision, {"type": c.type, "job": views.job_view(cache.cell(), job, info)})]

    def initial() -> Iterable[Message]:
        cell = cache.cell()
        for _, job in sorted(cell.state.jobs.items()):
            if user is None or job.user == user:
                yield "ADDED", cell.revision, {"type": "ADDED", "job": views.job_view(cell, job)}

    return select, render, initial


def task_messages(cache: WatchCache, job: str, cell_name: str) -> tuple[Callable, Callable, Callable]:
    prefix = job + "/"

    def select(c: Change) -> bool:
        return c.kind == "task" and c.key.startswith(prefix)

    def render(c: Change) -> Iterable[Message]:
        raw = c.value if c.value is not None else c.prev
        if raw is None:
            return []
        task, info = codec.decode_task(raw)
        view = views.task_view(cache.cell(), task, cell_name, info)
        return [(c.type, c.revision, {"type": c.type, "task": view})]

    def initial() -> Iterable[Message]:
        cell = cache.cell()
        for task in views.job_tasks(cell, job):
            yield "ADDED", cell.revision, {"type": "ADDED", "task": views.task_view(cell, task, cell_name)}

    return select, render, initial


def machine_messages(cache: WatchCache) -> tuple[Callable, Callable, Callable]:
    def select(c: Change) -> bool:
        return c.kind == "machine"

    def render(c: Change) -> Iterable[Message]:
        cell = cache.cell()
        if c.value is None or c.key not in cell.state.machines:
            return [("DELETED", c.revision, {"type": "DELETED", "machine": {"name": c.key}})]
        return [(c.type, c.revision, {"type": c.type, "machine": views.machine_view(cell, c.key)})]

    def initial() -> Iterable[Message]:
        cell = cache.cell()
        for name in sorted(cell.state.machines):
            yield "ADDED", cell.revision, {"type": "ADDED", "machine": views.machine_view(cell, name)}

    return select, render, initial


def event_messages(job: str | None) -> tuple[Callable, Callable]:
    """The cell's events: each task event new in a change (by its number), jobs submitted and
    removed, machines going down and coming back."""

    def select(c: Change) -> bool:
        if job is None:
            return True
        return c.kind in ("task", "job") and (c.key == job or c.key.startswith(job + "/"))

    def render(c: Change) -> Iterable[Message]:
        if c.kind == "task" and c.value is not None:
            task, info = codec.decode_task(c.value)
            before = codec.decode_task(c.prev)[1].events if c.prev is not None else ()
            seen = before[-1][0] if before else 0
            for n, at, kind, detail in info.events:
                if n > seen:
                    yield "task", c.revision, {
                        "task": str(task.id), "job": task.id.job, "index": task.id.index,
                        "incarnation": task.id.incarnation, "n": n, "at": at, "kind": kind, "detail": detail,
                        "state": task.state.value,
                    }  # fmt: skip
        elif c.kind == "job" and c.type in ("ADDED", "DELETED"):
            yield "job", c.revision, {"job": c.key, "kind": "submitted" if c.type == "ADDED" else "removed"}
        elif c.kind == "machine" and c.value is not None:
            machine, _ = codec.decode_machine(c.value)
            before = codec.decode_machine(c.prev)[0] if c.prev is not None else None
            if before is None or before.up != machine.up:
                kind = "up" if machine.up else "down"
                yield "machine", c.revision, {"machine": machine.name, "kind": kind}
        elif c.kind == "machine":
            yield "machine", c.revision, {"machine": c.key, "kind": "removed"}

    return select, render

