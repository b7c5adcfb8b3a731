"""Sigma, the cell's dashboard at /ui: its routes on a master replica, and the usage history its charts draw.

The pages are rendered by the replica from its watch cache, like any read, by the modules of
reference/master/sigma/: `jobs` (the cell and its jobs, a job, a task), `machines`, `eventlog`,
`listing` (search, filter, sort, paging), `history` and `charts` (usage over the last hour),
`html` and `script` (the frame, the login page and the one inline script). A page asked for
without a token is the login shell (`shell_page`, served by guard.py); its script fetches the
page again with the token, follows the cell's events (/v1/events) to fetch it again when
something changes, streams a task's logs, and sends a job owner's kill and count changes to
the API, which checks the owner as for any client.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response

from reference.master import guard
from reference.master.cell import Cell
from reference.master.changes import ChangeLog, between, task_of
from reference.master.logs import LogProxy
from reference.master.sigma import history as usage
from reference.master.sigma.eventlog import events_page
from reference.master.sigma.html import e, shell_page
from reference.master.sigma.jobs import cell_page, job_page, outcome, painted, task_page
from reference.master.sigma.machines import machine_page, machines_page
from reference.master.sigma.rollouts import rollout_section
from spec.model import TaskId, TaskState

__all__ = ["install", "outcome", "painted", "shell_page", "usage_sample"]


def usage_sample(cell: Cell) -> dict[str, tuple[float, float]]:
    """(cpu_milli, ram_bytes) now of each machine ("machine:NAME") and of each job, its running
    tasks' sum ("job:USER/NAME"): one sample of the history, from the whole cell."""
    return UsageSampler()(cell)


class UsageSampler:
    """`usage_sample`, kept from one sample to the next: each running task's share of its job's
    sum is held, and a sample looks again only at the tasks the watch cache's change log names
    since the last one (`changes.between`); machines are read as they stand (one lookup each).
    Without a log, after a reload of the cache, or when the log no longer holds every change
    since, it walks every task. A sample of 10,000 machines and 100,000 tasks from the whole
    cell took 1.6 s of the leader's GIL each minute, on every replica."""

    def __init__(self) -> None:
        self._revision = -1
        self._reloads = -1
        self._shares: dict[TaskId, tuple[float, float]] = {}  # running task -> (cpu, ram)
        self._sums: dict[str, tuple[float, float, int]] = {}  # job -> its running tasks' sum, and their count
        self.full_walks = 0

    def __call__(self, cell: Cell, log: ChangeLog | None = None, reloads: int = 0) -> dict[str, tuple[float, float]]:
        changes = None
        if log is not None and reloads == self._reloads and self._revision >= 0:
            changes = between(log, self._revision, cell.revision)
        self._revision, self._reloads = cell.revision, reloads
        if changes is None:
            self.full_walks += 1
            self._shares, self._sums = {}, {}
            for task in cell.state.tasks.values():
                self._take(cell, task.id)
        else:
            for c in changes:
                if c.kind == "task" and (tid := task_of(c)) is not None:
                    self._take(cell, tid)
        out: dict[str, tuple[float, float]] = {}
        for name in cell.state.machines:
            info = cell.machines.get(name)
            out[f"machine:{name}"] = usage.usage_of(info.usage if info else ())
        for key in cell.state.jobs:
            cpu, ram, _ = self._sums.get(key, (0.0, 0.0, 0))
            out[f"job:{key}"] = (cpu, ram)
        return out

    def _take(self, cell: Cell, tid: TaskId) -> None:
        """Bring `tid`'s share of its job's sum to `cell` (a job whose running tasks all left
        leaves the sums)."""
        old = self._shares.pop(tid, None)
        if old is not None:
            cpu, ram, n = self._sums[tid.job]
            if n == 1:
                del self._sums[tid.job]
            else:
                self._sums[tid.job] = (cpu - old[0], ram - old[1], n - 1)
        task = cell.state.tasks.get(tid)
        if task is None or task.state is not TaskState.RUNNING:
            return
        cpu, ram = usage.usage_of(cell.task_info(tid).usage)
        self._shares[tid] = (cpu, ram)
        had = self._sums.get(tid.job, (0.0, 0.0, 0))
        self._sums[tid.job] = (had[0] + cpu, had[1] + ram, had[2] + 1)


def _params(**given: Any) -> dict[str, str]:
    return {k: str(v) for k, v in given.items() if v not in (None, "")}


def install(app: FastAPI, replica: Any, proxy: LogProxy, overview: Any) -> None:
    """Add the /ui pages to a master's app and start sampling its usage; `overview()` is
    /v1/cell's body. `proxy` is unused: a task page's logs are streamed by the browser from
    the API's logs route, which uses it."""
    del proxy
    cell_name = replica.config.cell_name
    interval = usage.sample_interval()
    history = usage.UsageHistory(samples=max(2, min(3600, int(usage.WINDOW_S / interval))))
    # The sampler ends with the replica (its stop event), else with the process.
    stop = getattr(replica, "_stop", None) or threading.Event()
    sampler = UsageSampler()
    cache = replica.cache

    def sample() -> dict[str, tuple[float, float]]:
        return sampler(cache.cell(), getattr(cache, "changes", None), getattr(cache, "reloads", 0))

    usage.start_sampler(history, sample, time.time, stop, interval)

    def who(request: Request) -> str:
        identity = guard.identity_of(request.scope)
        return identity.name if identity else ""

    def html(text: str | None, missing: str) -> Response:
        if text is not None:
            return HTMLResponse(text)
        return HTMLResponse(f"<!doctype html><p>{e(missing)}</p><p><a href='/ui'>back to the cell</a></p>", status_code=404)

    missing_page = {404: {"description": "no such job, task or machine: a page that says so",
                          "content": {"text/html": {"schema": {"type": "string"}}}}}  # fmt: skip

    @app.get("/ui", response_class=HTMLResponse)
    async def ui_cell(
        request: Request, q: str = "", user: str = "", band: str = "", status: str = "", sort: str = "", page: int = 1
    ) -> Response:
        cell = replica.cache.cell()
        params = _params(q=q, user=user, band=band, status=status, sort=sort, page=page)
        return HTMLResponse(cell_page(cell, overview(cell), replica.name, params, who(request)))

    @app.get("/ui/machines", response_class=HTMLResponse)
    async def ui_machines(
        request: Request, q: str = "", state: str = "", domain: str = "", sort: str = "", page: int = 1
    ) -> Response:
        params = _params(q=q, state=state, domain=domain, sort=sort, page=page)
        return HTMLResponse(machines_page(replica.cache.cell(), replica.name, params, who(request)))

    @app.get("/ui/machines/{name}", response_class=HTMLResponse, responses=missing_page)
    async def ui_machine(request: Request, name: str) -> Response:
        return html(machine_page(replica.cache.cell(), name, replica.name, who(request), history), f"no machine {name}")

    @app.get("/ui/events", response_class=HTMLResponse)
    async def ui_events(request: Request, q: str = "", kind: str = "", sort: str = "", page: int = 1) -> Response:
        params = _params(q=q, kind=kind, sort=sort, page=page)
        return HTMLResponse(events_page(replica.cache.cell(), replica.name, params, who(request), replica.cache.changes))

    @app.get("/ui/jobs/{user}/{name}", response_class=HTMLResponse, responses=missing_page)
    async def ui_job(
        request: Request, user: str, name: str, q: str = "", outcome: str = "", sort: str = "", page: int = 1
    ) -> Response:
        params: Mapping[str, str] = _params(q=q, outcome=outcome, sort=sort, page=page)
        cell, key = replica.cache.cell(), f"{user}/{name}"
        extra = rollout_section(cell, key, time.time(), replica.ready_word()) if key in cell.state.jobs else ""
        text = job_page(cell, key, cell_name, replica.name, dict(params), guard.identity_of(request.scope), history,
                        extra)  # fmt: skip
        return html(text, f"no job {key}")

    @app.get("/ui/jobs/{user}/{name}/tasks/{index}", response_class=HTMLResponse, responses=missing_page)
    async def ui_task(request: Request, user: str, name: str, index: int) -> Response:
        key = f"{user}/{name}"
        text = task_page(replica.cache.cell(), key, index, cell_name, replica.name, who(request))
        return html(text, f"job {key} has no task {index}")
