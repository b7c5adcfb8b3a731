"""The watch cache's views: built from the keys each revision changed, they equal a view built
from scratch, keep unchanged objects' identity, and carry the pass's work set (`Cell.work`)
and the task counts equal to a scan of every task, through puts, deletes, job changes and reloads."""

from __future__ import annotations

import random

import pytest

from reference.jobspec import parse_job
from reference.master import codec, views
from reference.master.cache import WatchCache
from reference.master.cell import Cell, JobInfo, MachineInfo, TaskInfo
from reference.master.leader import pass_has_work, pass_work
from reference.store import ops
from spec.fmap import FMap
from spec.model import (
    Alloc,
    Band,
    CellState,
    DeathCause,
    Job,
    Machine,
    QuotaKey,
    Resources,
    RestartPolicy,
    Task,
    TaskId,
    TaskState,
)

KEYS = codec.Keys("c1")
SPEC = parse_job({"name": "web", "user": "u", "task_count": 1, "request": {"cpu": "100m"},
                  "command": ["sleep", "100"]})  # fmt: skip
REQS = (Resources.of(cpu=100, ram=100), Resources.of(cpu=50, ram=100))
JOBS = [f"u/j{i}" for i in range(4)]


class FakeClient:
    """etcd as a dict: a prefix read returns what it holds now; the watch is driven by hand."""

    def __init__(self) -> None:
        self.kv: dict[bytes, bytes] = {}
        self.revision = 1

    def get_prefix(self, prefix: str) -> tuple[list[tuple[bytes, bytes, int]], int]:
        return [(k, v, 1) for k, v in sorted(self.kv.items())], self.revision

    def watch_prefix(self, *args: object, **kwargs: object) -> None:
        return None


def scratch(client: FakeClient) -> Cell:
    """The cell the store holds, decoded record by record, without the cache."""
    machines, jobs, tasks, quotas, replicas, allocs = {}, {}, {}, {}, {}, {}
    for key, value in client.kv.items():
        k = key.decode()
        if k.startswith(KEYS.machines):
            m, mi = codec.decode_machine(value)
            machines[m.name] = (m, mi)
        elif k.startswith(KEYS.jobs):
            j, ji = codec.decode_job(value)
            jobs[j.key] = (j, ji)
        elif k.startswith(KEYS.tasks):
            t, ti = codec.decode_task(value)
            tasks[t.id] = (t, ti)
        elif k.startswith(KEYS.quotas):
            q, amount = codec.decode_quota(value)
            quotas[q] = amount
        elif k.startswith(KEYS.allocs):
            a = codec.decode_alloc(value)
            allocs[a.name] = a
        elif k.startswith(KEYS.replicas):
            doc = codec.loads(value)
            replicas[doc["name"]] = doc["url"]
    state = CellState(
        machines=FMap({k: v[0] for k, v in machines.items()}),
        jobs=FMap({k: v[0] for k, v in jobs.items()}),
        tasks=FMap({k: v[0] for k, v in tasks.items()}),
        quotas=FMap(quotas),
        allocs=FMap(allocs),
    )
    return Cell(
        state,
        {k: v[1] for k, v in machines.items()},
        {k: v[1] for k, v in jobs.items()},
        {k: v[1] for k, v in tasks.items()},
        client.revision,
        "",
        replicas,
        frozenset(pass_work(state)),
    )


def random_record(rng: random.Random) -> tuple[bytes, bytes | None]:
    """One key and its new value (None: delete it)."""
    kind = rng.choice(["task"] * 6 + ["job"] * 3 + ["machine", "quota", "replica", "alloc"])
    delete = rng.random() < 0.25
    if kind == "task":
        tid = TaskId(rng.choice(JOBS), rng.randrange(3), rng.randrange(3))
        state = rng.choice(list(TaskState))
        task = Task(
            tid,
            state,
            machine="m0" if state is TaskState.RUNNING else None,
            priority=100,
            request=rng.choice(REQS),
            cause=rng.choice(list(DeathCause)) if state is TaskState.DEAD else None,
        )
        info = TaskInfo(port=rng.randrange(3), restarts=rng.randrange(3), seen=rng.random() < 0.5,
                        borglet_state=rng.choice(["", "QUEUED", "STARTING", "RUNNING"]))  # fmt: skip
        return KEYS.task(tid).encode(), None if delete else codec.encode_task(task, info)
    if kind == "job":
        user, name = rng.choice(JOBS).split("/")
        job = Job(user, name, 100, rng.randrange(4), rng.choice(REQS),
                  restart_policy=rng.choice(list(RestartPolicy)))  # fmt: skip
        info = JobInfo(SPEC, submitted_at=float(rng.randrange(3)))
        return KEYS.job(job.key).encode(), None if delete else codec.encode_job(job, info)
    if kind == "machine":
        m = Machine(f"m{rng.randrange(3)}", Resources.of(cpu=1000 * rng.randrange(1, 3)))
        info = MachineInfo(address=f"http://127.0.0.1:{rng.randrange(2)}")
        return KEYS.machine(m.name).encode(), None if delete else codec.encode_machine(m, info)
    if kind == "quota":
        q = QuotaKey(rng.choice(["u", "*"]), Band.BATCH)
        return KEYS.quota(q).encode(), None if delete else codec.encode_quota(q, rng.choice(REQS))
    if kind == "alloc":
        a = Alloc("u/s", rng.randrange(2), f"m{rng.randrange(3)}", rng.choice(REQS), 100, "u")
        return KEYS.alloc(a.name).encode(), None if delete else codec.encode_alloc(a)
    name = f"r{rng.randrange(2)}"
    doc = codec.dumps({"schema": codec.SCHEMA, "name": name, "url": f"http://{name}"})
    return KEYS.replica(name).encode(), None if delete else doc


def assert_same(got: Cell, want: Cell) -> None:
    assert got.state == want.state
    assert got.machines == want.machines
    assert got.jobs == want.jobs
    assert got.tasks == want.tasks
    assert got.replicas == want.replicas
    assert got.revision == want.revision
    assert got.work == want.work == pass_work(got.state)
    # The acting set is the work set less its PENDING tasks, kept as records change.
    assert got.acting == {t for t in got.work if got.state.tasks[t].state is not TaskState.PENDING}
    assert got.running == {t for t, task in got.state.tasks.items() if task.state is TaskState.RUNNING}
    assert bool(got.work) == pass_has_work(got.state)
    # The counts the cache keeps as records change equal a walk of every task.
    assert got.counts == views.walk_counts(got, None)
    assert views.task_counts(got) == got.counts
    for job in JOBS:
        assert views.task_counts(got, job) == views.walk_counts(got, job)


@pytest.mark.parametrize("seed", range(12))
def test_views_at_successive_revisions_equal_a_rebuild(seed: int) -> None:
    rng = random.Random(seed)
    client = FakeClient()
    for _ in range(10):
        key, value = random_record(rng)
        if value is not None:
            client.kv[key] = value
    cache = WatchCache(client, KEYS)  # type: ignore[arg-type]
    cache._reload()
    before = cache.cell()
    assert_same(before, scratch(client))
    changed: set[bytes] = set()  # keys put or deleted since the last view
    for _ in range(150):
        events = []
        for _ in range(rng.randrange(1, 5)):
            key, value = random_record(rng)
            client.revision += 1
            changed.add(key)
            if value is None:
                client.kv.pop(key, None)
                events.append(ops.WatchEvent("DELETE", key, b"", client.revision, 0, 0))
            else:
                client.kv[key] = value
                events.append(ops.WatchEvent("PUT", key, value, client.revision, 1, 1))
        cache._on_events(events, client.revision)
        if rng.random() < 0.3:
            continue  # several batches between two views
        view = cache.cell()
        assert_same(view, scratch(client))
        # What no key touched keeps its identity: the writer diffs with `is`.
        for tid, task in view.state.tasks.items():
            if KEYS.task(tid).encode() not in changed and tid in before.state.tasks:
                assert before.state.tasks[tid] is task
                assert before.tasks[tid] is view.tasks[tid]
        # An earlier view's counts are its own: later batches did not change them.
        for job in JOBS:
            assert views.task_counts(before, job) == views.walk_counts(before, job)
        before, changed = view, set()


def test_unchanged_objects_and_maps_keep_their_identity() -> None:
    client = FakeClient()
    job = Job("u", "j0", 100, 2, REQS[0])
    client.kv[KEYS.job(job.key).encode()] = codec.encode_job(job, JobInfo(SPEC))
    m = Machine("m0", Resources.of(cpu=1000))
    client.kv[KEYS.machine("m0").encode()] = codec.encode_machine(m, MachineInfo())
    for i in range(2):
        t = Task(TaskId(job.key, i), TaskState.RUNNING, "m0", 100, REQS[0])
        client.kv[KEYS.task(t.id).encode()] = codec.encode_task(t, TaskInfo())
    cache = WatchCache(client, KEYS)  # type: ignore[arg-type]
    cache._reload()
    v1 = cache.cell()
    t0 = TaskId(job.key, 0)
    changed = Task(t0, TaskState.DEAD, None, 100, REQS[0], DeathCause.FAILED)
    key = KEYS.task(t0).encode()
    cache._on_events([ops.WatchEvent("PUT", key, codec.encode_task(changed, TaskInfo()), 2, 1, 2)], 2)
    v2 = cache.cell()
    assert v2.state.tasks[t0] == changed and v1.state.tasks[t0].state is TaskState.RUNNING
    t1 = TaskId(job.key, 1)
    assert v2.state.tasks[t1] is v1.state.tasks[t1]
    assert v2.tasks[t1] is v1.tasks[t1]
    # Maps no key of the revision touched are the previous view's.
    assert v2.state.machines is v1.state.machines and v2.machines is v1.machines
    assert v2.state.jobs is v1.state.jobs and v2.jobs is v1.jobs
    assert v2.work == {t0} and v1.work == frozenset()
    # A revision that touched no task shares the task counts of the view before (no copy).
    key = KEYS.machine("m0").encode()
    cache._on_events([ops.WatchEvent("PUT", key, codec.encode_machine(m, MachineInfo(reason="r")), 3, 1, 3)], 3)
    v3 = cache.cell()
    assert v3.machines["m0"].reason == "r" and v3.counts is v2.counts and v3.job_counts is v2.job_counts
    assert v3.counts == views.walk_counts(v3, None)


def test_a_job_change_moves_its_tasks_in_and_out_of_the_work_set() -> None:
    client = FakeClient()
    job = Job("u", "j0", 1, 1, REQS[0], restart_policy=RestartPolicy.ON_FAILURE)
    dead = Task(TaskId(job.key, 0), TaskState.DEAD, None, 1, REQS[0], DeathCause.FAILED)
    client.kv[KEYS.task(dead.id).encode()] = codec.encode_task(dead, TaskInfo())
    cache = WatchCache(client, KEYS)  # type: ignore[arg-type]
    cache._reload()
    assert cache.cell().work == frozenset()  # the job is gone: stays dead
    jkey = KEYS.job(job.key).encode()
    cache._on_events([ops.WatchEvent("PUT", jkey, codec.encode_job(job, JobInfo(SPEC)), 2, 1, 1)], 2)
    assert cache.cell().work == {dead.id}
    cache._on_events([ops.WatchEvent("DELETE", jkey, b"", 3, 0, 0)], 3)
    assert cache.cell().work == frozenset()


def test_deleting_the_latest_incarnation_makes_the_one_before_it_latest() -> None:
    client = FakeClient()
    job = Job("u", "j0", 1, 1, REQS[0], restart_policy=RestartPolicy.ON_FAILURE)
    client.kv[KEYS.job(job.key).encode()] = codec.encode_job(job, JobInfo(SPEC))
    old = Task(TaskId(job.key, 0, 0), TaskState.DEAD, None, 1, REQS[0], DeathCause.FAILED)
    new = Task(TaskId(job.key, 0, 1), TaskState.DEAD, None, 1, REQS[0], DeathCause.KILLED)
    for t in (old, new):
        client.kv[KEYS.task(t.id).encode()] = codec.encode_task(t, TaskInfo())
    cache = WatchCache(client, KEYS)  # type: ignore[arg-type]
    cache._reload()
    assert cache.cell().work == frozenset()
    cache._on_events([ops.WatchEvent("DELETE", KEYS.task(new.id).encode(), b"", 2, 0, 0)], 2)
    assert cache.cell().work == {old.id}


def test_a_reload_after_compaction_rebuilds_the_view_from_the_store() -> None:
    rng = random.Random(7)
    client = FakeClient()
    cache = WatchCache(client, KEYS)  # type: ignore[arg-type]
    cache._reload()
    for _ in range(40):
        key, value = random_record(rng)
        client.revision += 1
        if value is not None:
            client.kv[key] = value
            cache._on_events([ops.WatchEvent("PUT", key, value, client.revision, 1, 1)], client.revision)
    cache.cell()
    # Changes the watch missed (compacted away), then the reload reads the store again.
    for _ in range(40):
        key, value = random_record(rng)
        client.revision += 1
        if value is None:
            client.kv.pop(key, None)
        else:
            client.kv[key] = value
    cache._reload()
    assert cache.reloads == 2
    assert_same(cache.cell(), scratch(client))
    key, value = random_record(rng)
    client.revision += 1
    if value is not None:
        client.kv[key] = value
        cache._on_events([ops.WatchEvent("PUT", key, value, client.revision, 1, 1)], client.revision)
        assert_same(cache.cell(), scratch(client))


def test_a_progress_notification_keeps_the_view_and_its_work_set() -> None:
    client = FakeClient()
    cache = WatchCache(client, KEYS)  # type: ignore[arg-type]
    cache._reload()
    v1 = cache.cell()
    cache._on_events([], 5)
    v2 = cache.cell()
    assert v2.revision == 5 and v2.state is v1.state and v2.work == v1.work == frozenset()


@pytest.mark.parametrize("seed", range(4))
def test_views_carry_the_spec_indexes_forward(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A view's task and job maps are made from the last view's, so the spec's indexes (a
    job's tasks, a machine's running tasks, a user's jobs) are updated, not rebuilt."""
    from spec import fmap

    monkeypatch.setattr(fmap, "GROUP_MIN", 0)
    rng = random.Random(seed)
    client = FakeClient()
    cache = WatchCache(client, KEYS)  # type: ignore[arg-type]
    cache._reload()
    for _ in range(60):
        key, value = random_record(rng)
        client.revision += 1
        if value is None:
            client.kv.pop(key, None)
            event = ops.WatchEvent("DELETE", key, b"", client.revision, 0, 0)
        else:
            client.kv[key] = value
            event = ops.WatchEvent("PUT", key, value, client.revision, 1, 1)
        before = cache.cell().state
        for job in JOBS:
            before.tasks_of(job)  # build the indexes on this view
        before.running_on("m0")
        cache._on_events([event], client.revision)
        after = cache.cell().state
        want = scratch(client).state
        assert after.tasks._groups, "the index was not carried to the next view"
        for job in JOBS:
            assert after.tasks_of(job) == want.tasks_of(job)
            assert after.live_indices(job) == want.live_indices(job)
        assert after.running_on("m0") == want.running_on("m0")
        assert after.quota_used("u", Band.BATCH) == want.quota_used("u", Band.BATCH)


def test_freshness_is_timed_on_the_injected_clock() -> None:
    """etcd is heard at the moment a read is sent, then at every batch of events or progress
    notification; the replica's cache age (freshness.cache_age) is measured from there."""
    now = [100.0]
    client = FakeClient()
    cache = WatchCache(client, KEYS, clock=lambda: now[0])  # type: ignore[arg-type]
    assert cache.heard_at is None  # never heard: infinitely old
    cache._reload()
    assert cache.heard_at == 100.0
    now[0] = 103.5
    cache._on_events([], client.revision)  # a progress notification
    assert cache.heard_at == 103.5


def test_the_view_names_the_revision_of_each_term_of_the_leader() -> None:
    # The same replica winning the lease again writes the same value at a new revision: the
    # view tells the two terms apart (link shards resend their reports to a new term).
    client = FakeClient()
    client.kv[KEYS.leader.encode()] = b"r0=http://r0"
    cache = WatchCache(client, KEYS)  # type: ignore[arg-type]
    cache._reload()
    assert (cache.cell().leader, cache.cell().leader_revision) == ("r0=http://r0", 1)
    cache._on_events([ops.WatchEvent("DELETE", KEYS.leader.encode(), b"", 5, 0, 0)], 5)
    assert (cache.cell().leader, cache.cell().leader_revision) == ("", 0)
    cache._on_events([ops.WatchEvent("PUT", KEYS.leader.encode(), b"r0=http://r0", 6, 6, 1)], 6)
    assert (cache.cell().leader, cache.cell().leader_revision) == ("r0=http://r0", 6)


def test_records_this_process_wrote_are_taken_as_written_and_any_other_value_is_decoded() -> None:
    client = FakeClient()
    cache = WatchCache(client, KEYS)  # type: ignore[arg-type]
    cache._reload()
    tid = TaskId("u/j0", 0, 0)
    key = KEYS.task(tid).encode()
    mine = (Task(tid, TaskState.PENDING, None, 100, REQS[0]), TaskInfo(pending="no machine fits"))
    value = codec.encode_task(*mine)
    cache.expect([(key, value, mine)])
    cache._on_events([ops.WatchEvent("PUT", key, value, 2, 2, 1)], 2)
    got = cache.cell()
    assert got.state.tasks[tid] is mine[0] and got.tasks[tid] is mine[1]  # not decoded again
    assert cache._expected == {}  # taken once
    # Expected, but the watch brings other bytes (another write of the key came first): decoded.
    theirs = (Task(tid, TaskState.RUNNING, "m0", 100, REQS[0]), TaskInfo(port=8080))
    cache.expect([(key, value, mine)])
    cache._on_events([ops.WatchEvent("PUT", key, codec.encode_task(*theirs), 3, 2, 2)], 3)
    got = cache.cell()
    assert (got.state.tasks[tid], got.tasks[tid]) == theirs and got.state.tasks[tid] is not theirs[0]
    assert key in cache._expected  # still expected: its own write may yet come
    # What is taken equals what a reader of the bytes decodes.
    cache._on_events([ops.WatchEvent("PUT", key, value, 4, 2, 3)], 4)
    assert (cache.cell().state.tasks[tid], cache.cell().tasks[tid]) == codec.decode_task(value)


def test_the_memo_of_expected_records_is_dropped_past_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    from reference.master import cache as cache_module

    monkeypatch.setattr(cache_module, "EXPECTED_MAX", 3)
    cache = WatchCache(FakeClient(), KEYS)  # type: ignore[arg-type]
    mine = (Task(TaskId("u/j0", 0, 0), TaskState.PENDING, None, 100, REQS[0]), TaskInfo())
    cache.expect([(b"a", b"1", mine), (b"b", b"2", mine)])
    cache.expect([(b"c", b"3", mine), (b"d", b"4", mine)])  # 4 > 3: the writes that never landed go
    assert set(cache._expected) == {b"c", b"d"}
