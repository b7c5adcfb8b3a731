"""The watch cache: every replica's in-memory copy of the whole cell, kept by an etcd prefix watch.

A prefix read gives the cell at a revision; a watch from the next revision applies every
change in order. If the watch falls behind a compaction, the cache reads the prefix again and
starts a new watch. `cell()` returns an immutable `Cell` stamped with the revision it reflects;
unchanged machines, jobs and tasks keep their identity between views, which is what lets the
writer diff cheaply.

A view costs what changed since the previous one, not the cell's size in Python: the spec
objects and their runtime infos live in separate dicts, so a view is one C-level copy of each
map that changed (maps that did not change are shared with the previous view), and the set
of tasks a scheduling pass could act on (`Cell.work`) is kept up to date from the changed
keys, so the leader's quiet-case check does not scan the dead tasks of every killed job: each
change's edits to those indexes are `cacheindex`'s to say, and the cache applies them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from reference.master import cacheindex, codec, reports, views, work
from reference.master.access import UserRecord
from reference.master.cell import Cell, JobInfo, MachineInfo, TaskInfo
from reference.master.changes import Change, ChangeLog
from reference.store import ops
from reference.store.client import StoreClient, StoreError
from reference.store.watch import PrefixWatch
from spec.fmap import FMap
from spec.model import Alloc, CellState, Job, Machine, QuotaKey, Resources, Task, TaskId, TaskState

K = TypeVar("K")
V = TypeVar("V")

log = logging.getLogger(__name__)


class WatchCache:
    def __init__(
        self,
        client: StoreClient,
        keys: codec.Keys,
        *,
        idle_timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.keys = keys
        self.clock = clock
        # A watch silent this long is reconnected to the next member; with a progress
        # notification a second, a short value moves off a hung member before reads are refused.
        self.idle_timeout = idle_timeout
        # When etcd was last heard (a read, an event or a progress notification), on `clock`:
        # the cache is at least that fresh. None until the first read.
        self._heard_at: float | None = None
        # Spec objects and runtime infos in separate dicts: a view copies each in C.
        self._machines: dict[str, Machine] = {}
        self._machine_infos: dict[str, MachineInfo] = {}
        self._jobs: dict[str, Job] = {}
        self._job_infos: dict[str, JobInfo] = {}
        self._tasks: dict[TaskId, Task] = {}
        self._task_infos: dict[TaskId, TaskInfo] = {}
        self._quotas: dict[QuotaKey, Resources] = {}
        self._allocs: dict[str, Alloc] = {}
        # Which maps changed since the last view (the others are shared with it), and which
        # jobs and tasks: a view's maps are made from the last view's, keeping their indexes.
        self._dirty: set[str] = set()
        self._changed_jobs: set[str] = set()
        self._changed_tasks: set[TaskId] = set()
        # For `Cell.work`: the task ids of each job, the latest incarnation of each index,
        # and the tasks a pass could act on, all updated from the changed keys.
        self._job_tasks: dict[str, set[TaskId]] = {}
        self._latest: dict[tuple[str, int], int] = {}
        self._work: set[TaskId] = set()
        self._acting: set[TaskId] = set()  # the work set's tasks that are not PENDING (`Cell.acting`)
        self._running: set[TaskId] = set()
        # The machines no task may be placed on (drained), kept with each machine record: the
        # leader's pass asks whether it has work without building a view (`pass_outlook`).
        self._cordoned: set[str] = set()
        # The maps and indexes as `cacheindex` reads them: these very dicts, never copied.
        self._index = cacheindex.Index(self._tasks, self._jobs, self._job_tasks, self._latest, self._work)
        self._capacity_epoch = 0
        # Tasks by state and the confirmed RUNNING ones, moved as each task record changes: a
        # read of the cell's counts does not walk every task of a new view.
        self._counts = views.zero_counts()
        # The same per job. A view shares these dicts: one is copied before its first change
        # after a view was built (`_fresh_counts` names the ones copied since).
        self._job_counts: dict[str, dict[str, int]] = {}
        self._fresh_counts: set[str] = set()
        self._leader = ""
        self._leader_revision = 0
        self._replicas: dict[str, str] = {}
        # Users by name and by their token's hash: each request is authenticated from these.
        self._users: dict[str, UserRecord] = {}
        self._user_hashes: dict[str, UserRecord] = {}
        self._raw: dict[bytes, bytes] = {}  # key -> value as stored, for the writer's checks
        # Task records this process is writing, with what each decodes to (`expect`).
        self._expected: dict[bytes, tuple[bytes, tuple[Task, TaskInfo]]] = {}
        self._revision = 0
        self._view: Cell | None = None
        self._last: Cell | None = None  # the last view built: what the next one shares
        self._cond = threading.Condition()
        self._watch: PrefixWatch | None = None
        self._stopped = threading.Event()
        self._listeners: list[Callable[[int], None]] = []
        self.reloads = 0
        # The last changes to jobs, tasks and machines, for watches (master/changes.py).
        self.changes = ChangeLog()

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Read the cell and follow it; retries the first read until etcd answers or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._reload()
                return
            except StoreError as err:
                if time.monotonic() > deadline:
                    raise
                log.warning("watch cache: first read failed (%s); retrying", err)
                time.sleep(0.5)

    def stop(self) -> None:
        self._stopped.set()
        if self._watch is not None:
            self._watch.stop()

    def on_change(self, listener: Callable[[int], None]) -> None:
        """Call `listener(revision)` after each applied batch of changes (from the watch thread)."""
        self._listeners.append(listener)

    @property
    def healthy(self) -> bool:
        return self._watch is not None and self._watch.running

    # --- reads ---------------------------------------------------------------------------------

    @property
    def revision(self) -> int:
        return self._revision

    @property
    def heard_at(self) -> float | None:
        """The time (on `clock`) of the last message from etcd, None if there was none yet."""
        return self._heard_at

    def cell(self) -> Cell:
        # A current view is read without the lock: the watch thread holds it while it applies
        # a batch, and a reader (the API's event loop) must not wait for that. The view stays
        # the one of the last applied batch until the batch being applied is done.
        view = self._view
        if view is not None:
            return view
        with self._cond:
            if self._view is None:
                self._view = self._build(self._last)
                self._last = self._view
                self._dirty.clear()
                self._changed_jobs.clear()
                self._changed_tasks.clear()
            return self._view

    def pass_outlook(self) -> tuple[bool, bool, bool]:
        """What a view built now would say to the leader's pass, without building one: whether
        its work set holds a task (`Cell.work`), whether one of them is not PENDING
        (`Cell.acting`), and whether a machine is drained. The pass is woken by every batch the
        watch applies, and most often these say it has nothing to do (only pending tasks, which
        a scheduler process places); a view built only to learn that copied the changed maps
        whole each time, a walk of the cell per event (docs/decisions.md, issue 43)."""
        with self._cond:
            return bool(self._work), bool(self._acting), bool(self._cordoned)

    def _build(self, last: Cell | None) -> Cell:
        """A view of the maps now: a C-level copy of each changed map, the others from `last`.

        The copies of the maps that changed stay whole on purpose: at 100,000 tasks one costs
        about 25 ns an entry (`loadtests/viewcost.py`), while carrying the map from the last
        view as a Python mapping over the keys changed since would make every read of it
        several times slower and a scan about ten times slower (docs/decisions.md, issue 43).
        The counts are shared with `last` when no task changed."""
        dirty = self._dirty if last is not None else _ALL_MAPS
        tasks_changed = "tasks" in dirty
        work.add("views_built")
        work.add("view_entries_copied", sum(len(getattr(self, f"_{name}")) for name in dirty & COPIED_MAPS))
        prev = last.state if last is not None else CellState()
        state = CellState(
            machines=FMap(self._machines) if "machines" in dirty else prev.machines,
            jobs=_successor(prev.jobs, self._jobs, self._changed_jobs, last) if "jobs" in dirty else prev.jobs,
            tasks=_successor(prev.tasks, self._tasks, self._changed_tasks, last) if "tasks" in dirty else prev.tasks,
            quotas=FMap(self._quotas) if "quotas" in dirty else prev.quotas,
            allocs=FMap(self._allocs) if "allocs" in dirty else prev.allocs,
        )
        return Cell(
            state=state,
            machines=dict(self._machine_infos) if "machine_infos" in dirty else last.machines,  # type: ignore[union-attr]
            jobs=dict(self._job_infos) if "job_infos" in dirty else last.jobs,  # type: ignore[union-attr]
            tasks=dict(self._task_infos) if "task_infos" in dirty else last.tasks,  # type: ignore[union-attr]
            revision=self._revision,
            leader=self._leader,
            leader_revision=self._leader_revision,
            replicas=dict(self._replicas) if "replicas" in dirty else last.replicas,  # type: ignore[union-attr]
            work=frozenset(self._work) if "work" in dirty else last.work,  # type: ignore[union-attr]
            acting=frozenset(self._acting) if "acting" in dirty else last.acting,  # type: ignore[union-attr]
            running=frozenset(self._running) if "running" in dirty else last.running,  # type: ignore[union-attr]
            capacity_epoch=self._capacity_epoch,
            counts=dict(self._counts) if tasks_changed else last.counts,  # type: ignore[union-attr]
            job_counts=self._share_job_counts() if tasks_changed else last.job_counts,  # type: ignore[union-attr]
        )

    def _share_job_counts(self) -> dict[str, dict[str, int]]:
        self._fresh_counts.clear()
        return dict(self._job_counts)

    def user_by_hash(self, token_sha256: str) -> UserRecord | None:
        """The user whose token hashes to `token_sha256`, as the cache last heard of it."""
        return self._user_hashes.get(token_sha256)

    def users(self) -> list[UserRecord]:
        with self._cond:
            return sorted(self._users.values(), key=lambda u: u.name)

    def raw(self, key: str) -> bytes | None:
        with self._cond:
            return self._raw.get(key.encode())

    def wait_revision(self, revision: int, timeout: float) -> bool:
        """Block until the cache reflects `revision` (or later); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._revision < revision:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def catch_up(self, timeout: float) -> bool:
        """Wait until the cache holds everything etcd had committed when this was called."""
        return self.wait_revision(self.client.revision(), timeout)

    # --- applying changes ----------------------------------------------------------------------

    def _reload(self) -> None:
        asked = self.clock()  # the read reflects etcd no earlier than when it was sent
        kvs, revision = self.client.get_prefix(self.keys.root)
        with self._cond:
            self._heard_at = asked
            for d in (
                self._machines, self._machine_infos, self._jobs, self._job_infos, self._tasks,
                self._task_infos, self._quotas, self._replicas, self._users, self._user_hashes, self._raw, self._job_tasks,
                self._latest, self._work, self._acting, self._running, self._allocs, self._cordoned,
            ):  # fmt: skip
                d.clear()
            self._capacity_epoch += 1
            self._counts = views.zero_counts()
            self._job_counts, self._fresh_counts = {}, set()
            self._leader, self._leader_revision = "", 0
            for key, value, mod_revision in kvs:
                self._put(key, value, revision=mod_revision)
            self._revision = revision
            self.changes.reset(revision)
            self._view = None
            self._last = None  # a reload builds the next view from scratch
            self._cond.notify_all()
        self.reloads += 1
        self._watch = self.client.watch_prefix(
            self.keys.root,
            revision + 1,
            self._on_events,
            on_compacted=self._on_compacted,
            idle_timeout=self.idle_timeout,
        )

    def _on_compacted(self, compact_revision: int) -> None:
        log.warning("watch cache: compacted at %d; reading the cell again", compact_revision)

        def again() -> None:
            while not self._stopped.is_set():
                try:
                    self._reload()
                    return
                except StoreError as err:
                    log.warning("watch cache: reload failed (%s); retrying", err)
                    time.sleep(0.5)

        threading.Thread(target=again, name="cache-reload", daemon=True).start()

    def _on_events(self, events: list[ops.WatchEvent], revision: int) -> None:
        # Task records, the bulk of a large batch, are read before the lock is taken: readers
        # that need a new view wait only for the batch to be applied, not decoded.
        tasks = self.keys.tasks.encode()
        decoded: dict[int, tuple[Task, TaskInfo] | None] = {}
        expected, taken = self._expected, 0
        for i, e in enumerate(events):
            if e.kind == "PUT" and e.key.startswith(tasks):
                hit = expected.get(e.key)
                if hit is not None and hit[0] == e.value:
                    expected.pop(e.key, None)
                    decoded[i], taken = hit[1], taken + 1
                else:
                    decoded[i] = _decode_task(e.value)
        work.add("records_decoded", len(decoded) - taken)
        work.add("records_taken_as_written", taken)
        with self._cond:
            # Events and progress notifications alike prove the watch still hears etcd.
            self._heard_at = self.clock()
            for i, e in enumerate(events):
                self._log_change(e)
                if e.kind == "PUT":
                    self._put(e.key, e.value, decoded.get(i), revision=e.mod_revision)
                else:
                    self._delete(e.key)
            changed = bool(events)
            if changed or revision > self._revision:
                self._revision = max(self._revision, revision)
                self.changes.advance(self._revision)
                if changed:
                    self._view = None
                elif self._view is not None:
                    self._view = _restamp(self._view, self._revision)
                self._cond.notify_all()
        if changed:
            for listener in self._listeners:
                try:
                    listener(self._revision)
                except Exception:  # a listener's bug must not stop the cache
                    log.exception("watch cache listener failed")

    def expect(self, writes: list[tuple[bytes, bytes, tuple[Task, TaskInfo]]]) -> None:
        """Task records about to be written by this process: (key, value, what the value
        decodes to). When the watch brings a key back with exactly those bytes, the cache takes
        the objects as they are instead of decoding the value: the leader writes about three
        records per task and read each one back through its watch. A value that differs (a
        later write, another writer's) is decoded as any other; a write that never lands only
        leaves its entry here, and the whole memo is dropped past EXPECTED_MAX entries.

        The objects must be what decoding the value gives, to each field's type, or the leader
        would hold what no follower holds: `test_master_diff_keys` holds it for the writer's
        records. (Over the whole unit suite the one exception was a test's own TaskInfo with a
        usage beyond 64 bits, which decodes as a float; a usage from a report is held within 64
        bits where the report is read, `reports.usage_items`.)"""
        if len(self._expected) + len(writes) > EXPECTED_MAX:
            self._expected.clear()
        for key, value, objects in writes:
            self._expected[key] = (value, objects)

    def _log_change(self, e: ops.WatchEvent) -> None:
        k = e.key.decode()
        for kind, prefix in (("task", self.keys.tasks), ("job", self.keys.jobs), ("machine", self.keys.machines)):
            if k.startswith(prefix):
                value = e.value if e.kind == "PUT" else None
                self.changes.record(Change(e.mod_revision, kind, k[len(prefix) :], value, self._raw.get(e.key)))
                return

    def _put(self, key: bytes, value: bytes, task: tuple[Task, TaskInfo] | None = None, revision: int = 0) -> None:
        """Take one record, written at `revision`; `task`: a task record's value already
        decoded (`_on_events`)."""
        self._raw[key] = value
        k = key.decode()
        try:
            if k == self.keys.leader:
                self._leader, self._leader_revision = value.decode(), revision
            elif k.startswith(self.keys.replicas):
                doc = codec.loads(value)
                self._replicas[doc["name"]] = doc["url"]
                self._dirty.add("replicas")
            elif k.startswith(self.keys.machines):
                m, mi = codec.decode_machine(value)
                if self._machines.get(m.name) != m:
                    self._capacity_epoch += 1
                self._machines[m.name] = m
                (self._cordoned.discard if m.schedulable else self._cordoned.add)(m.name)
                self._machine_infos[m.name] = mi
                self._dirty.update(("machines", "machine_infos"))
            elif k.startswith(self.keys.jobs):
                j, ji = codec.decode_job(value)
                self._changed_jobs.add(j.key)
                edits = cacheindex.job_put(self._index, j)
                self._jobs[j.key] = j
                self._job_infos[j.key] = ji
                self._dirty.update(("jobs", "job_infos"))
                self._apply(edits)
            elif k.startswith(self.keys.tasks):
                t, ti = task or codec.decode_task(value)
                self._put_task(t, ti)
            elif k.startswith(self.keys.users):
                self._forget_user(k[len(self.keys.users) :])
                u = codec.decode_user(value)
                self._users[u.name] = u
                self._user_hashes[u.token_sha256] = u
            elif k.startswith(self.keys.quotas):
                q, amount = codec.decode_quota(value)
                self._quotas[q] = amount
                self._dirty.add("quotas")
            elif k.startswith(self.keys.allocs):
                a = codec.decode_alloc(value)
                self._allocs[a.name] = a
                self._capacity_epoch += 1  # what is free on its machine changed
                self._dirty.add("allocs")
        except (codec.SchemaError, KeyError, ValueError) as err:
            log.error("watch cache: cannot read %s: %s", k, err)

    def _delete(self, key: bytes) -> None:
        self._raw.pop(key, None)
        k = key.decode()
        if k == self.keys.leader:
            self._leader, self._leader_revision = "", 0
        elif k.startswith(self.keys.replicas):
            self._replicas.pop(k[len(self.keys.replicas) :], None)
            self._dirty.add("replicas")
        elif k.startswith(self.keys.machines):
            name = k[len(self.keys.machines) :]
            self._machines.pop(name, None)
            self._cordoned.discard(name)
            self._capacity_epoch += 1
            self._machine_infos.pop(name, None)
            self._dirty.update(("machines", "machine_infos"))
        elif k.startswith(self.keys.jobs):
            job = k[len(self.keys.jobs) :]
            self._changed_jobs.add(job)
            edits = cacheindex.job_deleted(self._index, job)
            self._jobs.pop(job, None)
            self._job_infos.pop(job, None)
            self._dirty.update(("jobs", "job_infos"))
            self._apply(edits)
        elif k.startswith(self.keys.tasks):
            try:
                user, name, index, inc = k[len(self.keys.tasks) :].split("/")
                tid = TaskId(f"{user}/{name}", int(index), int(inc))
            except ValueError:
                log.error("watch cache: cannot read the deleted key %s", k)
                return
            self._delete_task(tid)
        elif k.startswith(self.keys.users):
            self._forget_user(k[len(self.keys.users) :])
        elif k.startswith(self.keys.quotas):
            from spec.model import Band

            user, band = k[len(self.keys.quotas) :].split("/")
            self._quotas.pop(QuotaKey(user, Band(band)), None)
            self._dirty.add("quotas")
        elif k.startswith(self.keys.allocs):
            if self._allocs.pop(k[len(self.keys.allocs) :], None) is not None:
                self._capacity_epoch += 1  # its machine has room again: pending tasks may fit
                self._dirty.add("allocs")

    def _forget_user(self, name: str) -> None:
        old = self._users.pop(name, None)
        if old is not None:
            self._user_hashes.pop(old.token_sha256, None)

    # --- the pass's work set, from the changed keys --------------------------------------------

    def _put_task(self, t: Task, ti: TaskInfo) -> None:
        tid = t.id
        self._changed_tasks.add(tid)
        edits = cacheindex.task_put(self._index, t)
        self._count(self._tasks.get(tid), self._task_infos.get(tid), -1)
        self._count(t, ti, 1)
        self._tasks[tid] = t
        self._task_infos[tid] = ti
        self._dirty.update(("tasks", "task_infos"))
        self._apply(edits)
        self._judge_acting(tid)  # in the work set before and after, its state may have moved

    def _judge_acting(self, tid: TaskId) -> None:
        """Keep `tid` in the acting set exactly while it is in the work set and not PENDING."""
        t = self._tasks.get(tid)
        acting = t is not None and t.state is not TaskState.PENDING and tid in self._work
        if acting != (tid in self._acting):
            (self._acting.add if acting else self._acting.discard)(tid)
            self._dirty.add("acting")

    def _delete_task(self, tid: TaskId) -> None:
        edits = cacheindex.task_deleted(self._index, tid)
        if (old := self._tasks.pop(tid, None)) is None:
            return
        self._changed_tasks.add(tid)
        self._count(old, self._task_infos.pop(tid, None), -1)
        self._dirty.update(("tasks", "task_infos"))
        self._apply(edits)

    def _count(self, task: Task | None, info: TaskInfo | None, sign: int) -> None:
        if task is None:
            return
        job = task.id.job
        if job not in self._fresh_counts:
            self._job_counts[job] = dict(self._job_counts.get(job) or views.zero_counts())
            self._fresh_counts.add(job)
        mine = self._job_counts[job]
        self._counts[task.state.value] += sign
        mine[task.state.value] += sign
        if task.state is TaskState.RUNNING and info is not None and reports.confirmed(info):
            self._counts["running_confirmed"] += sign
            mine["running_confirmed"] += sign
        if sign < 0 and not any(mine.values()):
            del self._job_counts[job]  # its last task left: a job no view knows costs nothing
            self._fresh_counts.discard(job)

    def _apply(self, edits: cacheindex.Edits) -> None:
        """Carry out one change's edits to the indexes (cacheindex), marking what a view must copy."""
        job_task, latest, work, running, capacity = edits
        if job_task is not None:
            tid, joins = job_task
            if joins:
                self._job_tasks.setdefault(tid.job, set()).add(tid)
            elif (ids := self._job_tasks.get(tid.job)) is not None:
                ids.discard(tid)
                if not ids:
                    del self._job_tasks[tid.job]
        if latest is not None:
            index, incarnation = latest
            if incarnation is None:
                del self._latest[index]
            else:
                self._latest[index] = incarnation
        if work:
            for tid, joins in work:
                if joins:
                    self._work.add(tid)
                else:
                    self._work.discard(tid)
                self._judge_acting(tid)
            self._dirty.add("work")
        if running is not None:
            tid, joins = running
            if joins:
                self._running.add(tid)
            else:
                self._running.discard(tid)
            self._dirty.add("running")
        if capacity:
            self._capacity_epoch += 1


# The maps `_build` copies whole when they changed (the others are small, or carried).
COPIED_MAPS = frozenset(("machines", "jobs", "tasks", "task_infos", "work", "acting", "running", "allocs"))

# Records written but not yet seen on the watch that `expect` keeps (a few 10,000-task jobs).
EXPECTED_MAX = 200_000

_ALL_MAPS = frozenset(
    ("machines", "machine_infos", "jobs", "job_infos", "tasks", "task_infos", "quotas", "replicas", "work",
     "acting", "running", "allocs")
)


def _decode_task(value: bytes) -> tuple[Task, TaskInfo] | None:
    """A task record read, or None where it cannot be (`_put` then logs why)."""
    try:
        return codec.decode_task(value)
    except (codec.SchemaError, KeyError, ValueError):
        return None


def _successor(prev: FMap[K, V], now: dict[K, V], changed: set[K], last: Cell | None) -> FMap[K, V]:
    """The map of a new view: a copy of `now`, made from the last view's map when there is
    one (so it keeps that map's indexes, updated from the changed keys)."""
    if last is None:
        return FMap(now)
    return prev.successor(dict(now), changed)


def _restamp(view: Cell, revision: int) -> Cell:
    """The same cell, known to be current up to a later revision (a progress notification)."""
    from dataclasses import replace

    return replace(view, revision=revision)
