"""etcd as a dict for the unit tests that feed a watch cache by hand."""

from __future__ import annotations

from typing import Any

from reference.jobspec import parse_job
from reference.master import codec
from reference.master.cache import WatchCache
from reference.master.cell import JobInfo, MachineInfo
from reference.store import ops
from spec.model import Job, Machine, Resources


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


def job_spec(name: str, count: int) -> Any:
    """The parsed spec of user u's job `name` of `count` sleeping tasks (what a job record carries)."""
    return parse_job({"name": name, "user": "u", "task_count": count, "request": {"cpu": "100m"},
                      "command": ["sleep", "100"]})  # fmt: skip


def watched_cell(keys: codec.Keys, machines: int, jobs: list[Job]) -> tuple[Store, WatchCache]:
    """A store holding `jobs` and machines m0..m{machines-1}, and a watch cache loaded from it
    that the store feeds each later put and delete."""
    store = Store()
    for job in jobs:
        store.kv[keys.job(job.key).encode()] = codec.encode_job(job, JobInfo(job_spec(job.name, job.task_count)))
    for i in range(machines):
        m = Machine(f"m{i}", Resources.of(cpu=64000, ram=1 << 20))
        store.kv[keys.machine(m.name).encode()] = codec.encode_machine(m, MachineInfo(address=f"http://{m.name}"))
    cache = WatchCache(store, keys)  # type: ignore[arg-type]
    cache._reload()
    store.cache = cache
    return store, cache
