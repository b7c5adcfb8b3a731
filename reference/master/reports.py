"""Pure mapping between the cell and a borglet: the desired set a machine is sent, and its reply turned into spec steps.

A reply's task states map to the spec's actions:

    FINISHED                    -> finish
    FAILED (lost_on_restart)    -> lost       (the borglet lost it while it was down)
    FAILED (anything else)      -> fail       (it gave up restarting it in place)
    KILLED (memory_pressure)    -> evict, reason reclamation
    KILLED (anything else)      -> lost       (killed by the machine, not by the cell)
    absent, though seen before  -> lost       (the borglet no longer knows it)
    STARTING / RUNNING          -> no step; port, health, restarts and usage are recorded

A restart in place by the borglet is not a state change: only `restarts` moves.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from reference.master.cell import Cell, TaskInfo, borglet_task_id
from spec.actions import EvictReason
from spec.model import TaskId, TaskState


@dataclass
class Outcome:
    steps: list[tuple[str, tuple[Any, ...], str]] = field(default_factory=list)
    infos: dict[TaskId, TaskInfo] = field(default_factory=dict)  # facts worth writing now
    usage: dict[TaskId, tuple[tuple[str, int], ...]] = field(default_factory=dict)


def bns_name(tid: TaskId, cell: str) -> str:
    user, name = tid.job.split("/", 1)
    return f"{tid.index}.{name}.{user}.{cell}.minborg"


def desired_set(cell: Cell, machine: str, cell_name: str) -> tuple[list[dict[str, Any]], set[TaskId]]:
    """The tasks a machine's borglet should run: every task RUNNING there in the cell state."""
    out: list[dict[str, Any]] = []
    ids: set[TaskId] = set()
    for task in cell.state.running_on(machine):
        ji = cell.jobs.get(task.id.job)
        if ji is None:
            continue
        spec = ji.spec
        info = cell.task_info(task.id)
        ids.add(task.id)
        out.append(
            {
                "task_id": borglet_task_id(task.id, info),
                "job": task.id.job,
                "index": task.id.index,
                "incarnation": task.id.incarnation,
                "bns": bns_name(task.id, cell_name),
                "command": list(spec.command),
                "env": dict(spec.env),
                "cwd": spec.cwd,
                "port": 0,
                "request": {"cpu": task.request.get("cpu"), "ram": task.request.get("ram")},
                "priority": task.priority,
                "restart_policy": spec.restart_policy.value,
                "health_check": spec.health_check.model_dump() if spec.health_check else None,
            }
        )
    out.sort(key=lambda d: d["task_id"])
    return out, ids


def map_reply(cell: Cell, machine: str, reply: dict[str, Any], sent: set[TaskId]) -> Outcome:
    """Steps and facts from a borglet's reply to a sync that listed the tasks in `sent`."""
    reported = {t.get("task_id"): t for t in reply.get("tasks", []) if isinstance(t, dict)}
    out = Outcome()
    for tid in sorted(sent, key=str):
        task = cell.state.tasks.get(tid)
        if task is None or task.state is not TaskState.RUNNING or task.machine != machine:
            continue  # changed since the sync was sent
        info = cell.task_info(tid)
        r = reported.get(borglet_task_id(tid, info))
        if r is None:
            if info.seen:
                out.steps.append(("lost", (tid,), "unknown to its borglet"))
            continue
        state, reason = str(r.get("state", "")), str(r.get("reason") or "")
        if state == "FINISHED":
            out.steps.append(("finish", (tid,), "exit 0"))
        elif state == "FAILED":
            if reason == "lost_on_restart":
                out.steps.append(("lost", (tid,), reason))
            else:
                out.steps.append(("fail", (tid,), reason or "failed"))
        elif state == "KILLED":
            if reason == "memory_pressure":
                out.steps.append(("evict", (tid, EvictReason.RECLAMATION), reason))
            else:
                out.steps.append(("lost", (tid,), f"killed on the machine: {reason or '?'}"))
        usage = tuple(sorted((k, int(v)) for k, v in (r.get("usage") or {}).items()))
        out.usage[tid] = usage
        new = replace(
            info,
            port=int(r.get("port") or 0),
            healthy=r.get("healthy"),
            restarts=int(r.get("restarts") or 0),
            borglet_state=state,
            started_at=float(r.get("started_at") or 0.0),
            seen=True,
            reason=reason,
        )
        if _worth_writing(info, new):
            out.infos[tid] = replace(new, usage=usage)
    return out


def _worth_writing(old: TaskInfo, new: TaskInfo) -> bool:
    """Facts clients act on (BNS, health, restarts) are written at once; usage can wait."""
    return (old.port, old.healthy, old.restarts, old.borglet_state, old.seen, old.started_at) != (
        new.port,
        new.healthy,
        new.restarts,
        new.borglet_state,
        new.seen,
        new.started_at,
    )
