"""The API's JSON for jobs, tasks and machines, and BNS name resolution, read from one Cell."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from reference.master import events, work
from reference.master.cell import Cell, JobInfo, TaskInfo, will_restart
from reference.master.reports import bns_name, confirmed
from reference.resources import format_cpu
from spec.fmap import FMap
from spec.model import Job, Resources, Task, TaskId, TaskState, total


def host_of(address: str) -> str:
    return urlsplit(address if "://" in address else f"http://{address}").hostname or ""


def job_of(tid: TaskId, task: Task) -> str:
    """The index of a cell's tasks by job (`FMap.group`): a view's task map carries it from the
    last view's, updated from the keys that changed, so a read of one job costs that job."""
    return tid.job


class _TasksByJob(Mapping[str, list[Task]]):
    """job key -> its tasks (every incarnation), read from the task map's index by job."""

    def __init__(self, tasks: FMap[TaskId, Task]) -> None:
        self._tasks, self._ids = tasks, tasks.group(job_of)

    def __getitem__(self, job: str) -> list[Task]:
        ids = self._ids[job]
        work.add("view_index", len(ids))
        tasks = self._tasks
        return [tasks[t] for t in ids]

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


def tasks_by_job(cell: Cell) -> Mapping[str, list[Task]]:
    return _TasksByJob(cell.state.tasks)


def job_view(cell: Cell, job: Job, info: JobInfo | None = None) -> dict[str, Any]:
    info = info if info is not None else cell.jobs.get(job.key)
    doc: dict[str, Any] = info.spec.canonical() if info is not None else {}
    doc.update(
        name=job.name,
        user=job.user,
        priority=job.priority,
        task_count=job.task_count,
        request={k: (format_cpu(v) if k == "cpu" else v) for k, v in job.request.items},
        key=job.key,
        version=job.version,
        template=job.template,
        submitted_at=info.submitted_at if info is not None else 0.0,
    )
    return doc


def task_counts(cell: Cell, job_key: str | None = None) -> dict[str, int]:
    """Tasks by state, and `running_confirmed`: the RUNNING ones (placed on a machine, as in
    Borg) whose borglet has confirmed it started their process. A watch cache's view carries
    them (`Cell.counts`, `Cell.job_counts`); any other cell's tasks are walked."""
    if cell.counts is None or cell.job_counts is None:
        return walk_counts(cell, job_key)
    kept = cell.counts if job_key is None else cell.job_counts.get(job_key)
    return dict(kept) if kept is not None else zero_counts()  # a job the cache has no task of


def zero_counts() -> dict[str, int]:
    return {**{s.value: 0 for s in TaskState}, "running_confirmed": 0}


def walk_counts(cell: Cell, job_key: str | None) -> dict[str, int]:
    counts = zero_counts()
    tasks = cell.state.tasks.values() if job_key is None else tasks_by_job(cell).get(job_key, ())
    for t in tasks:
        counts[t.state.value] += 1
        if t.state is TaskState.RUNNING and confirmed(cell.task_info(t.id)):
            counts["running_confirmed"] += 1
    return counts


def is_serving(cell: Cell, task: Task) -> bool:
    """RUNNING, started by its borglet, with a port, and healthy (or without a health check)."""
    info = cell.task_info(task.id)
    if task.state is not TaskState.RUNNING or not info.port or not info.seen:
        return False
    job = cell.jobs.get(task.id.job)
    has_check = job is not None and job.spec.health_check is not None
    return info.healthy is True if has_check else info.borglet_state in ("RUNNING", "STARTING")


def is_reachable(cell: Cell, task: Task) -> bool:
    """Serving and not draining: what BNS and the endpoints list hand to clients."""
    return is_serving(cell, task) and not cell.task_info(task.id).draining_since


def task_view(cell: Cell, task: Task, cell_name: str, info: TaskInfo | None = None) -> dict[str, Any]:
    info = info if info is not None else cell.task_info(task.id)
    address = cell.machines[task.machine].address if task.machine in cell.machines else ""
    return {
        "job": task.id.job,
        "index": task.id.index,
        "incarnation": task.id.incarnation,
        "state": task.state.value,
        "machine": task.machine,
        "host": host_of(address) if task.machine else None,
        "port": info.port or None,
        "bns": bns_name(task.id, cell_name),
        "cause": task.cause.value if task.cause else None,
        "healthy": info.healthy,
        "restarts": info.restarts,
        "borglet_state": info.borglet_state or None,
        # Placed (RUNNING) is the cell's word; this is the borglet's: its process was started.
        "confirmed": task.state is TaskState.RUNNING and confirmed(info),
        "started_at": info.started_at or None,
        "usage": dict(info.usage),
        # What the task holds: its request since its last placement (an update rolls it), and
        # the part of it the master reserves (lower once reclamation estimates it needs less).
        "request": task.request.as_dict() if task.state is not TaskState.DEAD else None,
        "reservation": task.reserved.as_dict() if task.state is TaskState.RUNNING else None,
        # The job version's template it runs (spec.model.task_template), and why a PENDING task
        # is down on purpose ("roll" or "drain"; master/rollout.py, master/drain.py).
        "template": task.template or None,
        "down_for": task.down_for or None,
        "draining": bool(info.draining_since),
        "history": [{"state": s, "at": at, "reason": r} for s, at, r in info.history],
        "pid": info.pid or None,
        "last_machine": info.machine or None,
        "pending_reason": info.pending or None if task.state is TaskState.PENDING else None,
        "events": events.as_json(info.events),
        # A crash loop: the task waits out a restart back-off (its borglet's or the master's),
        # with how its last process ended, its failures in a row and when it is tried again.
        "crash_loop": (loop := events.crash_loop(task.state.value, info, time.time(), will_restart(cell.state, task))),
        "status": "BACKOFF" if loop and loop["by"] != "retry" else task.state.value,
        "failures": info.failures,
        "last_exit": info.last_exit or None,
    }


def pending_reasons(cell: Cell, job_key: str) -> list[dict[str, Any]]:
    """Why a job's PENDING tasks wait: each distinct reason with its tasks' indices. Tasks the
    scheduler has not yet looked at, or whose reason is not written yet, count as "no reason yet".
    A job the watch cache counts no PENDING task of has none to walk: a read of a large job that
    is all placed costs nothing per task."""
    if cell.job_counts is not None and not (cell.job_counts.get(job_key) or {}).get(TaskState.PENDING.value):
        return []
    by_reason: dict[str, list[int]] = {}
    for index, task in sorted(live_indices(cell, job_key).items()):
        if task.state is TaskState.PENDING:
            reason = cell.task_info(task.id).pending or ""
            by_reason.setdefault(reason, []).append(index)
    return [
        {"reason": reason or None, "tasks": len(indices), "indices": indices[:20]}
        for reason, indices in sorted(by_reason.items(), key=lambda kv: (not kv[0], -len(kv[1])))
    ]


def crash_loops(cell: Cell, job_key: str, now: float | None = None) -> list[dict[str, Any]]:
    """The job's task indices in a crash loop (events.crash_loop), by index: what `job show`
    and Sigma's job page list under the task counts."""
    at = time.time() if now is None else now
    out = []
    for index, task in sorted(live_indices(cell, job_key).items()):
        loop = events.crash_loop(task.state.value, cell.task_info(task.id), at, will_restart(cell.state, task))
        if loop is not None:
            out.append({"index": index, "incarnation": task.id.incarnation, **loop})
    return out


def quota_views(cell: Cell) -> list[dict[str, Any]]:
    """Every quota entry: user ("*" is everyone without one of their own), band and limit."""
    return [
        {"user": k.user, "band": k.band.value, "limit": amount.as_dict()}
        for k, amount in sorted(cell.state.quotas.items(), key=lambda kv: (kv[0].user, kv[0].band.value))
    ]


def requested_on(cell: Cell, name: str) -> Resources:
    """The requests of tasks running on a machine outside allocs, plus its allocs."""
    parts = [
        t.request
        for t in cell.state.running_on(name)
        if not (t.id.job in cell.state.jobs and cell.state.jobs[t.id.job].alloc is not None)
    ]
    return total(parts + [a.resources for a in cell.state.allocs_on(name)])


def machine_view(cell: Cell, name: str) -> dict[str, Any]:
    m = cell.state.machines[name]
    info = cell.machines.get(name)
    running = cell.state.running_on(name)
    return {
        "name": m.name,
        "address": info.address if info else "",
        "capacity": m.capacity.as_dict(),
        "attrs": dict(m.attrs),
        "failure_domain": m.failure_domain,
        "state": "up" if m.up else "down",
        # False while drained (master/drain.py); `drain` then says how far its tasks have moved off.
        "schedulable": m.schedulable,
        "drain": None if m.schedulable else {
            "state": "draining" if running else "drained", "tasks_left": len(running),
            "since": info.drain_since if info else 0.0, "deadline": (info.drain_deadline or None) if info else None,
        },
        "reserved": cell.state.machine_reserved(name).as_dict(),
        # What running tasks asked for; `reserved` is lower by what reclamation freed for batch work.
        "requested": requested_on(cell, name).as_dict(),
        "usage": dict(info.usage) if info else {},
        "isolation": info.isolation if info else "",
        # Why it is down, or why its borglet refuses the cell; "" when neither.
        "reason": info.reason if info else "",
        "tasks": sorted(str(t.id) for t in running),
    }


def job_tasks(cell: Cell, job_key: str) -> list[Task]:
    return sorted(tasks_by_job(cell).get(job_key, ()), key=lambda t: (t.id.index, t.id.incarnation))


def live_indices(cell: Cell, job_key: str) -> dict[int, Task]:
    """index -> newest incarnation, as CellState.live_indices, from the job's own tasks."""
    out: dict[int, Task] = {}
    for t in tasks_by_job(cell).get(job_key, ()):
        cur = out.get(t.id.index)
        if cur is None or t.id.incarnation > cur.id.incarnation:
            out[t.id.index] = t
    return out


def latest_task(cell: Cell, job_key: str, index: int) -> Task | None:
    return live_indices(cell, job_key).get(index)


def parse_bns(name: str, cell_name: str) -> tuple[str, int] | None:
    """'<index>.<job>.<user>.<cell>.minborg' -> (job key, index), or None if it is not one."""
    parts = name.split(".")
    if len(parts) != 5 or parts[4] != "minborg" or parts[3] != cell_name or not parts[0].isdigit():
        return None
    return f"{parts[2]}/{parts[1]}", int(parts[0])


def resolve(cell: Cell, name: str, cell_name: str) -> dict[str, Any] | None:
    parsed = parse_bns(name, cell_name)
    if parsed is None:
        return None
    task = latest_task(cell, *parsed)
    if task is None or not is_reachable(cell, task):
        return None
    info = cell.task_info(task.id)
    return {
        "name": name,
        "host": host_of(cell.machines[task.machine].address) if task.machine else "",
        "port": info.port,
        "task": str(task.id),
        "healthy": info.healthy,
    }


def endpoints(cell: Cell, job_key: str, cell_name: str) -> list[dict[str, Any]]:
    out = []
    for index, task in sorted(live_indices(cell, job_key).items()):
        if is_reachable(cell, task):
            out.append(
                {
                    "index": index,
                    "bns": bns_name(task.id, cell_name),
                    "host": host_of(cell.machines[task.machine].address) if task.machine else "",
                    "port": cell.task_info(task.id).port,
                }
            )
    return out


