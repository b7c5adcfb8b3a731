"""The order of the pending queue: high to low priority, round-robin across users within a priority."""

from __future__ import annotations

import heapq
from collections.abc import Collection, Sequence
from itertools import chain, islice, zip_longest

from spec.model import CellState, TaskId

from .config import QueueOrder
from .snapshot import PendingTask


def ordered(pending: Sequence[PendingTask], order: QueueOrder) -> list[PendingTask]:
    """Within a priority each user gets one task per round (users in name order, each user's
    tasks in snapshot order), so one user's huge job cannot starve another user's small one."""
    if order is QueueOrder.GIVEN:
        return list(pending)
    by_priority: dict[int, dict[str, list[PendingTask]]] = {}
    for t in pending:
        by_priority.setdefault(t.priority, {}).setdefault(t.user, []).append(t)
    out: list[PendingTask] = []
    for prio in sorted(by_priority, reverse=True):
        users = by_priority[prio]
        rounds = zip_longest(*(users[u] for u in sorted(users)))
        out.extend(t for t in chain.from_iterable(rounds) if t is not None)
    return out


def first_in_queue(state: CellState, ids: Collection[TaskId], n: int) -> set[TaskId]:
    """The `n` pending tasks of `ids` that come first in the queue's order (`ordered` with
    PRIORITY_ROUND_ROBIN over a pass's snapshot, whose pending tasks are in task-id order): a
    pass that plans at most `n` plans these, and the rest wait for the next. All of `ids` when
    they are no more than `n`; ids the state has no job for come last."""
    if len(ids) <= n:
        return set(ids)
    groups: dict[int, dict[str, list[TaskId]]] = {}
    orphans: list[TaskId] = []
    for tid in ids:
        job = state.jobs.get(tid.job)
        if job is None:
            orphans.append(tid)
            continue
        groups.setdefault(job.priority, {}).setdefault(job.user, []).append(tid)
    out: list[TaskId] = []
    for prio in sorted(groups, reverse=True):
        users = groups[prio]
        want = n - len(out)
        # Each user's first `want` in id order is all a round-robin of `want` can take from it.
        firsts = [heapq.nsmallest(want, users[u]) for u in sorted(users)]
        out.extend(islice((t for t in chain.from_iterable(zip_longest(*firsts)) if t is not None), want))
        if len(out) >= n:
            return set(out)
    out.extend(heapq.nsmallest(n - len(out), orphans))
    return set(out)
