"""A follower answers a forwarded write only once its own cache holds the leader's revision
(read-your-writes through one replica), and still answers when the cache is too slow."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import httpx
from starlette.requests import Request

from reference.master import forward
from reference.master.forward import Forwarder


class SlowCache:
    """A watch cache that reaches revision `to` when the test says so (`advance`)."""

    def __init__(self, to: int) -> None:
        self.to = to
        self.revision = 1
        self.cond = threading.Condition()
        self.waited: list[int] = []
        self.waiting = threading.Event()  # someone waits for a revision

    def advance(self) -> None:
        with self.cond:
            self.revision = self.to
            self.cond.notify_all()

    def wait_revision(self, revision: int, timeout: float) -> bool:
        self.waited.append(revision)
        with self.cond:
            self.waiting.set()
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
    cache = SlowCache(to=42)
    answer: list[Any] = []
    asked = threading.Thread(target=lambda: answer.append(forwarder(cache).forward(post(), {"name": "x"})))
    asked.start()
    assert cache.waiting.wait(10)  # the leader answered; the follower waits for its cache
    assert answer == []  # not answered before the cache holds revision 42
    cache.advance()
    asked.join(10)
    r = answer[0]
    assert r.status_code == 201 and r.headers["X-Minborg-Revision"] == "42"
    assert cache.waited == [42] and cache.revision == 42


def test_a_cache_too_slow_still_gets_the_answer_out(monkeypatch) -> None:
    monkeypatch.setattr(forward, "CATCH_UP_S", 0.2)
    cache = SlowCache(to=42)  # never advanced
    started = time.monotonic()
    r = forwarder(cache).forward(post(), {"name": "x"})
    assert r.status_code == 201 and time.monotonic() - started < 2.0
    assert cache.revision == 1


def test_answers_without_a_revision_do_not_wait() -> None:
    for status, revision in ((422, None), (503, "42")):
        cache = SlowCache(to=42)
        r = forwarder(cache, status=status, revision=revision).forward(post(), {})
        assert r.status_code == status and cache.waited == []


# --- a write's deadline: a forward held up past it is not made -------------------------------------


def test_a_forward_carries_a_deadline_of_its_budget_or_the_clients_if_sooner() -> None:
    seen: list[httpx.Request] = []
    f = forwarder(SlowCache(to=1))
    f.http = httpx.Client(transport=httpx.MockTransport(lambda req: seen.append(req) or httpx.Response(201, json={})))
    before = time.time()
    f.forward(post(), {"name": "x"})
    stamped = float(seen[-1].headers[forward.DEADLINE_HEADER])
    assert before + forward.FORWARD_BUDGET_S - 0.001 <= stamped <= time.time() + forward.FORWARD_BUDGET_S + 0.001  # to the ms
    # The client's own deadline, when sooner, is kept.
    sooner = Request({"type": "http", "method": "POST", "path": "/v1/jobs", "query_string": b"",
                      "headers": [(b"x-minborg-deadline", f"{before + 0.5:.3f}".encode())]})  # fmt: skip
    f.forward(sooner, {"name": "x"})
    assert float(seen[-1].headers[forward.DEADLINE_HEADER]) == round(before + 0.5, 3)


def test_late_refuses_past_the_deadline_and_ignores_what_is_no_deadline() -> None:
    assert forward.late(None, 100.0) is None
    assert forward.late("100.0", 100.0) is None  # at the deadline: in time
    for junk in ("nan", "inf", "-inf", "soon", ""):
        assert forward.late(junk, 100.0) is None
    refused = forward.late("98.5", 100.0)
    assert refused is not None and refused.status_code == 503
    assert b"1.5 s after its deadline: it was not made" in refused.body
