"""etcd as a dict for the unit tests that feed a watch cache by hand."""

from __future__ import annotations

from reference.master.cache import WatchCache
from reference.store import ops


class Store:
    """etcd as a dict, fed to the cache by hand as a watch would."""

    def __init__(self) -> None:
        self.kv: dict[bytes, bytes] = {}
        self.revision = 1
        self.cache: WatchCache | None = None

    def get_prefix(self, prefix: str) -> tuple[list[tuple[bytes, bytes, int]], int]:
        return [(k, v, 1) for k, v in self.kv.items()], self.revision

    def watch_prefix(self, *args: object, **kwargs: object) -> None:
        return None

    def put(self, records: list[tuple[str, bytes]]) -> None:
        self.revision += 1
        events = []
        for key, value in records:
            self.kv[key.encode()] = value
            events.append(ops.WatchEvent("PUT", key.encode(), value, self.revision, 1, 1))
        if self.cache is not None:
            self.cache._on_events(events, self.revision)

    def delete(self, keys: list[str]) -> None:
        self.revision += 1
        events = []
        for key in keys:
            self.kv.pop(key.encode(), None)
            events.append(ops.WatchEvent("DELETE", key.encode(), b"", self.revision, 1, 1))
        if self.cache is not None:
            self.cache._on_events(events, self.revision)
