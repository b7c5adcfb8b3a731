"""The reclaimer's tick looks at what changed since the last one, not at every running task
(issue 43): the tasks whose records or jobs changed (the watch cache's change log), whose usage
moved (the poller's count), whose warm-up ended, and the backlog; every FULL_WALK_EVERY ticks,
and whenever what changed is not known, every running task."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reference.elastic.reservation import estimate
from reference.jobspec import parse_job
from reference.master import codec, work
from reference.master.cache import WatchCache
from reference.master.cell import JobInfo, MachineInfo, TaskInfo
from reference.master.reclaimer import FULL_WALK_EVERY, WARMUP_S, Reclaimer
from spec.model import Job, Machine, Resources, Task, TaskId, TaskState
from tests.unit.fakestore import Store

KEYS = codec.Keys("c1")
REQ = Resources.of(cpu=1000, ram=1000)
USED = (("cpu_milli", 400), ("ram_bytes", 800))
TARGET = Resources.of(cpu=500, ram=1000)  # usage plus the 25% margin, within the request
N = 300


RUNNING = TaskInfo(placement=1, seen=True, borglet_state="RUNNING", port=1, started_at=900.0)


def _cell() -> tuple[Store, WatchCache, dict[TaskId, tuple[tuple[str, int], ...]]]:
    """N tasks running on m0 for long, each reserving what its usage calls for already."""
    store = Store()
    spec = parse_job({"name": "quiet", "user": "u", "task_count": N, "request": {"cpu": "1", "ram": "1000"},
                      "command": ["sleep", "100"]})  # fmt: skip
    job = Job("u", "quiet", 100, N, REQ)
    store.kv[KEYS.job(job.key).encode()] = codec.encode_job(job, JobInfo(spec))
    m = Machine("m0", Resources.of(cpu=10**7, ram=10**9))
    store.kv[KEYS.machine("m0").encode()] = codec.encode_machine(m, MachineInfo(address="http://m0"))
    usage = {}
    for i in range(N):
        t = Task(TaskId(job.key, i, 0), TaskState.RUNNING, "m0", 100, REQ, reservation=TARGET)
        store.kv[KEYS.task(t.id).encode()] = codec.encode_task(t, RUNNING)
        usage[t.id] = USED
    cache = WatchCache(store, KEYS)  # type: ignore[arg-type]
    cache._reload()
    store.cache = cache
    return store, cache, usage


def test_a_tick_looks_at_what_changed_not_at_every_task() -> None:
    store, cache, usage = _cell()
    now = [100.0]
    moved: list[set[TaskId] | None] = [None]  # the poller's count: None before its first take

    def take() -> set[TaskId] | None:
        got, moved[0] = moved[0], set()
        return got

    r = Reclaimer(cache, None, lambda: usage, clock=lambda: now[0], wall=lambda: now[0] + 1000.0, moved=take)  # type: ignore[arg-type]

    def tick() -> tuple[dict[TaskId, Resources], int, int]:
        before = work.snapshot()
        now[0] += 5.0
        out = r.estimates()
        after = work.snapshot()
        return (out, after.get("reservation_checks", 0) - before.get("reservation_checks", 0),
                after.get("reservation_full_walks", 0) - before.get("reservation_full_walks", 0))  # fmt: skip

    # The first tick walks every task (nothing is known yet): none is worth writing.
    assert tick() == ({}, N, 1)
    # A quiet cell: nothing looked at.
    assert tick() == ({}, 0, 0)
    # One task's usage moves: that task alone is looked at, and its reservation rises at once.
    hot = TaskId("u/quiet", 7, 0)
    usage[hot] = (("cpu_milli", 720), ("ram_bytes", 800))
    moved[0] = {hot}
    out, looked, full = tick()
    assert (looked, full) == (1, 0) and out == {hot: Resources.of(cpu=900, ram=1000)}
    # A new task starts: its record change brings it in, warming up; it is looked at again
    # when its warm-up ends, and not between.
    new = Task(TaskId("u/quiet", N, 0), TaskState.RUNNING, "m0", 100, REQ)
    store.put([(KEYS.task(new.id), codec.encode_task(new, replace(RUNNING, started_at=now[0] + 1005.0)))])
    usage[new.id] = USED
    moved[0] = {new.id}
    assert tick()[:2] == ({}, 1)
    ticks = 0
    while now[0] + 5.0 + 1000.0 < new_started(store, new.id) + WARMUP_S:
        assert tick()[:2] == ({}, 0)
        ticks += 1
    out, looked, _ = tick()
    # Its first estimate: from its request, over one tick's time.
    assert ticks >= 1 and looked == 1 and out == {new.id: estimate(REQ, dict(USED), REQ, 5.0)}
    # Every FULL_WALK_EVERY-th tick walks every task again; the ones between look at nothing.
    fulls = [tick()[2] for _ in range(FULL_WALK_EVERY)]
    assert sum(fulls) == 1
    # Usage moves not counted (more than the poller keeps): every task.
    moved[0] = None
    assert tick()[2] == 1


def new_started(store: Store, tid: TaskId) -> float:
    _, info = codec.decode_task(store.kv[KEYS.task(tid).encode()])
    return info.started_at


def test_a_quiet_task_is_estimated_again_over_all_the_time_since_by_a_full_walk() -> None:
    """Between full walks a quiet task is not looked at, and its time since its last estimate
    goes on: the full walk's estimate covers all of it (a decay too small to write over one
    tick is written once the minute's decay is)."""
    store, cache, usage = _cell()
    now = [100.0]
    moved: list[set[TaskId] | None] = [None]

    def take() -> set[TaskId] | None:
        got, moved[0] = moved[0], set()
        return got

    # Reservations 5% above their target: a tick's decay (5 s of a 30 s half-life) moves 0.5%,
    # not worth writing; a minute's moves 3.75%, which is.
    high = Resources.of(cpu=550, ram=1000)
    store.put([(KEYS.task(TaskId("u/quiet", i, 0)), codec.encode_task(
        Task(TaskId("u/quiet", i, 0), TaskState.RUNNING, "m0", 100, REQ, reservation=high), RUNNING)) for i in range(N)])
    r = Reclaimer(cache, None, lambda: usage, clock=lambda: now[0], wall=lambda: now[0] + 1000.0, moved=take)  # type: ignore[arg-type]
    written = []
    for _ in range(2 * FULL_WALK_EVERY):
        now[0] += 5.0
        written.append(len(r.estimates()))
    # The first full walk finds nothing worth writing; the next, a minute later, writes them
    # all (the write budget here is the floor: no task is confirmed started in this cache's counts).
    assert written[0] == 0 and sum(written[1:FULL_WALK_EVERY]) == 0
    assert written[FULL_WALK_EVERY] > 0


def test_the_poller_counts_the_tasks_whose_usage_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from reference.master import shardreports
    from reference.master.shardreports import ShardReports

    reports = ShardReports(None, None, epoch=1, interval=1.0, down_after=3, on_poll=None, clock=time.monotonic)  # type: ignore[arg-type]
    a, b = TaskId("u/j", 0, 0), TaskId("u/j", 1, 0)
    reports._take_usage({a: USED})
    assert reports.take_usage_moved() is None  # the first take: not known since when
    reports._take_usage({a: USED, b: USED})  # a's figures again: only b moved
    assert reports.take_usage_moved() == {b}
    assert reports.take_usage_moved() == set()
    reports._take_usage({a: (("cpu_milli", 1), ("ram_bytes", 800))})
    assert reports.take_usage_moved() == {a} and reports.usage[a] == (("cpu_milli", 1), ("ram_bytes", 800))
    # More than it keeps unread: not known again, and the next take says so.
    monkeypatch.setattr(shardreports, "USAGE_MOVED_KEPT", 3)
    many = {TaskId("u/j", i, 0): (("cpu_milli", 2),) for i in range(4)}
    reports._take_usage(many)
    assert reports.take_usage_moved() is None


def test_a_backlog_is_written_best_first_looking_at_no_more_of_it_than_a_tick_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """300 reservations worth writing, 50 a tick: between walks a tick looks at the backlog's
    best 50 and the tasks last tick's writes changed, never the whole backlog; every task is
    written once before any is written twice (a first estimate moves further than a second)."""
    import reference.master.reclaimer as reclaimer

    monkeypatch.setattr(reclaimer, "MAX_WRITES_PER_TICK", 50)
    monkeypatch.setattr(reclaimer, "MIN_WRITES_PER_TICK", 10)
    store, cache, usage = _cell()
    store.put([(KEYS.task(TaskId("u/quiet", i, 0)), codec.encode_task(
        Task(TaskId("u/quiet", i, 0), TaskState.RUNNING, "m0", 100, REQ), RUNNING)) for i in range(N)])  # fmt: skip
    now = [100.0]
    moved: list[set[TaskId] | None] = [None]

    def take() -> set[TaskId] | None:
        got, moved[0] = moved[0], set()
        return got

    r = Reclaimer(cache, None, lambda: usage, clock=lambda: now[0], wall=lambda: now[0] + 1000.0, moved=take)  # type: ignore[arg-type]
    order: list[TaskId] = []
    for tick in range(N // 50):
        before = work.snapshot().get("reservation_checks", 0)
        now[0] += 5.0
        out = r.estimates()
        looked = work.snapshot().get("reservation_checks", 0) - before
        assert len(out) == 50
        assert looked == (N if tick == 0 else 100), (tick, looked)  # the walk; then 50 best and 50 written
        order += sorted(out, key=str)
        tasks = cache.cell().state.tasks
        store.put([(KEYS.task(tid), codec.encode_task(replace(tasks[tid], reservation=res), RUNNING)) for tid, res in out.items()])
    assert sorted(order) == sorted(TaskId("u/quiet", i, 0) for i in range(N))  # each once
    assert order == sorted(order, key=str)  # equal shares: by id, as found
