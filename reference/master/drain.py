"""Machine drains: `POST /v1/machines/{name}/drain` and `/uncordon`, and the leader's step that moves a drained machine's tasks off within each job's budget.

A drain marks the machine unschedulable (the spec's `drain`) and the leader then moves its
tasks off, each through the spec's `drain_move`, whose guard holds a job to its budget
(`spec.actions.budget`: its max_unavailable). The shell is stricter than the spec in one
way: a task the cell counts as RUNNING is up only once its borglet has confirmed its process
started (and, with a health check, not reported it unhealthy), so the next task of a job
moves only after the previous one's replacement runs elsewhere for real. With a deadline,
the tasks still on the machine when it passes are evicted whatever their budgets, as an
operator who must power the machine off would (Kubernetes' drain gives up instead; Borg's
maintenance has a hard date). Tasks in an alloc stay on their alloc's machine: they leave
when their alloc set is deleted. `uncordon` makes the machine schedulable again; tasks do not
move back by themselves. A drained machine that holds no task is removed evicting nothing.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from fastapi import Body, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from reference.master import contract
from reference.master.cell import Cell, Draft
from reference.master.machines import MAX_DRAIN_DEADLINE_S as MAX_DEADLINE_S
from reference.master.mutations import ApiError
from reference.master.reports import confirmed
from spec.actions import EvictReason, budget, tasks_down
from spec.fmap import FMap
from spec.model import CellState, Machine, Task, TaskState

Write = Callable[[Request, Any, Callable[[Draft], Any], Callable[[Any, int], JSONResponse]], Awaitable[Response]]

def parse_deadline(payload: Any) -> float | None:
    """The body's deadline in seconds (None: none); ApiError 422 naming `deadline_s`."""
    if payload is None:
        return None
    if not isinstance(payload, dict):
        raise ApiError(422, "", 'the body must be a JSON object, e.g. {"deadline_s": 600}, or empty')
    unknown = sorted(set(payload) - {"deadline_s"})
    if unknown:
        raise ApiError(422, unknown[0], "unknown field: a drain takes only deadline_s")
    value = payload.get("deadline_s")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ApiError(422, "deadline_s", "must be a number of seconds, e.g. 600")
    if not 0 < value <= MAX_DEADLINE_S:
        raise ApiError(422, "deadline_s", f"must be more than 0 and at most {MAX_DEADLINE_S:.0f} seconds (a week)")
    return float(value)


# --- the pure part: the changes and the leader's step -------------------------------------------


def start_drain(d: Draft, name: str, deadline_s: float | None) -> str:
    """Mark the machine unschedulable; draining one already drained sets its deadline anew."""
    m = d.state.machines.get(name)
    if m is None:
        raise ApiError(404, "name", f"no machine {name}")
    info = d.machine_info(name)
    if m.schedulable:
        d.step("drain", name, reason=f"drain of {name}")
        info = replace(info, drain_since=d.now)
    deadline = d.now + deadline_s if deadline_s is not None else 0.0
    d.machines[name] = replace(info, drain_since=info.drain_since or d.now, drain_deadline=deadline)
    return name


def uncordon(d: Draft, name: str) -> str:
    """Make the machine schedulable again; ApiError 409 when it is not drained."""
    m = d.state.machines.get(name)
    if m is None:
        raise ApiError(404, "name", f"no machine {name}")
    if not d.step("uncordon", name, reason=f"uncordon of {name}"):
        raise ApiError(409, "name", f"machine {name} is not drained; nothing to uncordon")
    d.machines[name] = replace(d.machine_info(name), drain_since=0.0, drain_deadline=0.0)
    return name


def movable(state: CellState, machine: str) -> list[Task]:
    """The tasks a drain moves off `machine`: those RUNNING there outside allocs (a task in an
    alloc runs on its alloc's machine only: it leaves when the alloc set is deleted)."""
    return [t for t in state.running_on(machine) if (j := state.jobs.get(t.id.job)) is not None and j.alloc is None]


def cordoned(name: str, m: Machine) -> bool | None:
    """The index (`FMap.group`) of the machines no task may be placed on: drained ones."""
    return True if not m.schedulable else None


def draining(state: CellState) -> list[str]:
    """The drained machines that still run tasks a drain moves, by name: looked up in the
    machines' index of cordoned ones, not a walk of every machine on each pass."""
    return sorted(n for n in _cordoned(state) if movable(state, n))


def has_work(cell: Cell) -> bool:
    """Whether a leader's pass has a drain to advance (a drained machine still runs a task it moves)."""
    state = cell.state
    return any(movable(state, n) for n in _cordoned(state))


def _cordoned(state: CellState) -> frozenset[str]:
    machines = state.machines
    if isinstance(machines, FMap):
        return machines.group(cordoned).get(True, frozenset())
    return frozenset(n for n, m in machines.items() if not m.schedulable)


def down_now(d: Draft, job_key: str) -> int:
    """The job's tasks down as the shell sees them: the spec's (`tasks_down`) plus those the
    cell has placed but whose borglet has not confirmed them started, or reports unhealthy."""
    state = d.state
    job = state.jobs.get(job_key)
    if job is None:
        return 0
    unconfirmed = 0
    for i, t in state.live_indices(job_key).items():
        if i < job.task_count and t.state is TaskState.RUNNING:
            info = d.task_info(t.id)
            if not confirmed(info) or info.healthy is False:
                unconfirmed += 1
    return tasks_down(state, job_key) + unconfirmed


def advance(d: Draft) -> int:
    """One step of every drain: move off each drained machine the tasks whose jobs' budgets
    allow it now (in task id order), and evict the rest of a machine whose deadline passed;
    returns how many tasks left a machine."""
    moved = 0
    for name in draining(d.state):
        info = d.machine_info(name)
        overdue = 0 < info.drain_deadline <= d.now
        for t in movable(d.state, name):
            job = d.state.jobs[t.id.job]
            if down_now(d, job.key) < budget(job):
                if d.step("drain_move", t.id, reason=f"drain of {name}"):
                    moved += 1
                    continue
            if overdue and d.step("evict", t.id, EvictReason.MAINTENANCE, reason=f"drain of {name}: deadline passed"):
                moved += 1
    return moved


# --- the shell: the endpoints ------------------------------------------------------------------


def register(app: FastAPI, replica: Any, write: Write, stamped: Callable[..., JSONResponse], machine_view: Callable[[Cell, str], dict[str, Any]]) -> None:
    """Add the drain and uncordon operations to a master's app (the admin's, as every
    /v1/machines path is: access.ADMIN_PREFIXES)."""

    def render(name: str, revision: int) -> JSONResponse:
        cell = replica.cache.cell()
        body = {"machine": machine_view(cell, name)} if name in cell.state.machines else {"machine": {"name": name}}
        return stamped(body, revision)

    @app.post("/v1/machines/{name}/drain", responses=contract.answers(404, 503))
    async def drain_machine(name: str, request: Request, payload: Any = Body(None)) -> Response:
        """Mark the machine unschedulable and move its tasks off within each job's budget."""
        try:
            if payload is None and (await request.body()).strip():  # JSON null, not an empty body
                raise ApiError(422, "", 'the body must be a JSON object, e.g. {"deadline_s": 600}, or empty')
            deadline_s = parse_deadline(payload)
        except ApiError as err:
            return JSONResponse(status_code=err.status, content={"detail": err.errors})
        return await write(request, payload, lambda d: start_drain(d, name, deadline_s), render)

    @app.post("/v1/machines/{name}/uncordon", responses=contract.answers(404, 409, 503))
    async def uncordon_machine(name: str, request: Request) -> Response:
        """Make a drained machine schedulable again."""
        return await write(request, None, lambda d: uncordon(d, name), render)
