"""The job autoscaler's loop against an in-memory cell: scale up, drain then shrink, a drain cancelled, a drain adopted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reference.jobspec import parse_job
from reference.master import views
from reference.master.cell import Cell, Draft, JobInfo, MachineInfo, TaskInfo
from reference.master.jobscaler import JobAutoscaler
from spec.actions import schedule, submit
from spec.fmap import FMap
from spec.model import CellState, Machine, Resources, TaskId, TaskState

AUTOSCALE = {"min": 1, "max": 5, "metric": "requests_per_task", "target": 8,
             "scale_up_cooldown": 0, "scale_down_cooldown": 0, "stabilization_s": 0, "drain_s": 5}  # fmt: skip


class Store:
    """Stands in for the watch cache and the writer: mutate applies a Draft at once."""

    def __init__(self, cell: Cell) -> None:
        self.c = cell
        self.writes = 0

    def cell(self) -> Cell:
        return self.c

    def mutate(self, change: Callable[[Draft], Any]) -> tuple[Any, int]:
        d = Draft(self.c, 0.0)
        result = change(d)
        self.c = Cell(state=d.state, machines=d.machines, jobs=d.jobs, tasks=self.started(d))
        self.writes += 1
        return result, self.writes

    def started(self, d: Draft) -> dict[TaskId, TaskInfo]:
        """Every RUNNING task is up and serving at once (its borglet reported it)."""
        out = dict(d.tasks)
        for tid, t in d.state.tasks.items():
            if t.state is TaskState.RUNNING and not out.get(tid, TaskInfo()).seen:
                out[tid] = TaskInfo(port=9000 + tid.index, seen=True, borglet_state="RUNNING")
        return out


class Scaler(JobAutoscaler):
    """Measures what the test says, not real tasks."""

    load: float = 0.0  # requests/s over the whole job

    def _measure(self, cell: Cell, job: Any, spec: Any, serving: list) -> list[float | None]:
        return [self.load / len(serving)] * len(serving) if serving else []


def make(count: int) -> tuple[Store, Scaler, list[float]]:
    spec = parse_job({"name": "web", "user": "u", "task_count": count, "command": ["x"],
                      "request": {"cpu": "100m"}, "autoscale": AUTOSCALE})  # fmt: skip
    state: CellState | None = CellState(machines=FMap({"m0": Machine("m0", Resources.of(cpu=4000, ram=10**9))}))
    state = submit(state, spec.to_spec_job()) if state else None
    for i in range(count):
        state = schedule(state, TaskId("u/web", i), "m0") if state else None
    assert state is not None
    store = Store(Cell(state=state, machines={"m0": MachineInfo("http://127.0.0.1:1")}, jobs={"u/web": JobInfo(spec)}))
    store.mutate(lambda d: None)  # the tasks report in
    now = [100.0]
    scaler = Scaler(store, store, lambda: {}, clock=lambda: now[0], wall=lambda: now[0])  # type: ignore[arg-type]
    return store, scaler, now


def count_and_endpoints(store: Store) -> tuple[int, list[int]]:
    cell = store.cell()
    return cell.state.jobs["u/web"].task_count, [e["index"] for e in views.endpoints(cell, "u/web", "local")]


def test_scale_up_through_the_update_path() -> None:
    store, scaler, now = make(1)
    scaler.load = 30.0
    scaler.tick()
    assert count_and_endpoints(store) == (4, [0])
    states = sorted(t.state.value for t in store.cell().state.tasks.values())
    assert states == ["PENDING", "PENDING", "PENDING", "RUNNING"]  # the scheduler places them next
    assert store.cell().jobs["u/web"].spec.task_count == 4  # the job file too, as a PATCH does


def test_scale_down_drains_first_then_shrinks() -> None:
    store, scaler, now = make(3)
    scaler.load = 6.0
    scaler.tick()
    assert count_and_endpoints(store) == (3, [0])  # 1 and 2 still run but are out of the endpoints
    now[0] += 2.0
    scaler.tick()
    assert count_and_endpoints(store)[0] == 3  # still draining
    now[0] += 4.0
    scaler.tick()
    assert count_and_endpoints(store) == (1, [0])
    states = {t.id.index: t.state for t in store.cell().state.tasks.values()}
    assert states == {0: TaskState.RUNNING, 1: TaskState.DEAD, 2: TaskState.DEAD}


def test_load_returning_during_a_drain_cancels_it() -> None:
    store, scaler, now = make(3)
    scaler.load = 6.0
    scaler.tick()
    assert count_and_endpoints(store) == (3, [0])
    scaler.load = 24.0  # back: 24 on the one serving task wants 3
    now[0] += 1.0
    scaler.tick()
    assert count_and_endpoints(store) == (3, [0, 1, 2])


def test_a_drain_left_by_a_previous_leader_is_finished() -> None:
    store, first, now = make(3)
    first.load = 6.0
    first.tick()
    second = Scaler(store, store, lambda: {}, clock=lambda: now[0], wall=lambda: now[0])  # type: ignore[arg-type]
    second.load = 6.0
    second.tick()  # adopts the drain, waits drain_s from now
    assert count_and_endpoints(store)[0] == 3
    now[0] += 6.0
    second.tick()
    assert count_and_endpoints(store) == (1, [0])
