"""What the master answers for a borglet's answer to an exec (`ExecProxy.run`) and to an exec
session's request (`terminal.relay`): the borglet's JSON on a 200, its refusals passed on with
the field they name, a borglet without the route told to upgrade, anything else a 502."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from reference.master import terminal
from reference.master.execute import ExecProxy
from tests.unit.master_cells import placed_cell


def refusal(field: str, error: str) -> bytes:
    return json.dumps({"detail": [{"field": field, "error": error}]}).encode()


BUSY = {"Retry-After": "1"}
# (the borglet's status, body, headers): what both routes are asked to answer.
ANSWERS = {
    "ok": (200, b'{"exit_code": 0}', {}),
    "not json": (200, b"<html>", {}),
    "no route": (404, b'{"detail": "Not Found"}', {}),
    "gone": (404, refusal("task_id", "no task x here"), {}),
    "conflict": (409, refusal("task_id", "task x has no container yet"), {}),
    "bad": (422, refusal("command", "a NUL in PATH"), {}),
    "busy": (429, refusal("", "machine m1 runs 4 execs already"), BUSY),
    "broke": (500, b"Internal Server Error", {}),
    "bare": (503, b"", {}),
}
EXEC = {
    "ok": (200, {"exit_code": 0}, None),
    "not json": (502, [("machine", "machine m1 answered the exec in alice/web/0#0 with no JSON")], None),
    "no route": (409, [("index", "machine m1's borglet does not serve exec: upgrade it")], None),
    "gone": (409, [("index", "no task x here")], None),
    "conflict": (409, [("index", "task x has no container yet")], None),
    "bad": (422, [("command", "a NUL in PATH")], None),
    "busy": (429, [("", "machine m1 runs 4 execs already")], "1"),
    "broke": (502, [("machine", "machine m1 refused the exec in alice/web/0#0: Internal Server Error")], None),
    "bare": (502, [("machine", "machine m1 refused the exec in alice/web/0#0: HTTP 503")], None),
}
SESSION = {
    "ok": (200, {"exit_code": 0}, None),
    "not json": (502, [("machine", "machine m1 answered the exec session's request with no JSON")], None),
    "no route": (409, [("index", "machine m1's borglet does not serve exec -it: upgrade it")], None),
    "gone": (404, [("session", "no task x here")], None),
    "conflict": (409, [("index", "task x has no container yet")], None),
    "bad": (422, [("command", "a NUL in PATH")], None),
    "busy": (429, [("", "machine m1 runs 4 execs already")], "1"),
    "broke": (502, [("machine", "machine m1 refused the exec session's request: Internal Server Error")], None),
    "bare": (502, [("machine", "machine m1 refused the exec session's request: HTTP 503")], None),
}


def transport(case: str) -> httpx.MockTransport:
    status, body, headers = ANSWERS[case]
    return httpx.MockTransport(lambda request: httpx.Response(status, content=body, headers=headers))


def unreachable(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def seen(response) -> tuple[int, object, str | None]:  # type: ignore[no-untyped-def]
    content = json.loads(response.body)
    if response.status_code != 200:
        content = [(d["field"], d["error"]) for d in content["detail"]]
    return response.status_code, content, response.headers.get("retry-after")


def exec_answer(mock: httpx.MockTransport):  # type: ignore[no-untyped-def]
    proxy = ExecProxy(transport=mock)
    return asyncio.run(proxy.run(placed_cell(machine="m1"), "alice/web", 0, {"command": ["true"]}))


def session_answer(mock: httpx.MockTransport):  # type: ignore[no-untyped-def]
    async def go():  # type: ignore[no-untyped-def]
        async with httpx.AsyncClient(transport=mock) as http:
            return await terminal.relay(http, "http://m1/v1/tasks/t/terminal", "m1", "alice", {}, 1.0)

    return asyncio.run(go())


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_an_exec_answers_what_its_borglet_answered(case: str) -> None:
    assert seen(exec_answer(transport(case))) == EXEC[case]


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_an_exec_sessions_request_answers_what_its_borglet_answered(case: str) -> None:
    assert seen(session_answer(transport(case))) == SESSION[case]


def test_a_borglet_that_does_not_answer_is_a_502_naming_its_machine() -> None:
    status, problems, _ = seen(exec_answer(httpx.MockTransport(unreachable)))
    assert status == 502 and problems[0][0] == "machine"  # type: ignore[index]
    assert problems[0][1].startswith("machine m1 did not answer the exec in alice/web/0#0: ")  # type: ignore[index]
    status, problems, _ = seen(session_answer(httpx.MockTransport(unreachable)))
    assert status == 502 and problems[0][0] == "machine"  # type: ignore[index]
    assert problems[0][1].startswith("machine m1 did not answer the exec session's request: ")  # type: ignore[index]
