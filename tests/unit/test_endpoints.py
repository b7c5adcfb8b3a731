"""The failover order over a service's replicas: from the one that answered last, round the list."""

from __future__ import annotations

import httpx
import pytest

from reference.client import CellClient
from reference.endpoints import Endpoints, attempt_order

A, B, C = "http://a", "http://b", "http://c"


@pytest.mark.parametrize(
    ("start", "expected"),
    [(0, [A, B, C]), (1, [B, C, A]), (2, [C, A, B]), (3, [A, B, C]), (-1, [C, A, B])],
)
def test_attempt_order_is_every_url_once_from_the_start(start: int, expected: list[str]) -> None:
    assert attempt_order([A, B, C], start) == expected


def test_the_replica_that_answered_is_tried_first() -> None:
    replicas = Endpoints([A, B, C])
    assert (replicas.current(), replicas.order()) == (A, [A, B, C])
    replicas.answered(C)
    assert (replicas.current(), replicas.start, replicas.order()) == (C, 2, [C, A, B])


def test_a_failed_first_replica_gives_way_to_the_next() -> None:
    replicas = Endpoints([A, B, C], start=1)
    replicas.failed(B)
    assert replicas.order() == [C, A, B]
    replicas.failed(C)
    assert replicas.current() == A  # round the list, not back to the one that failed first


def test_a_replica_other_than_the_first_failing_changes_nothing() -> None:
    # Another thread may report a failure of a replica this one has already moved past.
    replicas = Endpoints([A, B, C], start=2)
    replicas.failed(A)
    assert replicas.current() == C


def test_no_replica_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one endpoint"):
        Endpoints([])


def test_the_api_client_fails_over_round_the_list() -> None:
    calls: list[str] = []
    down = {"a"}

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.host)
        if request.url.host in down:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={"jobs": [], "revision": 3})

    client = CellClient([A, B, C], transport=httpx.MockTransport(handler))
    client.jobs()  # a refuses, b answers
    down.add("b")
    client.jobs()  # b, the one that answered, first; then c, the next round the list
    assert calls == ["a", "b", "b", "c"]
