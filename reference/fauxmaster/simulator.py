"""The Fauxmaster: the master's own decision code run on a cell held in memory, with a simulated clock and stub borglets.

Borg's Fauxmaster is the Borgmaster's code with the borglets stubbed out. Here every change
goes through a `Draft` (spec actions only) and every decision is the master's: a submitted
job through `mutations.submit_job` (validation, admission, quota), a scheduling pass through
the leader's pass as the master's dry run runs it (`master.dryrun.one_pass`: `restart_dead`,
`roll_stale`, `plan_for`, `commit_plan`, `record_pending_reasons`), a machine failure
through the poller's `machine_down` step. What is simulated is only what a borglet would do: a placed task's process starts at once or after
`start_delay_s`, and a task of a job given a runtime finishes that long after it started;
what a borglet would report of a task's usage is given to `reclaim`, which runs the
leader's reclaimer tick on it.
A trace's jobs arrive at their moments (`arrive`) and depart after their runtimes. Nothing
sleeps: `advance` jumps the clock from one borglet event or arrival to the next.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from reference.elastic.reservation import DEFAULT_HALF_LIFE_S, DEFAULT_MARGIN
from reference.jobspec import JobSpec
from reference.master.cell import Cell, Draft, JobInfo
from reference.master.dryrun import one_pass
from reference.master.leader import pass_work
from reference.master.mutations import submit_job
from reference.master.reclaimer import apply_reservations, reservation_changes
from reference.scheduler import Plan, SchedulerConfig
from spec.model import CellState, Job, Machine, QuotaKey, Resources, TaskId, TaskState

T = TypeVar("T")
RECLAIM_INTERVAL_S = 5.0  # the leader's reclaimer ticks this often (`Reclaimer` interval)


def job_file_of(job: Job) -> JobSpec:
    """A job file for a workload's job, which has none: the job's own fields, and a command
    that is never run (a checkpoint records every job with its file)."""
    request = {k: (f"{v}m" if k == "cpu" else v) for k, v in job.request.as_dict().items()}
    return JobSpec.model_validate({
        "name": job.name, "user": job.user, "priority": job.priority, "task_count": job.task_count,
        "request": request, "command": ["true"], "restart_policy": job.restart_policy.value,
        "appclass": job.appclass.value, "package": job.package, "alloc": job.alloc,
        "constraints": [{"attr": c.attr, "op": c.op.value, "values": list(c.values)} for c in job.constraints],
    })  # fmt: skip


@dataclass(frozen=True)
class PassResult:
    """One scheduling pass: its plan, what it committed, and the restarts and rolls before it."""

    plan: Plan
    placed: int
    conflicts: int
    restarted: int
    rolled: int
    at: float


@dataclass(order=True)
class _Event:
    at: float
    seq: int
    kind: str = field(compare=False)  # "start" or "end"
    task: TaskId = field(compare=False)
    placement: int = field(compare=False)


class Fauxmaster:
    """A cell in memory changed only by the master's code; `now` is simulated seconds."""

    def __init__(
        self,
        cell: Cell | None = None,
        *,
        config: SchedulerConfig | None = None,
        start_delay_s: float = 0.0,
        runtimes: Mapping[str, float] | None = None,
        now: float = 0.0,
    ) -> None:
        self.cell = cell if cell is not None else Cell()
        self.config = config or SchedulerConfig()
        self.start_delay_s = start_delay_s
        self.runtimes = dict(runtimes or {})  # job key -> seconds each task runs before it finishes
        self.now = now
        self.passes: list[PassResult] = []
        self._events: list[_Event] = []
        self._seq = 0
        self._arrivals: list[tuple[float, int, Job]] = []  # (moment, order, job) a trace submits
        self.refused: list[tuple[float, str]] = []  # arrivals the cell refused: (moment, job key)
        self._reclaimed_at: dict[TaskId, float] = {}  # the reclaimer's clock of each task's last estimate

    @classmethod
    def from_workload(
        cls, machines: Iterable[Machine], jobs: Iterable[Job] = (), quotas: Mapping[QuotaKey, Resources] | None = None,
        **kw: Any,
    ) -> Fauxmaster:  # fmt: skip
        """A cell of these machines and jobs (a trace's or a synthetic workload's), each job
        submitted through the spec's `submit` (its guard: valid and within `quotas`)."""
        fm = cls(**kw)
        now = fm.now

        def build(d: Draft) -> None:
            # Quotas are configuration, written beside the state as the leader's defaults are.
            for key, amount in (quotas or {}).items():
                d.state = d.state.with_(quotas=d.state.quotas.set(key, amount))
            for m in machines:
                if not d.step("machine_add", m, reason="machine added"):
                    raise ValueError(f"machine {m.name}: the cell refuses it (a duplicate name?)")
            for j in jobs:
                d.jobs[j.key] = JobInfo(job_file_of(j), now)
                if not d.step("submit", j, reason="submitted"):
                    raise ValueError(f"job {j.key}: the cell refuses it (invalid, a duplicate, or over quota)")

        fm.change(build)
        return fm

    @property
    def state(self) -> CellState:
        return self.cell.state

    # --- changes -----------------------------------------------------------------------------

    def change(self, fn: Callable[[Draft], T]) -> T:
        """Run `fn` on a draft of the cell and keep what it did; if it raises, nothing changes."""
        d = Draft(self.cell, self.now)
        result = fn(d)
        self._commit(d)
        return result

    def _commit(self, d: Draft) -> None:
        before = self.cell
        # The draft's maps copied themselves on their first write; unwritten ones are the
        # base's own dicts, shared (a view's dicts are never changed in place).
        self.cell = Cell(
            state=d.state, machines=d.machines.data, jobs=d.jobs.data, tasks=d.tasks.data,
            revision=before.revision + 1,
        )  # fmt: skip
        for tid in d.touched:
            task = d.state.tasks.get(tid)
            old = before.state.tasks.get(tid)
            if task is None or task.state is not TaskState.RUNNING:
                continue
            if old is not None and old.state is TaskState.RUNNING and old.machine == task.machine:
                continue
            placement = self.cell.task_info(tid).placement
            self._at(self.now + self.start_delay_s, "start", tid, placement)
            runtime = self.runtimes.get(tid.job)
            if runtime is not None:
                self._at(self.now + self.start_delay_s + runtime, "end", tid, placement)

    def _at(self, at: float, kind: str, tid: TaskId, placement: int) -> None:
        self._seq += 1
        heapq.heappush(self._events, _Event(at, self._seq, kind, tid, placement))

    # --- the master's operations -------------------------------------------------------------

    def apply_job(self, job: JobSpec | Mapping[str, Any]) -> str:
        """Submit a job as `POST /v1/jobs` does (validation, admission against quota); returns
        its key. Raises `mutations.ApiError` with the API's status and wording if refused."""
        payload = job.canonical() if isinstance(job, JobSpec) else dict(job)
        return self.change(lambda d: submit_job(d, payload))

    def schedule_all_pending(self, seed: int = 0) -> PassResult:
        """One leader pass: restart what its job's policy restarts, roll stale tasks, plan every
        PENDING task with `seed`, commit the plan and record why the rest found no place."""

        result = self.change(lambda d: PassResult(*one_pass(d, self.config, seed), self.now))
        self.passes.append(result)
        self._run_due()
        return result

    def reclaim(
        self,
        usage: Mapping[TaskId, Mapping[str, int]],
        *,
        margin: float = DEFAULT_MARGIN,
        half_life: float = DEFAULT_HALF_LIFE_S,
        interval: float = RECLAIM_INTERVAL_S,
    ) -> int:
        """One tick of the leader's reclaimer on the stub borglets' `usage` (task -> usage
        figures as a borglet reports them, e.g. {"cpu_milli": 120, "ram_bytes": 2**27}): each
        running task's reservation moves toward its usage plus `margin`, and non-prod work in
        reclaimed room a growing reservation needs back is evicted. Returns the reservations
        written. The estimate is `master.reclaimer.reservation_changes`, the commit
        `apply_reservations`, both as the leader runs them; `now` is the clock they read (run
        the Fauxmaster's clock from past 0: a task started at 0 reads as never started)."""
        changes = reservation_changes(
            self.cell, {t: tuple(u.items()) for t, u in usage.items()}, self.now, self.now, self._reclaimed_at,
            interval=interval, margin=margin, half_life=half_life,
        )  # fmt: skip
        return self.change(lambda d: apply_reservations(d, changes)) if changes else 0

    def fail_machine(self, name: str) -> list[TaskId]:
        """The machine goes down as the poller marks it: its RUNNING tasks are lost. Returns them."""
        if name not in self.state.machines:
            raise KeyError(f"no machine {name}")
        lost = [t.id for t in self.state.running_on(name)]
        if not self.change(lambda d: d.step("machine_down", name, reason=f"machine {name} down")):
            raise ValueError(f"machine {name} is already down")
        return lost

    def fail_rack(self, rack: str, attr: str = "rack") -> list[TaskId]:
        """Every up machine whose `attr` attribute (or failure domain) is `rack` goes down."""
        names = [m.name for m in self.state.machines.values() if m.up and rack in (m.attr(attr), m.failure_domain)]
        if not names:
            raise KeyError(f"no up machine has {attr}={rack} or failure domain {rack}")
        lost: list[TaskId] = []
        for name in sorted(names):
            lost += self.fail_machine(name)
        return lost

    def advance(self, seconds: float, seed: int = 0, schedule: bool = True) -> list[PassResult]:
        """Move the clock on by `seconds`, through each borglet event due (a task's process
        starting, a task finishing); with `schedule`, a pass after each moment that left work."""
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        until = self.now + seconds
        passes: list[PassResult] = []
        while (due := self._next_moment()) <= until:
            self.now = max(self.now, due)
            arrived = self._arrive_due()
            ended = self._run_due()
            work = pass_work(self.state)
            # A task that ended freed room: the tasks found no place before may fit now.
            if schedule and work and (ended or arrived or work - self._unplaceable()):
                passes.append(self.schedule_all_pending(seed))
        self.now = until
        return passes

    def arrive(self, at: float, job: Job, runtime: float | None = None) -> None:
        """A job that a trace submits at `at` (simulated seconds): `advance` submits it then,
        through the spec's `submit` as `from_workload` does, and a pass follows; each of its
        tasks finishes `runtime` seconds after it starts (a trace's departure), or never."""
        if at < self.now:
            raise ValueError(f"job {job.key} arrives at {at}, before now ({self.now})")
        if runtime is not None:
            self.runtimes[job.key] = runtime
        self._seq += 1
        heapq.heappush(self._arrivals, (at, self._seq, job))

    def _next_moment(self) -> float:
        """When the next borglet event or arrival is due (inf: none is)."""
        return min(
            self._events[0].at if self._events else math.inf,
            self._arrivals[0][0] if self._arrivals else math.inf,
        )

    def _arrive_due(self) -> bool:
        """Submit the jobs due by `now`; one the cell refuses (a duplicate, over quota) is kept
        in `refused` with the moment. Returns whether any was submitted."""
        arrived = False
        while self._arrivals and self._arrivals[0][0] <= self.now:
            _at, _seq, job = heapq.heappop(self._arrivals)

            def submit(d: Draft, j: Job = job) -> bool:
                if not d.step("submit", j, reason="submitted"):
                    return False  # nothing written: no job info without its job
                d.jobs[j.key] = JobInfo(job_file_of(j), self.now)
                return True

            if self.change(submit):
                arrived = True
            else:
                self.refused.append((self.now, job.key))
        return arrived

    def _unplaceable(self) -> set[TaskId]:
        """The PENDING tasks the last pass found no place for: another pass now would not
        place them either until an event changes the cell, so they alone are not work."""
        if not self.passes:
            return set()
        return {u.task for u in self.passes[-1].plan.unschedulable}

    def _run_due(self) -> bool:
        """The borglet events due by `now`, in order; a stale one (its task evicted, lost or
        placed again since) is dropped. Returns whether a task ended."""
        ended = False
        while self._events and self._events[0].at <= self.now:
            e = heapq.heappop(self._events)
            task = self.state.tasks.get(e.task)
            info = self.cell.task_info(e.task)
            if task is None or task.state is not TaskState.RUNNING or info.placement != e.placement:
                continue
            if e.kind == "start":
                started = replace(info, borglet_state="RUNNING", seen=True, started_at=e.at)
                self.change(lambda d, t=e.task, i=started: d.set_task_info(t, i))
            else:
                ended = self.change(lambda d, t=e.task: d.step("finish", t, reason="finished")) or ended
        return ended
