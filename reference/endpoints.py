"""The order in which a failover client tries the replicas of one service: the one that answered last first.

Master replicas (the API client, the conformance harness) and etcd members (the store client
and its watches) are each several URLs of one service. A request tries them in turn, each
at most once per round, starting from the replica that answered last, so a client that found
a live replica stays on it and one that lost it moves on to the next, not back to the first.
"""

from __future__ import annotations

from collections.abc import Sequence


def attempt_order(urls: Sequence[str], start: int) -> list[str]:
    """Every URL once, from urls[start] round the list: start 1 of [a, b, c] is [b, c, a]."""
    start %= len(urls)
    return [*urls[start:], *urls[:start]]


class Endpoints:
    """The replicas of one service a client fails over between, and which to try first.

    `order()` is the attempts of one request; `answered(url)` makes a replica the first to
    try; `failed(url)` moves past it when it was the first. The state is one index that each
    call sets at most once, so threads may share an instance.
    """

    def __init__(self, urls: Sequence[str], start: int = 0) -> None:
        if not urls:
            raise ValueError("at least one endpoint URL is needed")
        self.urls = tuple(urls)
        self._start = start % len(self.urls)

    @property
    def start(self) -> int:
        """The index in `urls` of the replica to try first."""
        return self._start

    def current(self) -> str:
        return self.urls[self._start]

    def order(self) -> list[str]:
        return attempt_order(self.urls, self._start)

    def answered(self, url: str) -> None:
        self._start = self.urls.index(url)

    def failed(self, url: str) -> None:
        index = self.urls.index(url)
        if index == self._start:
            self._start = (index + 1) % len(self.urls)
