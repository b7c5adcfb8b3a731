"""The leader's reservation keeper: sets each running task's reservation from its usage through the spec's `reserve`.

When a reservation must grow back and the machine's reclaimed resources were handed to
non-prod work meanwhile, the lowest-priority non-prod tasks there are evicted (reason
reclamation) until it fits, as Borg does; the evicted tasks go back to PENDING.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from reference.elastic.reservation import (
    DEFAULT_HALF_LIFE_S,
    DEFAULT_MARGIN,
    estimate,
    worth_writing,
)
from reference.master import views, work
from reference.master.cache import WatchCache
from reference.master.cell import Cell, Draft
from reference.master.changes import between, task_of
from reference.master.jobscaler import UsageSource
from reference.master.views import task_counts
from reference.master.writer import NotLeader, WriteFailed, Writer
from spec.actions import ACTIONS, EvictReason
from spec.model import Resources, Task, TaskId, TaskState, is_prod

log = logging.getLogger(__name__)

# A task's first seconds (imports, warm-up) say little about what it will use.
WARMUP_S = 10.0
# Reservations written per tick at most, the largest changes first; the others keep their
# time since their last estimate and come in a later tick. Without a bound, a job of 10,000
# tasks leaving its warm-up made each tick a write of 10,000 records while the cell was still
# starting its processes.
# At 1,000 a tick, a fill of 100,000 left a backlog whose writes, right after it, took the
# replicas' watches from their shards' polls (polling p95 past 10 s at 10,000 machines) and the
# leader from the submits after it: 500 a tick is 100 records a second, 6,000 a minute.
MAX_WRITES_PER_TICK = 500
# While borglets still have tasks to start (placed, not yet confirmed running), each of
# those tasks takes the tick's budget down by one, to no less than this. Reservations are an
# optimization that can wait a few ticks; a start cannot: every reservation is one more
# record for etcd to apply and for each replica to decode, in the seconds those starts need
# them. A 10,000-task start wrote 2,000 reservations before its last process ran.
MIN_WRITES_PER_TICK = 100
# A tick looks at the tasks that changed since the last one (their records or jobs, from the
# watch cache's change log; their usage, from the poller; the end of their warm-up; the
# backlog), not at every running task. Every this many ticks, and whenever what changed is not
# known, it walks every running task: the safety net, which also estimates again, over all the
# time since their last estimate, the quiet tasks no change brought in (a minute at 5 s a tick).
FULL_WALK_EVERY = 12


class Reclaimer:
    def __init__(
        self,
        cache: WatchCache,
        writer: Writer,
        usage: UsageSource,
        *,
        interval: float = 5.0,
        margin: float = DEFAULT_MARGIN,
        half_life: float = DEFAULT_HALF_LIFE_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        moved: Callable[[], set[TaskId] | None] | None = None,
        full_walk_every: int = FULL_WALK_EVERY,
    ) -> None:
        self.cache, self.writer, self.usage = cache, writer, usage
        # The tasks whose usage moved since the last call (None: not known); without it every
        # tick walks every running task.
        self.moved = moved
        self._revision = -1  # the view the last tick looked at
        self._reloads = -1  # the cache's reload count then
        self._ticks = 0
        self.full_walk_every = full_walk_every
        self._warming: list[tuple[float, TaskId]] = []  # (wall time its warm-up ends, task)
        self.interval, self.margin, self.half_life = interval, margin, half_life
        self.clock, self.wall = clock, wall
        self._last: dict[TaskId, float] = {}
        self._unmoved: dict[TaskId, Unmoved] = {}
        self._waiting: dict[TaskId, Waiting] = {}
        # The backlog by rank (rank, task), entries of tasks no longer waiting, or waiting with
        # another rank, left in and skipped: a tick between walks takes its best `limit` alone.
        self._ranked: list[tuple[tuple[float, float, str], TaskId]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reclaimer", daemon=True)

    def start(self) -> None:
        if "reserve" in ACTIONS:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except (NotLeader, WriteFailed) as err:
                log.info("reservations not written: %s", err)
            except Exception:  # one bad tick must not end reclamation
                log.exception("reservation tick failed")

    def estimates(self) -> dict[TaskId, Resources]:
        """The reservations worth writing now, from the cached cell and the latest usage."""
        cell = self.cache.cell()
        wall = self.wall()
        limit = write_budget(cell)
        only = self._to_look_at(cell, wall)
        best = [] if only is None else self._best_waiting(limit)
        if only is not None:
            only.update(tid for _, tid in best)
            work.add("reservation_checks", len(only))
        warming: list[tuple[float, TaskId]] = []
        queued: list[tuple[tuple[float, float, str], TaskId]] = []
        changes = reservation_changes(
            cell, self.usage(), self.clock(), wall, self._last,
            interval=self.interval, margin=self.margin, half_life=self.half_life, limit=limit,
            unmoved=self._unmoved, waiting=self._waiting, only=only, warming=warming, queued=queued,
        )  # fmt: skip
        if only is None:
            self._warming = warming
            heapq.heapify(self._warming)
            self._ranked = [(w[2], tid) for tid, w in self._waiting.items()]
            heapq.heapify(self._ranked)
        else:
            for item in warming:
                heapq.heappush(self._warming, item)
            for item in (*queued, *best):  # the newly waiting, and the best that still wait
                if (w := self._waiting.get(item[1])) is not None and w[2] == item[0]:
                    heapq.heappush(self._ranked, item)
        return changes

    def _best_waiting(self, limit: int) -> list[tuple[tuple[float, float, str], TaskId]]:
        """The `limit` best ranked tasks of the backlog, taken off the heap: the only ones of
        it a tick may write, whatever else it looks at (the others rank lower still)."""
        best: list[tuple[tuple[float, float, str], TaskId]] = []
        seen: set[TaskId] = set()
        while self._ranked and len(best) < limit:
            rank, tid = heapq.heappop(self._ranked)
            w = self._waiting.get(tid)
            if w is not None and w[2] == rank and tid not in seen:
                best.append((rank, tid))
                seen.add(tid)
        return best

    def _to_look_at(self, cell: Cell, wall: float) -> set[TaskId] | None:
        """The tasks this tick looks at: those whose record or job changed since the last tick,
        whose usage moved, whose warm-up has ended, and the backlog; None for every running
        task (the first tick, every FULL_WALK_EVERY-th, and whenever what changed is not known:
        a reload of the cache, changes older than its log holds, usage moves not counted)."""
        log = getattr(self.cache, "changes", None)
        reloads = getattr(self.cache, "reloads", 0)
        moved = self.moved() if self.moved is not None else None
        since, self._revision = self._revision, cell.revision
        full = moved is None or log is None or reloads != self._reloads or self._ticks % self.full_walk_every == 0
        self._ticks += 1
        self._reloads = reloads
        changes = None if full else between(log, since, cell.revision)
        if changes is None:
            work.add("reservation_full_walks")
            work.add("reservation_checks", len(cell.state.tasks))
            return None
        only = set(moved)  # type: ignore[arg-type]
        tasks = cell.state.tasks
        for c in changes:  # those after this view's revision: the next tick reads them from here
            if c.kind == "task":
                if (tid := task_of(c)) is not None:
                    only.add(tid)
            elif c.kind == "job":
                only.update(tasks.group(views.job_of).get(c.key, ()))
        while self._warming and self._warming[0][0] <= wall:
            only.add(heapq.heappop(self._warming)[1])
        return only

    def tick(self) -> None:
        changes = self.estimates()
        if changes:
            self.writer.mutate(lambda d: apply_reservations(d, changes))


def write_budget(cell: Cell) -> int:
    """How many reservations a tick may write: MAX_WRITES_PER_TICK less one per task still
    to be placed (PENDING) or placed with its start not confirmed by its borglet yet (RUNNING
    less `running_confirmed`; the counts a watch cache's view keeps), and at least
    MIN_WRITES_PER_TICK. Submits and starts come first: a backlog of reservations left by a
    fill of 100,000 written at the full rate took the leader's budget from the submits after
    it, which queued, and queued tasks did not take the budget down while they waited to be
    placed."""
    counts = task_counts(cell)
    waiting = counts[TaskState.PENDING.value] + counts[TaskState.RUNNING.value] - counts["running_confirmed"]
    return max(MIN_WRITES_PER_TICK, MAX_WRITES_PER_TICK - waiting)


# A task whose last estimate was not worth writing: the task as it was (the same object: a
# view carries unchanged records over, and a new reservation, request or state is a new
# one), its usage then, and the longest time since an estimate over which its estimate was
# found not worth writing.
Unmoved = tuple[Task, object, float]

# A task whose estimate was worth writing but left out by a tick's limit: the task as it was
# (the same object, as in `Unmoved`), its usage then, and its rank: (minus the share of its
# request the estimate moved it, the clock when it was first found worth writing, its id).
Waiting = tuple[Task, object, tuple[float, float, str]]


def reservation_changes(
    cell: Cell,
    usage: Mapping[TaskId, Iterable[tuple[str, int]]],
    now: float,
    wall: float,
    last: dict[TaskId, float],
    *,
    interval: float,
    margin: float = DEFAULT_MARGIN,
    half_life: float = DEFAULT_HALF_LIFE_S,
    limit: int | None = None,
    unmoved: dict[TaskId, Unmoved] | None = None,
    waiting: dict[TaskId, Waiting] | None = None,
    only: Iterable[TaskId] | None = None,
    warming: list[tuple[float, TaskId]] | None = None,
    queued: list[tuple[tuple[float, float, str], TaskId]] | None = None,
) -> dict[TaskId, Resources]:
    """The reservations worth writing at `now`: each RUNNING task outside allocs, past its
    warm-up, with usage, gets `estimate` over the time since its last estimate (`last`, task
    -> clock of its last estimate, kept up to date here; tasks no longer running leave it).
    The leader's `Reclaimer` and the Fauxmaster both decide through this. With `limit`, at
    most that many, the largest changes (as a share of the request) first; a task left out
    keeps its last estimate's time, so its next one covers the whole time since.

    `unmoved` (kept by the caller from one call to the next) makes a quiet cell's tick cheap
    without changing its result: a task whose reservation, request and usage are what they
    were when its estimate was last found not worth writing, over a time since its last
    estimate no longer than then, is not estimated again. An estimate moves a reservation
    toward its target, at once or by a decay that only grows with the time, so over no more
    time it moves no further: still not worth writing.

    `waiting` (kept by the caller too, used with `limit`) makes a backlog cheap: a task found
    worth writing but left out keeps the rank it was found with, and while its reservation,
    request and usage stay what they were it is not estimated again until a tick chooses it
    (over more time it moves at least as far: still worth writing). A tick then costs its
    walk, the new estimates and the `limit` it writes, not an estimate of the whole backlog.
    With it, the largest changes go first as each was measured when first found, the earlier
    found first among equals; without it, as measured at this tick.

    `only` (the `Reclaimer`'s ticks between its full walks): look at these tasks alone, not at
    every task of the cell; the others keep their time since their last estimate, and leave
    `last` and the memos only when a call looks at them (a deleted task comes as a change of
    its own). `warming` gets (the wall time its warm-up ends, task) for each running task
    looked at that is still warming up: the caller looks at it again then. `queued` gets
    (rank, task) for each task that starts waiting."""
    out: dict[TaskId, Resources] = {}
    earlier: dict[TaskId, float | None] = {}
    ranks: dict[TaskId, tuple[float, float, str]] = {}  # with `limit`: each worth writing, largest first
    found: dict[TaskId, tuple[Task, object, float]] = {}  # waiting tasks not estimated: (task, usage, dt)
    running = set()
    jobs = cell.state.jobs
    tasks = cell.state.tasks
    looked = tasks.values() if only is None else [t for tid in only if (t := tasks.get(tid)) is not None]
    for t in looked:
        if t.state is not TaskState.RUNNING:
            continue
        tid = t.id
        used = usage.get(tid)
        if used is None:
            continue
        job = jobs.get(tid.job)
        info = cell.task_info(tid)
        if job is None or job.alloc is not None or not info.started_at:
            continue
        if wall - info.started_at < WARMUP_S:
            if warming is not None:
                warming.append((info.started_at + WARMUP_S, tid))
            continue
        running.add(tid)
        before = last.get(tid)
        dt = now - (before if before is not None else now - interval)
        last[tid] = now
        if unmoved is not None:
            seen = unmoved.get(tid)
            if seen is not None and seen[0] is t and dt <= seen[2] and seen[1] == used:
                continue
        if waiting is not None and limit is not None and (w := waiting.get(tid)) is not None:
            if w[0] is t and w[1] == used:
                ranks[tid], earlier[tid], found[tid] = w[2], before, (t, used, dt)
                continue
            del waiting[tid]  # its reservation, request or usage moved: estimated afresh
        new = estimate(t.reserved, dict(used), t.request, dt, margin=margin, half_life=half_life)
        if worth_writing(t.reserved, new, t.request):
            out[tid] = new
            earlier[tid] = before
            if limit is not None:
                ranks[tid] = (-change_share(t.reserved, new, t.request), now, str(tid))
                if waiting is not None:
                    found[tid] = (t, used, dt)
            if unmoved is not None:
                unmoved.pop(tid, None)
        elif unmoved is not None:
            unmoved[tid] = (t, used, dt)
    memos = [m for m in (last, unmoved, waiting) if m is not None]
    if only is None:
        for memo in memos:
            for tid in [k for k in memo if k not in running]:
                del memo[tid]
    else:
        for tid in only:
            if tid not in running:
                for memo in memos:
                    memo.pop(tid, None)
    if limit is None:
        return out
    chosen = set(ranks) if len(ranks) <= limit else set(heapq.nsmallest(limit, ranks, key=ranks.__getitem__))
    for tid, rank in ranks.items():
        if tid in chosen:
            if tid not in out:  # waiting: estimated now, over all the time since its last estimate
                t, used, dt = found[tid]
                new = estimate(t.reserved, dict(used), t.request, dt, margin=margin, half_life=half_life)
                if worth_writing(t.reserved, new, t.request):  # it is: over more time it moves no less
                    out[tid] = new
            if waiting is not None:
                waiting.pop(tid, None)
            continue
        out.pop(tid, None)
        if waiting is not None and tid not in waiting:
            t, used, _ = found[tid]
            waiting[tid] = (t, used, rank)
            if queued is not None:
                queued.append((rank, tid))
        if (before := earlier[tid]) is None:
            del last[tid]  # its next estimate is a first one again
        else:
            last[tid] = before
    return out


def change_share(old: Resources, new: Resources, request: Resources) -> float:
    """How far a reservation moves, as the largest share of the request in any resource."""
    return max((abs(new.get(name) - old.get(name)) / asked for name, asked in request.items if asked), default=0.0)


def apply_reservations(d: Draft, changes: dict[TaskId, Resources]) -> int:
    """Write each reservation; evict non-prod work that sits in reclaimed room a growing one needs back."""
    written = 0
    for tid, reservation in sorted(changes.items(), key=lambda kv: str(kv[0])):
        if d.step("reserve", tid, reservation, reason="reservation estimate"):
            written += 1
            continue
        task = d.state.tasks.get(tid)
        if task is None or task.state is not TaskState.RUNNING or task.machine is None:
            continue
        victims = sorted(
            (v for v in d.state.running_on(task.machine) if not is_prod(v.priority) and v.priority < task.priority),
            key=lambda v: (v.priority, str(v.id)),
        )
        for v in victims:
            d.step("evict", v.id, EvictReason.RECLAMATION, reason=f"reclaimed resources needed by {tid}")
            if d.step("reserve", tid, reservation, reason="reservation estimate"):
                written += 1
                break
    return written
