"""Pure borglet decisions: which syncs to apply, reconcile desired vs actual, tombstones, restarts
and backoff, re-adoption after a restart, memory-pressure victims."""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

if TYPE_CHECKING:
    from reference.borglet.protocol import Phase, SyncRequest

T = TypeVar("T")

# Why a task was killed when its borglet stood down (channel.StandDown): the cell asked, while
# the borglet refused every one of its requests.
STOOD_DOWN = "stood_down: the borglet refused every request of the cell, which asked it to stop its tasks"

BACKOFF_INITIAL_S = 0.1
BACKOFF_CAP_S = 10.0
# A run at least this long counts as healthy: the next failure starts the backoff from scratch.
BACKOFF_RESET_AFTER_S = 10.0


@dataclass(frozen=True)
class Fence:
    """The newest sync a borglet applied: its leader's epoch, its place in that leader's order,
    and the etcd revision its desired set was computed at. Persisted with the task table."""

    epoch: int = 0
    seq: int = 0
    revision: int = 0


def refusal(fence: Fence, epoch: int, seq: int, revision: int) -> str | None:
    """None when a sync may be applied, else why it is refused.

    A sync from an older leader is fenced off (`stale_epoch`); within one epoch only a newer
    sync applies (`stale_seq`: a sync delayed, replayed or given up on by its master must not
    undo a later one); and a desired set computed at an older revision than one already applied
    (`stale_revision`: a new leader whose watch still lags) must not bring back a task the cell
    had already taken away. Revisions are etcd's, so they order the syncs of every leader.
    """
    if epoch < fence.epoch:
        return "stale_epoch"
    if epoch == fence.epoch and seq <= fence.seq:
        return "stale_seq"
    if revision < fence.revision:
        return "stale_revision"
    return None


def sync_refusal(
    fence: Fence, epoch: int, seq: int, revision: int, delta_base: int | None, has_base: bool
) -> str | None:
    """None when a sync may be applied, else why it is refused: `refusal`, or `need_full` for
    a delta (on sync `delta_base`) that is not on the last sync applied in the same epoch, or
    that arrives before any whole set was applied (`has_base` False)."""
    reason = refusal(fence, epoch, seq, revision)
    if reason is None and delta_base is not None:
        if not has_base or epoch != fence.epoch or delta_base != fence.seq:
            return "need_full"
    return reason


def desired_after(
    base: Mapping[str, T], remove: Iterable[str], add: Iterable[tuple[str, T]]
) -> dict[str, T]:
    """The desired set a delta describes: `base` without the ids in `remove`, with `add`."""
    specs = dict(base)
    for tid in remove:
        specs.pop(tid, None)
    specs.update(add)
    return specs


def accept_sync(
    fence: Fence, desired: Mapping[str, T] | None, request: SyncRequest
) -> tuple[str | None, dict[str, T]]:
    """(why the sync is refused, {}) or (None, the desired set it makes of `desired`, the set
    of the last sync applied, None before any): the one reading of a sync that the borglet
    and a hollow machine both apply."""
    base = request.delta.base_seq if request.delta is not None else None
    reason = sync_refusal(fence, request.epoch, request.seq, request.revision, base, desired is not None)
    if reason is not None:
        return reason, {}
    if request.delta is None:
        return None, {spec.task_id: spec for spec in request.tasks}  # type: ignore[misc]
    add = ((s.task_id, s) for s in request.delta.add)
    return None, desired_after(desired or {}, request.delta.remove, add)  # type: ignore[arg-type]


def expired_tombstones(tombstones: Mapping[str, int], applied_revision: int) -> list[str]:
    """Tombstones (task id -> revision of the sync that forgot it) no sync can contradict any more.

    Once a sync newer in revision than the one that forgot a task has been applied, the fence
    refuses every sync computed before that task left the desired set, and the cell never lists
    a task id again once it left (a new placement is a new id): the tombstone can go. Bounded by
    the tasks forgotten at the newest revision, never by a count that could drop a live one.
    """
    return [tid for tid, revision in tombstones.items() if revision < applied_revision]


@dataclass(frozen=True)
class Plan:
    """What a sync asks of the supervisor. Lists keep the order of the inputs for determinism."""

    start: tuple[str, ...] = ()
    kill: tuple[str, ...] = ()
    forget: tuple[str, ...] = ()
    restore: tuple[str, ...] = ()


def reconcile(
    desired: Iterable[str], active: Mapping[str, bool], ended_before: Iterable[str] = ()
) -> Plan:
    """Decide what to start, kill and forget.

    desired: task ids the master lists; active: every known task id -> whether its process is
    still wanted alive by us (False once it ended or is being killed; True while it is queued to
    start); ended_before: ids this borglet ran and forgot. A task id is started at most once, so a forgotten id that is listed
    again is restored as ended instead of started.
    """
    desired_list = list(dict.fromkeys(desired))
    wanted = set(desired_list)
    gone = set(ended_before)
    start = tuple(t for t in desired_list if t not in active and t not in gone)
    restore = tuple(t for t in desired_list if t not in active and t in gone)
    kill = tuple(t for t, alive in active.items() if t not in wanted and alive)
    forget = tuple(t for t, alive in active.items() if t not in wanted and not alive)
    return Plan(start=start, kill=kill, forget=forget, restore=restore)


def stopping_indexes(tasks: Iterable[tuple[str, int, bool]]) -> frozenset[tuple[str, int]]:
    """The (job, index) pairs that have a process still stopping on this machine, from each
    task's (job, index, stopping: killed and its process not yet gone).

    A new incarnation must not start while an older one is still stopping on this machine
    (it may ignore SIGTERM for the whole kill grace): one task index, one process. Specs
    without a job name (hand-made syncs) are not tied to any index.
    """
    return frozenset((job, index) for job, index, stopping in tasks if job and stopping)


def start_blocked(job: str, index: int, stopping: frozenset[tuple[str, int]]) -> bool:
    """Whether a queued task of (job, index) must wait: an older process of its index is stopping."""
    return bool(job) and (job, index) in stopping


def should_restart(policy: str, exit_code: int | None, killed_by_borglet: bool) -> bool:
    """Restart in place by policy. A kill the borglet made itself is never undone by a restart."""
    if killed_by_borglet:
        return False
    if policy == "always":
        return True
    if policy == "on_failure":
        return exit_code != 0
    return False


def backoff_delay(attempt: int) -> float:
    """Seconds to wait before restart number `attempt` (0-based): 0.1 s doubling, capped at 10 s."""
    if attempt < 0:
        raise ValueError("attempt must be >= 0")
    # Cap the exponent first so huge attempt counts cannot overflow the float.
    return min(BACKOFF_INITIAL_S * (2 ** min(attempt, 20)), BACKOFF_CAP_S)


def restart_attempt(attempt: int, ran_for_s: float) -> int:
    """The backoff attempt a restart uses: the task's count so far, or 0 after a run of
    `ran_for_s` long enough to count as healthy."""
    return 0 if ran_for_s >= BACKOFF_RESET_AFTER_S else attempt


def started(health_checked: bool) -> tuple[Phase, bool | None]:
    """(phase, healthy) of a task whose process was just started, or found running after a
    borglet restart: STARTING and not yet healthy until its first good probe when its job
    has a health check (core.TaskTable.probed then makes it RUNNING), else RUNNING at once.
    The one place that says which phase a started task enters."""
    return ("STARTING", False) if health_checked else ("RUNNING", None)


def ended_state(
    exit_code: int | None, oom: bool, kill_reason: str | None
) -> tuple[Phase, str | None]:
    """(phase, reason) of a task whose process is gone and will not be restarted."""
    if kill_reason is not None:
        return "KILLED", kill_reason
    if oom:
        return "FAILED", "oom"
    if exit_code == 0:
        return "FINISHED", None
    if exit_code is None:
        return "FAILED", "exit_unobserved"
    if exit_code < 0:
        return "FAILED", f"signal {-exit_code}"
    return "FAILED", f"exit {exit_code}"


@dataclass(frozen=True)
class Exit:
    """What becomes of a task whose process is gone: restarted in place once `restart_at` is
    reached (phase STARTING), or ended for good (`restart_at` None)."""

    phase: Phase
    reason: str | None
    restart_at: float | None
    attempt: int  # the backoff attempt of the task's next restart


def after_exit(
    policy: str,
    exit_code: int | None,
    oom: bool,
    kill_reason: str | None,
    attempt: int,
    ran_for_s: float,
    now: float,
) -> Exit:
    """Restart by policy after a backoff, or end: `attempt` is the task's backoff attempt,
    `ran_for_s` how long the process ran, `now` when its exit was seen (the same clock as
    `restart_at`)."""
    # The kernel's OOM kill can leave a clean (or an unobserved) exit code: still a failure.
    code_for_policy = -signal.SIGKILL if oom and exit_code in (0, None) else exit_code
    if should_restart(policy, code_for_policy, kill_reason is not None):
        used = restart_attempt(attempt, ran_for_s)
        reason = ended_state(exit_code, oom, None)[1] or "exit 0"
        return Exit("STARTING", reason, now + backoff_delay(used), used + 1)
    phase, reason = ended_state(exit_code, oom, kill_reason)
    return Exit(phase, reason, None, attempt)


Verdict = Literal["ended", "queue", "cancel", "adopt", "resume", "lost"]


@dataclass(frozen=True)
class Saved:
    """A task as a restarted borglet finds it: its saved record, and what is left of its process."""

    phase: Phase
    reason: str | None
    ended: bool
    launching: bool  # saved just before its spawn
    has_pid: bool  # the record names a process
    kill_reason: str | None
    backing_off: bool  # it was waiting out a restart backoff (restart_at saved)
    health_checked: bool
    found: bool = False  # launching, no pid saved: a process carrying its marker runs
    alive: bool = False  # the process (saved or found) is still the one started for it


@dataclass(frozen=True)
class Readoption:
    """What a restarted borglet does with one saved task, and the task's phase and reason after.

    ended: nothing (it stays in the report); queue: back in the start queue; cancel: killed
    before it started; adopt: its process lives on, polled from now (a found one is taken as
    started); resume: its backoff is over at once; lost: its process is gone.
    """

    verdict: Verdict
    phase: Phase
    reason: str | None


def readoption(saved: Saved) -> Readoption:
    """The verdict on one task of the saved table after a borglet restart.

    A task saved just before its spawn is never spawned again: its process, if the borglet
    finds one by its marker, is adopted; else it is still queued. A kill decided before the
    restart stands: a queued task is cancelled, an adopted one keeps being killed.
    """
    if saved.ended:
        return Readoption("ended", saved.phase, saved.reason)
    phase, has_pid = saved.phase, saved.has_pid
    if saved.launching and not has_pid and saved.found:
        phase, has_pid = started(saved.health_checked)[0], True
    if phase == "QUEUED":
        if saved.kill_reason is None:
            return Readoption("queue", phase, saved.reason)
        return Readoption("cancel", "KILLED", saved.kill_reason)
    if has_pid and saved.alive:
        return Readoption("adopt", phase, saved.reason)
    if not has_pid and saved.backing_off and saved.kill_reason is None:
        return Readoption("resume", phase, saved.reason)
    if saved.kill_reason is not None:
        return Readoption("lost", "KILLED", saved.kill_reason)
    return Readoption("lost", "FAILED", "lost_on_restart")


@dataclass(frozen=True)
class Candidate:
    """A running task as memory-pressure victim selection sees it."""

    task_id: str
    priority: int
    ram_bytes: int
    started_at: float


def memory_pressure_victims(candidates: Iterable[Candidate], capacity_ram: int) -> list[str]:
    """Tasks to kill, lowest priority first, until summed RAM usage is within capacity.

    Within one priority the youngest task goes first: it has done the least work, and the
    oldest tasks are the ones users expect to be stable. Ties fall back to task id.
    """
    tasks = list(candidates)
    total = sum(c.ram_bytes for c in tasks)
    victims: list[str] = []
    if total <= capacity_ram:
        return victims  # the common case, on every supervisor pass: no sort
    order = sorted(tasks, key=lambda c: (c.priority, -c.started_at, c.task_id))
    for candidate in order:
        if total <= capacity_ram:
            break
        victims.append(candidate.task_id)
        total -= candidate.ram_bytes
    return victims


def container_unwanted(task_live: bool, task_container: str, container_id: str) -> bool:
    """Whether a container found by this borglet's label is to be removed: its task is not a
    live task here (forgotten, ended, or never known), or the task runs in another container
    (an older run's). A live task with no container yet is being started: its new container
    may be this one."""
    if not task_live:
        return True
    return bool(task_container) and task_container != container_id
