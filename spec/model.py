"""The cell's data: resources, machines, jobs, tasks, allocs, quotas, and the cell state.

Everything here is immutable and hashable, so the explorer can deduplicate states and a
transition can never change the state it was given. No I/O, no clock, no randomness.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Generic, NamedTuple, TypeVar

K = TypeVar("K")
V = TypeVar("V")
GROUP_MIN = 64  # maps smaller than this keep no index: a scan is as cheap, and memory is not spent


class FMap(Mapping[K, V], Generic[K, V]):
    """An immutable, hashable mapping. `set`, `update` and `remove` return a new map, which
    remembers (weakly) the map it was made from and the keys that changed: `changed_since`
    lets a user of many large maps (the master's writer) see what a step changed without
    comparing every entry. `group` indexes the keys by a function of each entry; a map made
    from one with an index gets the index updated from the changed keys, so the queries of
    a cell of thousands of tasks cost what one job or machine holds, not the whole cell."""

    __slots__ = ("_d", "_h", "_parent", "_changed", "_groups", "__weakref__")

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._d: dict[K, V] = dict(items)
        self._h: int | None = None
        self._parent: weakref.ref[FMap[K, V]] | None = None
        self._changed: tuple[K, ...] = ()
        self._groups: dict[Callable[[K, V], Any], dict[Any, frozenset[K]]] | None = None

    def _derived(self, d: dict[K, V], changed: tuple[K, ...]) -> FMap[K, V]:
        out: FMap[K, V] = FMap.__new__(FMap)
        out._d, out._h, out._parent, out._changed = d, None, weakref.ref(self), changed
        out._groups = None
        if self._groups:
            out._groups = {by: _regroup(groups, by, self._d, d, changed) for by, groups in self._groups.items()}
        return out

    def group(self, by: Callable[[K, V], Any]) -> Mapping[Any, frozenset[K]]:
        """The keys grouped by `by(key, value)` (None: in no group). `by` must be one
        module-level function (its identity names the index) that depends only on the entry."""
        groups = self._groups.get(by) if self._groups is not None else None
        if groups is None:
            built: dict[Any, set[K]] = {}
            for k, v in self._d.items():
                g = by(k, v)
                if g is not None:
                    built.setdefault(g, set()).add(k)
            groups = {g: frozenset(ks) for g, ks in built.items()}
            if len(self._d) >= GROUP_MIN:  # small maps (the explorer's) are grouped afresh
                if self._groups is None:
                    self._groups = {}
                self._groups[by] = groups
        return groups

    def changed_since(self, other: FMap[K, V]) -> tuple[K, ...] | None:
        """The keys whose entries may differ from `other`'s, when this map was made from
        `other` by one `set`, `update` or `remove`; None when that is not known."""
        if self is other:
            return ()
        if self._parent is not None and self._parent() is other:
            return self._changed
        return None

    def __getitem__(self, key: K) -> V:
        return self._d[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    # Direct dict views: the Mapping defaults go through __getitem__ per key, and the
    # explorer spends most of its time iterating these maps.
    def __contains__(self, key: object) -> bool:
        return key in self._d

    def get(self, key: K, default: Any = None) -> Any:
        return self._d.get(key, default)

    def keys(self):  # type: ignore[override]
        return self._d.keys()

    def values(self):  # type: ignore[override]
        return self._d.values()

    def items(self):  # type: ignore[override]
        return self._d.items()

    def __hash__(self) -> int:
        if self._h is None:
            self._h = hash(frozenset(self._d.items()))
        return self._h

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FMap):
            return self._d == other._d
        return NotImplemented

    def __repr__(self) -> str:
        return f"FMap({self._d!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FMap, (self._d,))  # the entries only: a weak reference does not pickle

    def set(self, key: K, value: V) -> FMap[K, V]:
        d = dict(self._d)
        d[key] = value
        return self._derived(d, (key,))

    def update(self, items: Mapping[K, V]) -> FMap[K, V]:
        d = dict(self._d)
        d.update(items)
        return self._derived(d, tuple(items))

    def remove(self, key: K) -> FMap[K, V]:
        d = dict(self._d)
        d.pop(key, None)
        return self._derived(d, (key,))

    def successor(self, items: dict[K, V], changed: Iterable[K]) -> FMap[K, V]:
        """A map of `items` (a dict the caller hands over and no longer changes) that differs
        from this one only at the `changed` keys: it gets this map's indexes updated."""
        return self._derived(items, tuple(changed))

    def edit(self, put: Mapping[K, V], remove: Iterable[K] = ()) -> FMap[K, V]:
        """`update(put)` and then `remove` of each key in `remove`, as one step."""
        d = dict(self._d)
        d.update(put)
        gone = tuple(remove)
        for key in gone:
            d.pop(key, None)
        return self._derived(d, tuple(dict.fromkeys((*put, *gone))))


_MISSING: Any = object()


def _regroup(
    groups: dict[Any, frozenset[K]], by: Callable[[K, V], Any], old: dict[K, V], new: dict[K, V],
    changed: tuple[K, ...],
) -> dict[Any, frozenset[K]]:  # fmt: skip
    """An index of `old` updated to `new`, which differ only at the `changed` keys."""
    out = dict(groups)
    for k in dict.fromkeys(changed):
        was, now = old.get(k, _MISSING), new.get(k, _MISSING)
        g0 = None if was is _MISSING else by(k, was)
        g1 = None if now is _MISSING else by(k, now)
        if g0 == g1:
            continue
        if g0 is not None:
            left = out[g0] - {k}
            if left:
                out[g0] = left
            else:
                del out[g0]
        if g1 is not None:
            out[g1] = out.get(g1, frozenset()) | {k}
    return out


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
        return Resources(tuple(sorted((k, int(v)) for k, v in d.items() if v)))

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
        d = self.as_dict()
        for k, v in other.items:
            d[k] = d.get(k, 0) + v
        return Resources.of(d)

    def __sub__(self, other: Resources) -> Resources:
        d = self.as_dict()
        for k, v in other.items:
            d[k] = d.get(k, 0) - v
        return Resources.of(d)

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


ZERO = Resources()


def total(rs: Iterable[Resources]) -> Resources:
    acc: dict[str, int] = {}
    for r in rs:
        for k, v in r.items:
            acc[k] = acc.get(k, 0) + v
    return Resources.of(acc)


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
    alloc: str | None = None  # run inside this alloc (its machine, its resources)
    package: str = ""  # the package (binary) the tasks run, for locality
    version: int = 0  # bumped by every update

    @property
    def key(self) -> str:
        return job_key(self.user, self.name)

    @property
    def band(self) -> Band:
        return band_of(self.priority)

    def total_request(self) -> Resources:
        return self.request.scale(self.task_count)


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


@dataclass(frozen=True, slots=True)
class Alloc:
    """Resources reserved on one machine, in which tasks of jobs naming it may run."""

    name: str
    machine: str
    resources: Resources
    priority: int
    user: str = ""


@dataclass(frozen=True, slots=True)
class QuotaKey:
    user: str  # "*" is the default for users without an entry of their own
    band: Band


# --- the cell --------------------------------------------------------------------------


def _by_job(tid: TaskId, task: Task) -> str:
    return tid.job


def _running_on(tid: TaskId, task: Task) -> str | None:
    return task.machine if task.state is TaskState.RUNNING else None


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
        return replace(self, **changes)

    # --- queries used by actions, invariants and the scheduler ---

    def task_ids_of(self, job: str) -> frozenset[TaskId]:
        """Every incarnation the state holds of the job's tasks."""
        return self.tasks.group(_by_job).get(job, frozenset())

    def tasks_of(self, job: str) -> list[Task]:
        tasks = self.tasks
        return [tasks[t] for t in sorted(tasks.group(_by_job).get(job, ()))]

    def latest(self, job: str, index: int) -> Task | None:
        """The newest incarnation of one task index."""
        best: TaskId | None = None
        for tid in self.tasks.group(_by_job).get(job, ()):
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

    def in_alloc(self, task: Task) -> bool:
        """Whether the task's job runs inside an alloc (its resources count through the alloc)."""
        job = self.jobs.get(task.id.job)
        return job is not None and job.alloc is not None

    def machine_reserved(self, machine: str, min_priority: int | None = None) -> Resources:
        """What RUNNING tasks outside allocs reserve on a machine, plus its allocs.

        A task counts at its reservation (its request until the master estimates lower);
        with `min_priority`, only what is held at that priority or above counts.
        """
        parts: list[Resources] = []
        for t in self._running_on_any_order(machine):
            if self.in_alloc(t):
                continue  # counted through its alloc
            if min_priority is None or t.priority >= min_priority:
                parts.append(t.reserved)
        for a in self.allocs_on(machine):
            if min_priority is None or a.priority >= min_priority:
                parts.append(a.resources)
        return total(parts)

    def machine_committed_for_prod(self, machine: str) -> Resources:
        """What a new prod task must fit beside: prod tasks at their full requests (prod is
        never overcommitted), other tasks at their reservations, and every alloc."""
        parts: list[Resources] = []
        for t in self._running_on_any_order(machine):
            if self.in_alloc(t):
                continue
            parts.append(t.request if is_prod(t.priority) else t.reserved)
        parts += [a.resources for a in self.allocs_on(machine)]
        return total(parts)

    def alloc_used(self, alloc: str) -> Resources:
        parts = []
        for t in self.tasks.values():
            if t.state is TaskState.RUNNING:
                job = self.jobs.get(t.id.job)
                if job is not None and job.alloc == alloc:
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
        """The total request of the user's admitted jobs in a band."""
        jobs = self.jobs
        return total(
            jobs[key].total_request()
            for key in jobs.group(_by_user_band).get((user, band), ())
            if key != excluding
        )
