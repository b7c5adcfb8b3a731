"""The leader's work, started on election and stopped on deposition: scheduling, restarts, rolling updates, polling.

One term of leadership runs, in order: catch the watch cache up with etcd (the new leader
already holds the cell in memory, so this is a short wait, not a rebuild), write the
configured default quotas, then loop. Each pass, in one fenced write: restart DEAD tasks
that their job's policy restarts, roll tasks whose request is older than their job's (both
at a limited rate), then schedule the pending tasks: chosen as a scheduler process chooses
them (`SetAside.next`), planned by the scheduler library, and committed through the spec's
actions by the one commit path a scheduler process's plan also takes (`commit`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from reference.master import backoff, drain, events, rollout
from reference.master.cache import WatchCache
from reference.master.cell import Cell, Draft, is_pass_work, machine_images, will_restart
from reference.master.crashes import record_failures
from reference.master.jobscaler import JobAutoscaler
from reference.master.poller import Link, Poller
from reference.master.reclaimer import Reclaimer
from reference.master.writer import NotLeader, WriteFailed, Writer
from reference.scheduler import Placement, Plan, SchedulerConfig, plan_for, plan_steps
from reference.scheduler.pairing import CrashMemory
from reference.scheduler.setaside import SetAside
from reference.scheduler.wire import crashes_to_json
from spec.actions import Step, apply, restart_allowed
from spec.model import Band, CellState, DeathCause, QuotaKey, Resources, TaskId, TaskState, is_stale

log = logging.getLogger(__name__)


@dataclass
class LeaderConfig:
    cell_name: str
    master_name: str
    poll_interval: float = 1.0
    down_after: int = 3
    restart_rate: float = 20.0  # new incarnations per second, cell-wide
    roll_rate: float = 2.0  # tasks rolled per second during a rolling update
    default_quota: Resources | None = None  # for user "*" in every band but best effort
    pass_interval: float = 0.5  # the longest the scheduler sleeps without a change
    channel_key: bytes | None = None  # signs every request to a borglet (reference/channel.py)


class TokenBucket:
    """At most `rate` events a second, in bursts of at most max(rate, 1)."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.clock = rate, clock
        self.burst = max(rate, 1.0)
        self.tokens = self.burst
        self.at = clock()

    def take(self, want: int) -> int:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        got = min(want, int(self.tokens))
        self.tokens -= got
        return got


def pass_has_work(state: CellState) -> bool:
    """Whether a scheduling pass could change anything: a task is PENDING, a DEAD task is
    the latest incarnation of a live index that its job's policy restarts, or a RUNNING task
    is older than its job's request. DEAD tasks that stay dead are no work."""
    latest: dict[tuple[str, int], int] = {}
    for tid in state.tasks:
        k = (tid.job, tid.index)
        latest[k] = max(latest.get(k, -1), tid.incarnation)
    for tid, t in state.tasks.items():
        if t.state is TaskState.PENDING:
            return True
        job = state.jobs.get(tid.job)
        if job is None:
            continue
        if t.state is TaskState.RUNNING:
            if is_stale(t, job):
                return True
        elif (
            t.state is TaskState.DEAD
            and latest[(tid.job, tid.index)] == tid.incarnation
            and tid.index < job.task_count
            and restart_allowed(job.restart_policy, t.cause)
        ):
            return True
    return False


def pass_work(state: CellState) -> set[TaskId]:
    """Every task a pass could act on, by a scan of all tasks: what `Cell.work` holds."""
    latest: dict[tuple[str, int], int] = {}
    for tid in state.tasks:
        k = (tid.job, tid.index)
        latest[k] = max(latest.get(k, -1), tid.incarnation)
    return {
        tid
        for tid, t in state.tasks.items()
        if is_pass_work(t, state.jobs.get(tid.job), latest[(tid.job, tid.index)] == tid.incarnation)
    }


def cell_has_work(cell: Cell) -> bool:
    """`pass_has_work` for a view: from its work set where the watch cache kept one."""
    if cell.work is not None:
        return bool(cell.work)
    return pass_has_work(cell.state)


# Pending reasons written per pass at most: tasks of one job share a class and its reasons, so
# a job of thousands of unschedulable tasks gets them on its first tasks at once and on the
# rest over later passes, instead of one pass rewriting every task record of the job.
PENDING_REASONS_PER_PASS = 200


def record_pending_reasons(d: Draft, plan: Plan) -> int:
    """Write why each unschedulable task of a plan found no place (TaskInfo.pending), where it
    changed; returns how many were written."""
    machines = len(d.state.machines)
    written = 0
    for u in sorted(plan.unschedulable, key=lambda u: (u.task.job, u.task.index)):
        task = d.state.tasks.get(u.task)
        if task is None or task.state is not TaskState.PENDING:
            continue
        text = events.pending_summary(u.reasons, machines)
        info = d.task_info(u.task)
        if info.pending != text:
            d.tasks[u.task] = replace(info, pending=text)
            written += 1
            if written >= PENDING_REASONS_PER_PASS:
                break
    return written


def step_reason(step: Step) -> str:
    """Why a plan's step is taken, as a task's history records it."""
    return "scheduled" if step.action == "schedule" else f"preempted by {step.args[-1]}"


def commit(d: Draft, plan: Plan) -> tuple[int, int]:
    """The one way a plan enters the cell, whoever made it (the leader's own pass or a
    scheduler process): its placements through `commit_plan`, then why each task it found no
    place for is waiting (`record_pending_reasons`); returns (placed, conflicts)."""
    placed, conflicts = commit_plan(d, plan)
    record_pending_reasons(d, plan)
    return placed, conflicts


def commit_plan(d: Draft, plan: Plan) -> tuple[int, int]:
    """Apply a plan computed on an earlier state: each placement, with its preemptions, only
    if every one of its spec steps is allowed in the draft as it is now (optimistic
    concurrency); returns (placements committed, conflicts). A conflict changes nothing: its
    task stays PENDING and its victims keep running."""
    placed = conflicts = 0
    for p in plan.placements:
        if not p.victims:
            # One step: its guard is the whole check, and a false guard changes nothing.
            if d.step("schedule", p.task, p.machine, reason="scheduled"):
                placed += 1
            else:
                conflicts += 1
            continue
        steps = list(plan_steps(Plan(placements=[p])))
        state: CellState | None = d.state
        for step in steps:
            state = apply(state, step) if state is not None else None
        if state is None:
            conflicts += 1
            continue
        for step in steps:
            d.step(step.action, *step.args, reason=step_reason(step))
        placed += 1
    return placed, conflicts


# A scheduler plan is committed in parts of this many placements, by machine (`plan_parts`), and
# a write takes as many parts as the writer's recent pace (`Writer.op_s`) says it commits within
# PLAN_WRITE_S, so what a client queues meanwhile (a submit, a kill) waits for about that long,
# not for the whole plan, whatever the cell's size or the host's load. While a change waits for
# the writer, a write takes one part. Before the writer has a pace, a write takes one part.
PLAN_CHUNK = 1000
PLAN_WRITE_S = 1.0


def parts_a_write(parts: list[list[Placement]], op_s: float | None, waiting: bool) -> int:
    """How many of `parts` (at least one) the next write takes: one while a change waits or the
    pace is unknown, else as many as fit PLAN_WRITE_S at `op_s` seconds per placement."""
    if waiting or op_s is None:
        return 1
    take, placements = 1, len(parts[0])
    while take < len(parts) and (placements + len(parts[take])) * op_s <= PLAN_WRITE_S:
        placements += len(parts[take])
        take += 1
    return take


def plan_parts(placements: list[Placement], size: int) -> list[list[Placement]]:
    """A plan's placements in parts of at most `size`, by machine: each machine's placements
    together, in the plan's order, and a part ends at a machine's last placement when that is
    possible. The scheduler spreads a pass over the cell; parts cut in the plan's order gave a
    machine its ten tasks of a 100,000-task fill in as many writes, each a new desired set, a
    sync and a changed report for it (the leader's CPU per task nearly doubled; docs/decisions.md).
    Placements on different machines do not depend on each other (a placement's victims are on
    its machine), so only each machine's own order is kept."""
    by_machine: dict[str, list[Placement]] = {}
    for p in placements:
        by_machine.setdefault(p.machine, []).append(p)
    parts: list[list[Placement]] = []
    part: list[Placement] = []
    for machine in sorted(by_machine):
        group = by_machine[machine]
        if part and len(part) + len(group) > size:
            parts.append(part)
            part = []
        while len(group) > size:  # one machine with more than a part: cut it alone
            parts.append(group[:size])
            group = group[size:]
        part.extend(group)
    if part:
        parts.append(part)
    return parts

# The most pending tasks this term's own pass plans: it plans inside the one writer, which holds
# every other write meanwhile. A pass of 90,000 tasks, made when a busy leader stopped hearing its
# scheduler process, held the writer 94 s in a 10,000-machine cell, and every submit meanwhile
# timed out. (A scheduler process plans more a pass: its plan is committed in parts.)
OWN_PASS_MAX = 5000

MARKED = 1e-9  # the least retry_at written: > 0 marks a death as counted (a cell clock may start at 0)


def restart_dead(d: Draft, candidates: set[TaskId], take: Callable[[int], int]) -> int:
    """Restart the DEAD tasks among `candidates` that their job's policy restarts and whose
    back-off is over, as many as `take(wanted)` allows (the leader's rate limit), in task id
    order; returns how many. A death seen for the first time gets its back-off written
    (master/backoff.py): the index's failures in a row and when it may be tried again, which
    `task list`, `job show` and Sigma show as BACKOFF until then."""
    state = d.state
    restartable = []
    for tid in candidates:
        t = state.tasks.get(tid)
        if t is not None and will_restart(state, t):
            info = d.task_info(tid)
            due = info.retry_at
            if due <= 0:
                failures, at = backoff.of_death(info.failures, info.history, d.now)
                wait = f"next incarnation in {max(at - d.now, 0):.0f}s"
                # No event for a restart made at once (a first failure), only for a wait.
                said = [("backoff", f"{wait} (failure {failures} in a row)")] if at > d.now else []
                # How it ended, where its borglet's facts did not say: the reason of its fail step.
                last_exit = info.last_exit
                if t.cause is DeathCause.FAILED and info.history and info.history[-1][0] == TaskState.DEAD.value:
                    last_exit = info.history[-1][2] or last_exit
                d.tasks[tid] = info = replace(
                    info, failures=failures, retry_at=max(at, MARKED), last_exit=last_exit,
                    events=events.append(info.events, d.now, said),
                )  # fmt: skip
                due = at
            if d.now >= due or due <= MARKED:
                restartable.append(tid)
    if not restartable:
        return 0
    done = 0
    for tid in sorted(restartable, key=str)[: take(len(restartable))]:
        cause = d.state.tasks[tid].cause
        dead = d.task_info(tid)  # the restart drops the dead one's record
        # The spec's guard checks that tid is still the latest incarnation of its index.
        if d.step("restart", tid, reason=f"restart after {cause.value if cause else '?'}"):
            done += 1
            newer = TaskId(tid.job, tid.index, tid.incarnation + 1)  # the count goes on with it
            d.tasks[newer] = replace(d.task_info(newer), failures=dead.failures, last_exit=dead.last_exit)
    return done


def roll_stale(d: Draft, candidates: set[TaskId], take: Callable[[int], int], ready: rollout.Ready | None = None) -> int:
    """Roll the RUNNING tasks among `candidates` whose request or template is older than their
    job's, as each job's rollout allows (master/rollout.py: at most max_unavailable down, each
    replacement confirmed up by its borglet, `ready`, before the next) and `take(wanted)`
    allows; returns how many."""
    return rollout.roll(d, candidates, take, ready)


class Term:
    """One term of leadership: its threads stop when the term ends."""

    # While a scheduler process was heard from this recently, this term does not plan.
    SCHEDULER_GRACE_S = 2.0
    # ... nor while it was heard from this recently and its lease in etcd stands: a leader
    # whose API is slow to read a plan or a heartbeat (a busy host) does not take that for the
    # process's death, which its lease's expiry tells. A process that holds its lease but has
    # stopped planning is planned for after this long.
    SCHEDULER_LEASED_GRACE_S = 30.0
    SCHEDULER_LEASE_CHECK_S = 0.5  # how often the lease is read, while only it can tell

    def __init__(
        self,
        token: int,
        cache: WatchCache,
        writer: Writer,
        config: LeaderConfig,
        on_pass: Callable[[float, int], None] | None = None,
        on_poll: Callable[[str], None] | None = None,
        *,
        link: Link,
        scheduler_leased: Callable[[], bool] | None = None,
    ) -> None:
        self.token = token
        self.cache = cache
        self.writer = writer
        self.config = config
        self.scheduler = SchedulerConfig()
        self._on_pass = on_pass
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.ready = threading.Event()
        self.restarts = TokenBucket(config.restart_rate)
        self.rolls = TokenBucket(config.roll_rate)
        self.passes = 0
        self.unschedulable = SetAside(pass_max=OWN_PASS_MAX)
        self.crashes = CrashMemory()  # task::machine pairings that crashed lately (scheduler/pairing.py)
        self.templates: dict[str, str] = {}  # each job's template as this term last saw it (rollout.new_versions)
        self._scheduler_heard = -float("inf")
        # Whether a scheduler process holds the cell's scheduler lease (a read of etcd), and
        # when it was last read and last found held; None: not known, the heartbeats alone tell.
        self._scheduler_leased = scheduler_leased
        self._lease_read_at = -float("inf")
        self._lease_seen = -float("inf")
        self._plans_in_flight = 0  # scheduler plans being committed now
        self._plans_lock = threading.Lock()
        self.scheduler_name = ""  # the scheduler process whose plan came last
        self.proposals = {"plans": 0, "placed": 0, "conflicts": 0}
        self.poller = Poller(
            cache,
            writer,
            cell_name=config.cell_name,
            master_name=config.master_name,
            epoch=token,
            interval=config.poll_interval,
            down_after=config.down_after,
            on_poll=on_poll,
            link=link,
        )
        # Around the scheduler: horizontal autoscaling of jobs and Borg's reservation
        # estimates, both reading the usage the poller gathers and writing through `writer`.
        self.autoscaler = JobAutoscaler(cache, writer, lambda: self.poller.usage)
        self.reclaimer = Reclaimer(cache, writer, lambda: self.poller.usage, moved=self.poller.take_usage_moved)
        self._thread = threading.Thread(target=self._run, name=f"leader-{token}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.poller.stop()
        self.autoscaler.stop()
        self.reclaimer.stop()

    def nudge(self) -> None:
        self._wake.set()
        self.poller.nudge()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.cache.catch_up(5.0):
                    break
            except Exception as err:
                log.warning("leader: cannot catch up with etcd yet: %s", err)
            self._stop.wait(0.2)
        if self._stop.is_set():
            return
        try:
            self._write_default_quotas()
        except (NotLeader, WriteFailed) as err:
            log.warning("leader: default quotas not written: %s", err)
        self.poller.start()
        self.autoscaler.start()
        self.reclaimer.start()
        self.ready.set()
        log.info("leader term %d: scheduling", self.token)
        while not self._stop.is_set():
            try:
                self.run_pass()
            except (NotLeader, WriteFailed) as err:
                log.warning("scheduling pass not written: %s", err)
                self._stop.wait(0.2)
            except Exception:
                log.exception("scheduling pass failed")
                self._stop.wait(0.5)
            self._wake.wait(self.config.pass_interval)
            self._wake.clear()

    def _write_default_quotas(self) -> None:
        quota = self.config.default_quota
        if quota is None:
            return

        # A seed, not a setting: an entry already in etcd is the admin's (PUT /v1/quotas/*/<band>)
        # and stands, or a failover would undo it (docs/decisions.md, "Quotas set through the API").
        def change(d: Draft) -> None:
            for band in (Band.BATCH, Band.PRODUCTION, Band.MONITORING):
                key = QuotaKey("*", band)
                if key not in d.state.quotas:
                    d.quotas[key] = quota

        self.writer.mutate(change)

    def run_pass(self) -> None:
        """One pass of the term's loop: restarts, rolls, drains, then, unless a scheduler
        process plans for the cell, scheduling, all in one fenced write."""
        outlook = getattr(self.cache, "pass_outlook", None)
        if outlook is not None and self._quiet(*outlook()):
            return  # decided from the watch cache's sets, without building a view
        cell = self.cache.cell()
        draining = drain.has_work(cell)  # a drained machine still runs a task: move what budgets allow
        if self._quiet(cell_has_work(cell), cell.acting is None or bool(cell.acting), draining):
            return
        if self.unschedulable.covers(cell) and not draining:
            return  # only tasks already found unschedulable, and nothing has freed capacity
        started = time.perf_counter()
        placed = self.writer.mutate(self._change)[0]
        self.passes += 1
        if self._on_pass is not None:
            self._on_pass(time.perf_counter() - started, placed)

    def _quiet(self, work: bool, acting: bool, draining: bool) -> bool:
        """Whether a pass has nothing to do: no task it could act on and no drain to advance
        (the common quiet case), or only pending tasks while a scheduler process places them.
        `acting`: a task of the work set is not PENDING (True where that is not known);
        `draining`: a drained machine (the watch cache's outlook), or one still running a task
        a drain moves (a view's)."""
        if not work and not draining:
            return True
        self._read_scheduler_lease()
        return not acting and not draining and self.scheduler_active()

    def scheduler_active(self) -> bool:
        """Whether a scheduler process plans for this cell: a plan of its is being committed, or
        it was heard from lately (a large plan's commit can outlast the grace; the term must not
        plan beside it while it does)."""
        if self._plans_in_flight > 0:
            return True
        now = time.monotonic()
        silent = now - self._scheduler_heard
        if silent < self.SCHEDULER_GRACE_S:
            return True
        leased = now - self._lease_seen < self.SCHEDULER_GRACE_S
        return leased and silent < self.SCHEDULER_LEASED_GRACE_S

    def _read_scheduler_lease(self) -> None:
        """Read whether a scheduler process holds its lease, when the heartbeats alone no longer
        say it is there (outside the writer: this is a read of etcd), at most every
        SCHEDULER_LEASE_CHECK_S. A read that fails tells nothing: the lease counts as not seen."""
        if self._scheduler_leased is None:
            return
        now = time.monotonic()
        silent = now - self._scheduler_heard
        if silent < self.SCHEDULER_GRACE_S / 2 or silent >= self.SCHEDULER_LEASED_GRACE_S:
            return
        if now - self._lease_read_at < self.SCHEDULER_LEASE_CHECK_S:
            return
        self._lease_read_at = now
        try:
            held = self._scheduler_leased()
        except Exception as err:  # etcd unreachable: the heartbeats alone decide
            log.info("the scheduler lease could not be read: %s", err)
            return
        if held:
            self._lease_seen = now

    def accept_plan(self, plan: Plan, by: str = "") -> dict[str, Any]:
        """Commit a scheduler process's plan: each placement with its preemptions only if every
        one of its spec steps is allowed in the cell as it is now, else it is a conflict and
        its task stays PENDING for the next pass. Raises NotLeader or WriteFailed.

        The answer carries, beside what was committed, the crashing pairings this term
        remembers (`crashes`, as `wire.crashes_to_json` writes them): the process plans its next
        pass with them, as this term's own pass would, so its placements avoid the machines a
        task index crashed on repeatedly. An idle process's heartbeat (an empty plan) every
        `schedulerd.process.HEARTBEAT_S` keeps them fresh."""
        self._scheduler_heard = time.monotonic()
        self.scheduler_name = by
        with self._plans_lock:
            self._plans_in_flight += 1
        try:
            return self._accept_plan(plan)
        finally:
            with self._plans_lock:
                self._plans_in_flight -= 1
            self._scheduler_heard = time.monotonic()  # the grace counts from the answer too

    def _accept_plan(self, plan: Plan) -> dict[str, Any]:
        if not plan.placements and not plan.unschedulable:
            answer: dict[str, Any] = {"placed": 0, "conflicts": 0, "revision": self.cache.revision}
        else:
            placed = conflicts = 0
            # A large plan goes in as several writes, so that what clients queued meanwhile (a
            # submit, a kill) is committed between them rather than behind the whole plan (see
            # PLAN_CHUNK).
            parts = plan_parts(list(plan.placements), PLAN_CHUNK)
            while len(parts) > 1:
                take = parts_a_write(parts, self.writer.op_s, self.writer.waiting() > 0)
                if take >= len(parts):
                    break
                part = [p for q in parts[:take] for p in q]
                parts = parts[take:]
                (p, c), revision = self.writer.mutate(lambda d, part=part: commit_plan(d, Plan(placements=part)))
                placed, conflicts = placed + p, conflicts + c
            last = Plan(placements=[p for q in parts for p in q], unschedulable=plan.unschedulable)
            (p, c), revision = self.writer.mutate(lambda d: commit(d, last))
            placed, conflicts = placed + p, conflicts + c
            self.proposals["plans"] += 1
            self.proposals["placed"] += placed
            self.proposals["conflicts"] += conflicts
            if placed and self._on_pass is not None:
                self._on_pass(0.0, placed)
            answer = {"placed": placed, "conflicts": conflicts, "revision": revision}
        answer["crashes"] = crashes_to_json(self.crashes.snapshot())
        return answer

    def _change(self, d: Draft) -> int:
        view = d.base if d.base.running is not None else self.cache.cell()
        # Tasks already found unschedulable are left out before anything looks at them, so a
        # pass costs what is new. They were PENDING; what leaves PENDING is placed by a pass
        # (which only plans them after the set is dropped) or killed, and killed tasks stay
        # dead: none of them can be a restart or a roll this pass would miss.
        known = self.unschedulable.known(view.capacity_epoch) if view.running is not None else set()
        # Restarts, rolls and failures act on tasks that are not PENDING: the work set less
        # the queue, where the cache keeps it, so a pass beside a long queue does not walk it.
        acting = self._acting(d)
        for key in rollout.new_versions(d.state, self.templates):
            self.crashes.forget(key)  # a new program: where the old one crashed says nothing of it
        record_failures(d, acting, self.crashes)  # before restart_dead marks each death seen
        acted = self._restart_dead(d, acting) + self._roll(d, acting) + drain.advance(d)
        if self.scheduler_active():
            return 0  # a scheduler process plans: its plans come through accept_plan
        candidates = self._candidates(d) - known
        # The pending tasks to plan, chosen as the scheduler process chooses them. A roll or
        # restart of this pass frees capacity the cache has not seen yet, and without the
        # cache's sets there is no epoch: every pending task is planned then.
        epoch = view.capacity_epoch if not acted and view.running is not None else -1
        to_plan = self.unschedulable.next(d.state, candidates | d.touched, epoch)
        if not to_plan:
            return 0
        if self.unschedulable.left:
            self._wake.set()  # the rest of the queue in the next pass, at once (SetAside.pass_max)
        state = d.state
        running = None
        if view.running is not None:
            running = {
                tid
                for tid in view.running | d.touched
                if (t := state.tasks.get(tid)) is not None and t.state is TaskState.RUNNING
            }
        plan = plan_for(
            state, self.scheduler, seed=self.passes, pending_ids=to_plan, running_ids=running,
            images=machine_images(d.machines), crashes=self.crashes.snapshot(),
        )  # fmt: skip
        placed, _ = commit(d, plan)
        self.unschedulable.found((u.task for u in plan.unschedulable), epoch)
        return placed

    def _candidates(self, d: Draft) -> set[TaskId]:
        """The tasks this pass may act on: the watch cache's work set (of the cell the draft
        started from) and whatever this draft changed; each is checked again against the
        draft's state before it is acted on. A draft that follows others in a group commit
        may start from a cell the cache has no work set for: the cache's own view then
        stands in, and work the earlier changes of the group made is left to the next pass,
        which their write wakes. Without a cache's work set at all, every task is scanned."""
        work = d.base.work
        if work is None:
            work = self.cache.cell().work
        if work is None:
            return pass_work(d.state)
        return set(work) | d.touched

    def _acting(self, d: Draft) -> set[TaskId]:
        """The tasks this pass may restart, roll or record as failed: the cache's acting set
        (its work set less PENDING tasks) and whatever this draft changed, or, without one,
        `_candidates`, whose PENDING tasks each of those steps passes over."""
        acting = d.base.acting
        if acting is None and d.base.work is None:
            acting = self.cache.cell().acting
        if acting is None:
            return self._candidates(d)
        return set(acting) | d.touched

    def _restart_dead(self, d: Draft, candidates: set[TaskId]) -> int:
        return restart_dead(d, candidates, self.restarts.take)

    def _roll(self, d: Draft, candidates: set[TaskId]) -> int:
        return roll_stale(d, candidates, self.rolls.take, self.poller.ready)
