"""The leader's record of crashing task::machine pairings: each failed incarnation, seen once, goes into the scheduler's crash memory (scheduler/pairing.py)."""

from __future__ import annotations

from collections.abc import Iterable

from reference.master.cell import Draft
from reference.scheduler.pairing import CrashMemory
from spec.model import DeathCause, TaskId, TaskState


def record_failures(d: Draft, candidates: Iterable[TaskId], memory: CrashMemory) -> int:
    """Record in `memory` the failed incarnations among `candidates` that no pass has seen yet
    (their back-off is not written: `restart_dead` writes it right after, once per death),
    each on the machine it last ran on; returns how many."""
    found = 0
    for tid in candidates:
        t = d.state.tasks.get(tid)
        if t is None or t.state is not TaskState.DEAD or t.cause is not DeathCause.FAILED:
            continue
        info = d.task_info(tid)
        if info.retry_at <= 0 and info.machine:
            memory.record(tid.job, tid.index, info.machine)
            found += 1
    return found
