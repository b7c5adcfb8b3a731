"""The actions of the cell: pure functions `action(state, ...) -> new state | None`.

Each action reads like a TLA+ action: the guard first (return None when it is false), then
the new values; everything not named stays unchanged because states are immutable. Faults
(evict, fail, lost, machine_down) are actions like any other. The guard and effect of each
action are restated in its docstring's first two lines, from which docs/spec.md is made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum, StrEnum
from typing import Any

from .model import (
    DISRUPTIONS,
    MAX_PRIORITY,
    ZERO,
    Alloc,
    CellState,
    DeathCause,
    Job,
    Machine,
    Resources,
    RestartPolicy,
    Task,
    TaskId,
    TaskState,
    is_prod,
    is_stale,
    may_preempt,
    task_template,
)


class EvictReason(StrEnum):
    PREEMPTION = "preemption"  # a higher-priority task needs the room
    MAINTENANCE = "maintenance"  # the machine is being drained (OS upgrade, removal)
    RECLAMATION = "reclamation"  # the reclaimed resources a non-prod task used are needed back
    MACHINE_FAILURE = "machine_failure"  # the machine is failing but still reachable


# --- helpers shared by the guards --------------------------------------------------------


def next_incarnation(state: CellState, job: str, index: int) -> int:
    """The incarnation a new task of `job`'s `index` gets: one past the newest, or 0."""
    prev = state.latest(job, index)
    return 0 if prev is None else prev.id.incarnation + 1


def _is_latest(state: CellState, task: Task) -> bool:
    latest = state.latest(task.id.job, task.id.index)
    return latest is not None and latest.id == task.id


def job_is_valid(job: Job) -> bool:
    return (
        bool(job.user)
        and bool(job.name)
        and job.task_count >= 0
        and 0 <= job.priority <= MAX_PRIORITY
        and job.request.is_nonnegative()
        and job.max_unavailable >= 1
    )


def fits_quota(state: CellState, job: Job) -> bool:
    """Would the user's jobs in this band, with `job` in place of its old version, fit quota?
    A job in an alloc set always does: its set was charged for what its tasks run in."""
    quota = state.quota_for(job.user, job.band)
    if quota is None or job.alloc is not None:
        return True
    used = state.quota_used(job.user, job.band, excluding=job.key)
    return (used + job.total_request()).fits_in(quota)


def alloc_fits_quota(state: CellState, alloc: Alloc) -> bool:
    """Would the user's jobs and allocs in the alloc's band, with `alloc` added, fit quota?"""
    quota = state.quota_for(alloc.user, alloc.band)
    if quota is None:
        return True
    return (state.quota_used(alloc.user, alloc.band) + alloc.resources).fits_in(quota)


def machine_free(state: CellState, machine: str) -> Resources:
    """Capacity minus every reservation on the machine (tasks outside allocs, and allocs).

    Reservations below requests are Borg's reclaimed resources: non-prod work may use them.
    """
    return state.machines[machine].capacity - state.machine_reserved(machine)


def machine_free_for_prod(state: CellState, machine: str) -> Resources:
    """What a prod task may use: reclaimed resources of prod tasks are not offered to prod."""
    return state.machines[machine].capacity - state.machine_committed_for_prod(machine)


def alloc_free(state: CellState, alloc: Alloc) -> Resources:
    """What an alloc may take on its machine: what is free, and for a prod alloc what a prod
    task may use (prod is never overcommitted: reclaimed resources of prod tasks are not
    offered to it)."""
    if is_prod(alloc.priority):
        return machine_free_for_prod(state, alloc.machine)
    return machine_free(state, alloc.machine)


def task_fits(state: CellState, task: Task, job: Job, machine: Machine) -> bool:
    """Constraints hold and the request fits in what is free (in the task's alloc, if the job names an alloc set)."""
    if not all(c.holds(machine) for c in job.constraints):
        return False
    if job.alloc is not None:
        alloc = state.alloc_for(job, task.id.index)
        if alloc is None or alloc.machine != machine.name:
            return False
        return (state.alloc_used(alloc.name) + job.request).fits_in(alloc.resources)
    if is_prod(job.priority):
        return job.request.fits_in(machine_free_for_prod(state, machine.name))
    return job.request.fits_in(machine_free(state, machine.name))


def new_task(job: Job, index: int, incarnation: int) -> Task:
    """A PENDING task of `job` at `index` and `incarnation`, with the job's priority and request."""
    return Task(
        id=TaskId(job.key, index, incarnation),
        state=TaskState.PENDING,
        priority=job.priority,
        request=job.request,
        template=task_template(job),
    )


def wanted_latest(state: CellState, job: Job) -> list[Task]:
    """The newest incarnation of each index the job still wants (below its task count)."""
    return [t for i, t in state.live_indices(job.key).items() if i < job.task_count]


def disrupted_tasks(state: CellState, job: Job) -> int:
    """How many of the job's wanted tasks are down because a rolling update or a drain took
    them down (PENDING with a `down_for` among DISRUPTIONS): what max_unavailable bounds."""
    return sum(1 for t in wanted_latest(state, job) if t.state is TaskState.PENDING and t.down_for in DISRUPTIONS)


def within_budget(state: CellState, job: Job) -> bool:
    """Whether one more task of the job may be taken down on purpose (a roll, a drain's move):
    fewer than its budget of its tasks are down now, whatever took them down (a crash-looping
    task spends the budget too, so a rollout or a drain never adds to an outage)."""
    return tasks_down(state, job.key) < budget(job)


def dead_task(task: Task, cause: DeathCause) -> Task:
    """A DEAD task holds no machine and reserves nothing; only why it died still matters."""
    return Task(task.id, TaskState.DEAD, None, task.priority, ZERO, cause)


def with_tasks(state: CellState, changes: dict[TaskId, Task]) -> CellState:
    """Apply task changes; a new incarnation replaces the DEAD older ones of its index.

    The state keeps only the newest incarnation of each index (older ones are history,
    which lives in the store's log, not in the state), unless an older one is still live:
    that is an invariant violation the checker must be able to see, so it is never dropped.
    """
    if not changes:
        return state
    new_ids: dict[tuple[str, int], int] = {}
    for t in changes:
        k = (t.job, t.index)
        new_ids[k] = max(new_ids.get(k, -1), t.incarnation)
    jobs = {job for job, _ in new_ids}
    drop = [
        tid
        for tid in {*(t for job in jobs for t in state.task_ids_of(job)), *changes}
        if (tid.job, tid.index) in new_ids
        and tid.incarnation < new_ids[(tid.job, tid.index)]
        and changes.get(tid, state.tasks[tid]).state is TaskState.DEAD
    ]
    return state.with_(tasks=state.tasks.edit(changes, drop))


# --- job lifecycle -----------------------------------------------------------------------


def submit(state: CellState, job: Job) -> CellState | None:
    """Guard: the job is valid, no job of that name exists, its alloc set has an alloc for each of its tasks, and it fits the user's quota in its band.
    Effect: the job is admitted and each index gets a PENDING task (a new incarnation if the index ran before)."""
    if not job_is_valid(job) or job.key in state.jobs:
        return None
    if job.alloc is not None and not state.alloc_set_covers(job.alloc, job.task_count):
        return None
    if not fits_quota(state, job):
        return None
    job = replace(job, version=0)
    tasks = {
        t.id: t
        for t in (
            new_task(job, i, next_incarnation(state, job.key, i)) for i in range(job.task_count)
        )
    }
    return with_tasks(state.with_(jobs=state.jobs.set(job.key, job)), tasks)


def kill_job(state: CellState, job_key: str) -> CellState | None:
    """Guard: the job exists.
    Effect: every task of the job becomes DEAD (killed) and the job is removed."""
    if job_key not in state.jobs:
        return None
    # Already-dead tasks are marked killed too: with the job gone, why they died no longer
    # decides anything (no restart), and one cause keeps equivalent states equal.
    dead = {t.id: dead_task(t, DeathCause.KILLED) for t in state.tasks_of(job_key)}
    return state.with_(jobs=state.jobs.remove(job_key), tasks=state.tasks.update(dead))


def update(
    state: CellState,
    job_key: str,
    task_count: int | None = None,
    request: Resources | None = None,
    job: Job | None = None,
) -> CellState | None:
    """Guard: the job exists, something changes (`job`, when given, is the whole new job of the same user and name), the new job is valid, fits quota, its alloc set (if any) has an alloc for each task, and its budget is not below the tasks a roll or drain holds down now.
    Effect: new indices get PENDING tasks, indices beyond the new count are killed, PENDING tasks take the new job's fields, RUNNING tasks take a new priority within its band in place; a RUNNING task whose request or template changed keeps them until rolled."""
    old = state.jobs.get(job_key)
    if old is None:
        return None
    base = old if job is None else job
    if base.key != job_key:
        return None
    new = replace(
        base,
        task_count=base.task_count if task_count is None else task_count,
        request=base.request if request is None else request,
        version=old.version,
    )
    if new == old:
        return None
    new = replace(new, version=old.version + 1)
    if not job_is_valid(new) or not fits_quota(state, new):
        return None
    if new.alloc is not None and not state.alloc_set_covers(new.alloc, new.task_count):
        return None
    if new.max_unavailable < disrupted_tasks(state, old):
        return None  # lowered below what is down on purpose now: wait for the roll to settle
    changes: dict[TaskId, Task] = {}
    live = state.live_indices(job_key)
    template = task_template(new)
    for i in range(new.task_count):
        cur = live.get(i)
        if cur is None or (i >= old.task_count and cur.state is TaskState.DEAD):
            changes_id = new_task(new, i, next_incarnation(state, job_key, i))
            changes[changes_id.id] = changes_id
        elif cur.state is TaskState.PENDING and (cur.request, cur.template, cur.priority) != (new.request, template, new.priority):
            # not placed yet: it takes the new job as it is, no roll needed
            changes[cur.id] = replace(cur, request=new.request, template=template, priority=new.priority)
        elif cur.state is TaskState.RUNNING and cur.priority != new.priority and cur.template == template:
            changes[cur.id] = replace(cur, priority=new.priority)  # within its band: in place
    for i, cur in live.items():
        if i >= new.task_count and cur.state is not TaskState.DEAD:
            changes[cur.id] = dead_task(cur, DeathCause.KILLED)
    return with_tasks(state.with_(jobs=state.jobs.set(job_key, new)), changes)


def roll(state: CellState, task_id: TaskId) -> CellState | None:
    """Guard: the task is RUNNING, the newest of its index, with a request or template older than its job's, and fewer than the job's max_unavailable of its tasks are down.
    Effect: the task is killed and a new incarnation with the job's current specification becomes PENDING, down for a roll (one step of a rolling update)."""
    task = state.tasks.get(task_id)
    if task is None or task.state is not TaskState.RUNNING or not _is_latest(state, task):
        return None
    job = state.jobs.get(task_id.job)
    if job is None or not is_stale(task, job) or not within_budget(state, job):
        return None
    nxt = replace(new_task(job, task_id.index, task_id.incarnation + 1), down_for="roll")
    return with_tasks(state, {task_id: dead_task(task, DeathCause.KILLED), nxt.id: nxt})


# --- task lifecycle ----------------------------------------------------------------------


def schedule(state: CellState, task_id: TaskId, machine: str) -> CellState | None:
    """Guard: the task is PENDING, its job exists, the machine is up and schedulable (not drained), the constraints hold and the request fits what is free (for a prod task, beside other prod tasks' full requests; for others, beside reservations).
    Effect: the task is RUNNING on the machine with its job's current priority, request and template, reserved in full; it is no longer down."""
    task = state.tasks.get(task_id)
    if task is None or task.state is not TaskState.PENDING:
        return None
    job = state.jobs.get(task_id.job)
    m = state.machines.get(machine)
    if job is None or m is None or not m.up or not m.schedulable:
        return None
    if not task_fits(state, task, job, m):
        return None
    placed = Task(task.id, TaskState.RUNNING, machine, job.priority, job.request, None, None, task_template(job))
    return state.with_(tasks=state.tasks.set(task_id, placed))


def evict(
    state: CellState,
    task_id: TaskId,
    reason: EvictReason,
    preemptor: TaskId | None = None,
) -> CellState | None:
    """Guard: the task is RUNNING; for preemption, the preemptor is PENDING and may preempt it (higher priority, not both prod).
    Effect: the task goes back to PENDING, same incarnation, with no machine."""
    task = state.tasks.get(task_id)
    if task is None or task.state is not TaskState.RUNNING:
        return None
    if reason is EvictReason.PREEMPTION:
        p = state.tasks.get(preemptor) if preemptor is not None else None
        if p is None or p.state is not TaskState.PENDING:
            return None
        if not may_preempt(p.priority, task.priority):
            return None
    elif preemptor is not None:
        return None
    return state.with_(
        tasks=state.tasks.set(task_id, replace(task, state=TaskState.PENDING, machine=None, reservation=None))
    )


def _running_to_dead(state: CellState, task_id: TaskId, cause: DeathCause) -> CellState | None:
    task = state.tasks.get(task_id)
    if task is None or task.state is not TaskState.RUNNING:
        return None
    return state.with_(tasks=state.tasks.set(task_id, dead_task(task, cause)))


def finish(state: CellState, task_id: TaskId) -> CellState | None:
    """Guard: the task is RUNNING.
    Effect: the task is DEAD (finished: its program exited 0)."""
    return _running_to_dead(state, task_id, DeathCause.FINISHED)


def fail(state: CellState, task_id: TaskId) -> CellState | None:
    """Guard: the task is RUNNING.
    Effect: the task is DEAD (failed: its program exited non-zero and its borglet gave up restarting it in place)."""
    return _running_to_dead(state, task_id, DeathCause.FAILED)


def lost(state: CellState, task_id: TaskId) -> CellState | None:
    """Guard: the task is RUNNING.
    Effect: the task is DEAD (lost: its borglet no longer knows it, or its machine went down)."""
    return _running_to_dead(state, task_id, DeathCause.LOST)


def kill(state: CellState, task_id: TaskId) -> CellState | None:
    """Guard: the task is PENDING or RUNNING.
    Effect: the task is DEAD (killed by a user or the master)."""
    task = state.tasks.get(task_id)
    if task is None or task.state is TaskState.DEAD:
        return None
    return state.with_(tasks=state.tasks.set(task_id, dead_task(task, DeathCause.KILLED)))


def restart_allowed(policy: RestartPolicy, cause: DeathCause | None) -> bool:
    if cause in (DeathCause.FAILED, DeathCause.LOST):
        return policy in (RestartPolicy.ON_FAILURE, RestartPolicy.ALWAYS)
    if cause is DeathCause.FINISHED:
        return policy is RestartPolicy.ALWAYS
    return False  # killed tasks stay dead


def restart(state: CellState, task_id: TaskId) -> CellState | None:
    """Guard: the task is the newest incarnation of its index, DEAD, its job still wants the index, and the job's restart policy allows it after that cause.
    Effect: a new incarnation of the index becomes PENDING; the DEAD one becomes history."""
    task = state.tasks.get(task_id)
    if task is None or task.state is not TaskState.DEAD or not _is_latest(state, task):
        return None
    job = state.jobs.get(task_id.job)
    if job is None or task_id.index >= job.task_count:
        return None
    if not restart_allowed(job.restart_policy, task.cause):
        return None
    nxt = new_task(job, task_id.index, task_id.incarnation + 1)
    return with_tasks(state, {nxt.id: nxt})


def reserve(state: CellState, task_id: TaskId, reservation: Resources) -> CellState | None:
    """Guard: the task is RUNNING outside an alloc, the reservation is between zero and its request, and the machine's reservations still fit its capacity.
    Effect: the task's reservation is set (Borg's resource reclamation: what it does not reserve, non-prod work may use)."""
    task = state.tasks.get(task_id)
    if task is None or task.state is not TaskState.RUNNING or task.machine is None:
        return None
    job = state.jobs.get(task_id.job)
    if job is None or job.alloc is not None:
        return None
    if not reservation.is_nonnegative() or not reservation.fits_in(task.request):
        return None
    new = replace(task, reservation=None if reservation == task.request else reservation)
    after = state.with_(tasks=state.tasks.set(task_id, new))
    if not after.machine_reserved(task.machine).fits_in(state.machines[task.machine].capacity):
        return None
    return after


# --- machines ----------------------------------------------------------------------------


def machine_add(state: CellState, machine: Machine) -> CellState | None:
    """Guard: no machine of that name is in the cell.
    Effect: the machine joins the cell, up."""
    if machine.name in state.machines:
        return None
    return state.with_(machines=state.machines.set(machine.name, replace(machine, up=True)))


def machine_remove(state: CellState, name: str) -> CellState | None:
    """Guard: the machine exists, runs no task and holds no alloc (drain it first).
    Effect: the machine leaves the cell."""
    if name not in state.machines or state.running_on(name) or state.allocs_on(name):
        return None
    return state.with_(machines=state.machines.remove(name))


def machine_down(state: CellState, name: str) -> CellState | None:
    """Guard: the machine is up.
    Effect: the machine is down and every task RUNNING on it is DEAD (lost)."""
    m = state.machines.get(name)
    if m is None or not m.up:
        return None
    lost_tasks = {t.id: dead_task(t, DeathCause.LOST) for t in state.running_on(name)}
    return state.with_(
        machines=state.machines.set(name, replace(m, up=False)),
        tasks=state.tasks.update(lost_tasks),
    )


def machine_up(state: CellState, name: str) -> CellState | None:
    """Guard: the machine is down.
    Effect: the machine is up again, running nothing."""
    m = state.machines.get(name)
    if m is None or m.up:
        return None
    return state.with_(machines=state.machines.set(name, replace(m, up=True)))


# --- drains: maintenance within each job's disruption budget --------------------------------

#: A job's budget when it names none: one task down at a time, as a rolling update's default.
DEFAULT_BUDGET = 1


def budget(job: Job) -> int:
    """How many of the job's tasks may be down at once because of a drain (its max_unavailable)."""
    return getattr(job, "max_unavailable", DEFAULT_BUDGET)


def tasks_down(state: CellState, job_key: str) -> int:
    """The job's wanted indices whose newest incarnation is not RUNNING: a task moved off a
    drained machine is down until its replacement runs elsewhere."""
    job = state.jobs.get(job_key)
    if job is None:
        return 0
    live = state.live_indices(job_key)
    return sum(1 for i in range(job.task_count) if (t := live.get(i)) is None or t.state is not TaskState.RUNNING)


def drain(state: CellState, name: str) -> CellState | None:
    """Guard: the machine is in the cell and schedulable.
    Effect: the machine is unschedulable (cordoned): nothing new is placed there; its tasks keep running until moved."""
    m = state.machines.get(name)
    if m is None or not m.schedulable:
        return None
    return state.with_(machines=state.machines.set(name, replace(m, schedulable=False)))


def uncordon(state: CellState, name: str) -> CellState | None:
    """Guard: the machine is in the cell and unschedulable.
    Effect: the machine is schedulable again; no task moves back by itself."""
    m = state.machines.get(name)
    if m is None or m.schedulable:
        return None
    return state.with_(machines=state.machines.set(name, replace(m, schedulable=True)))


def drain_move(state: CellState, task_id: TaskId) -> CellState | None:
    """Guard: the task is RUNNING on an unschedulable machine, outside an alloc (an alloc's tasks leave with their alloc), and fewer of its job's tasks are down than the job's budget.
    Effect: the task goes back to PENDING, same incarnation, with no machine, to be placed elsewhere (one step of a drain)."""
    task = state.tasks.get(task_id)
    if task is None or task.state is not TaskState.RUNNING or task.machine is None:
        return None
    m = state.machines.get(task.machine)
    job = state.jobs.get(task_id.job)
    if m is None or m.schedulable or job is None or job.alloc is not None:
        return None
    if tasks_down(state, job.key) >= budget(job):
        return None
    return state.with_(
        tasks=state.tasks.set(task_id, replace(task, state=TaskState.PENDING, machine=None, reservation=None, down_for="drain"))
    )


# --- allocs ------------------------------------------------------------------------------


def alloc_create(state: CellState, alloc: Alloc) -> CellState | None:
    """Guard: the set holds no alloc of that index, no other alloc of the set is on the machine, the machine is up and schedulable, the alloc's resources fit what is free there (for a prod alloc, beside prod tasks' full requests, as a prod task must) and the user's quota in the alloc's band.
    Effect: the resources are reserved on the machine (alloc `index` of the set, where task `index` of the set's jobs will run)."""
    if alloc.name in state.allocs or alloc.index < 0 or not 0 <= alloc.priority <= MAX_PRIORITY:
        return None
    m = state.machines.get(alloc.machine)
    if m is None or not m.up or not m.schedulable or not alloc.resources.is_nonnegative():
        return None
    if any(a.set == alloc.set and a.machine == alloc.machine for a in state.allocs.values()):
        return None  # a set spreads over machines: two of its allocs on one would be one alloc
    if not alloc.resources.fits_in(alloc_free(state, alloc)):
        return None
    if not alloc_fits_quota(state, alloc):
        return None
    return state.with_(allocs=state.allocs.set(alloc.name, alloc))


def alloc_delete(state: CellState, name: str) -> CellState | None:
    """Guard: the alloc exists and no job names its set (kill the set's jobs first).
    Effect: its reservation is released."""
    a = state.allocs.get(name)
    if a is None or any(j.alloc == a.set for j in state.jobs.values()):
        return None
    return state.with_(allocs=state.allocs.remove(name))


# --- the action table --------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One action applied with its arguments: the unit of a trace."""

    action: str
    args: tuple[Any, ...]

    def __str__(self) -> str:
        return f"{self.action}({', '.join(_short(a) for a in self.args)})"


def _short(a: Any) -> str:
    if isinstance(a, Job):
        tail = f", template={a.template}" if a.template else ""
        return f"Job({a.key}, prio={a.priority}, n={a.task_count}, req={a.request}{tail})"
    if isinstance(a, Machine):
        return f"Machine({a.name})"
    if isinstance(a, Alloc):
        return f"Alloc({a.name}@{a.machine}, {a.resources})"
    if isinstance(a, Enum):
        return str(a.value)
    return str(a)


ACTIONS: dict[str, Callable[..., CellState | None]] = {
    "submit": submit,
    "kill_job": kill_job,
    "update": update,
    "roll": roll,
    "schedule": schedule,
    "evict": evict,
    "finish": finish,
    "fail": fail,
    "lost": lost,
    "kill": kill,
    "restart": restart,
    "reserve": reserve,
    "machine_add": machine_add,
    "machine_remove": machine_remove,
    "machine_down": machine_down,
    "machine_up": machine_up,
    "drain": drain,
    "uncordon": uncordon,
    "drain_move": drain_move,
    "alloc_create": alloc_create,
    "alloc_delete": alloc_delete,
}


def apply(
    state: CellState, step: Step, actions: dict[str, Callable[..., Any]] | None = None
) -> CellState | None:
    """Apply one step; None when its guard is false."""
    table = ACTIONS if actions is None else actions
    return table[step.action](state, *step.args)
