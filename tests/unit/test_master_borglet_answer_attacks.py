"""A borglet's answer the master passes on (an exec, an exec session's request: terminal.forward)
can make it answer neither a 5xx nor a header of the borglet's choosing: an answer nested
deeper than Python's JSON reader recurses, and a Retry-After that is not a number of seconds
(one that latin-1 cannot encode made the master's answer itself raise), are what a borglet that
is not the cell's (a plain cell's port taken first) or a broken one would send."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from reference.master import terminal
from reference.master.execute import ExecProxy
from tests.unit.master_cells import placed_cell

DEEP = b"[" * 100_000 + b"]" * 100_000
DEEP_REFUSAL = b'{"detail": ' + DEEP + b"}"


def exec_answer(status: int, body: bytes, headers: list[tuple[bytes, bytes]]):  # type: ignore[no-untyped-def]
    mock = httpx.MockTransport(lambda request: httpx.Response(status, content=body, headers=headers))
    return asyncio.run(ExecProxy(transport=mock).run(placed_cell(machine="m1"), "alice/web", 0, {"command": ["true"]}))


def session_answer(status: int, body: bytes, headers: list[tuple[bytes, bytes]]):  # type: ignore[no-untyped-def]
    mock = httpx.MockTransport(lambda request: httpx.Response(status, content=body, headers=headers))

    async def go():  # type: ignore[no-untyped-def]
        async with httpx.AsyncClient(transport=mock) as http:
            return await terminal.relay(http, "http://m1/v1/tasks/t/terminal", "m1", "alice", {}, 1.0)

    return asyncio.run(go())


ROUTES = {"exec": exec_answer, "session": session_answer}


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("status, body", [(200, DEEP), (409, DEEP), (422, DEEP_REFUSAL)])
def test_an_answer_nested_too_deep_is_a_502_naming_the_machine(route: str, status: int, body: bytes) -> None:
    answer = ROUTES[route](status, body, [])
    assert answer.status_code in (409, 422, 502), answer.status_code
    problem = json.loads(answer.body)["detail"][0]
    assert problem["field"] in ("machine", "index", "command")
    if answer.status_code == 502:
        assert "m1" in problem["error"]


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("value", ["\u0101".encode(), b"soon; Set-Cookie: x=1", b"-1", b""])
def test_a_retry_after_that_is_no_number_of_seconds_is_not_passed_on(route: str, value: bytes) -> None:
    busy = json.dumps({"detail": [{"field": "", "error": "machine m1 runs 4 execs already"}]}).encode()
    answer = ROUTES[route](429, busy, [(b"Retry-After", value)])
    assert answer.status_code == 429
    assert json.loads(answer.body)["detail"][0]["error"] == "machine m1 runs 4 execs already"
    assert "retry-after" not in answer.headers


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_retry_after_in_seconds_is_passed_on(route: str) -> None:
    answer = ROUTES[route](429, b'{"detail": "busy"}', [(b"Retry-After", b"3")])
    assert answer.status_code == 429 and answer.headers["retry-after"] == "3"
