"""The named invariants of the cell: what must hold in every reachable state and across every step.

A state invariant is `check(state) -> list[str]` (one message per violation, empty when it
holds). A step invariant is `check(before, step, after) -> list[str]`: properties of
transitions, such as "a DEAD task never runs again". The names here are the names the
explorer prints, the tests use and the conformance suite reports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .actions import EvictReason, Step, disrupted_tasks
from .model import CellState, TaskState, is_prod, may_preempt, placed_under, total

StateCheck = Callable[[CellState], list[str]]
StepCheck = Callable[[CellState, Step, CellState], list[str]]


@dataclass(frozen=True)
class Invariant:
    name: str
    doc: str
    state_check: StateCheck | None = None
    step_check: StepCheck | None = None


def running_task_has_one_up_machine(s: CellState) -> list[str]:
    out = []
    for t in s.tasks.values():
        if t.state is TaskState.RUNNING:
            m = s.machines.get(t.machine) if t.machine is not None else None
            if m is None:
                out.append(f"{t.id} is RUNNING on no known machine ({t.machine})")
            elif not m.up:
                out.append(f"{t.id} is RUNNING on {m.name}, which is down")
        elif t.machine is not None:
            out.append(f"{t.id} is {t.state.value} but holds machine {t.machine}")
    return out


def prod_requests_within_capacity(s: CellState) -> list[str]:
    out = []
    for m in s.machines.values():
        # tasks inside an alloc are counted through the alloc, as machine_reserved does
        prod = [
            t.request
            for t in s.running_on(m.name)
            if is_prod(t.priority) and not s.in_alloc(t)
        ]
        prod += [a.resources for a in s.allocs_on(m.name) if is_prod(a.priority)]
        used = total(prod)
        if not used.fits_in(m.capacity):
            out.append(f"prod reservations {used} on {m.name} exceed its capacity {m.capacity}")
    return out


def reservations_within_capacity(s: CellState) -> list[str]:
    out = [
        f"{t.id} reserves {t.reservation}, more than its request {t.request}"
        for t in s.tasks.values()
        if t.reservation is not None and not t.reservation.fits_in(t.request)
    ]
    for m in s.machines.values():
        used = s.machine_reserved(m.name)
        if not used.fits_in(m.capacity):
            out.append(f"reservations {used} on {m.name} exceed its capacity {m.capacity}")
    return out


def alloc_tasks_within_alloc(s: CellState) -> list[str]:
    out = []
    for a in s.allocs.values():
        used = s.alloc_used(a.name)
        if not used.fits_in(a.resources):
            out.append(f"tasks in alloc {a.name} use {used}, more than its {a.resources}")
    for t in s.tasks.values():
        job = s.jobs.get(t.id.job)
        if t.state is not TaskState.RUNNING or job is None or job.alloc is None:
            continue
        a = s.alloc_for(job, t.id.index)  # the index rule: task i runs in alloc i of the set
        if a is None:
            out.append(f"{t.id} runs on {t.machine}, but alloc set {job.alloc} has no alloc {t.id.index}")
        elif t.machine != a.machine:
            out.append(f"{t.id} runs on {t.machine}, outside its alloc {a.name} on {a.machine}")
    return out


def constraints_hold(s: CellState) -> list[str]:
    out = []
    for t in s.tasks.values():
        if t.state is not TaskState.RUNNING or t.machine not in s.machines:
            continue
        job = s.jobs.get(t.id.job)
        if job is None:
            continue
        if not placed_under(t, job):
            continue  # placed under the job's older constraints; a rolling update replaces it
        m = s.machines[t.machine]
        for c in job.constraints:
            if not c.holds(m):
                out.append(f"{t.id} runs on {m.name} where '{c}' does not hold")
    return out


def admitted_jobs_fit_quota(s: CellState) -> list[str]:
    out = []
    holders = {(j.user, j.band) for j in s.jobs.values()} | {(a.user, a.band) for a in s.allocs.values()}
    for user, band in holders:
        quota = s.quota_for(user, band)
        if quota is None:
            continue
        used = s.quota_used(user, band)
        if not used.fits_in(quota):
            out.append(f"{user}'s {band.value} jobs and allocs request {used}, beyond quota {quota}")
    return out


def one_incarnation_running(s: CellState) -> list[str]:
    seen: dict[tuple[str, int], int] = {}
    out = []
    for t in s.tasks.values():
        if t.state is TaskState.RUNNING:
            k = (t.id.job, t.id.index)
            if k in seen:
                out.append(
                    f"{t.id.job}/{t.id.index} has incarnations {seen[k]} and "
                    f"{t.id.incarnation} RUNNING at once"
                )
            seen[k] = t.id.incarnation
    return out


def only_newest_incarnation_live(s: CellState) -> list[str]:
    newest: dict[tuple[str, int], int] = {}
    for t in s.tasks.values():
        k = (t.id.job, t.id.index)
        newest[k] = max(newest.get(k, -1), t.id.incarnation)
    return [
        f"{t.id} is {t.state.value} but incarnation {newest[(t.id.job, t.id.index)]} is newer"
        for t in s.tasks.values()
        if t.state is not TaskState.DEAD and t.id.incarnation < newest[(t.id.job, t.id.index)]
    ]


def live_tasks_belong_to_jobs(s: CellState) -> list[str]:
    out = []
    for t in s.tasks.values():
        if t.state is TaskState.DEAD:
            continue
        job = s.jobs.get(t.id.job)
        if job is None:
            out.append(f"{t.id} is {t.state.value} but its job is gone")
        elif t.id.index >= job.task_count:
            out.append(f"{t.id} is {t.state.value} beyond its job's {job.task_count} tasks")
    return out


def disruptions_within_budget(s: CellState) -> list[str]:
    out = []
    for job in s.jobs.values():
        down = disrupted_tasks(s, job)
        if down > job.max_unavailable:
            out.append(f"{job.key} has {down} tasks down for a roll or a drain, more than its max_unavailable {job.max_unavailable}")
    return out


def dead_stays_dead(before: CellState, step: Step, after: CellState) -> list[str]:
    return [
        f"{tid} was DEAD and is {after.tasks[tid].state.value} after {step}"
        for tid, t in before.tasks.items()
        if t.state is TaskState.DEAD
        and tid in after.tasks
        and after.tasks[tid].state is not TaskState.DEAD
    ]


def prod_never_preempts_prod(before: CellState, step: Step, after: CellState) -> list[str]:
    if step.action != "evict" or len(step.args) < 3:
        return []
    victim, reason, preemptor = step.args[0], step.args[1], step.args[2]
    if reason is not EvictReason.PREEMPTION or preemptor is None:
        return []
    v, p = before.tasks.get(victim), before.tasks.get(preemptor)
    if v is None or p is None:
        return []
    if not may_preempt(p.priority, v.priority):
        return [f"{preemptor} (priority {p.priority}) preempted {victim} (priority {v.priority})"]
    return []


INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "dead_stays_dead",
        "A DEAD task never runs again; only a new incarnation of its index can.",
        step_check=dead_stays_dead,
    ),
    Invariant(
        "running_task_has_one_up_machine",
        "A RUNNING task has exactly one machine, which is in the cell and up; other tasks hold none.",
        state_check=running_task_has_one_up_machine,
    ),
    Invariant(
        "prod_requests_within_capacity",
        "On every machine, the requests of production-band tasks and allocs never exceed capacity.",
        state_check=prod_requests_within_capacity,
    ),
    Invariant(
        "reservations_within_capacity",
        "A task reserves at most its request, and on every machine all reservations fit capacity.",
        state_check=reservations_within_capacity,
    ),
    Invariant(
        "prod_never_preempts_prod",
        "Tasks in the production bands never preempt one another; a preemptor outranks its victim.",
        step_check=prod_never_preempts_prod,
    ),
    Invariant(
        "constraints_hold",
        "A task runs on a machine only if the constraints it was placed under hold on that machine's attributes: its job's, unless the job changed them since and a rolling update is to replace it.",
        state_check=constraints_hold,
    ),
    Invariant(
        "admitted_jobs_fit_quota",
        "The admitted jobs (outside alloc sets) and the allocs of each user in each band fit that user's quota there.",
        state_check=admitted_jobs_fit_quota,
    ),
    Invariant(
        "one_incarnation_running",
        "No two incarnations of one task index are RUNNING at once.",
        state_check=one_incarnation_running,
    ),
    Invariant(
        "only_newest_incarnation_live",
        "Only the newest incarnation of a task index may be PENDING or RUNNING.",
        state_check=only_newest_incarnation_live,
    ),
    Invariant(
        "live_tasks_belong_to_jobs",
        "Every PENDING or RUNNING task belongs to an admitted job and to one of its indices.",
        state_check=live_tasks_belong_to_jobs,
    ),
    Invariant(
        "alloc_tasks_within_alloc",
        "Task i of a job naming an alloc set runs on the machine of alloc i of the set, and the tasks in an alloc together fit its resources.",
        state_check=alloc_tasks_within_alloc,
    ),
    Invariant(
        "disruptions_within_budget",
        "No job has more than max_unavailable tasks down because of an update or a drain (a roll's or a drain's task not yet running again).",
        state_check=disruptions_within_budget,
    ),
)

BY_NAME: dict[str, Invariant] = {i.name: i for i in INVARIANTS}


def check_state(s: CellState, invariants: tuple[Invariant, ...] = INVARIANTS) -> list[tuple[str, str]]:
    """(invariant name, message) for every state invariant that fails in `s`."""
    return [
        (inv.name, msg)
        for inv in invariants
        if inv.state_check is not None
        for msg in inv.state_check(s)
    ]


def check_step(
    before: CellState, step: Step, after: CellState, invariants: tuple[Invariant, ...] = INVARIANTS
) -> list[tuple[str, str]]:
    """(invariant name, message) for every step invariant that this transition breaks."""
    return [
        (inv.name, msg)
        for inv in invariants
        if inv.step_check is not None
        for msg in inv.step_check(before, step, after)
    ]
