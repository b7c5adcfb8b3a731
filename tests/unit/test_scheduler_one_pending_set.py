"""The leader's own scheduling pass and the scheduler process choose the same pending tasks from
the same cell, plan them alike, and set aside alike what found no place.

Both are driven through their real entry points (`Term.run_pass`, `SchedulerProcess.step`) on
one cell behind fakes of what they read and write; `plan_for`, the scheduler library they both
call, is wrapped to record the pending set each passes it.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from reference.master import leader as leader_module
from reference.master.cell import Cell, Draft
from reference.master.leader import LeaderConfig, Term
from reference.scheduler import Plan, plan_for
from reference.scheduler.wire import plan_from_json
from reference.schedulerd.process import SchedulerProcess, View
from spec.actions import machine_add, submit
from spec.fmap import FMap
from spec.model import CellState, Job, Machine, Resources, TaskId, TaskState

LEADER = ("m0", "http://127.0.0.1:1")
WEB = [TaskId("alice/web", i) for i in range(2)]
HUGE = TaskId("alice/huge", 0)
LATE = TaskId("bob/late", 0)  # its job record has not arrived


def the_cell() -> Cell:
    """One machine of 4000m; alice/web's 2 tasks of 100m fit, alice/huge's 8000m does not, and
    bob/late's task is PENDING without its job record (a job written tasks first)."""
    state = machine_add(CellState(), Machine("m1", Resources.of(cpu=4000, ram=2**30)))
    assert state is not None
    for job in (
        Job("alice", "web", 100, 2, Resources.of(cpu=100)),
        Job("alice", "huge", 100, 1, Resources.of(cpu=8000)),
        Job("bob", "late", 100, 1, Resources.of(cpu=100)),
    ):
        state = submit(state, job) or state
    state = state.with_(jobs=FMap({k: j for k, j in state.jobs.items() if k != "bob/late"}))
    pending = frozenset(tid for tid, t in state.tasks.items() if t.state is TaskState.PENDING)
    assert pending == {*WEB, HUGE, LATE}
    return Cell(state, revision=40, work=pending, running=frozenset(), capacity_epoch=3)


class Writer:
    """Applies a term's change to a draft of the cell, as the leader's writer does, and keeps it."""

    def __init__(self, cell: Cell) -> None:
        self.cell = cell
        self.drafts: list[Draft] = []
        self.op_s: float | None = None  # no pace learned: a large plan goes a part a write

    def waiting(self) -> int:
        return 0  # nothing else is queued: no other client writes

    def mutate(self, change: Callable[[Draft], Any]) -> tuple[Any, int]:
        d = Draft(self.cell, 100.0)
        self.drafts.append(d)
        return change(d), self.cell.revision + 1


class Cached:
    """The scheduler process's view of the cell; plans go nowhere (the cell does not move)."""

    def __init__(self, cell: Cell) -> None:
        self.current = View(cell.revision, cell.state, LEADER, cell.capacity_epoch, cell.work, cell.running)

    def view(self) -> View:
        return self.current

    def wait_revision(self, revision: int, timeout: float) -> bool:
        return True

    def on_change(self, fn: Callable[[int], None]) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Leader:
    def __init__(self) -> None:
        self.plans: list[Plan] = []

    def propose(self, leader: tuple[str, str], doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.plans.append(plan_from_json(doc["plan"]))
        return 200, {"placed": 0, "revision": 41}

    def close(self) -> None: ...


def test_both_choose_the_same_pending_set_and_set_aside_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    chosen: dict[str, list[set[TaskId]]] = {"leader": [], "process": []}

    def recording(who: str) -> Callable[..., Plan]:
        def wrapped(state: CellState, *args: Any, pending_ids: Any = None, **kwargs: Any) -> Plan:
            chosen[who].append(set(pending_ids))
            return plan_for(state, *args, pending_ids=pending_ids, **kwargs)

        return wrapped

    monkeypatch.setattr(leader_module, "plan_for", recording("leader"))
    cell = the_cell()
    writer = Writer(cell)
    cache = SimpleNamespace(cell=lambda: cell, revision=cell.revision)
    term = Term(1, cache, writer, LeaderConfig("c1", "m0"), link=None)  # type: ignore[arg-type]
    lead = Leader()
    lease = SimpleNamespace(start=lambda: None, resign=lambda: None)
    proc = SchedulerProcess(name="s0", cell=Cached(cell), leader=lead, lease=lambda elected, deposed: lease)
    carried_plan = proc.carried.plan

    def process_plan(state: CellState, config: Any, seed: int, pending_ids: Any, **kwargs: Any) -> Plan:
        chosen["process"].append(set(pending_ids))
        return carried_plan(state, config, seed, pending_ids, **kwargs)

    monkeypatch.setattr(proc.carried, "plan", process_plan)

    for _ in range(2):  # the same cell twice: the second pass skips what the first set aside
        term.run_pass()
        assert proc.step() is True
    # Both leave bob/late for the pass that sees its job, and plan the rest; then, as nothing
    # freed capacity, both plan alice/web again (it was placed, not set aside) but not alice/huge.
    assert chosen["leader"] == chosen["process"] == [{*WEB, HUGE}, set(WEB)]
    # The same plans: where each task goes, and why alice/huge goes nowhere.
    first = writer.drafts[0]
    assert {t for t in WEB if first.state.tasks[t].state is TaskState.RUNNING} == set(WEB)
    planned = [p for p in lead.plans if p.placements or p.unschedulable]  # the first is the empty ask (pairings)
    assert sorted((p.task, p.machine) for p in planned[0].placements) == [(t, "m1") for t in WEB]
    (unplaced,) = planned[0].unschedulable
    assert unplaced.task == HUGE and first.task_info(HUGE).pending
    assert first.state.tasks[LATE].state is TaskState.PENDING and not first.task_info(LATE).pending
    assert term.unschedulable.tasks == proc.unschedulable.tasks == {HUGE}
