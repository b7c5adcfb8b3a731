"""What a pass on a copy of the cell says (a dry run, a what-if, a Fauxmaster run): where tasks went, what they preempted (by job and priority), and why the rest stay pending."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from typing import Any

from reference.master import events
from reference.scheduler import Plan
from spec.model import CellState, TaskId


def placed(plans: Iterable[Plan], only: Collection[TaskId] | None = None) -> list[dict[str, Any]]:
    """Each placement of the plans (of the tasks in `only`, if given): task, machine, victims."""
    return [
        {"task": str(p.task), "machine": p.machine, "preempts": [str(v) for v in p.victims]}
        for plan in plans
        for p in plan.placements
        if only is None or p.task in only
    ]


def pending(state: CellState, plan: Plan | None, only: Collection[TaskId] | None = None) -> list[dict[str, Any]]:
    """Each task still PENDING (of those in `only`, if given), with the scheduler's reasons
    from `plan`, the pass that last looked at it."""
    reasons = {u.task: events.pending_summary(u.reasons, len(state.machines)) for u in (plan.unschedulable if plan else ())}
    out = []
    for tid in sorted(state.tasks if only is None else only):
        t = state.tasks.get(tid)
        if t is not None and t.state.value == "PENDING":
            out.append({"task": str(tid), "reason": reasons.get(tid, "not planned yet")})
    return out


def preempted(state: CellState, plans: Iterable[Plan]) -> list[dict[str, Any]]:
    """The tasks the plans preempt, counted by job and priority, most first."""
    count: Counter[tuple[str, int]] = Counter()
    for plan in plans:
        for p in plan.placements:
            for v in p.victims:
                t = state.tasks.get(v)
                count[(v.job, t.priority if t is not None else -1)] += 1
    return [{"job": j, "priority": pr, "tasks": n} for (j, pr), n in sorted(count.items(), key=lambda i: (-i[1], i[0]))]
