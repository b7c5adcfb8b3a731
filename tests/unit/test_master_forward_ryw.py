"""A follower answers a forwarded write only once its own cache holds the leader's revision
(read-your-writes through one replica), and still answers when the cache is too slow."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import httpx
from starlette.requests import Request

from reference.master import forward
from reference.master.forward import Forwarder


class SlowCache:
    """A watch cache that reaches revision `to` `after` seconds from now."""

    def __init__(self, to: int, after: float) -> None:
        self.revision = 1
        self.cond = threading.Condition()
        self.waited: list[int] = []

        def advance() -> None:
            time.sleep(after)
            with self.cond:
                self.revision = to
                self.cond.notify_all()

        threading.Thread(target=advance, daemon=True).start()

    def wait_revision(self, revision: int, timeout: float) -> bool:
        self.waited.append(revision)
        with self.cond:
            return self.cond.wait_for(lambda: self.revision >= revision, timeout)


def forwarder(cache: SlowCache, status: int = 201, revision: str | None = "42") -> Forwarder:
    leader = SimpleNamespace(name="m0", url="http://leader")
    replica = SimpleNamespace(name="m1", cache=cache, leader=lambda: leader)
    f = Forwarder(replica)  # type: ignore[arg-type]
    headers = {"X-Minborg-Revision": revision} if revision is not None else {}
    f.http = httpx.Client(transport=httpx.MockTransport(
        lambda req: httpx.Response(status, json={"revision": 42}, headers=headers)))  # fmt: skip
    return f


def post() -> Request:
    return Request({"type": "http", "method": "POST", "path": "/v1/jobs", "query_string": b"",
                    "headers": []})  # fmt: skip


def test_the_answer_waits_for_the_followers_cache() -> None:
    cache = SlowCache(to=42, after=0.3)
    started = time.monotonic()
    r = forwarder(cache).forward(post(), {"name": "x"})
    assert r.status_code == 201 and r.headers["X-Minborg-Revision"] == "42"
    assert cache.waited == [42] and cache.revision == 42
    assert time.monotonic() - started >= 0.25


def test_a_cache_too_slow_still_gets_the_answer_out(monkeypatch) -> None:
    monkeypatch.setattr(forward, "CATCH_UP_S", 0.2)
    cache = SlowCache(to=42, after=5.0)
    started = time.monotonic()
    r = forwarder(cache).forward(post(), {"name": "x"})
    assert r.status_code == 201 and time.monotonic() - started < 2.0
    assert cache.revision == 1


def test_answers_without_a_revision_do_not_wait() -> None:
    for status, revision in ((422, None), (503, "42")):
        cache = SlowCache(to=42, after=5.0)
        r = forwarder(cache, status=status, revision=revision).forward(post(), {})
        assert r.status_code == status and cache.waited == []
