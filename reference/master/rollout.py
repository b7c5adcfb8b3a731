"""Rolling updates as the leader drives them: which stale tasks of a job to replace next, and where the job's rollout stands (pure; leader.py and the API call it).

A task is stale when it runs an older request or template than its job's (`spec.model.is_stale`).
The spec's `roll` guard keeps a job's tasks down (not RUNNING) below its `max_unavailable`;
the leader asks more: a task counts as up only once its borglet has confirmed its process
started, its borglet reports it has run `MIN_READY_S` and still runs (the report's "ready",
judged on the borglet's own clock, where the process is), and, when the job has a health
check, it answers healthy. So each replacement is confirmed before the next is made. The
leader's own clock against a reported start is only the estimate shown where no borglet's word
is at hand (a follower's view of a job): judged so, a replacement whose exit had not been
reported yet, or whose borglet's clock ran behind, counted as up. A replacement of the current version
that fails by its own exits (a crash loop, a spawn failure) stops the rollout: nothing more is
replaced until it runs, and the job's `rollout` says which task and why. A replacement lost with
its machine has not failed: once restarted and running, it counts as up. A stale task that is down anyway is
replaced first: that adds no outage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reference.borglet.protocol import READY_AFTER_S
from reference.master.backoff import RESET_AFTER_S
from reference.master.cell import Cell, Draft, TaskInfo, borglet_task_id
from reference.master.reports import confirmed
from spec.actions import restart_allowed
from spec.model import CellState, DeathCause, Task, TaskId, TaskState, is_stale

MIN_READY_S = READY_AFTER_S  # how long a replacement runs before it counts as up (Kubernetes' minReadySeconds)
# Whether a machine's borglet last reported one placement of a task (its borglet task id)
# running MIN_READY_S: the leader's intake, shardreports.ShardReports.ready(machine, id); None
# where the leader has no report of the machine yet.
Ready = Callable[[str | None, str], bool | None]


def crashed(info: TaskInfo) -> bool:
    """Whether the task's index failed by its own doing and was restarted: a process of it
    exited (an exit code, a signal, a spawn failure) and the borglet restarted it in place or
    the master made a new incarnation. A task lost with its machine, or preempted, has no exit
    of its own: that is no failure of its version, and its replacement counts as up once it
    runs, like any other."""
    return bool(info.last_exit) and (info.failures > 0 or info.restarts > 0)


def is_up(task: Task, info: TaskInfo, health_checked: bool, now: float, ready: Ready | None = None) -> bool:
    """Whether a task serves: RUNNING, run `MIN_READY_S` by its borglet's word (`ready`; without
    a word of its machine yet, by `now` against its reported start), healthy if checked."""
    if task.state is not TaskState.RUNNING or not confirmed(info):
        return False
    if info.borglet_state != "RUNNING" or not info.started_at:
        # STARTING counts as started for users (a restart in place), not as serving: a task
        # waiting out its borglet's back-off between two exits is down.
        return False
    if crashed(info) and now - info.started_at < RESET_AFTER_S:
        # Restarting after its own exits (a crash loop): caught between two exits it has a
        # process, but it does not serve until a run long enough resets its failures.
        return False
    word = ready(task.machine, borglet_task_id(task.id, info)) if ready is not None else None
    if not (word if word is not None else now - info.started_at >= MIN_READY_S):
        return False
    return info.healthy is True if health_checked else True


@dataclass(frozen=True)
class Rollout:
    """Where one job's rollout stands, and which tasks to replace now."""

    job: str
    version: int
    max_unavailable: int
    stale: tuple[int, ...]  # indices still running an older version
    down: tuple[int, ...]  # indices of the job not up (any cause)
    failing: tuple[tuple[int, str], ...]  # current-version indices that failed: (index, how)
    replace: tuple[TaskId, ...]  # what to roll now

    @property
    def state(self) -> str:
        # A version whose tasks fail has stopped, whether or not stale tasks remain: once every
        # task is replaced (a stale task down anyway is replaced at once), no stale task is left,
        # and the rollout must not read complete while its new version crash-loops.
        if self.failing:
            return "stopped"
        return "complete" if not self.stale else "rolling"

    @property
    def reason(self) -> str:
        if self.state == "stopped":
            index, how = self.failing[0]
            return f"task {index} of version {self.version} fails ({how}); fix the job and run it again, or revert"
        if self.state == "rolling":
            return f"{len(self.stale)} task(s) to replace, at most {self.max_unavailable} down at once; {len(self.down)} down now"
        return ""

    def view(self) -> dict[str, Any]:
        return {
            "state": self.state, "version": self.version, "max_unavailable": self.max_unavailable,
            "stale": list(self.stale), "down": list(self.down), "reason": self.reason,
        }  # fmt: skip


def decide(
    state: CellState, key: str, info_of: Callable[[TaskId], TaskInfo], health_checked: bool, now: float,
    ready: Ready | None = None,
) -> Rollout | None:
    """The rollout of job `key` in `state` (None for no such job): what is stale, what is
    down, what failed, and which stale tasks to replace now within the budget. `ready`: the
    borglets' word on which tasks have run MIN_READY_S (the leader's); without it, an estimate."""
    job = state.jobs.get(key)
    if job is None:
        return None
    wanted = [t for i, t in sorted(state.live_indices(key).items()) if i < job.task_count]
    stale, down, failing = [], [], []
    for t in wanted:
        info = info_of(t.id)
        up = is_up(t, info, health_checked, now, ready)
        if t.state is TaskState.DEAD and not restart_allowed(job.restart_policy, t.cause):
            continue  # finished or killed: done, not down
        if not up:
            down.append(t)
        if t.state is TaskState.RUNNING and is_stale(t, job):
            stale.append(t)
        elif not up and (crashed(info) or (t.state is TaskState.DEAD and t.cause is DeathCause.FAILED)):
            failing.append((t.id.index, info.last_exit or (t.cause.value if t.cause else "not started")))
    chosen: list[TaskId] = []
    if not failing:
        room = job.max_unavailable - len(down)
        down_ids = {t.id for t in down}
        chosen = [t.id for t in stale if t.id in down_ids]  # down anyway: replacing adds no outage
        chosen += [t.id for t in stale if t.id not in down_ids][: max(room, 0)]
    return Rollout(
        job=key, version=job.version, max_unavailable=job.max_unavailable,
        stale=tuple(t.id.index for t in stale), down=tuple(t.id.index for t in down),
        failing=tuple(failing), replace=tuple(chosen),
    )  # fmt: skip


def new_versions(state: CellState, seen: dict[str, str]) -> list[str]:
    """The jobs whose template changed since `seen` (job -> template, brought up to date here):
    a job first seen counts as new only when `seen` knew it, so a new term forgets nothing."""
    changed = [key for key, job in state.jobs.items() if key in seen and seen[key] != job.template]
    seen.clear()
    seen.update({key: job.template for key, job in state.jobs.items()})
    return changed


def health_checked(cell: Cell | Draft, key: str) -> bool:
    info = cell.jobs.get(key)
    return info is not None and info.spec.health_check is not None


def status(cell: Cell, key: str, now: float, ready: Ready | None = None) -> dict[str, Any] | None:
    """The job's rollout as `GET /v1/jobs/{user}/{name}` shows it: on the leader by the word it
    rolls on (`ready`, Replica.ready_word), elsewhere by the estimate."""
    found = decide(cell.state, key, cell.task_info, health_checked(cell, key), now, ready)
    return None if found is None else found.view()


def roll(d: Draft, candidates: set[TaskId], take: Callable[[int], int], ready: Ready | None = None) -> int:
    """Replace, job by job, the stale tasks among `candidates` that each job's rollout allows
    now, as many as `take(wanted)` allows in all (the leader's rate); returns how many. The
    leader passes `ready`, its borglets' word on which replacements have run MIN_READY_S."""
    state = d.state
    keys = sorted({
        tid.job for tid in candidates
        if (t := state.tasks.get(tid)) is not None and t.state is TaskState.RUNNING
        and (job := state.jobs.get(tid.job)) is not None and is_stale(t, job)
    })  # fmt: skip
    wanted: list[TaskId] = []
    for key in keys:
        found = decide(state, key, d.task_info, health_checked(d, key), d.now, ready)
        if found is not None:
            wanted += found.replace
    done = 0
    for tid in wanted[: take(len(wanted))] if wanted else ():
        done += d.step("roll", tid, reason="rolling update")
    return done
