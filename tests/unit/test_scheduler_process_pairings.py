"""The scheduler process avoids the task::machine pairings that crashed repeatedly, as the
leader's own pass does: the leader's answer to each plan carries its crash memory
(scheduler/pairing.py), and the process's next pass plans with it.

The leader here is a real `Term` (its plans endpoint, `accept_plan`, and its own pass) on one
cell behind fakes of what it reads and writes; the process reaches it as it would over HTTP,
through the plan's JSON and back.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from reference.master import leader as leader_mod
from reference.master.cell import Cell
from reference.master.leader import LeaderConfig, Term
from reference.scheduler.plan import Placement, Plan, Reason, Unschedulable
from reference.scheduler.wire import crashes_from_json, crashes_to_json, plan_from_json
from reference.schedulerd.process import SchedulerProcess
from spec.actions import machine_add, submit
from spec.model import CellState, Job, Machine, Resources, TaskId, TaskState
from tests.unit.test_scheduler_one_pending_set import Cached, Writer

TASK = TaskId("alice/web", 0)


def two_machines() -> Cell:
    """m1 and m2 alike; alice/web's one task PENDING."""
    state = CellState()
    for name in ("m1", "m2"):
        state = machine_add(state, Machine(name, Resources.of(cpu=4000, ram=2**30))) or state
    state = submit(state, Job("alice", "web", 100, 1, Resources.of(cpu=1000))) or state
    return Cell(state, revision=40, work=frozenset({TASK}), running=frozenset(), capacity_epoch=3)


class Http:
    """The process's `Leader`: each plan to the term's plans endpoint, as JSON both ways."""

    def __init__(self, term: Term) -> None:
        self.term = term
        self.answers: list[dict[str, Any]] = []

    def propose(self, leader: tuple[str, str], doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        answer = self.term.accept_plan(plan_from_json(doc["plan"]), by=doc["scheduler"])
        self.answers.append(answer)
        return 200, answer

    def close(self) -> None: ...


def term_on(cell: Cell) -> tuple[Term, Writer]:
    writer = Writer(cell)
    cache = SimpleNamespace(cell=lambda: cell, revision=cell.revision)
    return Term(1, cache, writer, LeaderConfig("c1", "m0"), link=None), writer  # type: ignore[arg-type]


def placed_by_process(term: Term, writer: Writer, cell: Cell) -> str:
    """Where a fresh scheduler process places alice/web's task: the machine of the commit of its plan."""
    lease = SimpleNamespace(start=lambda: None, resign=lambda: None)
    http = Http(term)
    proc = SchedulerProcess(name="s0", cell=Cached(cell), leader=http, lease=lambda elected, deposed: lease)
    assert proc.step() is True
    assert [a["placed"] for a in http.answers] == [0, 1]  # an empty plan first: the crash memory comes with it
    task = writer.drafts[-1].state.tasks[TASK]
    assert task.state is TaskState.RUNNING and task.machine is not None
    return task.machine


@pytest.mark.parametrize("crashes", [2, 3])
def test_the_process_places_away_from_a_machine_the_task_crashed_on_repeatedly(crashes: int) -> None:
    cell = two_machines()
    term, writer = term_on(cell)
    first = placed_by_process(term, writer, cell)  # nothing remembered yet: the policy's choice
    # The leader records alice/web index 0 failing `crashes` times on that machine (its pass
    # does so for each failed incarnation, master/crashes.py): REPEATED (2) or more.
    for _ in range(crashes):
        term.crashes.record(TASK.job, TASK.index, first)
    assert crashes_from_json(term.accept_plan(plan_from_json({}))["crashes"]) == {(TASK.job, TASK.index): {first: crashes}}
    other = placed_by_process(term, writer, cell)
    assert other != first
    # The leader's own pass, with the same memory, places it where the process did.
    own, writer = term_on(cell)
    for _ in range(crashes):
        own.crashes.record(TASK.job, TASK.index, first)
    own.run_pass()
    assert writer.drafts[-1].state.tasks[TASK].machine == other


def test_one_crash_is_chance_and_moves_nothing() -> None:
    cell = two_machines()
    term, writer = term_on(cell)
    first = placed_by_process(term, writer, cell)
    term.crashes.record(TASK.job, TASK.index, first)
    assert term.accept_plan(plan_from_json({}))["crashes"] == []  # below REPEATED: not sent
    assert placed_by_process(term, writer, cell) == first


def test_crashes_cross_the_wire_and_a_malformed_row_is_named() -> None:
    memory = {("alice/web", 0): {"m1": 3, "m2": 2}, ("bob/db", 4): {"m9": 2}}
    assert crashes_from_json(crashes_to_json(memory)) == memory
    assert crashes_from_json(None) == {}
    with pytest.raises(ValueError, match="a crash is"):
        crashes_from_json([["alice/web", "0", "m1", 3]])


def test_a_plan_whose_commit_outlasts_the_grace_keeps_the_term_from_planning_beside_it() -> None:
    """A plan of 10,000 placements takes seconds to commit on a busy leader; the term's own
    pass must not count that time as silence and plan the same tasks inside the writer."""
    cell = two_machines()
    term, writer = term_on(cell)
    term.SCHEDULER_GRACE_S = 0.05
    committing, release = threading.Event(), threading.Event()
    plain = writer.mutate

    def slow_mutate(change: Any) -> tuple[Any, int]:
        committing.set()
        release.wait(5)
        return plain(change)

    writer.mutate = slow_mutate  # type: ignore[method-assign]
    plan = Plan(placements=[Placement(TASK, "m1")])
    answered: list[dict[str, Any]] = []
    t = threading.Thread(target=lambda: answered.append(term.accept_plan(plan, by="s0")))
    t.start()
    assert committing.wait(5)
    time.sleep(0.2)  # four graces
    assert term.scheduler_active() is True  # the plan is still being committed
    release.set()
    t.join(5)
    assert answered and answered[0]["placed"] == 1
    assert term.scheduler_active() is True  # heard at the answer, not only at the request
    time.sleep(0.2)
    assert term.scheduler_active() is False  # and silence after it counts as before


# (changes waiting for the writer, its pace in seconds per op as a share of PLAN_WRITE_S)
@pytest.mark.parametrize("queued,pace", [(1, 0.001), (0, None), (0, 0.25), (0, 0.001)])
def test_a_large_plan_is_committed_in_parts_so_a_queued_write_goes_between(
    monkeypatch: pytest.MonkeyPatch, queued: int, pace: float | None
) -> None:
    """A plan of more than PLAN_CHUNK placements goes in as several writes while other changes
    wait for the writer, the reasons of what found no place with the last: a submit queued
    meanwhile waits for one part, not for the whole plan. While nothing waits, a write takes as
    many parts as the writer's pace says it commits within PLAN_WRITE_S, and one part while the
    pace is not known: what queues behind a write waits about PLAN_WRITE_S, never the whole plan
    of a slow writer. Every placement is committed, each machine's together and in the plan's
    order."""
    monkeypatch.setattr(leader_mod, "PLAN_CHUNK", 2)
    monkeypatch.setattr(leader_mod, "PLAN_WRITE_S", 1.0)
    machines = ("m1", "m2", "m3", "m4", "m5")
    state = CellState()
    for name in machines:
        state = machine_add(state, Machine(name, Resources.of(cpu=4000, ram=2**30))) or state
    state = submit(state, Job("alice", "web", 100, 11, Resources.of(cpu=1000))) or state
    cell = Cell(state, revision=40, running=frozenset(), capacity_epoch=3)
    writes: list[list[str]] = []

    class Advancing(Writer):
        def mutate(self, change: Any) -> tuple[Any, int]:
            out, rev = super().mutate(change)
            d = self.drafts[-1]
            writes.append(sorted(f"{t.index}@{d.state.tasks[t].machine}" for t in d.task_keys if d.state.tasks[t].machine))
            self.cell = Cell(d.state, {}, {}, {**self.cell.tasks, **d.tasks}, rev)
            return out, rev

    writer = Advancing(cell)
    writer.waiting = lambda: queued  # type: ignore[method-assign]
    writer.op_s = pace
    cache = SimpleNamespace(cell=lambda: writer.cell, revision=40)
    term = Term(1, cache, writer, LeaderConfig("c1", "m0"), link=None)  # type: ignore[arg-type]
    ids = [TaskId("alice/web", i) for i in range(11)]
    on = ("m1", "m2", "m1", "m3", "m2", "m4", "m3", "m5", "m4", "m5")
    plan = Plan(
        placements=[Placement(ids[i], m) for i, m in enumerate(on)],
        unschedulable=[Unschedulable(ids[10], (Reason("cpu", "short", 2),))],
    )
    answer = term.accept_plan(plan, by="s0")
    assert (answer["placed"], answer["conflicts"]) == (10, 0)
    m1, m2, m3, m4, m5 = (["0@m1", "2@m1"], ["1@m2", "4@m2"], ["3@m3", "6@m3"], ["5@m4", "8@m4"], ["7@m5", "9@m5"])
    if queued or pace is None:  # a part a write; m1's two in one write, not cut by m2's
        assert writes == [m1, m2, m3, m4, m5]
    elif pace == 0.25:  # four placements fit a write: two parts, not the whole rest
        assert writes == [sorted(m1 + m2), sorted(m3 + m4), m5]
    else:  # the whole plan fits: one write
        assert writes == [sorted(m1 + m2 + m3 + m4 + m5)]
    final = writer.cell
    assert [final.state.tasks[t].state for t in ids] == [TaskState.RUNNING] * 10 + [TaskState.PENDING]
    assert final.tasks[ids[10]].pending  # its reason went in with the last part


def test_a_write_takes_the_parts_its_pace_fits_and_at_least_one() -> None:
    """`parts_a_write` counts placements, not parts (a part ends at a machine's last placement,
    so parts differ in size), stops at the first part that would overrun PLAN_WRITE_S, and
    takes one part however slow the writer, while a change waits, or before a pace is known."""
    parts = [[Placement(TaskId("a/b", i), f"m{i}")] * n for i, n in enumerate((3, 1, 4, 2))]
    per_op = leader_mod.PLAN_WRITE_S / 8  # eight placements a write
    assert leader_mod.parts_a_write(parts, per_op, waiting=False) == 3  # 3 + 1 + 4; the 2 would overrun
    assert leader_mod.parts_a_write(parts, per_op / 10, waiting=False) == 4
    assert leader_mod.parts_a_write(parts, leader_mod.PLAN_WRITE_S, waiting=False) == 1  # slower than a part
    assert leader_mod.parts_a_write(parts, per_op / 10, waiting=True) == 1
    assert leader_mod.parts_a_write(parts, None, waiting=False) == 1


def test_a_silent_process_whose_lease_stands_is_waited_for_a_longer_grace() -> None:
    """A busy leader can be slow to read a plan or a heartbeat; the process's lease in etcd says
    whether it is alive. While the lease stands the term waits SCHEDULER_LEASED_GRACE_S of
    silence; once the lease is gone (or cannot be read), the short grace decides again."""
    cell = two_machines()
    leased: list[bool | Exception] = [True]
    reads: list[float] = []

    def read() -> bool:
        reads.append(time.monotonic())
        if isinstance(leased[0], Exception):
            raise leased[0]
        return leased[0]

    writer = Writer(cell)
    cache = SimpleNamespace(cell=lambda: cell, revision=cell.revision)
    term = Term(1, cache, writer, LeaderConfig("c1", "m0"), link=None, scheduler_leased=read)  # type: ignore[arg-type]
    term.SCHEDULER_GRACE_S, term.SCHEDULER_LEASED_GRACE_S, term.SCHEDULER_LEASE_CHECK_S = 0.05, 0.6, 0.0
    term.accept_plan(plan_from_json({}), by="s0")  # heard from
    time.sleep(0.1)  # two graces of silence
    term.run_pass()  # reads the lease: held, so no pass plans beside the process
    assert reads and term.scheduler_active() is True
    assert TASK not in {t for d in writer.drafts for t in d.task_keys}
    leased[0] = False
    time.sleep(0.06)
    term.run_pass()  # the lease is gone: the term plans
    assert term.scheduler_active() is False
    assert writer.drafts[-1].state.tasks[TASK].state is TaskState.RUNNING
    # A lease that stands does not hold the term off past the longer grace (a wedged process).
    term2, writer2 = term_on(cell)
    term2._scheduler_leased = lambda: True
    term2.SCHEDULER_GRACE_S, term2.SCHEDULER_LEASED_GRACE_S, term2.SCHEDULER_LEASE_CHECK_S = 0.05, 0.3, 0.0
    term2.accept_plan(plan_from_json({}), by="s0")
    time.sleep(0.1)
    term2.run_pass()
    assert term2.scheduler_active() is True
    time.sleep(0.3)
    term2.run_pass()
    assert term2.scheduler_active() is False
    assert writer2.drafts[-1].state.tasks[TASK].state is TaskState.RUNNING
    # A read that fails tells nothing: the short grace alone decides.
    term3, _ = term_on(cell)
    term3._scheduler_leased = lambda: (_ for _ in ()).throw(OSError("etcd unreachable"))
    term3.SCHEDULER_GRACE_S, term3.SCHEDULER_LEASE_CHECK_S = 0.05, 0.0
    term3.accept_plan(plan_from_json({}), by="s0")
    time.sleep(0.1)
    term3.run_pass()
    assert term3.scheduler_active() is False


def test_a_pass_plans_the_first_of_the_queue_and_the_rest_right_after() -> None:
    """A pass takes at most `SetAside.pass_max` pending tasks, the first in the queue's order
    (priority, then users in turn), and wakes the next pass for the rest; every task is placed
    in the end. The term's own pass and the scheduler process's choose alike."""
    state = CellState()
    for name in ("m1", "m2"):
        state = machine_add(state, Machine(name, Resources.of(cpu=4000, ram=2**30))) or state
    state = submit(state, Job("alice", "batch", 100, 4, Resources.of(cpu=10))) or state
    state = submit(state, Job("bob", "prod", 200, 2, Resources.of(cpu=10))) or state
    pending = frozenset(state.tasks)
    cell = Cell(state, revision=40, work=pending, running=frozenset(), capacity_epoch=3)

    class Advancing(Writer):
        def mutate(self, change: Any) -> tuple[Any, int]:
            out, rev = super().mutate(change)
            d = self.drafts[-1]
            self.cell = Cell(d.state, {}, {}, {**self.cell.tasks, **d.tasks}, rev, work=pending, running=frozenset(),
                             capacity_epoch=3)  # fmt: skip
            return out, rev

    writer = Advancing(cell)
    cache = SimpleNamespace(cell=lambda: writer.cell, revision=40)
    term = Term(1, cache, writer, LeaderConfig("c1", "m0"), link=None)  # type: ignore[arg-type]
    term.unschedulable.pass_max = 3
    # The scheduler process, on the same cell, proposes the same three first.
    lead = Http(term)
    lease = SimpleNamespace(start=lambda: None, resign=lambda: None)
    proc = SchedulerProcess(name="s0", cell=Cached(cell), leader=lead, lease=lambda elected, deposed: lease)
    proc.unschedulable.pass_max = 3
    proc.crashes = {}  # no pairings to ask for first
    proposed: list[set[TaskId]] = []
    lead.term = SimpleNamespace(accept_plan=lambda plan, by="": proposed.append({p.task for p in plan.placements}) or {"placed": 0})  # type: ignore[assignment]
    assert proc.step() is True and proc._wake.is_set()
    term.run_pass()
    first = writer.drafts[-1]
    placed = {t for t in first.task_keys if first.state.tasks[t].state is TaskState.RUNNING}
    assert placed == {TaskId("bob/prod", 0), TaskId("bob/prod", 1), TaskId("alice/batch", 0)}
    assert proposed == [placed]
    assert term._wake.is_set()  # the rest come in the next pass, at once
    term._wake.clear()
    term.run_pass()
    assert all(t.state is TaskState.RUNNING for t in writer.cell.state.tasks.values())
    assert not term._wake.is_set()


def test_a_plans_parts_hold_whole_machines_in_the_plans_order() -> None:
    """A spread plan cut in its own order gave each machine its tasks in as many writes as
    parts; by machine, each machine's placements go in one write, in the plan's order, and
    only a machine with more than a part is cut."""
    from reference.master.leader import plan_parts

    spread = [Placement(TaskId("alice/web", i), f"m{i % 4}") for i in range(12)]
    parts = plan_parts(spread, 6)
    assert [[(p.machine, p.task.index) for p in part] for part in parts] == [
        [("m0", 0), ("m0", 4), ("m0", 8), ("m1", 1), ("m1", 5), ("m1", 9)],
        [("m2", 2), ("m2", 6), ("m2", 10), ("m3", 3), ("m3", 7), ("m3", 11)],
    ]
    big = [Placement(TaskId("bob/db", i), "m9") for i in range(5)] + [Placement(TaskId("bob/db", 5), "m1")]
    parts = plan_parts(big, 2)
    assert [[p.task.index for p in part] for part in parts] == [[5], [0, 1], [2, 3], [4]]
    assert plan_parts([], 3) == []
    for size in (1, 4, 7, 100):
        assert sorted(p.task for part in plan_parts(spread, size) for p in part) == sorted(p.task for p in spread)
        assert all(len(part) <= size for part in plan_parts(spread, size))
