"""The master's drains: the body's checks, the drain and uncordon changes, the leader's step within budgets, and the machine record's round trip."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reference.master import codec, drain, views
from reference.master.cell import Cell, Draft, MachineInfo, TaskInfo
from reference.master.mutations import ApiError, remove_machine
from spec.actions import machine_add, schedule, submit
from spec.model import CellState, Job, Machine, Resources, TaskId, TaskState

STARTED = TaskInfo(seen=True, borglet_state="RUNNING", pid=10)


def cell_of(n_tasks: int = 3, on: str = "m1") -> Cell:
    """Machines m1, m2, m3; job u/web of `n_tasks` tasks, all RUNNING (confirmed) on `on`."""
    s = CellState()
    for name in ("m1", "m2", "m3"):
        s = machine_add(s, Machine(name, Resources.of(cpu=4000, ram=2**30)))
    s = submit(s, Job("u", "web", 200, n_tasks, Resources.of(cpu=100)))
    for i in range(n_tasks):
        s = schedule(s, TaskId("u/web", i, 0), on)
    infos = {tid: STARTED for tid in s.tasks}
    return Cell(s, {n: MachineInfo("http://127.0.0.1:1") for n in ("m1", "m2", "m3")}, {}, infos)


def committed(d: Draft) -> Cell:
    return Cell(d.state, dict(d.machines), dict(d.jobs), dict(d.tasks))


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"deadline_s": -1}, "deadline_s"),
        ({"deadline_s": 0}, "deadline_s"),
        ({"deadline_s": "soon"}, "deadline_s"),
        ({"deadline_s": True}, "deadline_s"),
        ({"deadline_s": 10**9}, "deadline_s"),
        ({"deadline": 5}, "deadline"),
        ([1], ""),
    ],
)
def test_a_bad_body_is_refused_naming_the_field(payload, field):
    with pytest.raises(ApiError) as err:
        drain.parse_deadline(payload)
    assert err.value.status == 422 and err.value.field == field


def test_a_good_body():
    assert drain.parse_deadline(None) is None
    assert drain.parse_deadline({}) is None
    assert drain.parse_deadline({"deadline_s": 90}) == 90.0


def test_drain_of_an_unknown_machine_is_a_404_and_uncordon_of_a_schedulable_one_a_409():
    d = Draft(cell_of(), now=100.0)
    with pytest.raises(ApiError) as err:
        drain.start_drain(d, "zz", None)
    assert err.value.status == 404 and err.value.field == "name"
    with pytest.raises(ApiError) as err:
        drain.uncordon(d, "m2")
    assert err.value.status == 409


def test_drain_moves_one_task_per_pass_within_a_budget_of_one():
    d = Draft(cell_of(3), now=100.0)
    drain.start_drain(d, "m1", 60)
    assert not d.state.machines["m1"].schedulable
    assert d.machine_info("m1").drain_since == 100.0 and d.machine_info("m1").drain_deadline == 160.0
    assert drain.advance(d) == 1  # budget 1: one task down at a time
    down = [t for t in d.state.tasks.values() if t.state is TaskState.PENDING]
    assert len(down) == 1
    assert drain.advance(d) == 0  # still down: nothing else moves
    # Placed elsewhere but not yet confirmed by its borglet: still down for the drain.
    d.step("schedule", down[0].id, "m2")
    assert drain.advance(d) == 0
    # Its borglet confirms it started: the next one moves.
    d.tasks[down[0].id] = STARTED
    assert drain.advance(d) == 1


def test_an_unhealthy_replacement_holds_the_drain():
    d = Draft(cell_of(2), now=0.0)
    drain.start_drain(d, "m1", None)
    drain.advance(d)
    (moved,) = [t.id for t in d.state.tasks.values() if t.state is TaskState.PENDING]
    d.step("schedule", moved, "m2")
    d.tasks[moved] = replace(STARTED, healthy=False)
    assert drain.down_now(d, "u/web") == 1 and drain.advance(d) == 0


def test_past_the_deadline_the_rest_is_evicted():
    d = Draft(cell_of(3), now=100.0)
    drain.start_drain(d, "m1", 10)
    later = Draft(committed(d), now=111.0)
    assert drain.advance(later) == 3  # one within the budget, two by the deadline
    assert not later.state.running_on("m1") and not drain.has_work(committed(later))


def test_a_drained_empty_machine_is_removed_evicting_nothing_and_uncordon_reopens():
    d = Draft(cell_of(1), now=0.0)
    drain.start_drain(d, "m1", None)
    drain.advance(d)
    (moved,) = [t.id for t in d.state.tasks.values() if t.state is TaskState.PENDING]
    assert not d.step("schedule", moved, "m1")  # not back onto the drained machine
    d.step("schedule", moved, "m2")
    view = views.machine_view(committed(d), "m1")
    assert view["schedulable"] is False and view["drain"]["state"] == "drained" and view["drain"]["tasks_left"] == 0
    u = Draft(committed(d), now=1.0)
    drain.uncordon(u, "m1")
    assert u.state.machines["m1"].schedulable and u.machine_info("m1").drain_since == 0.0
    assert views.machine_view(committed(u), "m1")["drain"] is None
    assert remove_machine(Draft(committed(d), now=2.0), "m1") == 0


def test_the_drain_survives_the_store():
    d = Draft(cell_of(1), now=5.0)
    drain.start_drain(d, "m1", 30)
    m, info = codec.decode_machine(codec.encode_machine(d.state.machines["m1"], d.machine_info("m1")))
    assert not m.schedulable and (info.drain_since, info.drain_deadline) == (5.0, 35.0)
    m2, info2 = codec.decode_machine(codec.encode_machine(d.state.machines["m2"], d.machine_info("m2")))
    assert m2.schedulable and info2.drain_since == 0.0


def test_tasks_in_an_alloc_stay_with_their_alloc():
    from spec.actions import alloc_create
    from spec.model import Alloc

    c = cell_of(1)
    s = alloc_create(c.state, Alloc("u/set", 0, "m1", Resources.of(cpu=500), 200, "u"))
    s = submit(s, Job("u", "inset", 200, 1, Resources.of(cpu=100), alloc="u/set"))
    s = schedule(s, TaskId("u/inset", 0, 0), "m1")
    infos = {**c.tasks, TaskId("u/inset", 0, 0): STARTED}
    d = Draft(Cell(s, c.machines, {}, infos), now=0.0)
    drain.start_drain(d, "m1", None)
    assert [t.id.job for t in drain.movable(d.state, "m1")] == ["u/web"]
    assert drain.advance(d) == 1
    assert d.state.tasks[TaskId("u/inset", 0, 0)].state is TaskState.RUNNING
