"""The bridge to the spec: a CellState in, a Plan out, and the plan applied through the spec's transitions."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping

from spec.actions import EvictReason, Step, apply
from spec.model import CellState, Task, TaskId, TaskState, alloc_name

from .config import SchedulerConfig
from .engine import plan_pass
from .plan import Plan
from .snapshot import AllocView, PendingTask, RunningTask, Snapshot
from .terms import package_holders


class PlanRejected(ValueError):
    """A step of the plan is not allowed by the spec in the state it meets (the plan is stale)."""

    def __init__(self, step: Step) -> None:
        super().__init__(f"the spec refuses {step}")
        self.step = step


def snapshot_from_state(
    state: CellState,
    pending_ids: Collection[TaskId] | None = None,
    running_ids: Collection[TaskId] | None = None,
    images: Mapping[str, Iterable[str]] | None = None,
    crashes: Mapping[tuple[str, int], Mapping[str, int]] | None = None,
) -> Snapshot:
    """What the scheduler reads from a cell: up machines, running and pending tasks, allocs, packages
    (those of the jobs running on a machine, and the container images in `images`, by machine).

    With `pending_ids`, only those of the pending tasks are planned; with `running_ids` (which
    must name every RUNNING task; others are skipped) the running tasks are found without a
    scan of every task the cell holds. The running tasks are in task id order, as
    `CellState.running_on` gives a machine's (what `carried.CarriedCell` builds a row from)."""
    running: list[RunningTask] = []
    pending: list[PendingTask] = []
    packages: dict[str, set[str]] = {}
    if pending_ids is None or running_ids is None:
        tasks: Iterable[Task] = state.tasks.values()
    else:
        tasks = [t for tid in {*pending_ids, *running_ids} if (t := state.tasks.get(tid)) is not None]
    for t in tasks:
        if pending_ids is not None and t.state is TaskState.PENDING and t.id not in pending_ids:
            continue
        if t.state is TaskState.RUNNING and t.machine is not None:
            running.append(running_task(state, t))
            job = state.jobs.get(t.id.job)
            if job is not None and job.package:
                packages.setdefault(t.machine, set()).add(job.package)
        elif t.state is TaskState.PENDING and (p := pending_task(state, t)) is not None:
            pending.append(p)
    pending.sort(key=lambda p: (p.id.job, p.id.index, p.id.incarnation))
    running.sort(key=lambda r: r.id)
    return Snapshot(
        machines=tuple(state.machines[name] for name in sorted(state.machines)),
        running=tuple(running),
        pending=tuple(pending),
        allocs=allocs_of(state),
        packages=package_holders(packages, images or {}),
        crashes=crashes or {},
    )


def running_task(state: CellState, t: Task) -> RunningTask:
    """A RUNNING task (with a machine) as a pass reads it."""
    job = state.jobs.get(t.id.job)
    in_alloc = job is not None and job.alloc is not None
    assert t.machine is not None
    return RunningTask(t.id, t.machine, t.priority, t.request, in_alloc, t.reservation)


def pending_task(state: CellState, t: Task) -> PendingTask | None:
    """A PENDING task as a pass plans it, with its job's current request; None without its job."""
    job = state.jobs.get(t.id.job)
    if job is None:
        return None
    return PendingTask(
        t.id,
        job.user,
        job.priority,
        job.request,  # the spec places a task with its job's current request
        job.constraints,
        job.package,
        None if job.alloc is None else alloc_name(job.alloc, t.id.index),  # task i: alloc i
    )


def allocs_of(state: CellState) -> tuple[AllocView, ...]:
    return tuple(
        AllocView(a.name, a.machine, a.resources, a.priority, state.alloc_used(a.name))
        for a in state.allocs.values()
    )


def plan_for(
    state: CellState,
    config: SchedulerConfig | None = None,
    seed: int = 0,
    recent_disruptions: Mapping[str, int] | None = None,
    clock: Callable[[], float] | None = None,
    pending_ids: Collection[TaskId] | None = None,
    running_ids: Collection[TaskId] | None = None,
    images: Mapping[str, Iterable[str]] | None = None,
    crashes: Mapping[tuple[str, int], Mapping[str, int]] | None = None,
) -> Plan:
    """One scheduling pass over the cell's pending tasks (or those of `pending_ids`);
    `images`: the container images each machine's engine holds, as its borglet reports them;
    `crashes`: recent crashes of task indices by machine (pairing.CrashMemory.snapshot)."""
    snapshot = snapshot_from_state(state, pending_ids, running_ids, images, crashes)
    return plan_pass(snapshot, config, seed, recent_disruptions, clock)


def plan_steps(plan: Plan) -> Iterator[Step]:
    """The spec steps of a plan: each placement's evictions (preemption by it), then its schedule."""
    for p in plan.placements:
        for victim in p.victims:
            yield Step("evict", (victim, EvictReason.PREEMPTION, p.task))
        yield Step("schedule", (p.task, p.machine))


def apply_plan(state: CellState, plan: Plan) -> CellState:
    """Apply the plan through the spec's transitions; PlanRejected if any guard is false."""
    for step in plan_steps(plan):
        nxt = apply(state, step)
        if nxt is None:
            raise PlanRejected(step)
        state = nxt
    return state
