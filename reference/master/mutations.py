"""The API's writes as changes to a Draft: validate, check against the current cell, apply spec actions.

Each function runs inside `Writer.mutate`, so it sees the newest cell and nothing else
writes meanwhile; raising `ApiError` leaves the cell untouched.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from reference.jobspec import JobFileError, parse_job, parse_request_value
from reference.master import versions
from reference.master.cell import Draft
from reference.scheduler import admit
from spec.actions import EvictReason
from spec.model import CellState, Resources, TaskId, TaskState


class ApiError(Exception):
    """A request the cell refuses: status, the field at fault, and what to change."""

    def __init__(self, status: int, field: str, error: str, errors: list[dict[str, str]] | None = None) -> None:
        super().__init__(error)
        self.status, self.field, self.error = status, field, error
        self.errors = errors or [{"field": field, "error": error}]


def submit_job(d: Draft, payload: Any) -> str:
    try:
        spec = parse_job(payload)
    except JobFileError as err:
        raise ApiError(422, err.errors[0]["field"], err.errors[0]["error"], err.errors) from None
    job = spec.to_spec_job()
    if job.key in d.state.jobs:
        raise ApiError(409, "name", f"job {job.key} already exists; kill it or choose another name")
    if job.alloc is not None:
        check_alloc_set(d.state, job.alloc, job.task_count)
    admission = admit(d.state, job)
    if not admission:
        raise ApiError(403, "request", admission.reason)
    d.jobs[job.key] = versions.first(spec, d.now)
    if not d.step("submit", job, reason="submitted"):
        raise ApiError(422, "", f"the cell refuses job {job.key}")
    return job.key


UPDATABLE = ("task_count", "request")


def parse_update(payload: Any) -> tuple[int | None, dict[str, int] | None]:
    if not isinstance(payload, dict):
        raise ApiError(422, "", "the body must be a JSON object such as {\"task_count\": 3}")
    errors = [
        {"field": k, "error": f"cannot be updated; only {', '.join(UPDATABLE)} can"}
        for k in payload
        if k not in UPDATABLE
    ]
    count = payload.get("task_count")
    if isinstance(count, float) and count.is_integer():  # 3.0 is JSON's integer 3, as the job file reads it
        count = int(count)
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 10000):
        errors.append({"field": "task_count", "error": "must be an integer 0..10000"})
    request: dict[str, int] | None = None
    if payload.get("request") is not None:
        raw = payload["request"]
        if not isinstance(raw, dict):
            errors.append({"field": "request", "error": "must be a mapping such as {cpu: 500m}"})
        else:
            request = {}
            for name, value in raw.items():
                try:
                    request[str(name)] = parse_request_value(str(name), value)
                except ValueError as err:
                    errors.append({"field": f"request.{name}", "error": str(err)})
    if errors:
        raise ApiError(422, errors[0]["field"], errors[0]["error"], errors)
    return count, request


def check_alloc_set(state: CellState, alloc_set: str, task_count: int) -> None:
    """A job naming an alloc set needs the set, and an alloc in it for each task (task i runs in alloc i)."""
    have = len(state.alloc_set(alloc_set))
    if have == 0:
        raise ApiError(404, "alloc", f"no alloc set named {alloc_set}")
    if not state.alloc_set_covers(alloc_set, task_count):
        raise ApiError(422, "alloc", f"alloc set {alloc_set} has {have} allocs, fewer than the job's {task_count} tasks")


def update_job(d: Draft, key: str, payload: Any) -> str:
    count, request = parse_update(payload)
    old = d.state.jobs.get(key)
    if old is None:
        raise ApiError(404, "job", f"no job {key}")
    merged = old.request.as_dict()
    merged.update(request or {})
    new_request = Resources.of(merged) if request is not None else old.request
    new_count = old.task_count if count is None else count
    if (new_count, new_request) == (old.task_count, old.request):
        return key  # nothing to change
    if old.alloc is not None:
        check_alloc_set(d.state, old.alloc, new_count)
    admission = admit(d.state, replace(old, task_count=new_count, request=new_request))
    if not admission:
        raise ApiError(403, "request", admission.reason)
    info = d.jobs[key]
    if not d.step("update", key, new_count, new_request, reason="job updated"):
        raise ApiError(422, "", f"the cell refuses this update of {key}")
    spec = info.spec.model_copy(update={"task_count": new_count, "request": new_request.as_dict()})
    d.jobs[key] = versions.recorded(info, spec, d.now, d.state.jobs[key].version)
    return key


def kill_job(d: Draft, key: str) -> int:
    if key not in d.state.jobs:
        raise ApiError(404, "job", f"no job {key}")
    live = sum(1 for t in d.state.tasks_of(key) if t.state is not TaskState.DEAD)
    d.step("kill_job", key, reason="job killed")
    d.jobs.pop(key, None)
    return live


def kill_task(d: Draft, key: str, index: int) -> TaskId:
    if key not in d.state.jobs:
        raise ApiError(404, "job", f"no job {key}")
    task = d.state.latest(key, index)
    if task is None:
        raise ApiError(404, "index", f"job {key} has no task {index}")
    if not d.step("kill", task.id, reason="task killed"):
        raise ApiError(409, "index", f"task {task.id} is already DEAD")
    return task.id


def remove_machine(d: Draft, name: str) -> int:
    """Drain a machine (its RUNNING tasks evicted for maintenance, back to PENDING) and remove
    it; returns how many tasks were evicted."""
    if name not in d.state.machines:
        raise ApiError(404, "name", f"no machine {name}")
    running = d.state.running_on(name)
    for t in running:
        d.step("evict", t.id, EvictReason.MAINTENANCE, reason=f"drain of {name}")
    if not d.step("machine_remove", name, reason="machine removed"):
        raise ApiError(409, "name", f"machine {name} still holds allocs; delete them first")
    d.machines.pop(name, None)
    return len(running)
