"""The leader's one writer: changes a Draft of the cached cell and commits its diff in fenced, batched etcd txns.

All mutations on a leader go through `Writer.mutate`, which blocks its thread, or
`Writer.submit`, which returns at once and calls back (the API's handlers run on the event
loop, which must not block). Mutations that arrive while a write is in flight queue up, and
the next writer (a `mutate` caller, or the writer's own thread for submitted ones) commits
them together (group commit): it takes the cached cell, runs each queued change on a Draft
of the cell the previous change left (a change that raises leaves no trace, and the others
go on), writes what they changed in one `Election.fenced_commit` (so a deposed leader
writes nothing), and waits until its own watch cache shows the write before the next group
starts; with concurrent writers, the writer's thread holds a group open for up to a
millisecond for one more change (`GROUP_DELAY_S`). A write is acknowledged only after its
txn committed. etcd allows 128 ops per txn by default; a bigger diff is split, tasks first,
so a watcher never sees a job without its tasks' records being on their way.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from reference.master import codec
from reference.master.cache import WatchCache
from reference.master.cell import Cell, Draft, JobInfo, MachineInfo, TaskInfo
from reference.store import ops
from reference.store.client import StoreError, StoreOutcomeUnknown, StoreUnavailable
from reference.store.election import Election
from spec.model import CellState, QuotaKey, Resources, Task, TaskId

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_OPS_PER_TXN = 120  # under etcd's default --max-txn-ops of 128
MAX_TXN_BYTES = 1 << 20  # under etcd's default --max-request-bytes of 1.5 MiB
MAX_GROUP = 64  # changes committed together at most (docs/decisions.md)
# How long the writer's thread may hold a group open for one more change, when the last group
# held two or more (so writers are concurrent): PostgreSQL's commit_delay with
# commit_siblings, for the same reason. docs/decisions.md has the measurement.
GROUP_DELAY_S = 0.001
SLOW_GROUP_S = 1.0  # a group that takes longer is logged with where its time went
# The writer's pace, in seconds per op written (`Writer.op_s`), is learned from the groups of at
# least this many ops (a smaller one's time is mostly a txn's round trip), each new group weighing
# OP_S_WEIGHT in the mean: a few groups follow the host from idle into a start storm and back.
OP_S_MIN_OPS = 200
OP_S_WEIGHT = 0.5


class NotLeader(Exception):
    """This replica does not (or no longer) lead: the write was not made."""


class WriteFailed(Exception):
    """etcd could not be reached or did not answer: the write may not have been made."""


class Changed(Protocol):
    """What a diff is taken of: a Draft, or the result of a group of them. The key sets name
    every entry that may differ from the base (a superset is fine; an entry left out is
    not written)."""

    state: CellState
    machines: dict[str, MachineInfo]
    jobs: dict[str, JobInfo]
    tasks: dict[TaskId, TaskInfo]
    quotas: dict[QuotaKey, Resources | None]
    task_keys: set[TaskId]
    job_keys: set[str]
    machine_keys: set[str]
    alloc_keys: set[str]


def diff_ops(
    base: Cell, draft: Changed, keys: codec.Keys, written: list[tuple[bytes, bytes, tuple[Task, TaskInfo]]] | None = None
) -> list[ops.Op]:
    """The puts and deletes that turn `base` into `draft`, task records first; it looks only
    at the keys the draft names, so its cost is the change's, not the cell's. `written`, when
    given, gets each task record put: its key, its value and the objects it encodes (for the
    watch cache's `expect`)."""
    new, old = draft.state, base.state
    task_ops: list[ops.Op] = []
    other: list[ops.Op] = []
    deletes: list[ops.Op] = []
    # In the order of their keys, so a change split into several txns writes disjoint runs of
    # each job's task keys (`guard`'s range compares rely on it).
    for key, tid in sorted((keys.task(tid), tid) for tid in draft.task_keys):
        task, info = new.tasks.get(tid), draft.tasks.get(tid)
        if task is None:
            if tid in old.tasks:
                deletes.append(ops.delete(key))
        elif old.tasks.get(tid) is not task or base.tasks.get(tid) is not info:
            info = info or TaskInfo()
            value = codec.encode_task(task, info)
            task_ops.append(ops.put(key, value))
            if written is not None:
                written.append((key.encode(), value, (task, info)))
    for key in sorted(draft.job_keys):
        job = new.jobs.get(key)
        if job is None:
            if key in old.jobs:
                deletes.append(ops.delete(keys.job(key)))
        elif old.jobs.get(key) is not job or base.jobs.get(key) is not draft.jobs.get(key):
            other.append(ops.put(keys.job(key), codec.encode_job(job, draft.jobs[key])))
    for name in sorted(draft.machine_keys):
        m, info = new.machines.get(name), draft.machines.get(name)
        if m is None:
            if name in old.machines:
                deletes.append(ops.delete(keys.machine(name)))
        elif old.machines.get(name) is not m or base.machines.get(name) is not info:
            other.append(ops.put(keys.machine(name), codec.encode_machine(m, info or MachineInfo())))
    for qkey, amount in draft.quotas.items():
        if amount is None:
            deletes.append(ops.delete(keys.quota(qkey)))
        else:
            other.append(ops.put(keys.quota(qkey), codec.encode_quota(qkey, amount)))
    for name in sorted(draft.alloc_keys):
        a = new.allocs.get(name)
        if a is None:
            if name in old.allocs:
                deletes.append(ops.delete(keys.alloc(name)))
        elif old.allocs.get(name) is not a:
            other.append(ops.put(keys.alloc(name), codec.encode_alloc(a)))
    return task_ops + other + deletes


def guard(batch: list[ops.Op], seen: int, task_prefix: bytes, fresh: Collection[bytes] = ()) -> list[ops.Compare]:
    """The compares that keep a txn of `batch`, diffed against the view at revision `seen`,
    from writing over anything written after it: none of its keys was written since.

    Each run of two or more consecutive puts of task records under one folder of `fresh`
    (`task_prefix` + job + "/", of a job with no task record in the view: a job being
    submitted) is guarded by one compare over the keys from its first to its last (etcd's
    range compare), not one per key: a 10,000-task submission's txns then carry 10 compares,
    not 10,000. The span then holds no record but this txn's, unless one was written since;
    etcd reads every key in a span, so a span over a job that has records (placements of a
    large job, whose keys interleave by index) would cost more than the keys written, and
    those keep one compare each. It is right only where nothing but this writer writes task
    records, and the runs of a change's txns are disjoint (`diff_ops` orders task records by
    key, puts before deletes); the caller passes `fresh` only while its view holds its own
    last commit."""
    out: list[ops.Compare] = []
    below = seen + 1
    i, n = 0, len(batch)
    while i < n:
        op = batch[i]
        key = ops.unb64(next(iter(op.values()))["key"])
        j = i + 1
        if fresh and "request_put" in op and key.startswith(task_prefix):
            folder = key.rsplit(b"/", 2)[0] + b"/"  # <prefix><job>/<index>/<incarnation>
            if folder in fresh:
                while j < n and "request_put" in batch[j] and ops.unb64(batch[j]["request_put"]["key"]).startswith(folder):
                    j += 1
        if j - i > 1:
            last = ops.unb64(batch[j - 1]["request_put"]["key"])
            out.append(ops.mod_revision(key, "<", below, range_end=last + b"\0"))
        else:
            out.append(ops.mod_revision(key, "<", below))
        i = j
    return out


def fresh_folders(base: Cell, task_keys: Iterable[TaskId], keys: codec.Keys) -> frozenset[bytes]:
    """The task-record folders (`guard`) of the jobs among `task_keys` of which `base` holds no
    task record: jobs being submitted."""
    jobs = {tid.job for tid in task_keys}
    return frozenset(f"{keys.tasks}{job}/".encode() for job in jobs if not base.state.task_ids_of(job))


def chunks(items: list[ops.Op], size: int, max_bytes: int | None = None) -> list[list[ops.Op]]:
    """Txns of at most `size` ops and, with `max_bytes`, at most that many bytes of keys and
    values (etcd refuses a request over its --max-request-bytes, 1.5 MiB by default)."""
    if max_bytes is None:
        return [items[i : i + size] for i in range(0, len(items), size)]
    out: list[list[ops.Op]] = []
    batch: list[ops.Op] = []
    used = 0
    for op in items:
        cost = _op_bytes(op)
        if batch and (len(batch) >= size or used + cost > max_bytes):
            out.append(batch)
            batch, used = [], 0
        batch.append(op)
        used += cost
    if batch:
        out.append(batch)
    return out


def _op_bytes(op: ops.Op) -> int:
    # Keys and values travel base64-encoded here: 3 bytes of data for every 4 characters.
    body = next(iter(op.values()), {})
    return 16 + sum(len(v) for k, v in body.items() if k in ("key", "value", "range_end")) * 3 // 4


@dataclass
class _Request:
    """One queued mutation and, once its group is done, what became of it."""

    change: Callable[[Draft], Any]
    done: bool = False
    result: Any = None
    error: BaseException | None = None
    revision: int = 0
    on_done: Callable[[_Request], None] | None = None


@dataclass
class _Group:
    """The cell after a group's changes: what the diff is taken of."""

    state: CellState
    machines: dict[str, MachineInfo]
    jobs: dict[str, JobInfo]
    tasks: dict[TaskId, TaskInfo]
    quotas: dict[QuotaKey, Resources | None] = field(default_factory=dict)
    task_keys: set[TaskId] = field(default_factory=set)
    job_keys: set[str] = field(default_factory=set)
    machine_keys: set[str] = field(default_factory=set)
    alloc_keys: set[str] = field(default_factory=set)


class Writer:
    def __init__(
        self,
        cache: WatchCache,
        election: Election,
        keys: codec.Keys,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        max_ops: int = MAX_OPS_PER_TXN,
        max_group: int = MAX_GROUP,
        group_delay: float = GROUP_DELAY_S,
        on_txn: Callable[[str, int], None] | None = None,
    ) -> None:
        self.cache = cache
        self.election = election
        self.keys = keys
        self.clock = clock  # how long a group is held open
        self.wall = wall  # the time a Draft's changes are made at
        self.max_ops = max_ops
        self.max_group = max_group
        self.group_delay = group_delay
        self._on_txn = on_txn  # (outcome, ops) for metrics
        self._lock = threading.Lock()  # held by the one thread committing a group
        self._queue: list[_Request] = []
        self._queue_lock = threading.Lock()
        self._queued = threading.Condition(self._queue_lock)  # notified by `submit`
        self._last_group = 0  # changes in the writer thread's last group
        self._thread: threading.Thread | None = None
        self.groups = 0  # groups committed, and the changes in them: their ratio is the mean group size
        self.grouped = 0
        self.op_s: float | None = None  # seconds per op of the recent large groups; None until one
        # Each txn attempt requires a marker key of its own to be absent; an attempt whose answer
        # was lost is "in doubt" until its marker is written (poisoned), after which no copy of
        # it can commit. (lease id of its term, marker)
        self._marker_prefix = f"{keys.txns}{election.candidate_name}/{os.urandom(6).hex()}/"
        self._markers = itertools.count()
        self._in_doubt: list[tuple[int, str]] = []
        # The revision of this writer's last whole commit and the term it was made in; None
        # until one is known (and while a commit is under way or failed part way), when each
        # txn guards key by key (`guard`).
        self._committed: tuple[int, int | None] | None = None

    def mutate(self, change: Callable[[Draft], T]) -> tuple[T, int]:
        """Run `change` on a Draft of the cell and commit what it changed.

        Returns (what `change` returned, the revision the cell is at after the write). If
        `change` raises, nothing of it is written and the exception is raised here. Raises
        NotLeader or WriteFailed when the write (of this change's whole group) was not made.
        """
        request = _Request(change)
        with self._queue_lock:
            self._queue.append(request)
        while not request.done:
            with self._lock:
                if request.done:
                    break  # the thread that held the lock committed this one with its group
                self._run_group(self._take())
        if request.error is not None:
            raise request.error
        return request.result, request.revision

    def waiting(self) -> int:
        """Changes queued and not yet taken into a group."""
        with self._queue_lock:
            return len(self._queue)

    def submit(self, change: Callable[[Draft], Any], done: Callable[[_Request], None]) -> None:
        """Queue `change` and return at once; `done(request)` is called, from the writer's
        thread, once it was committed or failed (see `mutate` for what the request holds)."""
        with self._queue_lock:
            self._queue.append(_Request(change, on_done=done))
            self._queued.notify()
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="writer", daemon=True)
                self._thread.start()

    def _take(self) -> list[_Request]:
        """The next group: the oldest queued changes, at most `max_group`."""
        with self._queue_lock:
            group = self._queue[: self.max_group]
            del self._queue[: self.max_group]
        return group

    def _serve(self) -> None:
        """The writer's thread: commits what `submit` queued (a `mutate` caller that gets the
        writer first commits it instead, with its own change)."""
        while True:
            self._hold_open()
            with self._lock:
                group = self._take()
                self._last_group = len(group)  # 0 once idle: the next lone change does not wait
                if group:
                    try:
                        self._run_group(group)
                    except Exception:  # its changes were failed and answered; go on serving
                        log.exception("the writer's group failed")
            if not group:
                with self._queued:
                    self._queued.wait_for(lambda: bool(self._queue))

    def _hold_open(self) -> None:
        """Wait up to `group_delay` for the queue to hold one change more than the last group,
        when that group held two or more. With concurrent writers, the clients answered by
        the last group are sending their next changes: waiting a millisecond for them makes
        groups larger and txns fewer (each txn costs the leader more than a change does).
        A lone writer never waits. The hold is timed on `clock`, checked again at each
        change queued."""
        if self.group_delay <= 0 or self._last_group < 2:
            return
        want = min(self._last_group + 1, self.max_group)
        with self._queued:
            deadline = self.clock() + self.group_delay
            while len(self._queue) < want:
                left = deadline - self.clock()
                if left <= 0:
                    return
                self._queued.wait(left)

    def _run_group(self, group: list[_Request]) -> None:
        finished = False
        try:
            if not self.election.is_leader:
                for r in group:
                    r.error = NotLeader("not the leader")
                return
            began, began_cpu = time.perf_counter(), time.thread_time()
            base = self.cache.cell()
            now = self.wall()
            cell, result, applied = base, None, []
            for r in group:
                draft = Draft(cell, now)
                try:
                    r.result = r.change(draft)
                except Exception as err:  # this change is dropped; the others go on
                    r.error = err
                    continue
                applied.append(r)
                if draft.changed:
                    before = result or _Group(base.state, {}, {}, {})
                    result = _Group(
                        draft.state, draft.machines, draft.jobs, draft.tasks,
                        {**before.quotas, **draft.quotas},
                        before.task_keys | draft.task_keys,
                        before.job_keys | draft.job_keys,
                        before.machine_keys | draft.machine_keys,
                        before.alloc_keys | draft.alloc_keys,
                    )  # fmt: skip
                    cell = Cell(result.state, result.machines, result.jobs, result.tasks,
                                base.revision, base.leader, base.replicas)  # fmt: skip
            revision = base.revision
            if result is not None:
                drafted, drafted_cpu = time.perf_counter(), time.thread_time()
                try:
                    written: list[tuple[bytes, bytes, tuple[Task, TaskInfo]]] = []
                    diff = diff_ops(base, result, self.keys, written)
                    self.cache.expect(written)
                    diffed = time.perf_counter()
                    revision = self._commit(diff, base.revision, fresh_folders(base, result.task_keys, self.keys))
                except (NotLeader, WriteFailed) as err:
                    for r in applied:
                        r.error = err
                    return
                self.groups += 1
                self.grouped += len(applied)
                committed = time.perf_counter()
                if not self.cache.wait_revision(revision, 5.0):
                    log.warning("watch cache did not reach revision %d in 5 s", revision)
                seen = time.perf_counter()
                if len(diff) >= OP_S_MIN_OPS:
                    pace = (seen - began) / len(diff)
                    self.op_s = pace if self.op_s is None else self.op_s + OP_S_WEIGHT * (pace - self.op_s)
                if seen - began > SLOW_GROUP_S:
                    log.info(
                        "slow write group: %d changes, %d ops, %.2f s (changes %.2f, of it on this thread's CPU "
                        "%.2f; diff %.2f, txns %.2f, watch cache %.2f)", len(applied), len(diff), seen - began,
                        drafted - began, drafted_cpu - began_cpu, diffed - drafted, committed - diffed, seen - committed,
                    )  # fmt: skip
            for r in applied:
                r.revision = revision
            finished = True
        finally:
            for r in group:
                if not finished and r.error is None:
                    r.error = WriteFailed("the writer stopped before this change was committed")
                r.done = True
                if r.on_done is not None:
                    try:
                        r.on_done(r)
                    except Exception:
                        log.exception("a write's completion callback failed")

    def _commit(self, all_ops: list[ops.Op], seen: int = 0, fresh: Collection[bytes] = ()) -> int:
        token, last = self.election.fencing_token, self._committed
        # Range compares only where the view holds this writer's last commit, made in this term
        # (so it also holds every write of an earlier leader): see `guard`.
        if not (last is not None and last[1] == token and seen >= last[0]):
            fresh = ()
        self._committed = None  # until this commit's last revision is known
        revision = 0
        for batch in chunks(all_ops, self.max_ops, MAX_TXN_BYTES):
            revision = self._commit_batch(batch, seen, fresh)
        if not revision:
            try:
                revision = self.election.client.revision()
            except StoreError as err:
                raise WriteFailed(f"committed, but the revision could not be read: {err}") from err
        self._committed = (revision, token)
        return revision

    def _commit_batch(self, batch: list[ops.Op], seen: int = 0, fresh: Collection[bytes] = ()) -> int:
        """Commit one txn; its revision, or 0 where it landed but its answer was lost.

        A txn whose answer was lost may still commit much later: etcd keeps the proposal
        (docs/decisions.md, "A late copy of a retried txn"). Two guards keep such a late copy
        from undoing newer writes:
        - with `seen` (the revision of the view the diff was taken against), none of its keys
          may have been written after it;
        - each attempt requires a marker key of its own to be absent. When an attempt's answer
          is lost, its marker is written before anything else is decided (`_settle`), so no copy
          of it can commit afterwards; only then is the store read to see whether it landed, and
          only then is it retried. A key deleted since passes the first guard (etcd gives a
          deleted key and a never-written one the same mod_revision, 0); it cannot pass this one.
        """
        self._settle()  # an earlier attempt still in doubt: no write until it can no longer land
        compares = guard(batch, seen, self.keys.tasks.encode(), fresh) if seen else []
        for attempt in range(3):
            marker = f"{self._marker_prefix}{next(self._markers)}"
            lease_id = self.election.lease_id
            try:
                revision = self.election.fenced_commit(batch, [*compares, ops.create_revision(marker, "==", 0)])
            except StoreOutcomeUnknown as err:
                self._count("unknown", len(batch))
                if lease_id is not None:
                    self._in_doubt.append((lease_id, marker))
                self._settle()
                if self._landed(batch):
                    return 0
                log.warning("txn outcome unknown (%s); it did not land and cannot now; retrying", err)
                continue
            except StoreUnavailable as err:
                self._count("unavailable", len(batch))
                if attempt == 2:
                    raise WriteFailed(str(err)) from err
                time.sleep(0.2)
                continue
            except StoreError as err:
                self._count("error", len(batch))
                raise WriteFailed(str(err)) from err
            if revision is None and seen and self.election.is_leader:  # the fence held: a key moved
                self._count("conflict", len(batch))
                raise WriteFailed(f"etcd did not confirm the write: a key it writes (or a task record between two it writes) changed after revision {seen}")
            if revision is None:
                self._count("fenced", len(batch))
                raise NotLeader("the leader key is no longer ours: write refused by the fence")
            self._count("committed", len(batch))
            return revision
        raise WriteFailed("etcd did not confirm the write")

    def _settle(self) -> None:
        """Poison the marker of every attempt still in doubt, so none of them can commit from
        now on; WriteFailed, with the attempts kept in doubt, where etcd does not confirm it."""
        while self._in_doubt:
            lease_id, marker = self._in_doubt[0]
            try:
                self.election.poison(marker, lease_id)  # False: its term's lease is gone, and the fence holds
            except StoreError as err:
                raise WriteFailed(f"etcd did not confirm the write: an earlier txn is still in doubt ({err})") from err
            self._in_doubt.pop(0)

    def _landed(self, batch: list[ops.Op]) -> bool:
        """After an unanswered txn: did it commit? Its first op's key tells (all or nothing)."""
        first = batch[0]
        try:
            if "request_put" in first:
                req = first["request_put"]
                found = self.election.client.get(ops.unb64(req["key"]))
                return found is not None and found[0] == ops.unb64(req["value"])
            req = first["request_delete_range"]
            return self.election.client.get(ops.unb64(req["key"])) is None
        except StoreError as err:
            raise WriteFailed(f"outcome unknown and etcd unreachable: {err}") from err

    def _count(self, outcome: str, n: int) -> None:
        if self._on_txn is not None:
            self._on_txn(outcome, n)
