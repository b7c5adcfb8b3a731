"""The leader's pass learns that it has nothing to do without building a view (issue 43).

The pass is woken by every batch the watch cache applies. In a fill, what it finds is nearly
always the same: only pending tasks, which a scheduler process places. Building a view to learn
that copied the changed maps whole, a walk of the cell per event. The watch cache now answers
the three questions the pass asks first (`WatchCache.pass_outlook`): is any task in the work
set, is one of them not PENDING, is a machine drained. These tests hold the answers to what a
view built at the same moment says, through puts, deletes and a reload. They also check that
the pass builds no view in the quiet cases and still builds one, and acts, when a machine is
drained or a task needs the pass.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace

from reference.master import codec
from reference.master.cache import WatchCache
from reference.master.cell import MachineInfo, TaskInfo
from reference.master.leader import LeaderConfig, Term
from spec.model import DeathCause, Job, Machine, Resources, Task, TaskId, TaskState
from tests.unit.fakestore import Store, watched_cell

KEYS = codec.Keys("c1")
JOB = Job("u", "web", 100, 8, Resources.of(cpu=100, ram=100))


def _as_a_view_says(cache: WatchCache) -> tuple[bool, bool, bool]:
    view = cache.cell()
    assert view.work is not None and view.acting is not None
    return bool(view.work), bool(view.acting), any(not m.schedulable for m in view.state.machines.values())


def test_the_outlook_says_what_a_view_built_at_the_same_moment_says() -> None:
    rng = random.Random(43)
    store, cache = watched_cell(KEYS, 4, [JOB])
    states = [TaskState.PENDING, TaskState.RUNNING, TaskState.DEAD]
    seen = set()
    for step in range(400):
        roll = rng.random()
        if roll < 0.5:
            i = rng.randrange(JOB.task_count)
            state = rng.choice(states)
            # A RUNNING task with an older request is a roll's to replace, a DEAD one that failed
            # its job's restart: both are work that is not PENDING.
            task = Task(TaskId(JOB.key, i), state, machine=f"m{rng.randrange(4)}" if state is TaskState.RUNNING else None,
                        priority=JOB.priority, request=rng.choice([JOB.request, Resources.of(cpu=50, ram=100)]),
                        cause=rng.choice([DeathCause.FAILED, DeathCause.KILLED]) if state is TaskState.DEAD else None)  # fmt: skip
            info = TaskInfo(placement=1, seen=True, borglet_state="RUNNING") if state is TaskState.RUNNING else TaskInfo()
            store.put([(KEYS.task(task.id), codec.encode_task(task, info))])
        elif roll < 0.6:
            store.delete([KEYS.task(TaskId(JOB.key, rng.randrange(JOB.task_count)))])
        elif roll < 0.85:
            name = f"m{rng.randrange(6)}"  # m4 and m5 come and go
            m = Machine(name, Resources.of(cpu=64000, ram=1 << 20), schedulable=rng.random() < 0.6)
            store.put([(KEYS.machine(name), codec.encode_machine(m, MachineInfo(address=f"http://{name}")))])
        elif roll < 0.97:
            store.delete([KEYS.machine(f"m{rng.randrange(6)}")])
        else:
            cache._reload()
        outlook = cache.pass_outlook()
        assert outlook == _as_a_view_says(cache), f"step {step}"
        seen.add(outlook)
    # The walk met each answer both ways, not one answer throughout.
    assert all({o[k] for o in seen} == {False, True} for k in range(3)), seen


def _term(cache: WatchCache, writes: list[object]) -> Term:
    class Writer:
        op_s = None

        def mutate(self, change: object) -> tuple[int, int]:
            writes.append(change)
            return 0, 0

        def waiting(self) -> int:
            return 0

    term = Term(1, cache, Writer(), LeaderConfig("c1", "m0"), link=None)  # type: ignore[arg-type]
    term._scheduler_heard = time.monotonic()  # a scheduler process plans for the cell
    return term


def _pending(store: Store, indexes: range) -> None:
    store.put([(KEYS.task(TaskId(JOB.key, i)), codec.encode_task(Task(TaskId(JOB.key, i), priority=JOB.priority,
               request=JOB.request), TaskInfo())) for i in indexes])  # fmt: skip


def test_a_pass_with_only_pending_tasks_beside_a_scheduler_process_builds_no_view() -> None:
    store, cache = watched_cell(KEYS, 3, [JOB])
    writes: list[object] = []
    term = _term(cache, writes)
    cache.cell()
    for batch in range(5):  # a fill: each batch of records wakes the pass
        _pending(store, range(batch, batch + 1))
        term.run_pass()
        assert cache._view is None, "the pass built a view to learn it had nothing to do"
    assert writes == [] and term.passes == 0
    # Without a scheduler process the pass plans: it builds its view and writes.
    term._scheduler_heard = 0.0
    term._lease_seen = 0.0
    term.run_pass()
    assert cache._view is not None and len(writes) == 1 and term.passes == 1


def test_a_drained_machine_or_a_task_to_act_on_still_gets_its_pass() -> None:
    store, cache = watched_cell(KEYS, 3, [JOB])
    writes: list[object] = []
    term = _term(cache, writes)
    running = Task(TaskId(JOB.key, 0), TaskState.RUNNING, machine="m1", priority=JOB.priority, request=JOB.request)
    store.put([(KEYS.task(running.id), codec.encode_task(running, TaskInfo(placement=1, seen=True, borglet_state="RUNNING")))])
    cache.cell()
    term.run_pass()
    assert cache._view is not None and writes == []  # nothing to do: the last view stands, none built
    # m1 drained while it runs a task: the pass must see it and move the task.
    m1 = Machine("m1", Resources.of(cpu=64000, ram=1 << 20), schedulable=False)
    store.put([(KEYS.machine("m1"), codec.encode_machine(m1, MachineInfo(address="http://m1")))])
    assert cache.pass_outlook()[2]
    term.run_pass()
    assert cache._view is not None and len(writes) == 1
    # A task that is not PENDING in the work set (here one DEAD that its job restarts).
    store.put([(KEYS.machine("m1"), codec.encode_machine(replace(m1, schedulable=True), MachineInfo(address="http://m1")))])
    dead = replace(running, state=TaskState.DEAD, machine=None, cause=DeathCause.FAILED)
    store.put([(KEYS.task(dead.id), codec.encode_task(dead, TaskInfo(placement=1)))])
    assert cache.pass_outlook() == (True, True, False)
    term.run_pass()
    assert cache._view is not None and len(writes) == 2  # the pass looked, with a view, and wrote
