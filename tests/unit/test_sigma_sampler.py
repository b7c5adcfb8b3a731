"""Sigma's usage sampler follows the watch cache's changes (issue 43): each sample equals one
taken from the whole cell, while it walks the whole cell only on its first sample, after a
reload of the cache, or when the change log no longer holds what changed since the last."""

from __future__ import annotations

import random

from reference.jobspec import parse_job
from reference.master import codec
from reference.master.cache import WatchCache
from reference.master.cell import JobInfo, MachineInfo, TaskInfo
from reference.master.changes import ChangeLog
from reference.master.ui import UsageSampler, usage_sample
from spec.model import Job, Machine, Resources, Task, TaskId, TaskState
from tests.unit.fakestore import Store

KEYS = codec.Keys("c1")
REQ = Resources.of(cpu=1000, ram=1000)
STATES = (TaskState.PENDING, TaskState.RUNNING, TaskState.RUNNING, TaskState.DEAD)


def _job(store: Store, name: str) -> None:
    spec = parse_job({"name": name, "user": "u", "task_count": 1, "request": {"cpu": "1", "ram": "1000"},
                      "command": ["sleep", "100"]})  # fmt: skip
    job = Job("u", name, 100, 1, REQ)
    store.put([(KEYS.job(job.key), codec.encode_job(job, JobInfo(spec)))])


def _task(tid: TaskId, rng: random.Random) -> tuple[str, bytes]:
    state = rng.choice(STATES)
    t = Task(tid, state, "m0" if state is TaskState.RUNNING else None, 100, REQ)
    used = (("cpu_milli", rng.randrange(0, 900)), ("ram_bytes", rng.randrange(0, 900)))
    info = TaskInfo(placement=1, seen=True, borglet_state="RUNNING", port=1, started_at=1.0, usage=used)
    return KEYS.task(tid), codec.encode_task(t, info)


def _cell(rng: random.Random) -> tuple[Store, WatchCache]:
    store = Store()
    m = Machine("m0", Resources.of(cpu=10**7, ram=10**9))
    store.kv[KEYS.machine("m0").encode()] = codec.encode_machine(m, MachineInfo(address="http://m0"))
    cache = WatchCache(store, KEYS)  # type: ignore[arg-type]
    cache._reload()
    store.cache = cache
    for name in ("a", "b", "c"):
        _job(store, name)
    return store, cache


def test_each_sample_equals_the_whole_cells_and_walks_it_only_when_it_must() -> None:
    for seed in range(20):
        rng = random.Random(seed)
        store, cache = _cell(rng)
        sampler = UsageSampler()
        tasks: list[TaskId] = []
        for step in range(60):
            kind = rng.random()
            if kind < 0.5 or not tasks:  # a task placed, started, its usage moved, ended
                tid = rng.choice(tasks) if tasks and rng.random() < 0.6 else TaskId(f"u/{rng.choice('abc')}", step, 0)
                if tid not in tasks:
                    tasks.append(tid)
                store.put([_task(tid, rng) for _ in range(1)])
            elif kind < 0.65:  # a task record deleted
                tid = tasks.pop(rng.randrange(len(tasks)))
                store.delete([KEYS.task(tid)])
            elif kind < 0.75:  # a job added or deleted (its tasks stay till their own changes)
                name = rng.choice("abcd")
                if rng.random() < 0.5:
                    _job(store, name)
                else:
                    store.delete([KEYS.job(f"u/{name}")])
            elif kind < 0.85:  # a machine's usage moved
                m = Machine("m0", Resources.of(cpu=10**7, ram=10**9))
                used = (("cpu_milli", rng.randrange(900)), ("ram_bytes", 5))
                store.put([(KEYS.machine("m0"), codec.encode_machine(m, MachineInfo(address="http://m0", usage=used)))])
            if rng.random() < 0.4:  # the sampler's interval: several changes between samples
                cell = cache.cell()
                assert sampler(cell, cache.changes, cache.reloads) == usage_sample(cell), (seed, step)
        cell = cache.cell()
        assert sampler(cell, cache.changes, cache.reloads) == usage_sample(cell)
        assert sampler.full_walks == 1, seed  # its first sample alone


def test_a_reload_or_changes_the_log_no_longer_holds_bring_a_whole_walk() -> None:
    rng = random.Random(1)
    store, cache = _cell(rng)
    sampler = UsageSampler()
    tid = TaskId("u/a", 0, 0)
    store.put([_task(tid, rng)])
    cell = cache.cell()
    sampler(cell, cache.changes, cache.reloads)
    cache._reload()
    store.put([_task(tid, rng)])
    cell = cache.cell()
    assert sampler(cell, cache.changes, cache.reloads) == usage_sample(cell) and sampler.full_walks == 2
    # A log that dropped the changes since the last sample: walked again, and still right.
    small = ChangeLog(max_changes=1)
    for i in range(3):
        store.put([_task(TaskId("u/b", i, 0), rng)])
    cell = cache.cell()
    for c in cache.changes.after(cache.changes.floor)[0]:
        small.record(c)
    assert sampler(cell, small, cache.reloads) == usage_sample(cell) and sampler.full_walks == 3
    # Without a log, every sample walks.
    assert sampler(cell) == usage_sample(cell) and sampler.full_walks == 4
