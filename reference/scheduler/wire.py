"""A plan as JSON: what a scheduler process proposes to the leader, and back; and the leader's memory of crashing pairings, which its answer carries (pure)."""

from __future__ import annotations

from typing import Any

from reference.scheduler.pairing import IndexKey
from reference.scheduler.plan import Placement, Plan, Reason, Unschedulable
from spec.model import TaskId

PLANS_PATH = "/internal/v1/plans"  # a scheduler process's plan, to the leader (signed, like a sync)


def task_ref(tid: TaskId) -> list[Any]:
    return [tid.job, tid.index, tid.incarnation]


def task_of(ref: Any) -> TaskId:
    """A task id from [job, index, incarnation]; ValueError for anything else."""
    if not isinstance(ref, list | tuple) or len(ref) != 3:
        raise ValueError(f"a task is [job, index, incarnation], not {ref!r}")
    job, index, incarnation = ref
    if not isinstance(job, str) or not isinstance(index, int) or not isinstance(incarnation, int):
        raise ValueError(f"a task is [job, index, incarnation], not {ref!r}")
    return TaskId(job, index, incarnation)


def plan_to_json(plan: Plan) -> dict[str, Any]:
    return {
        "placements": [
            {"task": task_ref(p.task), "machine": p.machine, "victims": [task_ref(v) for v in p.victims],
             "score": p.score}
            for p in plan.placements
        ],
        "unschedulable": [
            {"task": task_ref(u.task), "reasons": [[r.subject, r.detail, r.machines] for r in u.reasons]}
            for u in plan.unschedulable
        ],
    }  # fmt: skip


def plan_from_json(doc: Any) -> Plan:
    """The plan `plan_to_json` wrote; ValueError naming what is malformed."""
    if not isinstance(doc, dict):
        raise ValueError("a plan is an object with placements and unschedulable")
    placements = []
    for p in doc.get("placements") or []:
        if not isinstance(p, dict) or not isinstance(p.get("machine"), str):
            raise ValueError(f"a placement is {{task, machine, victims}}, not {p!r}")
        victims = tuple(task_of(v) for v in p.get("victims") or [])
        placements.append(Placement(task_of(p.get("task")), p["machine"], victims, float(p.get("score") or 0.0)))
    unschedulable = []
    for u in doc.get("unschedulable") or []:
        if not isinstance(u, dict):
            raise ValueError(f"an unschedulable task is {{task, reasons}}, not {u!r}")
        reasons = tuple(Reason(str(s), str(d), int(n)) for s, d, n in u.get("reasons") or [])
        unschedulable.append(Unschedulable(task_of(u.get("task")), reasons))
    return Plan(placements=placements, unschedulable=unschedulable)


def crashes_to_json(crashes: dict[IndexKey, dict[str, int]]) -> list[list[Any]]:
    """`CrashMemory.snapshot` as [job, index, machine, crashes] rows."""
    return [[job, index, machine, n] for (job, index), by in crashes.items() for machine, n in by.items()]


def crashes_from_json(doc: Any) -> dict[IndexKey, dict[str, int]]:
    """The crashes `crashes_to_json` wrote; ValueError naming a malformed row."""
    out: dict[IndexKey, dict[str, int]] = {}
    for row in doc or []:
        if not isinstance(row, list) or len(row) != 4:
            raise ValueError(f"a crash is [job, index, machine, crashes], not {row!r}")
        job, index, machine, n = row
        if not (isinstance(job, str) and isinstance(index, int) and isinstance(machine, str) and isinstance(n, int)):
            raise ValueError(f"a crash is [job, index, machine, crashes], not {row!r}")
        out.setdefault((job, index), {})[machine] = n
    return out
