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
from reference.master.cache import WatchCache
from reference.master.cell import Cell, Draft
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
MAX_WRITES_PER_TICK = 1000
# While borglets still have tasks to start (placed, not yet confirmed running), each of
# those tasks takes the tick's budget down by one, to no less than this. Reservations are an
# optimization that can wait a few ticks; a start cannot: every reservation is one more
# record for etcd to apply and for each replica to decode, in the seconds those starts need
# them. A 10,000-task start wrote 2,000 reservations before its last process ran.
MIN_WRITES_PER_TICK = 100


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
    ) -> None:
        self.cache, self.writer, self.usage = cache, writer, usage
        self.interval, self.margin, self.half_life = interval, margin, half_life
        self.clock, self.wall = clock, wall
        self._last: dict[TaskId, float] = {}
        self._unmoved: dict[TaskId, Unmoved] = {}
        self._waiting: dict[TaskId, Waiting] = {}
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
        return reservation_changes(
            cell, self.usage(), self.clock(), self.wall(), self._last,
            interval=self.interval, margin=self.margin, half_life=self.half_life, limit=write_budget(cell),
            unmoved=self._unmoved, waiting=self._waiting,
        )  # fmt: skip

    def tick(self) -> None:
        changes = self.estimates()
        if changes:
            self.writer.mutate(lambda d: apply_reservations(d, changes))


def write_budget(cell: Cell) -> int:
    """How many reservations a tick may write: MAX_WRITES_PER_TICK less one per task placed
    whose borglet has not confirmed its start yet (RUNNING less `running_confirmed`, the
    counts a watch cache's view keeps), and at least MIN_WRITES_PER_TICK."""
    counts = task_counts(cell)
    starting = counts[TaskState.RUNNING.value] - counts["running_confirmed"]
    return max(MIN_WRITES_PER_TICK, MAX_WRITES_PER_TICK - starting)


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
    found first among equals; without it, as measured at this tick."""
    out: dict[TaskId, Resources] = {}
    earlier: dict[TaskId, float | None] = {}
    ranks: dict[TaskId, tuple[float, float, str]] = {}  # with `limit`: each worth writing, largest first
    found: dict[TaskId, tuple[Task, object, float]] = {}  # waiting tasks not estimated: (task, usage, dt)
    running = set()
    jobs = cell.state.jobs
    for t in cell.state.tasks.values():
        if t.state is not TaskState.RUNNING:
            continue
        tid = t.id
        used = usage.get(tid)
        if used is None:
            continue
        job = jobs.get(tid.job)
        info = cell.task_info(tid)
        if job is None or job.alloc is not None or not info.started_at or wall - info.started_at < WARMUP_S:
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
    for tid in [k for k in last if k not in running]:
        del last[tid]
    for memo in (unmoved, waiting):
        if memo is not None:
            for tid in [k for k in memo if k not in running]:
                del memo[tid]
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
