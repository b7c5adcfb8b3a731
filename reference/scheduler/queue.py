"""The order of the pending queue: high to low priority, round-robin across users within a priority."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, zip_longest

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
