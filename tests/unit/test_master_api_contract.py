"""The master's API contract, on an app whose replica never started: undeclared query parameters are refused."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

from reference.master.api import make_app
from reference.master.leader import LeaderConfig
from reference.master.replica import Replica

with warnings.catch_warnings():  # starlette's TestClient warns about its httpx
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    # Never started: no etcd, no leader. Reads need allow_stale; writes answer 503 once validated.
    replica = Replica(
        name="m0", url="http://127.0.0.1:1", etcd=["http://127.0.0.1:9"],
        config=LeaderConfig(cell_name="c", master_name="m0"),
    )  # fmt: skip
    with TestClient(make_app(replica)) as c:
        yield c


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/healthz?verbose=1"),
        ("GET", "/metrics?verbose=1"),
        ("GET", "/v1/jobs?allow_stale=1&verbose=1"),
        ("GET", "/v1/jobs/alice/web/tasks/0/logs?allow_stale=1&verbose=1"),
        ("POST", "/v1/jobs?verbose=1"),
        ("DELETE", "/v1/machines/m1?verbose=1"),
        ("GET", "/ui?verbose=1"),
    ],
)
def test_an_undeclared_query_parameter_is_refused_by_name(client: TestClient, method: str, path: str) -> None:
    r = client.request(method, path)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["field"] == "query.verbose"
    assert error["error"].startswith("unknown query parameter; this operation takes: ")


def test_the_refusal_lists_what_the_operation_takes(client: TestClient) -> None:
    r = client.get("/v1/jobs", params={"usr": "alice", "allow_stale": "1"})
    assert r.json()["detail"] == [
        {
            "field": "query.usr",
            "error": "unknown query parameter; this operation takes: allow_stale, min_revision, since, timeout_s, user, watch",
        }
    ]


@pytest.mark.parametrize(
    "path",
    [
        "/healthz",
        "/v1/jobs?allow_stale=true&user=alice",
        "/v1/jobs?allow_stale=1&min_revision=",  # ReadGate reads an empty floor as none
        "/v1/cell?allow_stale=yes",
        "/v1/machines?allow_stale=on",
        "/v1/quotas?allow_stale=1",
    ],
)
def test_declared_parameters_and_the_freshness_controls_are_taken(client: TestClient, path: str) -> None:
    assert client.get(path).status_code == 200, client.get(path).text


def test_a_write_with_only_declared_parameters_reaches_the_forwarder(client: TestClient) -> None:
    r = client.post("/v1/jobs", json={"name": "web"})
    assert r.status_code == 503  # no leader in a cell that never started
