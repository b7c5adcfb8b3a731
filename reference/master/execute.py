"""`POST /v1/jobs/{user}/{name}/tasks/{index}/exec` on any master replica: check the request, find the task's machine in the cell view, and forward the command to that borglet over the signed channel.

Who may call it is the guard's (master/access.py): a POST under a job's path is its owner's or
the admin's, so another user gets a 403 before this handler runs. What runs where is the
borglet's (borglet/execute.py).
"""

from __future__ import annotations

import logging
import shlex
from typing import Any
from urllib.parse import quote

import httpx
from fastapi import Body, FastAPI, Request
from fastapi.responses import JSONResponse

from reference import channel, execspec
from reference.master import contract, guard, terminal
from reference.master.cell import Cell, borglet_task_id

log = logging.getLogger(__name__)

# What the borglet may take beyond the command's own limit to answer (start, drain, kill).
SLACK_S = 10.0


# An exec's refusals passed on (terminal.forward): a 404 or 409 is the task's, which the
# borglet's view, newer than the cell's, no longer runs there.
REFUSALS = {404: (409, "index"), 409: (409, "index"), 422: (422, "command"), 429: (429, "")}


class ExecProxy:
    """Forwards exec requests to borglets; one HTTP client for the replica's lifetime."""

    def __init__(
        self, timeout: float = 5.0, transport: httpx.AsyncBaseTransport | None = None, auth: httpx.Auth | None = None
    ) -> None:
        self._timeout, self._transport, self._auth = timeout, transport, auth
        self._http: httpx.AsyncClient | None = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:  # made on the event loop that uses it
            self._http = httpx.AsyncClient(
                timeout=self._timeout, transport=self._transport, auth=self._auth, verify=channel.peer_verify()
            )
        return self._http

    async def run(self, cell: Cell, job: str, index: int, payload: Any, who: str = "?") -> JSONResponse:
        try:
            request = execspec.parse_exec(payload)
        except execspec.ExecError as err:
            return JSONResponse(status_code=422, content={"detail": err.errors})
        found = terminal.running(cell, job, index)
        if isinstance(found, JSONResponse):
            return found
        task, info, address = found
        url = f"{address}/v1/tasks/{quote(borglet_task_id(task.id, info), safe='')}/exec"
        timeout = httpx.Timeout(self._timeout, read=request.timeout_s + SLACK_S)
        # Who ran what where: the replica's log is the audit trail of execs (docs/security.md).
        log.info("exec by %s in %s on %s: %s", who, task.id, info.machine, shlex.join(request.command)[:500])
        sending = self._client().post(
            url, json=request.body(), headers=channel.to_machine(info.machine), timeout=timeout
        )
        return await terminal.forward(sending, info.machine, f"the exec in {task.id}", "exec", REFUSALS)


def register(app: FastAPI, replica: Any) -> None:
    """Add `POST /v1/jobs/{user}/{name}/tasks/{index}/exec` to a master's app."""
    proxy = ExecProxy(auth=channel.client_auth(replica.config.channel_key))
    terminal.register(app, replica, proxy._client)  # task exec -it: the sessions' routes, on the same client

    @app.post(
        "/v1/jobs/{user}/{name}/tasks/{index}/exec",
        response_model=contract.ExecResult,
        responses=contract.answers(403, 404, 409, 429, 502),
    )
    async def exec_in_task(
        user: str, name: str, index: contract.Index, request: Request, payload: Any = Body(None)
    ) -> JSONResponse:
        """Run a command in a running task, as its user, in its cgroups and working directory,
        with its environment (in its container, for a container task); answers its exit code
        and output once it ends (at most `timeout_s`)."""
        who = guard.identity_of(request.scope)
        return await proxy.run(replica.cache.cell(), f"{user}/{name}", index, payload, who.name if who else "?")
