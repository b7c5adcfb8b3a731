"""What a watch-cache view costs at a large cell, and what its whole-map copies cost beside the
alternative of carrying the maps from view to view:

    python -m loadtests.viewcost --tasks 100000 --machines 10000 --batch 50

One process, no sockets: a `WatchCache` is loaded with the cell's records, then fed batches of
task records (a placement's write) and a view is built after each (`cell()`). Reported, in
milliseconds (median of the batches): the whole view; the C-level copies `_build` makes of the
runtime-info maps (tasks, machines, jobs) and of the spec's task map (`_successor`); and, for
the carried alternative (a view as the last view's dict plus the keys changed since, read
through a Python `Mapping`), what it adds to one scan of the task infos, to 1,000 reads of
one task each and to the copy a writer's draft made on its first write (it no longer copies), beside a plain dict. Issue 43 weighs the two with these figures
(docs/decisions.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from reference.jobspec import parse_job
from reference.master import codec
from reference.master.cache import WatchCache
from reference.master.cell import JobInfo, MachineInfo, TaskInfo
from reference.store import ops
from spec.model import Job, Machine, Resources, Task, TaskId, TaskState

KEYS = codec.Keys("c1")
REQ = Resources.of(cpu=100, ram=100)
JOB_TASKS = 10_000


class _Store:
    def __init__(self) -> None:
        self.kv: dict[bytes, bytes] = {}

    def get_prefix(self, prefix: str) -> tuple[list[tuple[bytes, bytes, int]], int]:
        return [(k, v, 1) for k, v in self.kv.items()], 1

    def watch_prefix(self, *args: object, **kwargs: object) -> None:
        return None


class Overlay(Mapping[Any, Any]):
    """The carried alternative: the last view's dict, shared, plus the keys changed since (None: removed)."""

    __slots__ = ("base", "over")

    def __init__(self, base: dict[Any, Any], over: dict[Any, Any]) -> None:
        self.base, self.over = base, over

    def __getitem__(self, key: Any) -> Any:
        v = self.over.get(key, self)
        if v is self:
            return self.base[key]
        if v is None:
            raise KeyError(key)
        return v

    def __iter__(self) -> Iterator[Any]:
        over = self.over
        for k in self.base:
            if k not in over:
                yield k
        for k, v in over.items():
            if v is not None:
                yield k

    def __len__(self) -> int:
        return len(self.base)


def _ms(fn: Callable[[], Any], reps: int = 20) -> float:
    took = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        took.append(time.perf_counter() - t)
    return round(statistics.median(took) * 1000, 3)


def run(tasks: int, machines: int, batch: int, batches: int = 20) -> dict[str, Any]:
    store = _Store()
    names = [f"m{i}" for i in range(machines)]
    for name in names:
        m = Machine(name, Resources.of(cpu=64000, ram=1 << 20))
        store.kv[KEYS.machine(name).encode()] = codec.encode_machine(m, MachineInfo(address=f"http://{name}"))
    ids: list[TaskId] = []
    for j in range(0, tasks, JOB_TASKS):
        count = min(JOB_TASKS, tasks - j)
        spec = parse_job({"name": f"j{j}", "user": "u", "task_count": count, "request": {"cpu": "100m"},
                          "command": ["sleep", "100"]})  # fmt: skip
        job = Job("u", f"j{j}", 100, count, REQ)
        store.kv[KEYS.job(job.key).encode()] = codec.encode_job(job, JobInfo(spec))
        for i in range(count):
            t = Task(TaskId(job.key, i), TaskState.RUNNING, names[(j + i) % machines], 100, REQ)
            store.kv[KEYS.task(t.id).encode()] = codec.encode_task(t, TaskInfo(seen=True, borglet_state="RUNNING"))
            ids.append(t.id)
    cache = WatchCache(store, KEYS)  # type: ignore[arg-type]
    cache._reload()
    cache.cell()
    revision, views = 1, []
    for b in range(batches):
        events = []
        revision += 1
        for tid in ids[b * batch : (b + 1) * batch]:
            t = Task(tid, TaskState.RUNNING, names[(b + 7) % machines], 100, REQ)
            value = codec.encode_task(t, TaskInfo(seen=True, borglet_state="RUNNING", port=b + 1))
            events.append(ops.WatchEvent("PUT", KEYS.task(tid).encode(), value, revision, 1, 1))
        cache._on_events(events, revision)
        began = time.perf_counter()
        cache.cell()
        views.append(time.perf_counter() - began)
    infos = cache._task_infos
    over = {tid: infos[tid] for tid in ids[:batch]}
    carried = Overlay(infos, over)
    probe = ids[:: max(1, len(ids) // 1000)][:1000]
    return {
        "tasks": tasks, "machines": machines, "batch": batch,
        "view_ms": round(statistics.median(views) * 1000, 3),
        "copy_task_infos_ms": _ms(lambda: dict(infos)),
        "copy_task_map_ms": _ms(lambda: dict(cache._tasks)),
        "copy_machine_infos_ms": _ms(lambda: dict(cache._machine_infos)),
        "copy_job_infos_ms": _ms(lambda: dict(cache._job_infos)),
        "scan_dict_ms": _ms(lambda: [v for v in infos.values()], 5),
        "scan_carried_ms": _ms(lambda: [v for v in carried.values()], 5),
        "reads_1000_dict_ms": _ms(lambda: [infos.get(t) for t in probe]),
        "reads_1000_carried_ms": _ms(lambda: [carried.get(t) for t in probe]),
        # What a writer's draft's first write cost when it copied the task infos (`cell.Tracked`
        # before it wrote over its base instead; the figure stays for the decision it was made for).
        "draft_copy_carried_ms": _ms(lambda: dict(carried), 5),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--machines", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=50)
    args = p.parse_args()
    print(json.dumps(run(args.tasks, args.machines, args.batch)), flush=True)


if __name__ == "__main__":
    main()
