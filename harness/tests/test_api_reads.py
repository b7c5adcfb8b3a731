"""Polls never go back in time: a poll read from another master after a failover is read at the last poll's revision or later."""

from __future__ import annotations

import httpx

from harness.api import Api


class Master:
    """A stand-in master at a cache revision; `honours_floor`: it refuses a read below its
    client's floor (the reference's replicas do), else it answers whatever it has."""

    def __init__(self, revision: int, honours_floor: bool = True) -> None:
        self.revision, self.honours_floor, self.up = revision, honours_floor, True
        self.floors: list[str | None] = []

    def answer(self, request: httpx.Request) -> httpx.Response:
        if not self.up:
            raise httpx.ConnectError("down", request=request)
        floor = request.headers.get("X-Minborg-Min-Revision")
        self.floors.append(floor)
        if self.honours_floor and floor is not None and int(floor) > self.revision:
            return httpx.Response(503, json={"detail": [{"field": "min_revision", "error": "behind"}]})
        return httpx.Response(200, json={"revision": self.revision, "machines": []})


def api_of(masters: dict[str, Master]) -> Api:
    api = Api(list(masters))
    api._http = httpx.Client(transport=httpx.MockTransport(lambda r: masters[f"{r.url.scheme}://{r.url.host}"].answer(r)))
    return api


def test_a_poll_after_a_failover_is_not_read_behind_the_last_one():
    for honours in (True, False):
        a, b = Master(10), Master(8, honours_floor=honours)
        api = api_of({"http://a": a, "http://b": b})
        assert api.read_together(["/v1/machines"])[0]["revision"] == 10
        a.up = False  # the leader dies; b's cache is two revisions behind
        assert api.read_together(["/v1/machines"], tries=3) is None  # behind: no poll rather than an old one
        assert b.floors and set(b.floors) == {"10"}
        b.revision = 11  # caught up
        assert api.read_together(["/v1/machines"])[0]["revision"] == 11
        assert api.revision_seen == 11


def test_the_first_poll_carries_no_floor():
    a = Master(3)
    api = api_of({"http://a": a})
    api.read_together(["/v1/machines"])
    assert a.floors == [None] and api.revision_seen == 3
