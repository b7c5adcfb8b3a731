"""The scheduler process's cell view carried from pass to pass (`carried.CarriedCell`) equals
one built afresh from the same state, and a pass on it plans what a pass on a fresh one plans:
over random runs of what a cell goes through (submits, placements, ends, evictions,
reservations, drains, machines down and up, kills, package changes, images, allocs and new
machines), each state made as a watch cache makes its views."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from reference.scheduler import SchedulerConfig
from reference.scheduler.adapter import plan_for, snapshot_from_state
from reference.scheduler.carried import SEED, CarriedCell
from reference.scheduler.cellview import CellView
from spec import actions
from spec.actions import EvictReason
from spec.fmap import FMap
from spec.model import GPU, Alloc, CellState, Job, Machine, Resources, TaskId, TaskState

ROWS = ("dims", "names", "cap", "free", "gfree", "up", "slack", "reclaimed", "vmin", "ref_free", "ref_gfree",
        "gkinds", "pkgs", "dom", "domains", "attrs", "gcap", "alloc_rows")  # fmt: skip


def as_view(last: CellState | None, now: CellState) -> CellState:
    """`now` as a watch cache's next view holds it (master/cache.py `_build`): its task and job
    maps made from the last view's by the keys that changed, its other maps afresh."""
    if last is None:
        return CellState(*(FMap(dict(m.items())) for m in (now.machines, now.jobs, now.tasks, now.allocs, now.quotas)))

    def successor(old: FMap[Any, Any], new: FMap[Any, Any]) -> FMap[Any, Any]:
        keys = [k for k in new.keys() | old.keys() if new.get(k) is not old.get(k)]
        return old.successor(dict(new.items()), keys) if keys else old

    return CellState(
        machines=FMap(dict(now.machines.items())), jobs=successor(last.jobs, now.jobs),
        tasks=successor(last.tasks, now.tasks), allocs=FMap(dict(now.allocs.items())), quotas=last.quotas,
    )  # fmt: skip


def victims(view: CellView) -> list[list[tuple[Any, ...]]]:
    return [[(v.id, v.job, v.priority, v.req, v.gpu_shares) for v in vs] for vs in view.victims]


def assert_same(carried: CellView, fresh: CellView) -> None:
    for row in ROWS:
        assert getattr(carried, row) == getattr(fresh, row), row
    assert victims(carried) == victims(fresh)
    assert {n: (a.machine, a.free) for n, a in carried.allocs.items()} == {n: (a.machine, a.free) for n, a in fresh.allocs.items()}
    assert not carried.version.any() and carried.bumps == 0


def job(name: str, rng: random.Random, **kw: Any) -> Job:
    request = {"cpu": rng.choice((100, 500, 1500)), "ram": rng.choice((1, 4)) << 28}
    if rng.random() < 0.15:
        request[GPU] = rng.choice((500, 1000))
    return Job("u", name, rng.choice((0, 100, 200, 360)), rng.randint(1, 4), Resources.of(request),
               package=rng.choice(("", "p1", "p2")), **kw)  # fmt: skip


def machine(i: int) -> Machine:
    capacity = {"cpu": 4000, "ram": 8 << 30, **({GPU: 2000} if i % 4 == 0 else {})}
    return Machine(f"m{i}", Resources.of(capacity), (("rack", f"r{i % 3}"),), f"r{i % 3}")


def step(state: CellState, rng: random.Random, n: int) -> CellState:
    """One random thing that happens to a cell (or the state unchanged, where its guard says no)."""
    tasks = list(state.tasks.values())
    running = [t for t in tasks if t.state is TaskState.RUNNING]
    pending = [t for t in tasks if t.state is TaskState.PENDING]
    names = sorted(state.machines)
    kind = rng.choices(
        ("submit", "schedule", "end", "evict", "reserve", "drain", "down", "kill", "package", "alloc", "add"),
        (6, 12, 3, 2, 3, 2, 2, 1, 1, 1, 1),
    )[0]  # fmt: skip
    got: CellState | None = None
    if kind == "submit":
        got = actions.submit(state, job(f"j{n}", rng))
    elif kind == "schedule" and pending:
        t = rng.choice(pending)
        for m in rng.sample(names, len(names)):
            if (got := actions.schedule(state, t.id, m)) is not None:
                break
    elif kind == "end" and running:
        t = rng.choice(running)
        got = rng.choice((actions.finish, actions.fail, actions.lost))(state, t.id)
    elif kind == "evict" and running:
        got = actions.evict(state, rng.choice(running).id, EvictReason.PREEMPTION, None)
    elif kind == "reserve" and running:
        t = rng.choice(running)
        got = actions.reserve(state, t.id, Resources.of({k: v // 2 for k, v in t.request.as_dict().items()}))
    elif kind == "drain":
        m = state.machines[rng.choice(names)]
        got = (actions.drain if m.schedulable else actions.uncordon)(state, m.name)
    elif kind == "down":
        m = state.machines[rng.choice(names)]
        got = (actions.machine_down if m.up else actions.machine_up)(state, m.name)
    elif kind == "kill" and state.jobs:
        got = actions.kill_job(state, rng.choice(sorted(state.jobs)))
    elif kind == "package" and state.jobs:
        j = state.jobs[rng.choice(sorted(state.jobs))]
        if j.alloc is None:
            got = state.with_(jobs=state.jobs.set(j.key, replace(j, package=rng.choice(("", "p1", "p3")))))
    elif kind == "alloc":
        a = Alloc(f"s{n}", 0, rng.choice(names), Resources.of(cpu=500, ram=1 << 28), 200)
        got = actions.alloc_create(state, a)
        if got is not None:
            got = actions.submit(got, Job("u", f"in{n}", 200, 1, Resources.of(cpu=100, ram=1 << 26), alloc=a.set))
    elif kind == "add":
        got = actions.machine_add(state, machine(len(names)))
    return got if got is not None else state


@pytest.mark.parametrize("seed", range(6))
def test_a_carried_view_equals_one_built_afresh_and_plans_alike(seed: int) -> None:
    rng = random.Random(seed)
    spec_state = CellState()
    for i in range(10):
        spec_state = actions.machine_add(spec_state, machine(i)) or spec_state
    carried, view, images = CarriedCell(), None, {}
    cfg = SchedulerConfig()
    for n in range(300):
        spec_state = step(spec_state, rng, n)
        if rng.random() < 0.05:
            images = {**images, rng.choice(sorted(spec_state.machines)): (rng.choice(("p1", "p4")),)}
        view = as_view(view, spec_state)
        if rng.random() < 0.4:  # a state read and not planned on: only followed
            carried.follow(view)
            continue
        pending = {t.id for t in view.tasks.values() if t.state is TaskState.PENDING and rng.random() < 0.7}
        current = carried.view(view, images, pending)
        running = {t.id for t in view.tasks.values() if t.state is TaskState.RUNNING}
        fresh = CellView(snapshot_from_state(view, pending, running, images), SEED)
        assert_same(current, fresh)
        if n % 3 == 0 and pending:
            mine = carried.plan(view, cfg, n, pending, images=images)
            theirs = plan_for(view, cfg, seed=n, pending_ids=pending, running_ids=running, images=images)
            assert mine.placements == theirs.placements and mine.preemptions == theirs.preemptions
            assert mine.unschedulable == theirs.unschedulable
            assert_same(current, fresh)  # the pass changed a copy, not the carried view
    # Both ways were taken: most states carried, some built afresh (allocs, new machines).
    assert carried.carried > 80 and carried.built >= 2, (carried.carried, carried.built)


def test_a_state_not_made_from_the_last_one_is_built_afresh() -> None:
    state = CellState()
    for i in range(3):
        state = actions.machine_add(state, machine(i)) or state
    state = actions.submit(state, job("a", random.Random(1))) or state
    placed = actions.schedule(state, TaskId("u/a", 0, 0), "m1")
    assert placed is not None
    carried = CarriedCell()
    first = as_view(None, state)
    carried.view(first, {})
    second = as_view(None, placed)  # the same content as the next view, but not made from `first`
    carried.view(second, {})
    assert (carried.built, carried.carried) == (2, 0)
    again = as_view(first, placed)  # made from `first`, which is not the last one seen
    carried.view(again, {})
    assert (carried.built, carried.carried) == (3, 0)
    ended = actions.finish(placed, TaskId("u/a", 0, 0))
    assert ended is not None
    third = as_view(again, ended)  # made from the last one seen: carried
    carried.view(third, {})
    assert (carried.built, carried.carried) == (3, 1) and carried.rows_redone == 1
    carried.follow(as_view(None, placed))  # followed, not made from `third`: the chain is lost
    carried.view(as_view(third, ended), {})
    assert (carried.built, carried.carried) == (4, 1)


def test_many_changes_since_the_last_view_build_it_afresh() -> None:
    state = CellState()
    for i in range(4):
        state = actions.machine_add(state, machine(i)) or state
    state = actions.submit(state, Job("u", "a", 100, 8, Resources.of(cpu=100, ram=1 << 20))) or state
    carried = CarriedCell()
    view = as_view(None, state)
    carried.view(view, {})
    for i in range(3):  # 3 of 8 tasks placed, each followed: past CARRY_MAX_SHARE of the cell
        state = actions.schedule(state, TaskId("u/a", i, 0), f"m{i}") or state
        view = as_view(view, state)
        carried.follow(view)
    fresh = CellView(snapshot_from_state(view, (), {t.id for t in view.tasks.values() if t.state is TaskState.RUNNING}), SEED)
    assert_same(carried.view(view, {}), fresh)
    assert (carried.built, carried.carried) == (2, 0)
