"""The cell's data: resources, machines, jobs, tasks, allocs, quotas, and the cell state.

Everything here is immutable and hashable, so the explorer can deduplicate states and a
transition can never change the state it was given. No I/O, no clock, no randomness.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, NamedTuple

from .fmap import FMap

# --- resources -------------------------------------------------------------------------

#: Well-known resource names. Any other name (e.g. "ssd", "fpga") is allowed too.
CPU = "cpu"  # milli-cores
RAM = "ram"  # bytes
DISK = "disk"  # bytes
PORTS = "ports"  # count of ports
GPU = "gpu"  # milli-GPUs: 1000 is one whole GPU, 460 a share of one


@dataclass(frozen=True, slots=True)
class Resources:
    """A vector of named, non-negative integer quantities. Absent names are zero."""

    items: tuple[tuple[str, int], ...] = ()

    @staticmethod
    def of(mapping: Mapping[str, int] | None = None, **kw: int) -> Resources:
        d: dict[str, int] = dict(mapping or {})
        d.update(kw)
        return _normalized(d)

    def get(self, name: str) -> int:
        for k, v in self.items:
            if k == name:
                return v
        return 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.items)

    def names(self) -> set[str]:
        return {k for k, _ in self.items}

    def __add__(self, other: Resources) -> Resources:
        d = dict(self.items)
        for k, v in other.items:
            d[k] = d.get(k, 0) + v
        return _normalized(d)

    def __sub__(self, other: Resources) -> Resources:
        d = dict(self.items)
        for k, v in other.items:
            d[k] = d.get(k, 0) - v
        return _normalized(d)

    def scale(self, n: int) -> Resources:
        if n == 1:
            return self
        return Resources.of({k: v * n for k, v in self.items})

    def fits_in(self, other: Resources) -> bool:
        """True when every quantity here is at most the same quantity in `other`."""
        return all(v <= other.get(k) for k, v in self.items)

    def shortfall(self, available: Resources) -> tuple[str, ...]:
        """Names of the resources where this request exceeds `available`."""
        return tuple(k for k, v in self.items if v > available.get(k))

    def is_nonnegative(self) -> bool:
        return all(v >= 0 for _, v in self.items)

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.items) or "0"


def _normalized(d: dict[str, int]) -> Resources:
    """The Resources of `d`, a dict the caller owns: names sorted, zeros left out."""
    return Resources(tuple(sorted([(k, int(v)) for k, v in d.items() if v])))


ZERO = Resources()


def total(rs: Iterable[Resources]) -> Resources:
    acc: dict[str, int] = {}
    for r in rs:
        for k, v in r.items:
            acc[k] = acc.get(k, 0) + v
    return _normalized(acc)


# --- priorities ------------------------------------------------------------------------


class Band(StrEnum):
    """Borg's priority bands, from the least to the most important."""

    BEST_EFFORT = "best_effort"  # also called "free" or "testing"
    BATCH = "batch"
    PRODUCTION = "production"
    MONITORING = "monitoring"


#: The lowest priority of each band; a band extends up to the next band's floor.
BAND_FLOOR: dict[Band, int] = {
    Band.BEST_EFFORT: 0,
    Band.BATCH: 100,
    Band.PRODUCTION: 200,
    Band.MONITORING: 300,
}
MAX_PRIORITY = 399


def band_of(priority: int) -> Band:
    if priority >= BAND_FLOOR[Band.MONITORING]:
        return Band.MONITORING
    if priority >= BAND_FLOOR[Band.PRODUCTION]:
        return Band.PRODUCTION
    if priority >= BAND_FLOOR[Band.BATCH]:
        return Band.BATCH
    return Band.BEST_EFFORT


def is_prod(priority: int) -> bool:
    """Production and monitoring are the 'prod' bands: they never preempt each other."""
    return priority >= BAND_FLOOR[Band.PRODUCTION]


def may_preempt(preemptor: int, victim: int) -> bool:
    """A task may preempt another of strictly lower priority, never within the prod bands."""
    return preemptor > victim and not (is_prod(preemptor) and is_prod(victim))


# --- machines --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Machine:
    name: str
    capacity: Resources
    attrs: tuple[tuple[str, str], ...] = ()
    failure_domain: str = ""
    up: bool = True
    # False while drained (cordoned): no new task or alloc is placed on it; its tasks move off
    # within their jobs' budgets (actions.drain_move) until `uncordon`.
    schedulable: bool = True

    def attr(self, key: str) -> str | None:
        for k, v in self.attrs:
            if k == key:
                return v
        return None


# --- jobs and tasks --------------------------------------------------------------------


class ConstraintOp(StrEnum):
    EQ = "eq"
    NE = "ne"
    IN = "in"
    NOT_IN = "not_in"


@dataclass(frozen=True, slots=True)
class Constraint:
    """A hard constraint on one machine attribute."""

    attr: str
    op: ConstraintOp
    values: tuple[str, ...]

    def holds(self, machine: Machine) -> bool:
        v = machine.attr(self.attr)
        if self.op is ConstraintOp.EQ:
            return v == self.values[0]
        if self.op is ConstraintOp.NE:
            return v != self.values[0]
        if self.op is ConstraintOp.IN:
            return v in self.values
        return v not in self.values

    def __str__(self) -> str:
        return f"{self.attr} {self.op.value} {'|'.join(self.values)}"


class RestartPolicy(StrEnum):
    NEVER = "never"
    ON_FAILURE = "on_failure"  # restart after fail or lost, not after finish
    ALWAYS = "always"  # restart after fail, lost or finish (a service)


class AppClass(StrEnum):
    LATENCY_SENSITIVE = "latency_sensitive"
    BATCH = "batch"


@dataclass(frozen=True, slots=True)
class Job:
    user: str
    name: str
    priority: int
    task_count: int
    request: Resources
    constraints: tuple[Constraint, ...] = ()
    restart_policy: RestartPolicy = RestartPolicy.ON_FAILURE
    appclass: AppClass = AppClass.BATCH
    alloc: str | None = None  # the alloc set its tasks run in: task i in alloc i of the set
    package: str = ""  # the package (binary) the tasks run, for locality
    version: int = 0  # bumped by every update
    # How many of its tasks a rolling update or a drain may take down at once (at least 1).
    max_unavailable: int = 1
    # What the spec does not model of the job file (command, environment, image, health
    # check...), as an opaque digest: a change to it is a change a task must restart for.
    template: str = ""

    @property
    def key(self) -> str:
        return job_key(self.user, self.name)

    @property
    def band(self) -> Band:
        return band_of(self.priority)

    @property
    def task_template(self) -> str:
        """What a task must restart to change: every field but the request (kept on the task
        apart, as reservations read it), the task count, the priority within its band, the
        restart policy and the budget, which apply in place."""
        return task_template(self)

    def total_request(self) -> Resources:
        return self.request.scale(self.task_count)


@functools.lru_cache(maxsize=4096)
def task_template(job: Job) -> str:
    """The digest of the fields of `job` that a running task cannot take without a restart:
    its opaque template, constraints, application class, band, package and alloc set."""
    parts = (job.template, tuple(str(c) for c in job.constraints), job.appclass.value,
             job.band.value, job.package, job.alloc or "")  # fmt: skip
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:12]


def job_key(user: str, name: str) -> str:
    return f"{user}/{name}"


class TaskState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DEAD = "DEAD"


class DeathCause(StrEnum):
    """Why a task is DEAD: the action that put it there."""

    FINISHED = "finished"
    FAILED = "failed"
    KILLED = "killed"
    LOST = "lost"


class TaskId(NamedTuple):
    """A task incarnation's name. A named tuple, not a dataclass: task ids key every task map,
    and a tuple's hash and equality run in C (a frozen dataclass's are Python calls: 11% of
    the master's CPU under submissions, docs/decisions.md)."""

    job: str  # job key "user/name"
    index: int
    incarnation: int = 0

    def __str__(self) -> str:
        return f"{self.job}/{self.index}#{self.incarnation}"


@dataclass(frozen=True, slots=True)
class Task:
    id: TaskId
    state: TaskState = TaskState.PENDING
    machine: str | None = None
    priority: int = 0  # copied from the job, so invariants need not look it up
    request: Resources = ZERO  # copied from the job at the time of the last (re)placement
    cause: DeathCause | None = None  # set when DEAD
    # Borg's reservation: what the master estimates the task needs, at most its request.
    # None means the full request (a task starts reserved at its limit).
    reservation: Resources | None = None
    template: str = ""  # its job's task_template when it was made or placed
    # Why a PENDING task is down when a planned disruption took it down: "roll" (a rolling
    # update replaced it) or "drain" (its machine is being drained); "" otherwise.
    down_for: str = ""

    @property
    def reserved(self) -> Resources:
        return self.request if self.reservation is None else self.reservation

    @property
    def job(self) -> str:
        return self.id.job

    @property
    def index(self) -> int:
        return self.id.index

    @property
    def incarnation(self) -> int:
        return self.id.incarnation


#: The causes of a planned disruption, counted against a job's max_unavailable.
DISRUPTIONS = ("roll", "drain")


def placed_under(task: Task, job: Job) -> bool:
    """Whether the task was made or placed under the job's current template ("" on a task: a
    record older than templates, taken as current)."""
    return task.template in ("", task_template(job))


def is_stale(task: Task, job: Job) -> bool:
    """Whether the task runs an older specification than its job's: a rolling update replaces it."""
    return task.request != job.request or not placed_under(task, job)


def alloc_name(alloc_set: str, index: int) -> str:
    """The name of alloc `index` of an alloc set: "set/index" (a set's name is "user/name")."""
    return f"{alloc_set}/{index}"


@dataclass(frozen=True, slots=True)
class Alloc:
    """Resources reserved on one machine: alloc `index` of alloc set `set`.

    Borg's alloc set reserves resources on several machines; a job names the set, and its
    task i runs in alloc i. The alloc stays reserved while no task runs in it.
    """

    set: str
    index: int
    machine: str
    resources: Resources
    priority: int
    user: str = ""

    @property
    def name(self) -> str:
        return alloc_name(self.set, self.index)

    @property
    def band(self) -> Band:
        return band_of(self.priority)


@dataclass(frozen=True, slots=True)
class QuotaKey:
    user: str  # "*" is the default for users without an entry of their own
    band: Band


# --- the cell --------------------------------------------------------------------------


def _by_job(tid: TaskId, task: Task) -> str:
    return tid.job


def _by_index(tid: TaskId, task: Task) -> tuple[str, int]:
    return (tid.job, tid.index)


# A job with this many task records or more finds an index's newest incarnation through the
# (job, index) index instead of a scan of the job's records: submitting, growing, restarting or
# rolling each of a large job's tasks then costs what that index holds, not the whole job
# (resubmitting a killed 10,000-task job scanned 10,000 records for each of its 10,000 tasks).
LATEST_SCAN_MAX = 64


def _running_on(tid: TaskId, task: Task) -> str | None:
    return task.machine if task.state is TaskState.RUNNING else None


def _reserved(tid: TaskId, task: Task) -> Resources:
    return task.reserved


def _committed_for_prod(tid: TaskId, task: Task) -> Resources:
    return task.request if is_prod(task.priority) else task.reserved


def _alloc_of(key: str, job: Job) -> str | None:
    return job.alloc


def _by_user_band(key: str, job: Job) -> tuple[str, Band]:
    return (job.user, job.band)


@dataclass(frozen=True, slots=True)
class CellState:
    """The whole cell. Tasks are keyed by (job, index, incarnation); old incarnations stay DEAD."""

    machines: FMap[str, Machine] = field(default_factory=FMap)
    jobs: FMap[str, Job] = field(default_factory=FMap)
    tasks: FMap[TaskId, Task] = field(default_factory=FMap)
    allocs: FMap[str, Alloc] = field(default_factory=FMap)
    quotas: FMap[QuotaKey, Resources] = field(default_factory=FMap)

    def with_(self, **changes: Any) -> CellState:
        """`dataclasses.replace(self, **changes)` without its walk of the fields (a plan of
        10,000 placements makes 10,000 of these)."""
        if not changes.keys() <= _CELL_STATE_FIELDS:
            raise TypeError(f"CellState has no field {sorted(changes.keys() - _CELL_STATE_FIELDS)[0]!r}")
        get = changes.get
        return CellState(
            get("machines", self.machines), get("jobs", self.jobs), get("tasks", self.tasks),
            get("allocs", self.allocs), get("quotas", self.quotas),
        )  # fmt: skip

    # --- queries used by actions, invariants and the scheduler ---

    def task_ids_of(self, job: str) -> frozenset[TaskId]:
        """Every incarnation the state holds of the job's tasks."""
        return self.tasks.group(_by_job).get(job, frozenset())

    def tasks_of(self, job: str) -> list[Task]:
        tasks = self.tasks
        return [tasks[t] for t in sorted(tasks.group(_by_job).get(job, ()))]

    def latest(self, job: str, index: int) -> Task | None:
        """The newest incarnation of one task index."""
        ids = self.tasks.group(_by_job).get(job, ())
        if len(ids) >= LATEST_SCAN_MAX:
            ids = self.tasks.group(_by_index).get((job, index), ())
        best: TaskId | None = None
        for tid in ids:
            if tid.index == index and (best is None or tid.incarnation > best.incarnation):
                best = tid
        return None if best is None else self.tasks[best]

    def live_indices(self, job: str) -> dict[int, Task]:
        """index -> newest incarnation, for every index of the job."""
        newest: dict[int, TaskId] = {}
        for tid in sorted(self.tasks.group(_by_job).get(job, ())):
            newest[tid.index] = tid  # sorted: the last incarnation of an index wins
        return {i: self.tasks[tid] for i, tid in newest.items()}

    def running_on(self, machine: str) -> list[Task]:
        tasks = self.tasks
        return [tasks[t] for t in sorted(tasks.group(_running_on).get(machine, ()))]

    def _running_on_any_order(self, machine: str) -> list[Task]:
        # For sums, where order does not matter: sorting thousands of task ids on every
        # placement's fit check made placing a large job quadratic in its size.
        tasks = self.tasks
        return [tasks[t] for t in tasks.group(_running_on).get(machine, ())]

    def allocs_on(self, machine: str) -> list[Alloc]:
        return [a for a in self.allocs.values() if a.machine == machine]

    def alloc_set(self, alloc_set: str) -> list[Alloc]:
        """The allocs of a set, by index."""
        return sorted((a for a in self.allocs.values() if a.set == alloc_set), key=lambda a: a.index)

    def alloc_for(self, job: Job, index: int) -> Alloc | None:
        """The alloc task `index` of `job` runs in: alloc `index` of the job's set (None outside sets)."""
        if job.alloc is None:
            return None
        return self.allocs.get(alloc_name(job.alloc, index))

    def alloc_set_covers(self, alloc_set: str, task_count: int) -> bool:
        """Whether the set has an alloc for each of `task_count` tasks (indices 0 to task_count - 1)."""
        return all(alloc_name(alloc_set, i) in self.allocs for i in range(task_count))

    def in_alloc(self, task: Task) -> bool:
        """Whether the task's job runs inside an alloc (its resources count through the alloc)."""
        job = self.jobs.get(task.id.job)
        return job is not None and job.alloc is not None

    def machine_reserved(self, machine: str, min_priority: int | None = None) -> Resources:
        """What RUNNING tasks outside allocs reserve on a machine, plus its allocs.

        A task counts at its reservation (its request until the master estimates lower);
        with `min_priority`, only what is held at that priority or above counts.
        """
        if min_priority is None:
            return self._machine_sum(machine, _reserved)
        parts: list[Resources] = []
        for t in self._running_on_any_order(machine):
            if self.in_alloc(t):
                continue  # counted through its alloc
            if t.priority >= min_priority:
                parts.append(t.reserved)
        for a in self.allocs_on(machine):
            if a.priority >= min_priority:
                parts.append(a.resources)
        return total(parts)

    def machine_committed_for_prod(self, machine: str) -> Resources:
        """What a new prod task must fit beside: prod tasks at their full requests (prod is
        never overcommitted), other tasks at their reservations, and every alloc."""
        return self._machine_sum(machine, _committed_for_prod)

    def _machine_sum(self, machine: str, weigh: Callable[[TaskId, Task], Resources]) -> Resources:
        """`weigh` summed over the RUNNING tasks on the machine outside allocs, plus its allocs.

        The sum over every RUNNING task is an index the task map keeps up to date (one lookup,
        not a pass over a machine of thousands of tasks); the tasks of jobs in allocs, when the
        cell has any, are taken out again one by one."""
        parts = [self.tasks.sums(_running_on, weigh).get(machine, ZERO)]
        alloc_jobs = self.jobs.group(_alloc_of)
        if alloc_jobs:
            in_allocs = frozenset().union(*alloc_jobs.values())
            tasks = self.tasks
            gone = [weigh(t, tasks[t]) for t in tasks.group(_running_on).get(machine, ()) if t.job in in_allocs]
            if gone:
                parts = [parts[0] - total(gone)]
        parts += [a.resources for a in self.allocs_on(machine)]
        return total(parts)

    def alloc_used(self, alloc: str) -> Resources:
        """The requests of the RUNNING tasks in an alloc: task `index` of each job naming its set."""
        a = self.allocs.get(alloc)
        if a is None:
            return ZERO
        parts = []
        for t in self.tasks.values():
            if t.state is TaskState.RUNNING and t.id.index == a.index:
                job = self.jobs.get(t.id.job)
                if job is not None and job.alloc == a.set:
                    parts.append(t.request)
        return total(parts)

    def quota_for(self, user: str, band: Band) -> Resources | None:
        """The quota that applies, or None: unlimited (no entry for the user nor for '*')."""
        if band is Band.BEST_EFFORT:
            return None  # Borg: quota at the lowest priority is effectively unlimited
        q = self.quotas.get(QuotaKey(user, band))
        if q is None:
            q = self.quotas.get(QuotaKey("*", band))
        return q

    def quota_used(self, user: str, band: Band, excluding: str | None = None) -> Resources:
        """What the user holds against its quota in a band: the total request of its admitted
        jobs outside alloc sets, and the resources of its allocs. A job in an alloc set runs
        in what the set reserved, so it is not counted a second time. `excluding`: a job key."""
        jobs = self.jobs
        from_jobs = (
            jobs[key].total_request()
            for key in jobs.group(_by_user_band).get((user, band), ())
            if key != excluding and jobs[key].alloc is None
        )
        from_allocs = (a.resources for a in self.allocs.values() if a.user == user and a.band is band)
        return total(itertools.chain(from_jobs, from_allocs))


_CELL_STATE_FIELDS = frozenset(f.name for f in fields(CellState))
