"""A small master cell for the master's unit tests: alice/web's two tasks running on m1."""

from __future__ import annotations

from reference.jobspec import parse_job
from reference.master.cell import Cell, JobInfo, MachineInfo, TaskInfo
from spec.actions import machine_add, schedule, submit
from spec.model import CellState, Machine, Resources, TaskId

SPEC = parse_job({"name": "web", "user": "alice", "task_count": 2, "request": {"cpu": "100m"},
                  "command": ["sleep", "100"], "restart_policy": "never"})  # fmt: skip
T0, T1 = TaskId("alice/web", 0, 0), TaskId("alice/web", 1, 0)
M2 = Machine("m2", Resources.of(cpu=4000, ram=2**30))


def placed_cell(**info: object) -> Cell:
    """alice/web's two tasks RUNNING on m1, each with TaskInfo(**info)."""
    state = machine_add(CellState(), Machine("m1", Resources.of(cpu=4000, ram=2**30)))
    assert state is not None
    state = submit(state, SPEC.to_spec_job())
    for i in range(2):
        state = schedule(state, TaskId("alice/web", i, 0), "m1")
    assert state is not None
    tasks = {tid: TaskInfo(**info) for tid in state.tasks}  # type: ignore[arg-type]
    return Cell(state, {"m1": MachineInfo("http://127.0.0.1:1")}, {"alice/web": JobInfo(SPEC)}, tasks)
