"""The desired sets kept from the change log equal sets built afresh from the whole cell after
any run of changes (issue 43), while a task record rewritten with nothing its entry carries
changed (a reservation written, its borglet's facts taken) touches no machine."""

from __future__ import annotations

import random

from reference.jobspec import parse_job
from reference.master import codec, reports
from reference.master.cache import WatchCache
from reference.master.cell import JobInfo, MachineInfo, TaskInfo
from reference.master.desired import DesiredSets
from spec.model import Job, Machine, Resources, Task, TaskId, TaskState
from tests.unit.fakestore import Store

KEYS = codec.Keys("c1")
MACHINES = [f"m{i}" for i in range(6)]


def _spec(cpu: str) -> object:
    return parse_job({"name": "web", "user": "u", "task_count": 8, "request": {"cpu": cpu}, "command": ["sleep", "1"]})


def _cell() -> tuple[Store, WatchCache]:
    store = Store()
    for name in MACHINES:
        m = Machine(name, Resources.of(cpu=10**6, ram=10**9))
        store.kv[KEYS.machine(name).encode()] = codec.encode_machine(m, MachineInfo(address=f"http://{name}"))
    job = Job("u", "web", 100, 8, Resources.of(cpu=100))
    store.kv[KEYS.job(job.key).encode()] = codec.encode_job(job, JobInfo(_spec("100m")))
    cache = WatchCache(store, KEYS)  # type: ignore[arg-type]
    cache._reload()
    store.cache = cache
    return store, cache


def _afresh(cache: WatchCache) -> dict[str, tuple[list, set]]:
    cell = cache.cell()
    return {m: reports.desired_set(cell, m, "c1") for m in cell.state.machines}


def test_kept_sets_equal_sets_built_afresh_and_entry_blind_changes_touch_nothing() -> None:
    for seed in range(30):
        rng = random.Random(seed)
        store, cache = _cell()
        sets = DesiredSets("c1")
        sets.update(cache.cell(), cache.changes, cache.reloads)
        records: dict[TaskId, tuple[Task, TaskInfo]] = {}
        for step in range(80):
            kind = rng.random()
            tid = TaskId("u/web", rng.randrange(8), rng.randrange(2))
            t, info = records.get(tid, (Task(tid, TaskState.PENDING, None, 100, Resources.of(cpu=100)), TaskInfo()))
            blind = False
            if kind < 0.3:  # placed, moved, or ended
                state = rng.choice((TaskState.RUNNING, TaskState.RUNNING, TaskState.PENDING, TaskState.DEAD))
                machine = rng.choice(MACHINES) if state is TaskState.RUNNING else None
                t = Task(tid, state, machine, t.priority, t.request, reservation=t.reservation)
                info = TaskInfo(placement=info.placement + 1)
            elif kind < 0.6:  # a reservation written: nothing an entry carries
                t = Task(tid, t.state, t.machine, t.priority, t.request, reservation=Resources.of(cpu=rng.randrange(1, 100)))
                blind = tid in records
            elif kind < 0.75:  # its borglet's facts: nothing an entry carries
                info = TaskInfo(placement=info.placement, seen=True, borglet_state="RUNNING", port=rng.randrange(1, 9),
                                usage=(("cpu_milli", rng.randrange(100)),))  # fmt: skip
                blind = tid in records
            elif kind < 0.85:  # request or priority moved
                t = Task(tid, t.state, t.machine, rng.choice((100, 200)), Resources.of(cpu=rng.choice((100, 150))),
                         reservation=t.reservation)  # fmt: skip
            elif kind < 0.92:  # the job file changed: every entry of the job
                store.put([(KEYS.job("u/web"), codec.encode_job(Job("u", "web", 100, 8, Resources.of(cpu=100)),
                                                               JobInfo(_spec(rng.choice(("100m", "200m"))))))])  # fmt: skip
                touched = sets.update(cache.cell(), cache.changes, cache.reloads)
                assert {m: (s[0], s[1]) for m, s in sets.sets.items()} == _afresh(cache), (seed, step)
                continue
            else:  # deleted
                if tid in records:
                    del records[tid]
                    store.delete([KEYS.task(tid)])
                    sets.update(cache.cell(), cache.changes, cache.reloads)
                    assert {m: (s[0], s[1]) for m, s in sets.sets.items()} == _afresh(cache), (seed, step)
                continue
            records[tid] = (t, info)
            store.put([(KEYS.task(tid), codec.encode_task(t, info))])
            touched = sets.update(cache.cell(), cache.changes, cache.reloads)
            assert touched is not None
            if blind:
                assert touched == set(), (seed, step)
            assert {m: (s[0], s[1]) for m, s in sets.sets.items()} == _afresh(cache), (seed, step)


def test_a_machines_record_written_again_changes_no_set_and_one_that_joins_or_leaves_does() -> None:
    """A machine's usage, reason or state written again touches no set (no entry carries
    them) but is listed in `machines_changed`; a machine removed loses its set, and one added
    gets its own; after each, the kept sets equal sets built afresh."""
    for seed in range(20):
        rng = random.Random(seed)
        store, cache = _cell()
        sets = DesiredSets("c1")
        sets.update(cache.cell(), cache.changes, cache.reloads)
        placed = [(TaskId("u/web", i), rng.choice(MACHINES)) for i in range(8)]
        store.put([(KEYS.task(tid), codec.encode_task(Task(tid, TaskState.RUNNING, m, 100, Resources.of(cpu=100)),
                                                      TaskInfo(placement=1))) for tid, m in placed])  # fmt: skip
        sets.update(cache.cell(), cache.changes, cache.reloads)
        present = set(MACHINES)
        for step in range(40):
            name = rng.choice(MACHINES)
            m = Machine(name, Resources.of(cpu=10**6, ram=10**9), up=rng.random() < 0.7)
            if name in present and rng.random() < 0.2:  # it leaves the cell
                present.discard(name)
                store.delete([KEYS.machine(name)])
                joins_or_leaves = True
            else:  # it joins, or its record is written again (usage, reason, up or down)
                joins_or_leaves = name not in present
                present.add(name)
                info = MachineInfo(address=f"http://{name}", reason=rng.choice(("", "lost")),
                                   usage=(("cpu_milli", rng.randrange(1000)),))  # fmt: skip
                store.put([(KEYS.machine(name), codec.encode_machine(m, info))])
            touched = sets.update(cache.cell(), cache.changes, cache.reloads)
            assert touched == ({name} if joins_or_leaves else set()), (seed, step)
            assert sets.machines_changed == {name}, (seed, step)
            assert {n: (s[0], s[1]) for n, s in sets.sets.items()} == _afresh(cache), (seed, step)
