"""Which pending tasks a scheduling pass plans: one choice for the leader's own pass and the
scheduler process (reference/schedulerd/), with the tasks set aside as unschedulable until
capacity may have changed."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from typing import Protocol

from reference.scheduler.queue import first_in_queue
from spec.model import CellState, TaskId, TaskState

# The most pending tasks one pass of the scheduler process plans: a bound, not a pace. The
# scheduler spreads a pass over the cell, so each pass is a sync and a changed report for most
# machines: in a 10,000-machine fill of 100,000 tasks, passes of at most 5,000 and 20,000 cost
# the leader 1.13 and 1.03 ms of CPU per task, against 0.58-0.76 where one pass placed 90,000
# (docs/decisions.md). Its plan is committed in parts while the process waits for the answer
# (`cached.PLAN_ANSWER_S`).
PASS_MAX = 100_000


def plannable(state: CellState, work: Iterable[TaskId] | None) -> set[TaskId]:
    """The PENDING tasks among `work` (every task of the cell when None) that a pass can plan:
    those whose job record is in the cell. A task whose job record has not arrived yet (a
    large job is written in several txns, tasks first) is left for the pass that sees its job,
    rather than found unschedulable and set aside."""
    tasks, jobs = state.tasks, state.jobs
    return {
        tid
        for tid in (tasks if work is None else work)
        if (t := tasks.get(tid)) is not None and t.state is TaskState.PENDING and tid.job in jobs
    }


class PassView(Protocol):
    """What `covers` reads of a view of the cell (the watch cache's `Cell`)."""

    @property
    def work(self) -> Collection[TaskId] | None: ...

    @property
    def running(self) -> Collection[TaskId] | None: ...

    @property
    def capacity_epoch(self) -> int: ...


class SetAside:
    """Pending tasks a pass found no place for, skipped by later passes while nothing could
    have made room: the cell's capacity epoch has not moved (no machine changed, no task left
    a machine or changed what it holds, no job changed its request) and at most `retry_s` has
    passed. Kubernetes keeps its unschedulable pods aside the same way, until a cluster event
    or a periodic flush. Placement here is deterministic given the cell (relaxed
    randomization samples machines but scans on until it has found enough feasible ones), so
    a task that fitted nowhere still fits nowhere."""

    def __init__(
        self, retry_s: float = 30.0, clock: Callable[[], float] = time.monotonic, pass_max: int = PASS_MAX
    ) -> None:
        self.retry_s, self.clock = retry_s, clock
        self.tasks: set[TaskId] = set()
        self.epoch = -1
        self.since = 0.0
        self.pass_max = pass_max
        self.left = 0  # pending tasks the last `next` left for the next pass (past `pass_max`)

    def _valid(self, epoch: int) -> bool:
        return epoch >= 0 and epoch == self.epoch and self.clock() - self.since < self.retry_s

    def covers(self, cell: PassView) -> bool:
        """Whether a pass over `cell` has nothing to do but tasks already found unschedulable."""
        if cell.work is None or cell.running is None or not self._valid(cell.capacity_epoch):
            return False
        return not (cell.work - self.tasks)

    def known(self, epoch: int) -> set[TaskId]:
        """The tasks known to be unschedulable at `epoch` (none once the set is stale)."""
        return self.tasks if self._valid(epoch) else set()

    def next(self, state: CellState, work: Iterable[TaskId] | None, epoch: int) -> set[TaskId]:
        """The tasks a pass over `state` at capacity epoch `epoch` plans: the `plannable` ones
        among `work`, less those known to be unschedulable (all of them once the set is stale).
        The leader's own pass and the scheduler process both choose with this."""
        pending = plannable(state, work)
        chosen = self.to_plan(pending, epoch) if pending else set()
        self.left = max(0, len(chosen) - self.pass_max)
        # A pass plans at most `pass_max`: the first in the queue's order now, the rest in the
        # passes right after it (the caller wakes the next when `left`).
        return first_in_queue(state, chosen, self.pass_max) if self.left else chosen

    def to_plan(self, pending: set[TaskId], epoch: int) -> set[TaskId]:
        """Which of the pending tasks to plan: all of them when the set is no longer valid."""
        if not self._valid(epoch):
            self.tasks = set()
            self.since = self.clock()
            self.epoch = epoch
            return pending
        return pending - self.tasks

    def found(self, unplaced: Iterable[TaskId], epoch: int) -> None:
        """After a pass at `epoch`: `unplaced` of its planned tasks found no place."""
        if epoch < 0:
            self.tasks, self.epoch = set(), -1
            return
        self.tasks = self.tasks.union(unplaced)  # killed ones linger harmlessly until the next reset
