"""Finding the leader from outside the masters (reference.launcher.ask_leader), the one way the
launcher, chaos, the load tests and the harness ask it: against masters that answer, fail or
answer for another cell."""

from __future__ import annotations

import httpx
import pytest

from reference.launcher import LauncherError, ask_leader

ANSWERS = {
    "http://m0": None,  # down
    "http://m1": (503, {}),
    "http://m2": (200, {"leader": None}),  # no leader yet
    "http://m3": (200, {"leader": "master0"}),
    "http://m4": (200, {"leader": "master4"}),
    "http://other": (200, {"leader": "elsewhere"}),
}


def _http() -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/cell"
        found = ANSWERS[f"{request.url.scheme}://{request.url.host}"]
        if found is None:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(found[0], json=found[1])

    return httpx.Client(transport=httpx.MockTransport(answer))


@pytest.mark.parametrize(
    ("urls", "not_named", "leader"),
    [
        (["http://m0", "http://m1", "http://m2", "http://m3"], None, "master0"),
        (["http://m3", "http://m4"], "master0", "master4"),  # the old leader is passed over
        (["http://m3"], "master0", None),
        (["http://m0", "http://m1", "http://m2"], None, None),
        ([], None, None),
    ],
)
def test_the_first_master_that_names_a_leader_is_believed(urls: list[str], not_named: str | None, leader: str | None) -> None:
    with _http() as http:
        assert ask_leader(http, urls, not_named) == leader


def test_what_each_master_said_is_noted_when_none_names_a_leader() -> None:
    problems: list[str] = []
    with _http() as http:
        assert ask_leader(http, ["http://m0", "http://m1", "http://m2"], problems=problems) is None
    assert problems[0].startswith("http://m0: refused")
    assert problems[1:] == ["http://m1: HTTP 503, leader none", "http://m2: HTTP 200, leader none"]


def test_a_leader_from_another_cell_means_a_taken_port() -> None:
    with _http() as http, pytest.raises(LauncherError, match="http://other answers for another cell .*its port was taken"):
        ask_leader(http, ["http://other", "http://m3"], own={"master0", "master1"})
    with _http() as http:
        assert ask_leader(http, ["http://m3"], own={"master0", "master1"}) == "master0"


HEALTH = {
    "http://m0": None,  # down
    "http://m1": (200, {"name": "m1", "role": "follower"}),
    "http://m2": (200, {"name": "m2", "role": "leader"}),
    "http://m3": (200, {"name": "m3", "role": "leader"}),  # a deposed leader that has not noticed yet
}


def test_itself_believes_only_a_master_that_says_it_leads() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/healthz"
        found = HEALTH[f"{request.url.scheme}://{request.url.host}"]
        if found is None:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(found[0], json=found[1])

    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        assert ask_leader(http, ["http://m0", "http://m1", "http://m2"], itself=True) == "m2"
        assert ask_leader(http, ["http://m0", "http://m1"], itself=True) is None
        assert ask_leader(http, ["http://m2", "http://m3"], "m2", itself=True, timeout=2.0) == "m3"


def test_heard_tells_a_master_that_says_it_follows_from_one_that_does_not_answer() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        found = HEALTH[f"{request.url.scheme}://{request.url.host}"]
        if found is None:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(found[0], json=found[1])

    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        for urls, leader, heard_from in [
            (["http://m0"], None, []),  # no answer: not heard, though it names no leader either
            (["http://m1"], None, ["http://m1"]),  # it answered that it follows
            (["http://m0", "http://m1", "http://m2"], "m2", ["http://m1", "http://m2"]),
        ]:
            heard: list[str] = []
            assert ask_leader(http, urls, itself=True, heard=heard) == leader
            assert heard == heard_from
    heard = []
    with _http() as http:
        assert ask_leader(http, ["http://m1", "http://m2", "http://m3"], heard=heard) == "master0"
    assert heard == ["http://m2", "http://m3"]  # a 503 is no answer read
