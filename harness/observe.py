"""Turns the API's views (machines, jobs, tasks, quotas, alloc sets) into a spec CellState: what the cell shows, in the spec's terms."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from harness.api import Api, cpu_milli
from spec.fmap import FMap
from spec.model import (
    ZERO,
    Alloc,
    AppClass,
    Band,
    CellState,
    Constraint,
    ConstraintOp,
    DeathCause,
    Job,
    Machine,
    QuotaKey,
    Resources,
    RestartPolicy,
    Task,
    TaskId,
    TaskState,
)


def resources_of(view: dict[str, Any]) -> Resources:
    """A resources view in the spec's units. Job requests are written as in a job file ("250m");
    capacities, requests, reservations and quota limits as numbers already in the spec's units
    (millicores, bytes), which must not be read as cores."""
    return Resources.of({k: cpu_milli(v) if k == "cpu" and isinstance(v, str) else int(v) for k, v in view.items()})


def machine_of(view: dict[str, Any]) -> Machine:
    return Machine(
        name=view["name"],
        capacity=resources_of(view.get("capacity", {})),
        attrs=tuple(sorted((str(k), str(v)) for k, v in (view.get("attrs") or {}).items())),
        failure_domain=view.get("failure_domain", ""),
        up=view.get("state") == "up",
        schedulable=view.get("schedulable", True) is not False,
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
        alloc=alloc_set_key(view["user"], view.get("alloc")),
        package=view.get("package") or "",
        version=int(view.get("version", 0)),
        max_unavailable=int(view.get("max_unavailable") or 1),
        template=view.get("template") or "",
    )


def alloc_set_key(user: str, alloc: str | None) -> str | None:
    """The key of the alloc set a job names: a job file names one of its user's sets by name."""
    if not alloc:
        return None
    return alloc if "/" in alloc else f"{user}/{alloc}"


def allocs_of(views: list[dict[str, Any]]) -> FMap[str, Alloc]:
    """`GET /v1/allocs`'s sets as the spec's allocs, one per machine."""
    out = {}
    for v in views:
        for a in v.get("allocs", []):
            alloc = Alloc(str(v["key"]), int(a["index"]), str(a["machine"]), resources_of(a.get("resources") or {}),
                          int(v["priority"]), str(v.get("user", "")))  # fmt: skip
            out[alloc.name] = alloc
    return FMap(out)


def quotas_of(views: list[dict[str, Any]]) -> FMap[QuotaKey, Resources]:
    return FMap({QuotaKey(str(q["user"]), Band(q["band"])): resources_of(q.get("limit") or {}) for q in views})


@dataclass
class Observation:
    """One poll of the cell: the spec state, the raw views, and what each borglet reports."""

    t: float
    state: CellState
    task_views: dict[TaskId, dict[str, Any]]
    machine_views: dict[str, dict[str, Any]]
    borglets: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    #: machine -> (sent, answered): each borglet is read after the API, one after another
    borglet_times: dict[str, tuple[float, float]] = field(default_factory=dict)
    revision: int | None = None  # the cache revision the API read was at, where the cell says


class Observer:
    """Polls the API and builds CellStates.

    A task view carries the request the task holds and, when RUNNING, its reservation. A
    cell whose views lack the request (an older API) has it remembered from the job when
    the task is first seen running in a placement: that matches the spec (schedule copies
    the job's request) except when the placement predates a job update the observer saw
    first, where it errs toward the newer request. Quotas come from `GET /v1/quotas`; a
    cell without that endpoint reads as one without quotas.
    """

    def __init__(self, api: Api, keys: set[str] | None = None) -> None:
        self.api = api
        self.keys = keys  # jobs to watch besides the live ones (killed jobs keep DEAD tasks)
        self._held: dict[tuple[TaskId, Any], Resources] = {}
        self.quotas_readable = True
        self.allocs_readable = True  # an older cell has no /v1/allocs: it reads as one without allocs

    def poll(self, borglets: bool = True, skip: set[str] | frozenset[str] = frozenset()) -> Observation | None:
        """One observation; `skip` names machines whose borglet is known not to answer (paused)."""
        t = time.monotonic()
        # The machines and jobs lists name what to read; the lists, every watched job's tasks
        # and the quotas are then read together, at one revision of one master, so the state
        # is one the cell was in (a task never shows RUNNING on a machine read before it came up).
        listed: set[str] = set()
        for _ in range(3):
            keys = sorted(listed | (self.keys or set()))
            paths = ["/v1/machines", "/v1/jobs"] + [f"/v1/jobs/{k}/tasks" for k in keys]
            if self.quotas_readable:
                paths.append("/v1/quotas")
            if self.allocs_readable:
                paths.append("/v1/allocs")
            bodies = self.api.read_together(paths)
            if bodies is None:
                return None
            listed = {str(j["key"]) for j in bodies[1]["jobs"]}
            if listed <= set(keys):
                break  # every listed job's tasks were read with it
        else:
            return None
        mviews, jviews = bodies[0]["machines"], bodies[1]["jobs"]
        jobs = {j.key: j for j in map(job_of, jviews)}
        tasks: dict[TaskId, Task] = {}
        tviews: dict[TaskId, dict[str, Any]] = {}
        for key, body in zip(keys, bodies[2 : 2 + len(keys)], strict=True):
            for v in (body or {}).get("tasks", []):
                task = self._task_of(v, jobs.get(key))
                tasks[task.id] = task
                tviews[task.id] = v
        extra = bodies[2 + len(keys) :]
        quotas: FMap[QuotaKey, Resources] = FMap()
        if self.quotas_readable:
            body = extra.pop(0)
            if body is None:
                self.quotas_readable = False  # a cell without GET /v1/quotas: none are judged
            else:
                quotas = quotas_of(body.get("quotas", []))
        allocs: FMap[str, Alloc] = FMap()
        if self.allocs_readable:
            body = extra.pop(0)
            if body is None:
                self.allocs_readable = False
            else:
                allocs = allocs_of(body.get("alloc_sets", []))
        state = CellState(
            machines=FMap({m["name"]: machine_of(m) for m in mviews}),
            jobs=FMap(jobs),
            tasks=FMap(tasks),
            quotas=quotas,
            allocs=allocs,
        )
        reports: dict[str, dict[str, Any] | None] = {}
        times: dict[str, tuple[float, float]] = {}
        if borglets:
            for m in mviews:
                if m.get("address") and m["name"] not in skip:
                    sent = time.monotonic()
                    reports[m["name"]] = self.api.borglet_state(m["address"], m["name"])
                    times[m["name"]] = (sent, time.monotonic())
        revision = bodies[0].get("revision")
        return Observation(
            t, state, tviews, {m["name"]: m for m in mviews}, reports, times,
            int(revision) if isinstance(revision, int) else None,
        )  # fmt: skip

    def _task_of(self, v: dict[str, Any], job: Job | None) -> Task:
        tid = TaskId(v["job"], int(v["index"]), int(v["incarnation"]))
        st = TaskState(v["state"])
        priority = job.priority if job is not None else 0
        request = ZERO
        reservation = None
        if v.get("request") is not None and st is not TaskState.DEAD:
            request = resources_of(v["request"])
            if st is TaskState.RUNNING and v.get("reservation") is not None:
                reserved = resources_of(v["reservation"])
                reservation = None if reserved == request else reserved
        elif st is TaskState.RUNNING:
            runs = [h["at"] for h in v.get("history", []) if h["state"] == "RUNNING"]
            placement = (tid, (v.get("machine"), runs[-1] if runs else None))
            if placement not in self._held:
                self._held[placement] = job.request if job is not None else ZERO
            request = self._held[placement]
        elif st is TaskState.PENDING and job is not None:
            request = job.request
        cause = DeathCause(v["cause"]) if st is TaskState.DEAD and v.get("cause") else None
        machine = v.get("machine") if st is TaskState.RUNNING else v.get("machine") or None
        template = (v.get("template") or "") if st is not TaskState.DEAD else ""
        down_for = (v.get("down_for") or "") if st is TaskState.PENDING else ""
        return Task(tid, st, machine, priority, request, cause, reservation, template, down_for)
