"""Every machine's desired set, kept from the keys each cell view changed: a new view costs
the machines its changes touch, not a walk of the whole cell.

The watch cache logs every change to a task, job or machine record by revision
(`changes.ChangeLog`). A task's change touches the machine whose set held it and the one it
runs on now, unless it changed nothing its entry carries (`_same`); a job's, the machines of
its tasks (an entry carries its job's command); a machine's, itself only when it joins or
leaves the cell: no entry carries the machine's record, so its usage, reason or state written
again (every 10 s while its tasks' usage moves) changes no set. Those machines are listed apart
(`machines_changed`), for what the poller keeps of each machine (its address, whether it is up
and reported). Anything the log cannot account for (a reload of the cache, changes older than
the log holds, the allocs changed, a cache without a log) rebuilds every set from the whole
cell: the safety net, counted as `full_rebuilds` (reference/master/work.py).

No I/O, no locks: the poller holds one and calls `update` from its loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from reference.master import reports, views, work
from reference.master.cell import Cell
from reference.master.changes import Change, between, task_of
from spec.model import TaskId, TaskState

Entry = tuple[list[dict[str, Any]], set[TaskId]]  # a desired set and its task ids


class DesiredSets:
    def __init__(self, cell_name: str) -> None:
        self.cell_name = cell_name
        self.sets: dict[str, Entry] = {}  # machine in the cell -> its desired set
        self.where: dict[TaskId, str] = {}  # task -> the machine whose set holds it
        self.memo: reports.Memo = {}
        self._revision = -1  # the view the sets were built at
        self._reloads = -1  # the cache's reload count then
        self._allocs: Any = None  # that view's allocs: entries name their alloc
        self.dropped: list[str] = []  # borglet task ids the last update took out of a set
        self.machines_changed: set[str] = set()  # machines whose record the last update saw written

    def update(self, cell: Cell, log: Any, reloads: int) -> set[str] | None:
        """Bring the sets to `cell`, given the cache's change log and reload count; returns
        the machines whose sets were computed again (None: all of them, from the whole cell)."""
        changes = self._changes(cell, log, reloads)
        self.dropped = []
        self.machines_changed = set()
        self._reloads, self._allocs = reloads, cell.state.allocs
        if len(self.memo) > 2 * len(cell.state.tasks) + 1000:
            self.memo = {}  # entries of tasks long gone: the next sets build theirs again
        if changes is None:
            self._revision = cell.revision
            self._rebuild(cell)
            return None
        self._revision = max(self._revision, cell.revision)
        touched = self.touched(cell, changes)
        for name in touched:
            self._compute(cell, name)
        return touched

    def _changes(self, cell: Cell, log: Any, reloads: int) -> list[Change] | None:
        if log is None or reloads != self._reloads or cell.state.allocs is not self._allocs:
            return None
        return between(log, self._revision, cell.revision)

    def touched(self, cell: Cell, changes: Iterable[Change]) -> set[str]:
        """The machines whose desired sets `changes` may change."""
        out: set[str] = set()
        tasks = cell.state.tasks
        for c in changes:
            if c.kind == "machine":
                self.machines_changed.add(c.key)
                if c.key not in self.sets or c.key not in cell.state.machines:
                    out.add(c.key)  # joined or left the cell: its set is made or dropped
                continue
            if c.kind == "task":
                if (tid := task_of(c)) is None or self._same(cell, tid):
                    continue
                ids: Iterable[TaskId] = (tid,)
            elif c.kind == "job":
                # Its tasks now, dead ones too: a task deleted since comes as a change of its own.
                ids = tasks.group(views.job_of).get(c.key, ())
                work.add("desired_job_tasks", len(ids))
            else:
                continue
            for tid in ids:
                if (held := self.where.get(tid)) is not None:
                    out.add(held)
                task = tasks.get(tid)
                if task is not None and task.state is TaskState.RUNNING and task.machine:
                    out.add(task.machine)
        return out

    def _same(self, cell: Cell, tid: TaskId) -> bool:
        """Whether `tid`'s record changed in nothing its entry carries: it runs on the machine
        whose set holds it, and its memo's entry was built from the same job file, placement and
        `reports.same_entry` record (a reservation written, its borglet's facts taken). Its set
        stands: each task of a filling cell is written three or four times after its placement."""
        held = self.where.get(tid)
        task = cell.state.tasks.get(tid)
        if held is None or task is None or task.state is not TaskState.RUNNING or task.machine != held:
            return False
        return reports.entry_stands(self.memo.get(tid), cell.jobs.get(tid.job), cell.task_info(tid), task)

    def _compute(self, cell: Cell, name: str) -> None:
        old = self.sets.pop(name, None)
        if old is not None:
            for tid in old[1]:
                if self.where.get(tid) == name:
                    del self.where[tid]
        if name not in cell.state.machines:
            if old is not None:
                self.dropped.extend(d["task_id"] for d in old[0])
            return
        entry = reports.desired_set(cell, name, self.cell_name, self.memo)
        self.sets[name] = entry
        for tid in entry[1]:
            self.where[tid] = name
        if old is not None and old[0] is not entry[0]:
            kept = {d["task_id"] for d in entry[0]}
            self.dropped.extend(t for d in old[0] if (t := d["task_id"]) not in kept)

    def _rebuild(self, cell: Cell) -> None:
        work.add("full_rebuilds")
        self.sets, self.where = {}, {}
        for name in cell.state.machines:
            self._compute(cell, name)


