"""The freshness rules of a replica's reads: cache age, the staleness bound, the client's revision floor, readiness."""

from __future__ import annotations

import math
import threading

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from reference.master import freshness
from reference.master.readgate import ReadGate


def test_cache_age_counts_from_the_last_message_and_is_infinite_before_any() -> None:
    assert freshness.cache_age(10.0, 7.5) == 2.5
    assert freshness.cache_age(10.0, None) == math.inf
    assert freshness.cache_age(10.0, 10.5) == 0.0  # never negative


def test_a_cache_within_the_bound_is_served() -> None:
    assert freshness.too_old(2.9, 3.0) is None
    assert freshness.too_old(3.0, 3.0) is None


def test_a_cache_past_the_bound_is_refused_with_the_age_in_the_detail() -> None:
    refusal = freshness.too_old(4.25, 3.0)
    assert refusal is not None
    assert "has not heard from etcd for 4.2 s" in refusal.error
    assert refusal.retry_after_s >= 1


def test_a_cache_that_never_heard_from_etcd_is_refused() -> None:
    refusal = freshness.too_old(math.inf, 3.0)
    assert refusal is not None and "never heard from etcd" in refusal.error


@pytest.mark.parametrize(
    ("header", "query", "floor"),
    [(None, None, None), ("", None, None), ("12", None, 12), (None, "7", 7), ("12", "30", 30), (" 5 ", None, 5)],
)
def test_min_revision_from_header_or_query(header: str | None, query: str | None, floor: int | None) -> None:
    assert freshness.parse_min_revision(header, query) == floor


@pytest.mark.parametrize(("header", "query"), [("abc", None), (None, "1.5"), ("-3", None)])
def test_a_malformed_min_revision_is_an_error(header: str | None, query: str | None) -> None:
    with pytest.raises(ValueError):
        freshness.parse_min_revision(header, query)


def test_floor_decides_waiting_and_refusal() -> None:
    assert not freshness.needs_wait(10, None)
    assert not freshness.needs_wait(10, 10)
    assert freshness.needs_wait(9, 10)
    assert freshness.below_floor(10, 10) is None
    refusal = freshness.below_floor(9, 10)
    assert refusal is not None and "revision 9, below the requested 10" in refusal.error


def test_allow_stale_is_an_explicit_opt_in() -> None:
    assert not freshness.allows_stale(None, None)
    assert not freshness.allows_stale("false", "0")
    assert freshness.allows_stale("true", None)
    assert freshness.allows_stale(None, "1")


def test_readiness_fields() -> None:
    ready = freshness.readiness(0.4, 3.0, 42)
    assert ready == {"ready": True, "revision": 42, "cache_age_s": 0.4, "max_staleness_s": 3.0}
    unready = freshness.readiness(5.0, 3.0, 42)
    assert unready["ready"] is False and "5.0 s" in str(unready["reason"])
    assert freshness.readiness(math.inf, 3.0, 0)["cache_age_s"] is None


class FakeCache:
    """Age and revision set by the test; `wait_revision` returns when `advance` is called or times out."""

    def __init__(self) -> None:
        self.age_s, self.rev = 0.0, 10
        self.cond = threading.Condition()

    def wait_revision(self, revision: int, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.rev >= revision, timeout)

    def advance(self, revision: int) -> None:
        with self.cond:
            self.rev = revision
            self.cond.notify_all()


def gated(cache: FakeCache, wait_s: float = 0.2) -> TestClient:
    app = FastAPI()

    @app.get("/v1/jobs")
    async def jobs() -> dict[str, int]:
        return {"revision": cache.rev}

    @app.get("/healthz")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    app.add_middleware(
        ReadGate, age=lambda: cache.age_s, revision=lambda: cache.rev,
        wait_revision=cache.wait_revision, bound_s=3.0, wait_s=wait_s,
    )  # fmt: skip
    return TestClient(app)


def test_gate_serves_fresh_reads_and_refuses_stale_ones() -> None:
    cache = FakeCache()
    client = gated(cache)
    assert client.get("/v1/jobs").status_code == 200
    cache.age_s = 7.0
    r = client.get("/v1/jobs")
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert "has not heard from etcd for 7.0 s" in r.json()["detail"][0]["error"]
    assert client.get("/healthz").status_code == 200  # liveness is not gated
    assert client.get("/v1/jobs", params={"allow_stale": "true"}).status_code == 200


def test_gate_waits_for_the_floor_then_answers_or_refuses() -> None:
    cache = FakeCache()
    client = gated(cache, wait_s=2.0)
    assert client.get("/v1/jobs", headers={"X-Minborg-Min-Revision": "10"}).status_code == 200
    timer = threading.Timer(0.1, cache.advance, args=(12,))
    timer.start()
    r = client.get("/v1/jobs", params={"min_revision": "12"})
    timer.join()
    assert r.status_code == 200 and r.json()["revision"] == 12
    quick = gated(cache, wait_s=0.1)
    r = quick.get("/v1/jobs", params={"min_revision": "99"})
    assert r.status_code == 503 and "below the requested 99" in r.json()["detail"][0]["error"]
    assert quick.get("/v1/jobs", params={"min_revision": "x"}).status_code == 422
