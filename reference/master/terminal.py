"""`task exec -it` on any master replica: open a terminal session in a running task, write its keys, read its output, close it; each request checked here and relayed to the task's borglet over the signed channel.

    POST /v1/jobs/{user}/{name}/tasks/{index}/terminal                    {"command", "rows", "cols"}
    POST /v1/jobs/{user}/{name}/tasks/{index}/terminal/{session}/input    {"data" (base64), "rows", "cols"}
    POST /v1/jobs/{user}/{name}/tasks/{index}/terminal/{session}/output   {"offset", "wait_s"}
    POST /v1/jobs/{user}/{name}/tasks/{index}/terminal/{session}/close

Every one is a POST under the job's path, so the guard (master/access.py) lets only the job's
owner or the admin through; the handler checks it again itself, and signs who asked (`by`) into
the query of its request to the borglet, which serves a session only to the user who opened it,
in the task it runs in (borglet/terminal.py). The machine is found from the cell's view at each
request, never from the caller. The session lives on the borglet, so any replica relays any
request of it: a failover between two keys loses nothing (docs/decisions.md, "task exec -it").
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Awaitable, Mapping
from typing import Any
from urllib.parse import quote

import httpx
from fastapi import Body, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from reference import channel, execspec
from reference.master import access, contract, guard, logs
from reference.master.cell import Cell, TaskInfo, borglet_task_id
from spec.model import Task, TaskState

log = logging.getLogger(__name__)

SLACK_S = 10.0  # beyond an output request's own wait: the borglet's answer on its way
ACTIONS = ("input", "output", "close")
PATH = "/v1/jobs/{user}/{name}/tasks/{index}/terminal"


class TerminalBody(BaseModel):
    """`POST .../terminal`: the command to run on a terminal in the task, and the window's size."""

    model_config = ConfigDict(extra="forbid")
    command: list[str] = Field(
        min_length=1, max_length=execspec.MAX_ARGS,
        json_schema_extra={"prefixItems": [{"type": "string", "minLength": 1, "pattern": "^[^\\x00]*$"}], "items": {"type": "string", "pattern": "^[^\\x00]*$"}},
        description="the program and its arguments (e.g. [\"/bin/sh\"]), looked up on the task's PATH",
    )  # fmt: skip
    rows: int = Field(default=24, ge=1, le=execspec.MAX_WINDOW, description="the terminal's rows")
    cols: int = Field(default=80, ge=1, le=execspec.MAX_WINDOW, description="the terminal's columns")


class StepBody(BaseModel):
    """`POST .../terminal/{session}/{action}`: for `input`, the keys (`data`, base64) and a new
    window size; for `output`, the bytes already read (`offset`) and how long to wait for more."""

    model_config = ConfigDict(extra="forbid")
    data: str | None = Field(default=None, description="input: the keys, base64; Ctrl-D is byte 4, the end of input")
    rows: int | None = Field(default=None, ge=1, le=execspec.MAX_WINDOW, description="input: the terminal's new rows")
    cols: int | None = Field(default=None, ge=1, le=execspec.MAX_WINDOW, description="input: the terminal's new columns")
    offset: int | None = Field(default=None, ge=0, description="output: the bytes of output already read")
    wait_s: float | None = Field(default=None, ge=0, le=execspec.OUTPUT_WAIT_S,
                                 description="output: seconds to wait for something new")  # fmt: skip


_error = logs.problem  # one problem's answer, as every route gives it


def caller(request: Request, owner: str) -> str | JSONResponse:
    """Who asks, if they may: the job's owner or the admin (the guard's rule, checked again
    here); a 403 else. A cell whose guard checks nothing (no tokens) answers to anyone."""
    who = guard.identity_of(request.scope)
    if who is None:
        return "?"
    refused = access.may_act_for(who, owner)
    if refused is not None:
        return _error(403, "job", refused)
    return who.name


def running(cell: Cell, job: str, index: int) -> tuple[Task, TaskInfo, str] | JSONResponse:
    """The running task `index` of `job`, its facts and its borglet's address, or the error to
    answer: what an exec and a terminal session both need first."""
    found = logs.find_task(cell, job, index, None)
    if isinstance(found, JSONResponse):
        return found
    task, info = found, cell.task_info(found.id)
    if task.state is not TaskState.RUNNING or not info.machine:
        return _error(409, "index", f"task {task.id} is {task.state.value}, not running: exec needs a running task")
    machine = cell.machines.get(info.machine)
    if machine is None or not machine.address:
        return _error(409, "index", f"task {task.id} runs on machine {info.machine}, which has no address in the cell")
    return task, info, machine.address if "://" in machine.address else f"http://{machine.address}"


def locate(cell: Cell, job: str, index: int) -> tuple[str, str, str] | JSONResponse:
    """(the borglet's URL of the task's terminal, its task id there, its machine), or the error to answer."""
    found = running(cell, job, index)
    if isinstance(found, JSONResponse):
        return found
    task, info, address = found
    task_id = borglet_task_id(task.id, info)
    return f"{address}/v1/tasks/{quote(task_id, safe='')}/terminal", task_id, info.machine


# A session's refusals passed on (`forward`): a 404 names the session (it ended, or is another
# user's; an open's 404, a task the borglet no longer has, is named so too), a 409 the task.
REFUSALS = {404: (404, "session"), 409: (409, "index"), 422: (422, "command"), 429: (429, "")}


async def forward(
    sending: Awaitable[httpx.Response], machine: str, what: str, serves: str, refusals: Mapping[int, tuple[int, str]]
) -> JSONResponse:
    """The API's answer to `what` ("the exec in TASK"), `sending` to `machine`'s borglet: the
    borglet's JSON on a 200; a refusal in `refusals` (the borglet's status: the API's, and the
    field it names) with the borglet's words and its Retry-After; a 409 to upgrade a borglet
    that has no such route (it does not serve `serves`); a 502 for no answer or any other.
    An exec and a terminal session's requests both answer so (master/execute.py)."""
    try:
        answer = await sending
    except httpx.HTTPError as err:
        return _error(502, "machine", f"machine {machine} did not answer {what}: {err}")
    if answer.status_code == 200:
        try:
            return JSONResponse(content=answer.json())
        except (ValueError, RecursionError):  # RecursionError: JSON nested past the reader's depth
            return _error(502, "machine", f"machine {machine} answered {what} with no JSON")
    detail = logs.upstream_detail(answer.content) or f"HTTP {answer.status_code}"
    if answer.status_code == 404 and detail == "Not Found":  # no such route: an older borglet
        return _error(409, "index", f"machine {machine}'s borglet does not serve {serves}: upgrade it")
    if answer.status_code in refusals:
        status, field = refusals[answer.status_code]
        # Only a number of seconds is passed on: a header of the borglet's choosing is not the
        # API's, and one latin-1 cannot take made this answer itself fail (a 500).
        retry = answer.headers.get("retry-after", "")
        headers = {"Retry-After": retry} if retry.isascii() and retry.isdigit() else None
        return JSONResponse(status_code=status, content={"detail": [{"field": field, "error": detail}]},
                            headers=headers)  # fmt: skip
    return _error(502, "machine", f"machine {machine} refused {what}: {detail}")


async def relay(http: httpx.AsyncClient, url: str, machine: str, by: str, body: dict[str, Any], read_s: float) -> JSONResponse:
    """POST `body` to the borglet, signed for `machine`, `by` in the signed query; its answer."""
    sending = http.post(url, params={"by": by}, json=body, headers=channel.to_machine(machine),
                        timeout=httpx.Timeout(5.0, read=read_s))  # fmt: skip
    return await forward(sending, machine, "the exec session's request", "exec -it", REFUSALS)


def register(app: FastAPI, replica: Any, http: Any) -> None:
    """Add the session routes to a master's app; `http()` is the replica's signed client to borglets."""
    contract.BODIES[("post", PATH)] = TerminalBody
    contract.BODIES[("post", PATH + "/{session}/{action}")] = StepBody
    contract.OPTIONAL_BODIES.add(("post", PATH + "/{session}/{action}"))  # close takes none

    @app.post(PATH, responses=contract.answers(403, 404, 409, 429, 502))
    async def open_terminal(user: str, name: str, index: contract.Index, request: Request,
                            payload: Any = Body(None)) -> JSONResponse:  # fmt: skip
        """Start a command on a terminal in a running task, as its user, in its cgroups and
        working directory, with its environment (in its container, for a container task);
        answers the session's id, which the other requests name."""
        who = caller(request, user)
        if isinstance(who, JSONResponse):
            return who
        try:
            wanted = execspec.parse_terminal(payload)
        except execspec.ExecError as err:
            return JSONResponse(status_code=422, content={"detail": err.errors})
        where = locate(replica.cache.cell(), f"{user}/{name}", index)
        if isinstance(where, JSONResponse):
            return where
        url, task_id, machine = where
        # Who ran what where: the replica's log is the audit trail of execs (docs/security.md).
        log.info("exec -it by %s in %s on %s: %s", who, task_id, machine, shlex.join(wanted.command)[:500])
        return await relay(http(), url, machine, who, wanted.body(), SLACK_S)

    @app.post(PATH + "/{session}/{action}", responses=contract.answers(403, 404, 409, 429, 502))
    async def drive_terminal(user: str, name: str, index: contract.Index, session: str, action: str,
                             request: Request, payload: Any = Body(None)) -> JSONResponse:  # fmt: skip
        """`input`: write keys (and a new window size); `output`: what the command printed after
        `offset`, waiting up to `wait_s` for something new, and its exit code once it ended and
        all is read; `close`: end it."""
        who = caller(request, user)
        if isinstance(who, JSONResponse):
            return who
        if action not in ACTIONS:
            return _error(404, "action", f"no action {action[:40]}: input, output or close")
        if not execspec.valid_session(session):
            return _error(404, "session", "no such exec session: its id is the 32 hex digits `terminal` answered")
        try:
            if action == "input":
                execspec.parse_input(payload)
            elif action == "output":
                execspec.parse_output(payload)
        except execspec.ExecError as err:
            return JSONResponse(status_code=422, content={"detail": err.errors})
        where = locate(replica.cache.cell(), f"{user}/{name}", index)
        if isinstance(where, JSONResponse):
            return where
        url, _task_id, machine = where
        body = payload if isinstance(payload, dict) else {}
        read_s = float(body.get("wait_s", execspec.OUTPUT_WAIT_S)) + SLACK_S if action == "output" else SLACK_S
        return await relay(http(), f"{url}/{session}/{action}", machine, who, body, read_s)
