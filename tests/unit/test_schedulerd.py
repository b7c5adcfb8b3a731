"""The scheduler process's pass (reference/schedulerd/process.py) on a cell behind its two
interfaces, faked here: what it plans, what it proposes, and what it waits for."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from reference.scheduler.setaside import plannable
from reference.schedulerd import process as proc_mod
from reference.schedulerd.process import SchedulerProcess, View
from spec.actions import machine_add, submit
from spec.model import CellState, Machine, Resources
from tests.unit.master_cells import SPEC

LEADER = ("m0", "http://127.0.0.1:1")


def pending_state() -> CellState:
    """alice/web's two tasks PENDING, one machine with room for both."""
    state = machine_add(CellState(), Machine("m1", Resources.of(cpu=4000, ram=2**30)))
    assert state is not None
    return submit(state, SPEC.to_spec_job())


class FakeCell:
    def __init__(self, view: View) -> None:
        self.current = view
        self.waited: list[int] = []

    def view(self) -> View:
        return self.current

    def wait_revision(self, revision: int, timeout: float) -> bool:
        self.waited.append(revision)
        return True

    def on_change(self, fn: Callable[[int], None]) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class FakeLeader:
    """Answers a plan with `answer`, an empty plan with nothing placed; each answer with `crashes`."""

    def __init__(self, status: int = 200, answer: dict[str, Any] | None = None, crashes: Any = ()) -> None:
        self.status, self.answer = status, answer if answer is not None else {"placed": 2, "revision": 41}
        self.crashes = [list(c) for c in crashes]
        self.docs: list[dict[str, Any]] = []

    def propose(self, leader: tuple[str, str], doc: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        assert leader == LEADER
        self.docs.append(doc)
        if self.status != 200:
            return self.status, self.answer
        answer = dict(self.answer) if doc["plan"] else {"placed": 0, "revision": self.answer.get("revision", 0)}
        return 200, {**answer, "crashes": self.crashes}

    def close(self) -> None: ...


def process(view: View, leader: FakeLeader) -> tuple[SchedulerProcess, FakeCell]:
    cell = FakeCell(view)
    lease = SimpleNamespace(start=lambda: None, resign=lambda: None)
    return SchedulerProcess(name="s0", cell=cell, leader=leader, lease=lambda elected, deposed: lease), cell


def test_a_pass_plans_the_pending_tasks_proposes_them_and_waits_for_the_commit() -> None:
    leader = FakeLeader()
    p, cell = process(View(revision=40, state=pending_state(), leader=LEADER, capacity_epoch=3), leader)
    assert p.step() is True
    # Before its first plan, an empty one: the leader's answer holds the crashing pairings it remembers.
    ask, doc = leader.docs
    assert ask == {"scheduler": "s0", "revision": 40, "plan": {}} and p.crashes == {}
    assert (doc["scheduler"], doc["revision"]) == ("s0", 40)
    assert sorted(pl["machine"] for pl in doc["plan"]["placements"]) == ["m1", "m1"]
    assert cell.waited == [41]  # plans again only on the state the leader's commit made
    assert p.proposed == {"plans": 2, "placements": 2, "placed": 2, "conflicts": 0, "refused": 0}


def test_without_a_leader_nothing_is_planned() -> None:
    leader = FakeLeader()
    p, _ = process(View(revision=1, state=pending_state(), leader=None), leader)
    assert p.step(heartbeat=True) is False and leader.docs == [] and p.passes == 0


def test_with_nothing_pending_only_a_heartbeat_goes_out_and_it_is_an_empty_plan() -> None:
    leader = FakeLeader(answer={"placed": 0, "revision": 7})
    idle = machine_add(CellState(), Machine("m1", Resources.of(cpu=4000, ram=2**30)))
    p, cell = process(View(revision=5, state=idle, leader=LEADER), leader)
    assert p.step() is False and leader.docs == []
    assert p.step(heartbeat=True) is True
    assert leader.docs == [{"scheduler": "s0", "revision": 5, "plan": {}}]
    assert cell.waited == []  # no plan: nothing to wait for


def test_a_refused_plan_is_counted_and_not_waited_for() -> None:
    leader = FakeLeader(status=409, answer={"text": "this replica does not lead"})
    p, cell = process(View(revision=40, state=pending_state(), leader=LEADER), leader)
    assert p.step() is False
    assert p.proposed["refused"] == 1 and p.proposed["plans"] == 0 and cell.waited == []


def test_a_task_whose_job_record_has_not_arrived_is_left_for_a_later_pass() -> None:
    state = pending_state()
    without_job = CellState(machines=state.machines, jobs={}, tasks=state.tasks, quotas=state.quotas)
    assert len(plannable(state, None)) == 2
    assert plannable(without_job, None) == set()
    # The watch cache's work set narrows what is looked at.
    first = min(state.tasks)
    assert plannable(state, {first}) == {first}


def test_a_long_pass_sends_heartbeats_while_it_plans(monkeypatch: Any) -> None:
    """A pass over 10,000 pending tasks takes seconds: the leader, hearing nothing for its
    grace, would plan the same tasks itself. While a pass plans, empty plans go out every
    HEARTBEAT_S; an idle moment sends none from the beat (the loop's own heartbeat does)."""
    planning, done = threading.Event(), threading.Event()
    leader = FakeLeader()
    p, _ = process(View(revision=40, state=pending_state(), leader=LEADER, capacity_epoch=3), leader)
    real = p.carried.plan

    def slow_plan(*args: Any, **kwargs: Any) -> Any:
        planning.set()
        time.sleep(4 * proc_mod.HEARTBEAT_S)
        return real(*args, **kwargs)

    monkeypatch.setattr(p.carried, "plan", slow_plan)
    p._active.set()
    beat = threading.Thread(target=p._beat_while_planning, daemon=True)
    beat.start()
    try:
        threading.Thread(target=lambda: (p.step(), done.set()), daemon=True).start()
        assert planning.wait(5) and done.wait(10)
        empties = [d for d in leader.docs[1:-1] if d["plan"] == {}]  # between the first ask and the plan
        assert len(empties) >= 2, leader.docs
        assert leader.docs[-1]["plan"]["placements"]  # the plan itself still goes out
        sent = len(leader.docs)
        time.sleep(3 * proc_mod.HEARTBEAT_S)
        assert len(leader.docs) == sent  # no pass, no beat
    finally:
        p._stop.set()
        beat.join(5)
