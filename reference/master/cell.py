"""The cell as the master sees it: the spec's CellState plus runtime facts, and a Draft that changes it only through spec actions."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from reference.jobspec import JobSpec
from reference.master import events
from spec.actions import ACTIONS, restart_allowed
from spec.fmap import FMap
from spec.model import CellState, Job, QuotaKey, Resources, Task, TaskId, TaskState, is_stale
from spec.taskid import format_task_id

HISTORY_LIMIT = 20  # task history entries kept in each task record


@dataclass(frozen=True)
class MachineInfo:
    """What the spec does not model about a machine: where its borglet is and what it reports."""

    address: str = ""
    isolation: str = ""
    usage: tuple[tuple[str, int], ...] = ()
    images: tuple[str, ...] = ()  # the container images its engine holds (--runtime docker)
    reason: str = ""  # why it is down, or why its borglet refuses the cell ("" when neither)
    # While drained (master/drain.py): when the drain began, and when the tasks still on it are
    # evicted whatever their jobs' budgets (0: no deadline); both 0 when not drained.
    drain_since: float = 0.0
    drain_deadline: float = 0.0


def machine_images(machines: Mapping[str, MachineInfo]) -> dict[str, tuple[str, ...]]:
    """The container images each machine's engine holds, of the machines that reported any:
    what the scheduler's package locality reads beside the jobs running there."""
    return {name: machines[name].images for name in machines if machines[name].images}


@dataclass(frozen=True)
class JobInfo:
    """The job file behind a spec Job (command, env, health check...) and when it was submitted."""

    spec: JobSpec
    submitted_at: float = 0.0
    # Its versions, oldest first, the last `jobhistory.KEPT` of them: (version, when, the job
    # file as canonical JSON, the fields changed since the version before).
    versions: tuple[tuple[int, float, str, tuple[str, ...]], ...] = ()
    # The task count its file last declared (submit, PUT, revert; None: a record older than
    # this field). A resize (PATCH, the autoscaler) changes the job's count, not this: a PUT of
    # an autoscaled job that declares this count again keeps the resize (master/jobhistory.py).
    declared_count: int | None = None


@dataclass(frozen=True)
class TaskInfo:
    """Runtime facts of one task incarnation, reported by its borglet and kept for BNS and history."""

    port: int = 0
    healthy: bool | None = None
    restarts: int = 0
    borglet_state: str = ""  # STARTING, RUNNING, ... as the borglet last reported
    started_at: float = 0.0  # when the borglet started its process (wall clock)
    seen: bool = False  # the borglet has reported it at least once
    # Bumped on every placement: an evicted task placed again is a new process on the
    # borglet, which never starts one task id twice.
    placement: int = 0
    reason: str = ""
    usage: tuple[tuple[str, int], ...] = ()
    history: tuple[tuple[str, float, str], ...] = ()  # (state, at, reason), oldest first
    # Wall-clock time the autoscaler chose this task to leave (0: not draining). A draining
    # task still runs but is out of the endpoints and BNS, so clients stop calling it first.
    draining_since: float = 0.0
    pid: int = 0  # the process its borglet last reported (0: none now)
    machine: str = ""  # the machine of its latest placement, kept after it left (for its logs)
    events: tuple[tuple[int, float, str, str], ...] = ()  # master/events.py, oldest first
    pending: str = ""  # while PENDING: why the last scheduling pass found it no place
    # The crash loop (master/backoff.py): consecutive short-lived incarnations of its index
    # before and including this one, when its next try is due (the master's new incarnation
    # while DEAD, its borglet's restart in place while RUNNING; 0: none due), and how its
    # last process ended ('exit 3', 'signal 9', 'oom', 'spawn: ...'; kept across restarts).
    failures: int = 0
    retry_at: float = 0.0
    last_exit: str = ""

    def with_history(self, state: str, at: float, reason: str) -> TaskInfo:
        entries = (*self.history, (state, at, reason))[-HISTORY_LIMIT:]
        return self.evolve(history=entries)

    def evolve(self, **changes: Any) -> TaskInfo:
        """`dataclasses.replace(self, **changes)`, without its walk of every field and its
        `__init__`: a copy of the fields with `changes`. A submit of 10,000 tasks makes
        20,000 of these (its event, then its history entry): `replace` was a third of it."""
        values = self.__dict__
        if not changes.keys() <= values.keys():
            raise TypeError(f"TaskInfo has no field {sorted(changes.keys() - values.keys())[0]!r}")
        return _bare_task_info({**values, **changes})


# The facts of a task no borglet has reported on yet: one shared value (TaskInfo is frozen),
# not a new one per lookup; replies of every machine are mapped against it each poll.
NO_TASK_INFO = TaskInfo()

_TASK_INFO_FIELDS = frozenset(f.name for f in fields(TaskInfo))


def task_info_of(values: dict[str, Any]) -> TaskInfo:
    """`TaskInfo(**values)` for a dict naming every field (the decoder's: each replica decodes
    every task record written), without `__init__`'s per-field work: a sixth of the time.
    `values` becomes the object's own: the caller hands it over."""
    if values.keys() != _TASK_INFO_FIELDS:
        raise TypeError(f"TaskInfo fields differ: {sorted(values.keys() ^ _TASK_INFO_FIELDS)}")
    return _bare_task_info(values)


def _bare_task_info(values: dict[str, Any]) -> TaskInfo:
    """A TaskInfo whose fields are `values`, made without `__init__` (the caller checked the
    names: `TaskInfo.evolve`, `task_info_of`)."""
    info = object.__new__(TaskInfo)
    object.__setattr__(info, "__dict__", values)
    return info


@dataclass(frozen=True)
class Cell:
    """One consistent view of the cell at an etcd revision."""

    state: CellState = field(default_factory=CellState)
    machines: dict[str, MachineInfo] = field(default_factory=dict)
    jobs: dict[str, JobInfo] = field(default_factory=dict)
    tasks: dict[TaskId, TaskInfo] = field(default_factory=dict)
    revision: int = 0
    leader: str = ""  # the leader key's value: "name=url", empty with no leader
    replicas: dict[str, str] = field(default_factory=dict)  # name -> url
    # The tasks a scheduling pass could act on (`is_pass_work`), kept up to date by the watch
    # cache from the keys each revision changed; None where the view was not built by a cache.
    work: frozenset[TaskId] | None = None
    # The work set less its PENDING tasks: what a pass may restart, roll or record as failed.
    # A scheduler process places the pending ones; the leader's pass, beside it, then walks
    # these, not the whole queue (a fill of 100,000 tasks queues them all at once).
    acting: frozenset[TaskId] | None = None
    # The RUNNING tasks, and a counter that moves whenever capacity may have been freed or
    # added (a machine changed, a task left a machine or changed what it holds there, a job
    # changed its request): a task found unschedulable stays so while it does not move.
    running: frozenset[TaskId] | None = None
    capacity_epoch: int = 0
    # Tasks by state and `running_confirmed`, as `views.task_counts` gives them, kept by the
    # watch cache as each task record changes; None where the view was not built by a cache.
    counts: dict[str, int] | None = None
    job_counts: dict[str, dict[str, int]] | None = None  # the same per job, never changed in place
    # The revision at which the leader key was last written: a new term, also of a replica
    # that lost its lease and won it again under the same name (0: unknown or no leader).
    leader_revision: int = 0

    def task_info(self, tid: TaskId) -> TaskInfo:
        return self.tasks.get(tid) or NO_TASK_INFO


def is_pass_work(task: Task, job: Job | None, latest: bool) -> bool:
    """Whether a scheduling pass could act on this task: it is PENDING, or RUNNING with a
    request or template older than its job's (a roll), or DEAD, the latest incarnation (`latest`) of an
    index its job still wants, and restartable under the job's policy. DEAD tasks that stay
    dead (killed, finished, or of a removed job) are no work, however many there are."""
    state = task.state
    if state is TaskState.PENDING:
        return True
    if job is None:
        return False
    if state is TaskState.RUNNING:
        return is_stale(task, job)
    return (
        latest
        and task.id.index < job.task_count
        and restart_allowed(job.restart_policy, task.cause)
    )


def will_restart(state: CellState, task: Task) -> bool:
    """Whether the leader makes a new incarnation of this DEAD task once its back-off is over:
    it is its index's newest (no incarnation after it, which restart and roll would add) and
    its job's policy restarts it (`is_pass_work`). The leader's restart pass and the crash-loop
    view (`views.task_view`) both ask this."""
    newer = TaskId(task.id.job, task.id.index, task.id.incarnation + 1)
    return (
        task.state is TaskState.DEAD
        and newer not in state.tasks
        and is_pass_work(task, state.jobs.get(task.id.job), True)
    )


def borglet_task_id(tid: TaskId, info: TaskInfo) -> str:
    """The id a borglet knows one placement of a task incarnation by."""
    return format_task_id(tid, info.placement)


_MISSING = object()  # not in a Tracked map's overlay: its base says
_GONE = object()  # removed by the Tracked map's writes


class Tracked(MutableMapping[Any, Any]):
    """A dict-like map over a base map that it never copies, and that remembers which keys
    were written or removed (`written`).

    A write goes to an overlay of the entries written (a removed one as a mark), and a read
    looks there before the base. A Tracked map made over another takes that one's base and a
    copy of its overlay, so each change of a writer's group costs the entries the group wrote,
    not the size of the cell: the draft's maps hold every task of the cell, and a copy of the
    whole map on a draft's first write cost the leader 8% of its CPU under arrivals at 10,000
    machines (docs/decisions.md). Iteration follows a dict copied and changed the same way:
    the base's order, new keys after it in the order they came, a key removed and set again
    moved to the end."""

    __slots__ = ("_base", "_over", "_readded", "_size", "written")

    def __init__(self, base: Mapping[Any, Any]) -> None:
        if isinstance(base, Tracked):
            self._base: Mapping[Any, Any] = base._base
            self._over: dict[Any, Any] = dict(base._over)
            self._readded: set[Any] = set(base._readded)  # base keys removed, then set again
            self._size = base._size
        else:
            self._base, self._over, self._readded, self._size = base, {}, set(), len(base)
        self.written: set[Any] = set()

    @property
    def data(self) -> Mapping[Any, Any]:
        """The map as one dict (the base itself while nothing was written): a copy of the
        whole map otherwise, for a caller that keeps it (the Fauxmaster's next cell)."""
        return self._base if not self._over else dict(self.items())

    def __getitem__(self, key: Any) -> Any:
        value = self._over.get(key, _MISSING)
        if value is _MISSING:
            return self._base[key]
        if value is _GONE:
            raise KeyError(key)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        value = self._over.get(key, _MISSING)
        if value is _MISSING:
            return self._base.get(key, default)
        return default if value is _GONE else value

    def __contains__(self, key: object) -> bool:
        value = self._over.get(key, _MISSING)
        return key in self._base if value is _MISSING else value is not _GONE

    def __iter__(self) -> Iterator[Any]:
        if not self._over:
            return iter(self._base)  # nothing written: the base's own iterator, at C speed
        return self._merged()

    def _merged(self) -> Iterator[Any]:
        over, readded = self._over, self._readded
        for key in self._base:
            value = over.get(key, _MISSING)
            if value is _MISSING or (value is not _GONE and key not in readded):
                yield key
        for key, value in over.items():
            if value is not _GONE and (key in readded or key not in self._base):
                yield key

    def __len__(self) -> int:
        return self._size

    def __setitem__(self, key: Any, value: Any) -> None:
        self.written.add(key)
        was = self._over.get(key, _MISSING)
        if was is _GONE:
            del self._over[key]  # set again after its removal: it moves to the end, as in a dict
            if key in self._base:
                self._readded.add(key)
            self._size += 1
        elif was is _MISSING and key not in self._base:
            self._size += 1
        self._over[key] = value

    def __delitem__(self, key: Any) -> None:
        self.pop(key)

    def pop(self, key: Any, *default: Any) -> Any:
        self.written.add(key)
        if key not in self:
            if default:
                return default[0]
            raise KeyError(key)
        value = self[key]
        self._over[key] = _GONE
        self._size -= 1
        return value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return dict(self.items()) == dict(other.items())

    def __repr__(self) -> str:
        return f"Tracked({dict(self.items())!r})"


def changed_keys(before: FMap[Any, Any], after: FMap[Any, Any]) -> set[Any]:
    """The keys whose entries differ between two FMaps (by identity), cheaply where `after`
    was made from `before` by one set, update or remove."""
    if before is after:
        return set()
    known = after.changed_since(before)
    if known is not None:
        return set(known)
    keys = {k for k, v in after.items() if before.get(k) is not v}
    keys.update(k for k in before if k not in after)
    return keys


class Draft:
    """A cell being changed by one writer: spec actions change the state, nothing else does.

    Every task whose state a step changes gets a history entry with the step's reason. The
    draft keeps the keys its steps and its callers changed (`task_keys`, `job_keys`,
    `machine_keys`: a superset of what differs from the base), so the writer's diff and
    `changed` cost what changed, not the size of the cell.
    """

    def __init__(self, base: Cell, now: float) -> None:
        self.base = base
        self.now = now
        self.state = base.state
        self.machines: Tracked = Tracked(base.machines)
        self.jobs: Tracked = Tracked(base.jobs)
        self.tasks: Tracked = Tracked(base.tasks)
        # Configuration written beside the state; None deletes the entry (its user falls back to "*").
        self.quotas: dict[QuotaKey, Resources | None] = {}
        self.steps: list[str] = []
        # Tasks whose spec state a step of this draft changed, added or removed.
        self.touched: set[TaskId] = set()
        self._jobs_stepped: set[str] = set()
        self._machines_stepped: set[str] = set()
        self.alloc_keys: set[str] = set()  # the allocs a step created or deleted

    def step(self, action: str, *args: Any, reason: str = "") -> bool:
        """Apply one spec action; False (and no change) when its guard is false."""
        before = self.state
        nxt = ACTIONS[action](before, *args)
        if nxt is None:
            return False
        self._record(before, nxt, reason or action, action)
        self._jobs_stepped |= changed_keys(before.jobs, nxt.jobs)
        self._machines_stepped |= changed_keys(before.machines, nxt.machines)
        if before.allocs is not nxt.allocs:
            self.alloc_keys |= changed_keys(before.allocs, nxt.allocs)
        self.state = nxt
        self.steps.append(action)
        return True

    @property
    def task_keys(self) -> set[TaskId]:
        return self.touched | self.tasks.written

    @property
    def job_keys(self) -> set[str]:
        return self._jobs_stepped | self.jobs.written

    @property
    def machine_keys(self) -> set[str]:
        return self._machines_stepped | self.machines.written

    def _record(self, before: CellState, after: CellState, reason: str, action: str = "") -> None:
        old, new = before.tasks, after.tasks
        for tid in changed_keys(old, new):
            task, prev = new.get(tid), old.get(tid)
            if prev is task:
                continue
            self.touched.add(tid)
            if task is None:
                self.tasks.pop(tid, None)
            elif prev is None or prev.state is not task.state:
                info = self.tasks.get(tid) or NO_TASK_INFO
                if prev is not None and prev.machine != task.machine:
                    # A new placement (or none): the old process's facts no longer apply.
                    info = info.evolve(
                        port=0, healthy=None, borglet_state="", seen=False, usage=(),
                        started_at=0.0, placement=info.placement + (task.machine is not None),
                        pid=0, machine=task.machine or info.machine, retry_at=0.0,
                    )
                info = self._with_event(info, action, reason, prev, task)
                self.tasks[tid] = info.with_history(task.state.value, self.now, reason)

    def _with_event(self, info: TaskInfo, action: str, reason: str, prev: Task | None, task: Task) -> TaskInfo:
        job = self.state.jobs.get(task.id.job)
        policy = job.restart_policy.value if job is not None else None
        if prev is None and action == "restart" and task.id.incarnation > 0:
            # Say why: the end of the incarnation it replaces, whose record the cell drops.
            before = TaskId(task.id.job, task.id.index, task.id.incarnation - 1)
            # Its end, not the restart back-off that followed it.
            ended = [e for e in self.base.task_info(before).events if e[2] != "backoff"]
            if ended:
                reason = f"{reason}; incarnation {before.incarnation} {ended[-1][2]}: {ended[-1][3]}"
        event = events.from_step(action, reason, prev, task, policy)
        if event is None:
            return info
        pending = info.pending if task.state is TaskState.PENDING else ""
        return info.evolve(events=events.append(info.events, self.now, [event]), pending=pending)

    def task_info(self, tid: TaskId) -> TaskInfo:
        return self.tasks.get(tid) or NO_TASK_INFO

    def machine_info(self, name: str) -> MachineInfo:
        return self.machines.get(name) or MachineInfo()

    def set_task_info(self, tid: TaskId, info: TaskInfo) -> None:
        """Take a task's runtime facts (its borglet's report). Its events, its last machine
        and its pending reason are the cell's own record: kept from the draft, with events
        added for what changed in the facts (events.from_report)."""
        task = self.state.tasks.get(tid)
        if task is None:
            return
        cur = self.task_info(tid)
        found = events.from_report(cur, info, task.machine)
        new = replace(
            info, events=events.append(cur.events, self.now, found), machine=cur.machine, pending=cur.pending
        )
        if new != cur:  # facts read again unchanged (a usage sample that moved nothing) write nothing
            self.tasks[tid] = new

    @property
    def changed(self) -> bool:
        b = self.base
        return (
            self.state is not b.state
            or self.quotas != {}
            or any(b.machines.get(k) is not self.machines.get(k) for k in self.machines.written)
            or any(b.jobs.get(k) is not self.jobs.get(k) for k in self.jobs.written)
            or any(b.tasks.get(k) is not self.tasks.get(k) for k in self.tasks.written)
        )
