"""Hollow machines, for scale tests only: the real borglet's fencing and reconciliation over simulated tasks.

A hollow machine answers the master's sync exactly as a borglet does (the same refusals, the
same report) but runs no process: a task starts `start_delay_s` after it was queued, then
reports RUNNING with pid 0 and a usage derived from its request; a `sleep S` task finishes S
seconds later, any other runs until it leaves the desired set, and a kill ends it at once.
Which syncs apply, what starts, what is killed and what is forgotten are `decisions`'s to
say, as on a real borglet, so a task id is never started twice.

Task states are functions of the time: they are brought up to date when the machine is
synced or read, never by a thread of their own, so ten thousand idle machines cost nothing
between polls. A hollow machine keeps nothing on disk.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from reference.borglet import decisions
from reference.borglet.protocol import Request, SyncRequest, TaskSpec
from reference.borglet.supervisor import SyncRefused
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
    """One simulated machine. Not thread-safe: the hollow server calls it from one thread.

    `clock` is wall time, the scale of a task's `started_at` on a real borglet."""

    def __init__(self, config: HollowConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.tasks: dict[str, Task] = {}
        self.tombstones: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.fence = decisions.Fence()
        self.master = ""
        self.desired: dict[str, TaskSpec] | None = None
        self.syncs = 0
        self.refused: Counter[str] = Counter()
        # Times each task id was started for the first time: 1 each, always (decisions.reconcile).
        self.starts: Counter[str] = Counter()
        self._queued_at: dict[str, float] = {}
        self._next_port = FIRST_PORT
        self._due = math.inf  # the earliest moment a task changes state by itself

    # --- the protocol ------------------------------------------------------------------------

    def sync(self, request: SyncRequest) -> dict[str, Any]:
        """Apply a sync as a borglet does and return the report; SyncRefused changes nothing."""
        reason, specs = decisions.accept_sync(self.fence, self.desired, request)
        if reason is not None:
            self.refused[reason] += 1
            raise SyncRefused(reason, self.fence, request)
        self.fence = decisions.Fence(request.epoch, request.seq, request.revision)
        self.master, self.desired = request.master, specs
        self.syncs += 1
        now = self.clock()
        self.advance(now)  # a task that ended meanwhile is forgotten, not killed
        plan = decisions.reconcile(
            specs, {tid: not t.ended for tid, t in self.tasks.items()}, self.tombstones
        )
        for tid in plan.kill:
            self._kill(self.tasks[tid], "not_desired")
        for tid in plan.forget:
            self.tombstones[tid] = self.tasks.pop(tid).tombstone(request.revision)
            self._queued_at.pop(tid, None)
        for tid in plan.restore:
            self.tasks[tid] = Task.from_tombstone(specs[tid], tid, self.tombstones[tid])
        for tid in decisions.expired_tombstones(
            {t: int(stone.get("revision", 0)) for t, stone in self.tombstones.items()},
            request.revision,
        ):
            del self.tombstones[tid]
        for tid in plan.start:
            self._queue(specs[tid], now)
        return self._report()

    def report(self) -> dict[str, Any]:
        """What GET /v1/state answers: the same shape as a borglet's report."""
        self.advance(self.clock())
        return self._report()

    # --- simulated time -----------------------------------------------------------------------

    def advance(self, now: float) -> None:
        """Start the tasks whose start delay is over, end the `sleep` tasks whose time is up,
        and restart by policy those whose backoff is over (decisions.after_exit)."""
        if now < self._due:
            return
        due = math.inf
        for tid, task in self.tasks.items():
            at = self._step(tid, task, now)
            due = min(due, at)
        self._due = due

    def _step(self, tid: str, task: Task, now: float) -> float:
        """Bring one task up to `now`; returns when it next changes by itself (inf: never)."""
        while not task.ended:
            if task.phase == "QUEUED":
                at = self._queued_at[tid] + self.config.start_delay_s
                if now < at:
                    return at
                self.starts[tid] += 1
                self._run(task, at)
            elif task.restart_at is not None:  # waiting out a restart backoff
                if now < task.restart_at:
                    return task.restart_at
                task.restarts += 1
                self._run(task, task.restart_at)
            else:
                run_s = sleep_seconds(task.spec.command)
                if run_s is None:
                    return math.inf
                end = task.started_at + run_s
                if now < end:
                    return end
                self._exit(task, end)
        return math.inf

    def _run(self, task: Task, at: float) -> None:
        task.phase, task.reason, task.exit_code = "RUNNING", None, None
        task.restart_at, task.pid, task.started_at = None, 0, at
        task.healthy = None if task.spec.health_check is None else True
        task.cpu_milli, task.ram_bytes = simulated_usage(task.spec.request)

    def _exit(self, task: Task, at: float) -> None:
        """The simulated process exits 0 at `at`: restarted by policy, or FINISHED."""
        after = decisions.after_exit(
            task.spec.restart_policy, 0, False, None, task.attempt, at - task.started_at, at
        )
        task.pid, task.exit_code, task.cpu_milli, task.ram_bytes = None, 0, 0, 0
        task.healthy = None if task.spec.health_check is None else False
        task.phase, task.reason, task.restart_at, task.attempt = (
            after.phase, after.reason, after.restart_at, after.attempt
        )  # fmt: skip

    def _kill(self, task: Task, reason: str) -> None:
        """A kill ends a simulated task at once: there is no process to wait for, so no
        index ever has one still stopping here (decisions.start_blocked never holds)."""
        task.kill_reason = reason
        task.phase, task.reason = decisions.ended_state(None, False, reason)
        task.pid, task.restart_at, task.cpu_milli, task.ram_bytes = None, None, 0, 0
        task.healthy = None if task.spec.health_check is None else False

    def _queue(self, spec: TaskSpec, now: float) -> None:
        task = Task(spec=spec, key=spec.task_id)
        task.port = spec.port or self._next_port
        if not spec.port:
            self._next_port += 1
        self.tasks[spec.task_id] = task
        self._queued_at[spec.task_id] = now
        self._due = min(self._due, now + self.config.start_delay_s)

    # --- the report -----------------------------------------------------------------------------

    def _report(self) -> dict[str, Any]:
        tasks = [t.report() for t in self.tasks.values()]
        return {
            "machine": self.config.name,
            "capacity": dict(self.config.capacity),
            "attrs": dict(self.config.attrs),
            "failure_domain": self.config.failure_domain,
            "isolation": "hollow",
            "epoch": self.fence.epoch,
            "usage": {
                "cpu_milli": sum(t["usage"]["cpu_milli"] for t in tasks),
                "ram_bytes": sum(t["usage"]["ram_bytes"] for t in tasks),
            },
            "tasks": tasks,
            "fence": {
                "epoch": self.fence.epoch,
                "seq": self.fence.seq,
                "revision": self.fence.revision,
            },
            "queued": sum(1 for t in self.tasks.values() if t.phase == "QUEUED"),
            "waiting": [],  # a kill ends at once: no queued task waits for its index to stop
        }


def machine_names(count: int, prefix: str = "hollow") -> list[str]:
    """`count` names that sort in order and never collide with a real borglet's `machineN`:
    hollow0000, hollow0001, ... (more digits past 10,000)."""
    width = max(4, len(str(count - 1)))
    return [f"{prefix}{i:0{width}d}" for i in range(count)]
