"""The guard in front of a master's app (reference/master/guard.py), on a replica that never started: which paths are open, the 401's challenge, the page shell of /ui, and the 429 with Retry-After."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

from reference.master.access import AccessConfig, hash_token
from reference.master.api import make_app
from reference.master.leader import LeaderConfig
from reference.master.replica import Replica

with warnings.catch_warnings():  # starlette's TestClient warns about its httpx
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TOKEN = "mbt_guard-test-admin"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


def app(**config: float) -> TestClient:
    replica = Replica(
        name="m0", url="http://127.0.0.1:1", etcd=["http://127.0.0.1:9"],
        config=LeaderConfig(cell_name="c", master_name="m0"),
    )  # fmt: skip
    return TestClient(make_app(replica, AccessConfig(admin_hash=hash_token(TOKEN), **config)))


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with app() as c:
        yield c


@pytest.mark.parametrize("path", ["/healthz", "/metrics", "/openapi.json"])
def test_probes_metrics_and_the_document_are_open(client: TestClient, path: str) -> None:
    assert client.get(path).status_code in (200, 503)


@pytest.mark.parametrize(("headers", "challenge"), [
    ({}, 'Bearer realm="minborg"'),
    ({"Authorization": "Bearer mbt_wrong"}, 'Bearer realm="minborg", error="invalid_token"'),
    ({"Authorization": f"Basic {TOKEN}"}, 'Bearer realm="minborg", error="invalid_token"'),
])  # fmt: skip
def test_no_valid_token_is_401_with_the_challenge(client: TestClient, headers: dict[str, str], challenge: str) -> None:
    r = client.get("/v1/cell", params={"allow_stale": "true"}, headers=headers)
    assert r.status_code == 401 and r.headers["WWW-Authenticate"] == challenge
    assert r.json()["detail"][0]["field"] == "Authorization"
    assert client.delete("/v1/machines/b0", headers=headers).status_code == 401


def test_the_admin_token_passes(client: TestClient) -> None:
    assert client.get("/v1/cell", params={"allow_stale": "true"}, headers=ADMIN).status_code == 200


def test_a_dashboard_page_without_a_token_is_a_shell_without_data(client: TestClient) -> None:
    r = client.get("/ui/jobs/alice/web")
    assert r.status_code == 200 and 'data-shell="1"' in r.text and "alice" not in r.text
    assert "sessionStorage" in r.text and "Authorization" in r.text
    # With a token the page itself: here a 404 page, the job being unknown.
    assert client.get("/ui/jobs/alice/web", headers=ADMIN).status_code == 404


def test_over_the_rate_limit_is_429_with_retry_after() -> None:
    with app(rate=0.5, burst=2) as c:
        statuses = [c.get("/v1/cell", params={"allow_stale": "true"}, headers=ADMIN).status_code for _ in range(3)]
        assert statuses[:2] == [200, 200] and statuses[2] == 429
        r = c.get("/v1/cell", params={"allow_stale": "true"}, headers=ADMIN)
        # (1 - ~0 tokens) / 0.5 per s = ~2 s, in whole seconds (1 if the host stalled a second)
        assert r.status_code == 429 and r.headers["Retry-After"] in ("1", "2")
        assert "admin is over its rate limit of 0.5 requests/s (burst 2)" in r.json()["detail"][0]["error"]
        assert c.get("/healthz").status_code in (200, 503)  # open paths take nothing from the bucket
