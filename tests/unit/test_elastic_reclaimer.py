"""Applying reservation estimates in a Draft: through the spec's reserve, evicting non-prod work a growing one needs back."""

from __future__ import annotations

from reference.master.cell import Cell, Draft, TaskInfo
from reference.master.reclaimer import apply_reservations, reservation_changes
from spec.actions import reserve, schedule, submit
from spec.fmap import FMap
from spec.model import CellState, Job, Machine, Resources, TaskId, TaskState

M = Machine("m0", Resources.of(cpu=1000, ram=1000))
WEB = TaskId("u/web", 0)
BATCH = TaskId("u/batch", 0)


def cell_with_batch_in_reclaimed_room() -> CellState:
    s: CellState | None = CellState(machines=FMap({"m0": M}))
    s = submit(s, Job("u", "web", 200, 1, Resources.of(cpu=800, ram=100)))
    s = schedule(s, WEB, "m0") if s else None
    s = reserve(s, WEB, Resources.of(cpu=200, ram=100)) if s else None
    s = submit(s, Job("u", "batch", 100, 1, Resources.of(cpu=700, ram=100))) if s else None
    s = schedule(s, BATCH, "m0") if s else None  # fits only beside web's reservation
    assert s is not None
    return s


def test_a_falling_reservation_is_written() -> None:
    s = cell_with_batch_in_reclaimed_room()
    d = Draft(Cell(state=s), 0.0)
    assert apply_reservations(d, {WEB: Resources.of(cpu=150, ram=100)}) == 1
    assert d.state.tasks[WEB].reserved == Resources.of(cpu=150, ram=100)
    assert d.state.tasks[BATCH].state is TaskState.RUNNING


def test_a_growing_reservation_evicts_batch_work_from_reclaimed_room() -> None:
    s = cell_with_batch_in_reclaimed_room()
    d = Draft(Cell(state=s), 0.0)
    assert apply_reservations(d, {WEB: Resources.of(cpu=600, ram=100)}) == 1
    assert d.state.tasks[WEB].reserved == Resources.of(cpu=600, ram=100)
    assert d.state.tasks[BATCH].state is TaskState.PENDING  # evicted for reclamation
    assert any("reclaimed resources" in reason for _, _, reason in d.tasks[BATCH].history)


def running_cell(n: int) -> Cell:
    """`n` tasks of one job running on m0 for a minute, each reserving its whole request."""
    s: CellState | None = CellState(machines=FMap({"m0": Machine("m0", Resources.of(cpu=10**6, ram=10**9))}))
    s = submit(s, Job("u", "many", 200, n, Resources.of(cpu=1000, ram=1000))) if s else None
    for i in range(n):
        s = schedule(s, TaskId("u/many", i), "m0") if s else None
    assert s is not None
    return Cell(state=s, tasks={TaskId("u/many", i): TaskInfo(started_at=1000.0) for i in range(n)})


def test_a_tick_writes_at_most_its_limit_largest_changes_first() -> None:
    cell = running_cell(5)
    # Task i uses 100*i milli-CPU: the less it uses, the further its reservation falls.
    usage = {TaskId("u/many", i): [("cpu_milli", 100 * i), ("ram_bytes", 1000)] for i in range(5)}
    last: dict[TaskId, float] = {}
    every = reservation_changes(cell, usage, 100.0, 1100.0, dict(last), interval=5.0)
    capped = reservation_changes(cell, usage, 100.0, 1100.0, last, interval=5.0, limit=2)
    assert len(every) == 5
    assert sorted(capped) == [TaskId("u/many", 0), TaskId("u/many", 1)]  # the largest falls
    assert capped == {tid: every[tid] for tid in capped}  # the same estimates, only fewer
    # The ones left out keep no estimate time: their next estimate is a first one again.
    assert sorted(last) == sorted(capped)
    # Next tick, with the two written: the others' estimates are the ones they would have had.
    d = Draft(cell, 100.0)
    assert apply_reservations(d, capped) == 2
    later = reservation_changes(Cell(state=d.state, tasks=cell.tasks), usage, 105.0, 1105.0, last, interval=5.0)
    assert {tid: later[tid] for tid in every if tid not in capped} == {t: every[t] for t in every if t not in capped}


def test_tasks_still_to_be_started_take_the_ticks_budget_down_to_its_floor() -> None:
    from dataclasses import replace

    from reference.master.reclaimer import MAX_WRITES_PER_TICK, MIN_WRITES_PER_TICK, write_budget

    cell = running_cell(300)
    started = TaskInfo(started_at=1000.0, borglet_state="RUNNING", seen=True)
    infos = {tid: started for tid in cell.state.tasks}
    assert write_budget(replace(cell, tasks=infos)) == MAX_WRITES_PER_TICK  # every process runs
    # 100 not reported yet and 100 queued on their machines: 200 starts to come.
    for i in range(200):
        infos[TaskId("u/many", i)] = TaskInfo() if i < 100 else TaskInfo(borglet_state="QUEUED", seen=True)
    assert write_budget(replace(cell, tasks=infos)) == MAX_WRITES_PER_TICK - 200
    # A start larger than the budget leaves the floor, not nothing.
    assert write_budget(running_cell(950)) == MIN_WRITES_PER_TICK  # 950 to start: 50 left
    # Tasks still to be placed take it down too: 100 pending beside the 200 starting.
    from spec.actions import submit as submit_job

    queued = submit_job(cell.state, Job("u", "later", 200, 100, Resources.of(cpu=1000, ram=1000)))
    assert queued is not None
    assert write_budget(replace(cell, state=queued, tasks=infos)) == MAX_WRITES_PER_TICK - 300 > MIN_WRITES_PER_TICK


def test_skipping_unmoved_tasks_changes_no_tick() -> None:
    """Ticks with the `unmoved` memo write exactly what ticks without it write, whatever the
    usage does and however irregular the ticks: two reclaimers side by side over 400 ticks,
    each applying its own writes, stay identical, and the memo does skip most estimates."""
    import random
    from dataclasses import replace

    import reference.master.reclaimer as reclaimer

    rng = random.Random(43)
    n = 40
    cell = running_cell(n)
    tids = [TaskId("u/many", i) for i in range(n)]
    usage = {tid: (("cpu_milli", rng.randrange(0, 1200)), ("ram_bytes", rng.randrange(0, 1000))) for tid in tids}
    cells = [cell, cell]
    lasts: list[dict[TaskId, float]] = [{}, {}]
    memo: dict[TaskId, reclaimer.Unmoved] = {}
    calls = [0]
    real_estimate = reclaimer.estimate

    def counted(*args: object, **kw: object) -> Resources:
        calls[0] += 1
        return real_estimate(*args, **kw)  # type: ignore[arg-type]

    now, skipped_ticks = 100.0, 0
    reclaimer.estimate = counted  # type: ignore[assignment]
    try:
        for tick in range(400):
            now += rng.choice([5.0, 5.0, 4.9, 5.1, 7.5, 12.0])
            for tid in rng.sample(tids, rng.choice([0, 0, 0, 1, 3])):  # a few usages move
                usage[tid] = (("cpu_milli", rng.randrange(0, 1200)), ("ram_bytes", rng.randrange(0, 1000)))
            if tick % 97 == 50:  # a task's facts change (a restart in place): estimated again
                tid = rng.choice(tids)
                infos = dict(cells[0].tasks)
                infos[tid] = replace(infos[tid], started_at=now + 1000.0 - 20.0)
                cells = [Cell(state=c.state, tasks=FMap(infos)) for c in cells]
            before = calls[0]
            plain = reservation_changes(cells[0], usage, now, now + 1000.0, lasts[0], interval=5.0)
            plain_calls = calls[0] - before
            memoed = reservation_changes(cells[1], usage, now, now + 1000.0, lasts[1], interval=5.0, unmoved=memo)
            assert memoed == plain, tick
            assert lasts[0] == lasts[1], tick
            skipped_ticks += calls[0] - before - plain_calls < plain_calls
            new = []
            for c in cells:
                d = Draft(c, now)
                apply_reservations(d, plain)
                new.append(Cell(state=d.state, tasks=c.tasks))
            cells = new
    finally:
        reclaimer.estimate = real_estimate  # type: ignore[assignment]
    assert skipped_ticks > 300  # the memo saved estimates in most ticks


def test_a_backlog_waits_unestimated_and_is_written_once_each_largest_first() -> None:
    """A backlog larger than a tick's limit: with the `waiting` memo each tick estimates only
    what is new or moved and the `limit` it writes, writes what ticks without the memo write
    (where an estimate does not depend on the time), each task once, until none is left; a
    waiting task whose usage moves is estimated afresh from its new usage."""
    import random

    import reference.master.reclaimer as reclaimer

    rng = random.Random(7)
    n, limit = 60, 8
    cell = running_cell(n)
    tids = [TaskId("u/many", i) for i in range(n)]
    usage = {tid: (("cpu_milli", rng.randrange(0, 700)), ("ram_bytes", 1000)) for tid in tids}
    calls = [0]
    real_estimate = reclaimer.estimate

    def counted(*args: object, **kw: object) -> Resources:
        calls[0] += 1
        return real_estimate(*args, **kw)  # type: ignore[arg-type]

    cells, lasts = [cell, cell], [{}, {}]  # without the memo, with it
    unmoved: dict[TaskId, reclaimer.Unmoved] = {}
    waiting: dict[TaskId, reclaimer.Waiting] = {}
    written: list[TaskId] = []
    moved = tids[-1]  # the smallest fall: waits to the end; its usage moves on the way
    now = 100.0
    reclaimer.estimate = counted  # type: ignore[assignment]
    try:
        for tick in range(12):
            now += 5.0
            if tick == 3:
                usage[moved] = (("cpu_milli", 0), ("ram_bytes", 1000))  # now the largest fall
            outs, estimated = [], []
            for k, c in enumerate(cells):
                before = calls[0]
                memo = {"unmoved": unmoved, "waiting": waiting} if k else {}
                outs.append(
                    reservation_changes(c, usage, now, now + 1000.0, lasts[k], interval=5.0, half_life=0.0, limit=limit, **memo)
                )
                estimated.append(calls[0] - before)
            plain, memoed = outs
            # With no decay (half-life 0) an estimate does not depend on the time since the last:
            # the memo's ranks are the ones ticks that estimate the whole backlog find.
            assert memoed == plain, tick
            assert estimated[0] == n  # without a memo: every running task, every tick
            # With the memo: the `limit` it writes, last tick's writes once more (their
            # reservations moved), and the one whose usage moved.
            assert estimated[1] <= (2 * limit if tick else n) + (tick == 3), (tick, estimated)
            if tick == 3:
                assert moved in memoed and memoed[moved].get("cpu") == 0  # the new usage, at once
            assert len(memoed) == min(limit, n - len(written))
            written += memoed
            drafts = [Draft(c, now) for c in cells]
            for d in drafts:
                apply_reservations(d, memoed)
            cells = [Cell(state=d.state, tasks=cell.tasks) for d in drafts]
    finally:
        reclaimer.estimate = real_estimate  # type: ignore[assignment]
    assert sorted(written) == sorted(tids)  # each task once, none left
    assert not waiting
