"""Hollow machines, for scale tests only: the real borglet's fencing and reconciliation over simulated tasks.

A hollow machine answers the master's sync exactly as a borglet does (the same refusals, the
same report) but runs no process: a task starts `start_delay_s` after it was queued, then
reports RUNNING with pid 0 and a usage derived from its request; a `sleep S` task finishes S
seconds later, any other runs until it leaves the desired set, and a kill ends it at once.
It runs the real borglet's core (core.TaskTable): which syncs apply, what starts, what is
killed and forgotten, which phase a started task enters and what becomes of one that exits are
decided as on a real borglet, so a task id is never started twice, and the report is the same.

Task states are functions of the time: they are brought up to date when the machine is
synced or read, never by a thread of their own, so ten thousand idle machines cost nothing
between polls. A hollow machine keeps nothing on disk.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from reference.borglet import decisions
from reference.borglet.core import TaskTable
from reference.borglet.protocol import Request, SyncRequest
from reference.borglet.task import Task

DEFAULT_START_DELAY_S = 0.1
CPU_USED_SHARE = 0.5  # a simulated task uses half the CPU it requested, and all its RAM
FIRST_PORT = 20_000  # simulated tasks get ports from here, per machine: nothing listens on them


def sleep_seconds(command: Sequence[str]) -> float | None:
    """How long a task of `command` runs when simulated: S for `["/bin/sleep", "S"]`,
    `["sleep", "S"]` or `["sleep S"]`; None (until it is removed) for any other command."""
    words = list(command)
    if len(words) == 1:
        words = words[0].split()
    if len(words) != 2 or os.path.basename(words[0]) != "sleep":
        return None
    try:
        seconds = float(words[1])
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def simulated_usage(request: Request) -> tuple[int, int]:
    """(milli-CPU, RAM bytes) a running simulated task reports: half its CPU request
    (`int(1000 * 0.5) = 500` for a 1000m request) and its whole RAM request."""
    return int(request.cpu * CPU_USED_SHARE), request.ram


@dataclass(frozen=True)
class HollowConfig:
    """What one hollow machine declares about itself."""

    name: str
    capacity: dict[str, int]
    attrs: dict[str, str] = field(default_factory=dict)
    failure_domain: str = ""
    start_delay_s: float = DEFAULT_START_DELAY_S


class HollowMachine:
    """One simulated machine: the borglet's core (core.TaskTable) with time standing in for
    processes. Not thread-safe: the hollow server calls it from one thread.

    `clock` is wall time, the scale of a task's `started_at` on a real borglet."""

    def __init__(self, config: HollowConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.table = TaskTable()
        # Times each task id was started for the first time: 1 each, always (decisions.reconcile).
        self.starts: Counter[str] = Counter()
        self._queued_at: dict[str, float] = {}
        self._next_port = FIRST_PORT
        self._due = math.inf  # the earliest moment a task changes state by itself
        self._machine = {
            "machine": config.name,
            "capacity": dict(config.capacity),
            "attrs": dict(config.attrs),
            "failure_domain": config.failure_domain,
            "isolation": "hollow",
        }

    @property
    def tasks(self) -> dict[str, Task]:
        return self.table.tasks

    @property
    def fence(self) -> decisions.Fence:
        return self.table.fence

    @property
    def refused(self) -> Counter[str]:
        return self.table.refused

    # --- the protocol ------------------------------------------------------------------------

    def sync(self, request: SyncRequest) -> dict[str, Any]:
        """Apply a sync as a borglet does and return the report; SyncRefused changes nothing."""
        now = self.clock()
        # A task that ended meanwhile is forgotten, not killed. A refused sync changes no
        # task: their phases are functions of the time, which this only brings up to date.
        self.advance(now)
        self.table.apply_sync(request, now)
        self._carry_out(now)
        return self.table.report(self._machine, now)

    def report(self) -> dict[str, Any]:
        """What GET /v1/state answers: the same shape as a borglet's report."""
        now = self.clock()
        self.advance(now)
        return self.table.report(self._machine, now)

    def _carry_out(self, now: float) -> None:
        """What the core asks: a killed task's process ends at once (there is none to wait
        for, so no index ever has one still stopping here); a queued one gets its port and
        starts `start_delay_s` later."""
        ready = self.table.take()
        for task, _pid, _signal in ready.signals:
            self.table.exited(task, None, False, now)
        for task in ready.release:
            self._queued_at.pop(task.spec.task_id, None)  # killed before it started
        for tid in ready.start:
            task = self.table.tasks[tid]
            task.port = task.spec.port or self._next_port
            if not task.spec.port:
                self._next_port += 1
            self._queued_at[tid] = now
            self._due = min(self._due, now + self.config.start_delay_s)
        self.table.take()  # the kills' releases: a simulated task holds nothing

    # --- simulated time -----------------------------------------------------------------------

    def advance(self, now: float) -> None:
        """Start the tasks whose start delay is over, end the `sleep` tasks whose time is up,
        and restart by policy those whose backoff is over (decisions.after_exit)."""
        if now < self._due:
            return
        due = math.inf
        for tid, task in self.table.tasks.items():
            at = self._step(tid, task, now)
            due = min(due, at)
        queue = self.table.queue  # the core's; when each task starts is the hollow machine's
        while queue and queue[0] not in self._queued_at:
            queue.popleft()  # started, or killed before it started
        self._due = due
        self.table.take()

    def _step(self, tid: str, task: Task, now: float) -> float:
        """Bring one task up to `now`; returns when it next changes by itself (inf: never)."""
        while not task.ended:
            if task.phase == "QUEUED":
                at = self._queued_at[tid] + self.config.start_delay_s
                if now < at:
                    return at
                del self._queued_at[tid]
                self.starts[tid] += 1
                self._run(task, at)
            elif task.restart_at is not None:  # waiting out a restart backoff
                if now < task.restart_at:
                    return task.restart_at
                at = task.restart_at
                self.table.restart_due(task, at)
                self._run(task, at)
            else:
                run_s = sleep_seconds(task.spec.command)
                if run_s is None:
                    return math.inf
                end = task.started_at + run_s
                if now < end:
                    return end
                self.table.exited(task, 0, False, end)  # restarted by policy, or FINISHED
        return math.inf

    def _run(self, task: Task, at: float) -> None:
        """A simulated process starts at `at` (pid 0) and, health-checked, is healthy at once."""
        self.table.launched(task, 0, None, at)
        if task.spec.health_check is not None:
            self.table.probed(task, 0, True, at)
        task.cpu_milli, task.ram_bytes = simulated_usage(task.spec.request)


def machine_names(count: int, prefix: str = "hollow") -> list[str]:
    """`count` names that sort in order and never collide with a real borglet's `machineN`:
    hollow0000, hollow0001, ... (more digits past 10,000)."""
    width = max(4, len(str(count - 1)))
    return [f"{prefix}{i:0{width}d}" for i in range(count)]
