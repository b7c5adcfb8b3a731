"""Turns the API's views (machines, jobs, tasks) into a spec CellState: what the cell shows, in the spec's terms."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from harness.api import Api, cpu_milli
from spec.model import (
    ZERO,
    AppClass,
    CellState,
    Constraint,
    ConstraintOp,
    DeathCause,
    FMap,
    Job,
    Machine,
    Resources,
    RestartPolicy,
    Task,
    TaskId,
    TaskState,
)


def resources_of(view: dict[str, Any]) -> Resources:
    return Resources.of({k: cpu_milli(v) if k == "cpu" else int(v) for k, v in view.items()})


def machine_of(view: dict[str, Any]) -> Machine:
    return Machine(
        name=view["name"],
        capacity=resources_of(view.get("capacity", {})),
        attrs=tuple(sorted((str(k), str(v)) for k, v in (view.get("attrs") or {}).items())),
        failure_domain=view.get("failure_domain", ""),
        up=view.get("state") == "up",
    )


def constraint_of(view: dict[str, Any]) -> Constraint:
    values = view.get("values") or [view.get("value")]
    return Constraint(view["attr"], ConstraintOp(view.get("op", "eq")), tuple(str(v) for v in values))


def job_of(view: dict[str, Any]) -> Job:
    return Job(
        user=view["user"],
        name=view["name"],
        priority=int(view["priority"]),
        task_count=int(view["task_count"]),
        request=resources_of(view.get("request", {})),
        constraints=tuple(constraint_of(c) for c in view.get("constraints") or []),
        restart_policy=RestartPolicy(view.get("restart_policy", "on_failure")),
        appclass=AppClass(view.get("appclass", "batch")),
        alloc=view.get("alloc"),
        package=view.get("package") or "",
        version=int(view.get("version", 0)),
    )


@dataclass
class Observation:
    """One poll of the cell: the spec state, the raw views, and what each borglet reports."""

    t: float
    state: CellState
    task_views: dict[TaskId, dict[str, Any]]
    machine_views: dict[str, dict[str, Any]]
    borglets: dict[str, dict[str, Any] | None] = field(default_factory=dict)


class Observer:
    """Polls the API and builds CellStates.

    The task view carries no request, so the request a RUNNING task holds is remembered
    from its job when the task is first seen running in a placement: that matches the
    spec (schedule copies the job's request) except when the placement predates a job
    update the observer saw first, where it errs toward the newer request.
    """

    def __init__(self, api: Api, keys: set[str] | None = None) -> None:
        self.api = api
        self.keys = keys  # jobs to watch besides the live ones (killed jobs keep DEAD tasks)
        self._held: dict[tuple[TaskId, Any], Resources] = {}

    def poll(self, borglets: bool = True) -> Observation | None:
        t = time.monotonic()
        mviews = self.api.machines()
        jviews = self.api.jobs()
        if mviews is None or jviews is None:
            return None
        jobs = {j.key: j for j in map(job_of, jviews)}
        keys = set(jobs) | (self.keys or set())
        tasks: dict[TaskId, Task] = {}
        tviews: dict[TaskId, dict[str, Any]] = {}
        for key in sorted(keys):
            views = self.api.tasks(key)
            if views is None:
                return None
            for v in views:
                task = self._task_of(v, jobs.get(key))
                tasks[task.id] = task
                tviews[task.id] = v
        state = CellState(
            machines=FMap({m["name"]: machine_of(m) for m in mviews}),
            jobs=FMap(jobs),
            tasks=FMap(tasks),
        )
        reports: dict[str, dict[str, Any] | None] = {}
        if borglets:
            for m in mviews:
                if m.get("address"):
                    reports[m["name"]] = self.api.borglet_state(m["address"])
        return Observation(t, state, tviews, {m["name"]: m for m in mviews}, reports)

    def _task_of(self, v: dict[str, Any], job: Job | None) -> Task:
        tid = TaskId(v["job"], int(v["index"]), int(v["incarnation"]))
        st = TaskState(v["state"])
        priority = job.priority if job is not None else 0
        request = ZERO
        if st is TaskState.RUNNING:
            runs = [h["at"] for h in v.get("history", []) if h["state"] == "RUNNING"]
            placement = (tid, (v.get("machine"), runs[-1] if runs else None))
            if placement not in self._held:
                self._held[placement] = job.request if job is not None else ZERO
            request = self._held[placement]
        elif st is TaskState.PENDING and job is not None:
            request = job.request
        cause = DeathCause(v["cause"]) if st is TaskState.DEAD and v.get("cause") else None
        machine = v.get("machine") if st is TaskState.RUNNING else v.get("machine") or None
        return Task(tid, st, machine, priority, request, cause)
