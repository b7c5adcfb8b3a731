"""The scheduler process's working copy of the cell carried from one pass to the next.

A pass built its `CellView` from a snapshot of the whole cell: every running task made into a
row's victim, every machine into a row. At 10,000 machines and 100,000 tasks that took 1.7 s of
CPU for a pass that placed 100 arriving tasks (0.06 s at 1,000 machines), so at a 0.3-core
budget an arriving task waited seconds for the pass before its own (docs/decisions.md, issue 43).

`CarriedCell` keeps the view of the last pass, never handed to a pass, and brings it to the new
state by the keys that changed: a task that started, ended or moved redoes the rows of its
machines (from `CellState.running_on`, an index the state keeps), a machine drained or back up
redoes its row. A pass works on a copy (`CellView.working_copy`). Whatever it cannot carry
exactly, it builds afresh, as before: the first pass, a state not made from the last one by its
changes (`FMap.changed_since`), machines added, removed or reshaped, allocs changed, a running
task in an alloc, or a resource name that comes or goes. A carried view equals one built
afresh; the tests build both and compare them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace

from spec.model import CPU, RAM, CellState, Job, Task, TaskId, TaskState

from .adapter import pending_task, running_task, snapshot_from_state
from .cellview import CellView
from .config import SchedulerConfig
from .engine import plan_pass
from .plan import Plan
from .snapshot import PendingTask, Snapshot
from .terms import package_holders

SEED = 0x5A17  # as `engine.Pass` seeds the view it builds (a pass sets its salt itself)


def _running(t: Task | None) -> bool:
    return t is not None and t.state is TaskState.RUNNING and t.machine is not None


# Past this share of the cell's tasks changed since the view was last brought forward, it is
# built afresh: redoing that many rows costs about what a build does.
CARRY_MAX_SHARE = 0.25


class CarriedCell:
    """The last pass's cell view and the state it was built on, brought forward each pass.

    `follow` is called with every state the owner reads, planned on or not, and only notes
    the keys that changed (what `FMap.changed_since` tells between one state and the next: a
    state skipped breaks that chain). `view` and `plan` redo the rows those keys touch."""

    def __init__(self) -> None:
        self._state: CellState | None = None  # the state the view's rows are of
        self._seen: CellState | None = None  # the last state followed
        self._tasks: set[TaskId] = set()  # task keys changed from `_state` to `_seen`
        self._jobs: set[str] = set()  # job keys changed from `_state` to `_seen`
        self._lost = False  # a state followed was not made from the one before: build afresh
        self._images: dict[str, tuple[str, ...]] = {}
        self._view: CellView | None = None
        self._names: Counter[str] = Counter()  # resource names of the machines and running tasks
        self.built = 0  # views built afresh
        self.carried = 0  # views brought forward
        self.rows_redone = 0

    def plan(
        self,
        state: CellState,
        config: SchedulerConfig,
        seed: int,
        pending_ids: Collection[TaskId],
        images: Mapping[str, Iterable[str]] | None = None,
        crashes: Mapping[tuple[str, int], Mapping[str, int]] | None = None,
    ) -> Plan:
        """One pass over `pending_ids` in `state`: the plan `adapter.plan_for` makes."""
        pending = self._pending(state, pending_ids)
        view = self._bring(state, images or {}, pending)
        snapshot = Snapshot(machines=(), pending=tuple(pending), crashes=crashes or {})
        return plan_pass(snapshot, config, seed, cell=view.working_copy(), job_on=lambda job: _job_on(state, job))

    def follow(self, state: CellState) -> None:
        """Note the keys that changed from the last state followed to `state`."""
        seen = self._seen
        self._seen = state
        if seen is None or state is seen or self._view is None or self._lost:
            return
        tasks = state.tasks.changed_since(seen.tasks)
        if tasks is None:
            self._lose()
            return
        self._tasks.update(tasks)
        if len(self._tasks) > CARRY_MAX_SHARE * len(state.tasks):
            self._lose()
            return
        if state.jobs is not seen.jobs:
            jobs = state.jobs.changed_since(seen.jobs)
            if jobs is None:  # a job map made afresh: its entries compared (jobs are few beside tasks)
                jobs = tuple(k for k in state.jobs.keys() | seen.jobs.keys() if state.jobs.get(k) is not seen.jobs.get(k))
            self._jobs.update(jobs)

    def view(
        self, state: CellState, images: Mapping[str, Iterable[str]], pending_ids: Collection[TaskId] = ()
    ) -> CellView:
        """The view of `state` for a pass over `pending_ids` (not to be changed: a pass takes a
        `working_copy`)."""
        return self._bring(state, images, self._pending(state, pending_ids))

    def _lose(self) -> None:
        self._lost = True
        self._tasks.clear()
        self._jobs.clear()

    @staticmethod
    def _pending(state: CellState, pending_ids: Collection[TaskId]) -> list[PendingTask]:
        pending = [p for tid in pending_ids if (t := state.tasks.get(tid)) is not None
                   and t.state is TaskState.PENDING and (p := pending_task(state, t)) is not None]  # fmt: skip
        pending.sort(key=lambda p: (p.id.job, p.id.index, p.id.incarnation))
        return pending

    def _bring(self, state: CellState, images: Mapping[str, Iterable[str]], pending: list[PendingTask]) -> CellView:
        self.follow(state)
        imgs = {m: tuple(sorted(v)) for m, v in images.items() if v}
        names: set[str] = set()
        for p in pending:
            names |= p.request.names()
        view = self._view
        if view is None or self._lost or not self._carry(state, imgs) or self._dims(names) != view.dims:
            self._build(state, imgs, pending)
        elif self._tasks or self._jobs or state is not self._state:
            self.carried += 1
        self._state = self._seen = state
        self._images = imgs
        self._lost = False
        self._tasks.clear()
        self._jobs.clear()
        assert self._view is not None
        return self._view

    # --- afresh --------------------------------------------------------------------------------

    def _build(self, state: CellState, images: dict[str, tuple[str, ...]], pending: Iterable[PendingTask]) -> None:
        # No pending ids: the one walk of the cell's tasks takes its running ones only.
        snapshot = replace(snapshot_from_state(state, pending_ids=(), images=images), pending=tuple(pending))
        self._view = CellView(snapshot, SEED)
        self._names = Counter()
        for m in snapshot.machines:
            self._names.update(m.capacity.names())
        for r in snapshot.running:
            self._names.update(r.request.names())
        self.built += 1

    def _dims(self, pending_names: set[str]) -> tuple[str, ...]:
        """The dimensions a view built afresh would have (`cellview.resource_dims`)."""
        names = {n for n, c in self._names.items() if c > 0} | pending_names
        return (CPU, RAM, *sorted(names - {CPU, RAM}))

    # --- carried -------------------------------------------------------------------------------

    def _carry(self, state: CellState, images: dict[str, tuple[str, ...]]) -> bool:
        """Bring the view to `state`; False where only a view built afresh is sure to be right."""
        old = self._state
        view = self._view
        assert old is not None and view is not None
        if state.allocs is not old.allocs and state.allocs != old.allocs:
            return False
        redo: dict[str, None] = {}  # machine names, in the order found
        if state.machines is not old.machines:
            if len(state.machines) != len(old.machines):
                return False
            for name, m in state.machines.items():
                was = old.machines.get(name)
                if was is m:
                    continue
                if was is None or (was.capacity, was.attrs, was.failure_domain) != (m.capacity, m.attrs, m.failure_domain):
                    return False
                redo[name] = None
        if self._jobs and not self._jobs_carried(old, state, redo):
            return False
        if images != self._images:
            for name in images.keys() | self._images.keys():
                if images.get(name) != self._images.get(name):
                    redo[name] = None
        names = self._names
        for tid in self._tasks:
            was, now = old.tasks.get(tid), state.tasks.get(tid)
            if was is now:
                continue
            for t, st, sign in ((was, old, -1), (now, state, 1)):
                if not _running(t):
                    continue
                assert t is not None and t.machine is not None
                job = st.jobs.get(tid.job)
                if job is not None and job.alloc is not None:
                    return False  # counted through its alloc: the alloc's row, not the task's
                for n in t.request.names():
                    names[n] += sign
                redo[t.machine] = None
        for name in redo:
            mi = view.index.get(name)
            if mi is None:
                return False
            m = state.machines[name]
            running = [running_task(state, t) for t in state.running_on(name)]
            held = {j.package for r in running if (j := state.jobs.get(r.id.job)) is not None and j.package}
            packages = package_holders({name: held}, {name: images.get(name, ())}).get(name, frozenset())
            view.redo_row(mi, m.up and m.schedulable, [r for r in running if not r.in_alloc], packages)
        self.rows_redone += len(redo)
        return True

    def _jobs_carried(self, old: CellState, state: CellState, redo: dict[str, None]) -> bool:
        """Note the machines whose rows a job's change moves (its package, or whether it runs in
        an alloc: both read from the job for its running tasks); False for an alloc's job."""
        for key in self._jobs:
            was: Job | None = old.jobs.get(key)
            now: Job | None = state.jobs.get(key)
            if any(j is not None and j.alloc is not None for j in (was, now)):
                return False
            if (was.package if was else "") == (now.package if now else ""):
                continue
            for tid in old.task_ids_of(key) | state.task_ids_of(key):
                for st in (old, state):
                    t = st.tasks.get(tid)
                    if _running(t):
                        assert t is not None and t.machine is not None
                        redo[t.machine] = None
        return True


def _job_on(state: CellState, job: str) -> list[str]:
    """The machines the job's running tasks are on, in task id order."""
    tasks = state.tasks
    return [t.machine for tid in sorted(state.task_ids_of(job)) if _running(t := tasks[tid]) and t.machine is not None]

