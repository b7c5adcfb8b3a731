"""The borglet's shell: applies syncs, starts queued tasks, watches their processes, restarts, kills
and persists them.

A sync only records what the master wants: new tasks join a queue that a starter thread works
through at a bounded rate, so a sync of thousands of tasks is answered at once and a busy
borglet keeps answering its polls. Each task is recorded as launching (and the record saved)
before its process is spawned, so a borglet restarted at any moment finds the process by its
environment marker instead of starting it a second time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from reference import ports
from reference.borglet import containers as runtime
from reference.borglet import decisions, logs, processes, store, taskusers
from reference.borglet.cgroups import AllocGroup
from reference.borglet.health import Prober
from reference.borglet.isolation import Isolation
from reference.borglet.protocol import SyncRequest, TaskSpec
from reference.borglet.task import Task

log = logging.getLogger(__name__)

CPU_RATE_WINDOW_S = 1.0  # CPU usage is a rate over at least this long; shorter is noise
SAMPLES_PER_TICK = 200  # usage samples taken per supervisor pass at most: the oldest first
# A task's usage is sampled this often. The master writes usage every 10 s
# (pollclock.USAGE_WRITE_EVERY_S), the reclaimer's estimates move over minutes, and the kernel
# enforces memory limits itself: sampling every second cost an idle borglet half its CPU,
# 0.13 ms per task per second, 1.3 cores for 10,000 tasks on one host (docs/decisions.md).
SAMPLE_EVERY_S = 3.0
SAVE_EVERY_S = 1.0  # the task table is rewritten at most this often, except before a start
RELEASES_PER_TICK = 200  # cgroups of ended tasks removed per pass, outside the lock
OBSERVE_CHUNK = 200  # tasks observed per hold of the lock in a pass
FIRST_PROBE_DELAY_S = 0.1
STARTUP_PROBE_INTERVAL_S = 0.25  # probe quickly until a task is first healthy
CONTAINER_STARTS = 8  # containers the starter makes at once (--runtime docker)
# The longest the supervisor loop sleeps when nothing is under way (no kill, start, cleanup or
# unsaved change; no backoff or probe due sooner). A child's exit (SIGCHLD) or a sync wakes it
# at once. A pass every tick_s whatever the state made a hundred idle borglets on one host
# spend a fifth of a core on waking up (docs/decisions.md).
IDLE_TICK_S = 1.0


class SyncRefused(Exception):
    """A sync the borglet did not apply (decisions.refusal, or a delta on an unknown base)."""

    MESSAGES = {
        "stale_epoch": "sync epoch {epoch} is older than epoch {fence.epoch} already seen",
        "stale_seq": "sync {epoch}/{seq} is not newer than {fence.epoch}/{fence.seq} already applied",
        "stale_revision": "sync computed at revision {revision}, older than revision "
        "{fence.revision} already applied",
        "need_full": "a delta on sync {base} of epoch {epoch}, but the last applied sync is "
        "{fence.epoch}/{fence.seq}: send the whole desired set",
    }

    def __init__(self, reason: str, fence: decisions.Fence, request: SyncRequest):
        base = request.delta.base_seq if request.delta is not None else None
        super().__init__(
            self.MESSAGES[reason].format(
                epoch=request.epoch, seq=request.seq, revision=request.revision, fence=fence, base=base
            )
        )
        self.reason = reason
        self.fence = fence


@dataclass(frozen=True)
class MachineConfig:
    """What the borglet declares about its machine."""

    name: str
    capacity: dict[str, int]
    state_dir: str
    attrs: dict[str, str] = field(default_factory=dict)
    failure_domain: str = ""
    kill_grace_s: float = 3.0
    tick_s: float = 0.2
    start_rate: float = 200.0  # task processes started per second, at most
    # Run each task as its job user's own unprivileged uid (taskusers.py; the borglet must be
    # root), in its own working directory under `work_dir`; False: as the borglet's user.
    task_uids: bool = False
    work_dir: str = ""  # default: the state dir's path + ".work"
    # Variables the borglet's operator chose to give every task (--task-env), beneath the
    # job's own: a task's environment is built from nothing, never from the borglet's.
    task_env: tuple[tuple[str, str], ...] = ()

    @property
    def work_root(self) -> str:
        return self.work_dir or self.state_dir.rstrip("/") + ".work"


class Borglet:
    """All task state of one machine behind one lock; the HTTP layer and the loop call in.

    Two clocks: `wall_clock` times the tasks (start times, backoffs, kill deadlines, probes),
    on the scale of a process's creation time, which is what a task's start time is; `clock`
    paces the borglet itself (table saves, start batches, the wait for killed tasks).
    """

    def __init__(
        self,
        config: MachineConfig,
        isolation: Isolation,
        clock: Callable[[], float] = time.monotonic,
        prober: Prober | None = None,
        wall_clock: Callable[[], float] = time.time,
        containers: runtime.Containers | None = None,
    ):
        self.config = config
        # The docker runtime (--runtime docker): a task whose job names an image runs as a
        # container of it; None, or a task without an image: as a process.
        self.containers = containers
        self.isolation = isolation
        self.clock = clock
        self.wall_clock = wall_clock
        self.prober = prober or Prober()
        self.tasks: dict[str, Task] = {}
        # Task ids in the order they are to be started; an id whose task is no longer QUEUED
        # (killed before it started) is skipped when its turn comes.
        self.queue: deque[str] = deque()
        self.tombstones: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.fence = decisions.Fence()
        self.master = ""
        # The desired set of the last applied sync, the base of the next delta; None until a
        # whole set was applied since this borglet started.
        self.desired: dict[str, TaskSpec] | None = None
        self.uids: dict[str, int] = {}  # job user -> the uid its tasks run as (task_uids)
        self.syncs = 0
        self.refused: Counter[str] = Counter()
        self._lock = threading.RLock()
        self._queued = threading.Condition(self._lock)
        self._saved_at = 0.0
        self._save_lock = threading.Lock()
        self._dirty = False
        self._snapshots = 0  # snapshots taken of the table
        self._saved = 0  # the newest snapshot written
        self._stop = threading.Event()
        self._wake = threading.Event()  # a supervisor pass is wanted now
        self._thread: threading.Thread | None = None
        self._starter: threading.Thread | None = None
        # Cgroups of ended tasks, removed by the supervisor loop outside the lock: removing
        # thousands after a job's kill, under the lock, kept syncs waiting past their timeout.
        self._to_release: deque[dict[str, str]] = deque()
        self._to_clean: deque[str] = deque()  # working directories of ended tasks
        self._to_remove: deque[str] = deque()  # containers of ended runs, removed outside the lock
        self._sweep_due = False  # after the first sync: remove the containers no task wants

    @property
    def epoch(self) -> int:
        return self.fence.epoch


    @property
    def table_path(self) -> str:
        return os.path.join(self.config.state_dir, "tasks.json")

    # --- the API the HTTP layer uses -------------------------------------------------------

    def sync(self, request: SyncRequest) -> dict[str, Any]:
        """Record the desired set: queue new tasks, kill dropped ones; returns the report.

        Raises SyncRefused, changing nothing, for a sync that is not newer than the last one
        applied (decisions.refusal) or a delta whose base is not the last one applied.
        """
        with self._lock:
            reason, specs = decisions.accept_sync(self.fence, self.desired, request)
            if reason is not None:
                self.refused[reason] += 1
                raise SyncRefused(reason, self.fence, request)
            self.fence = decisions.Fence(request.epoch, request.seq, request.revision)
            self.master = request.master
            self.desired = specs
            self.syncs += 1
            if self.syncs == 1 and self.containers is not None:
                self._sweep_due = True
            self._dirty = True
            plan = decisions.reconcile(
                specs,
                {tid: not t.ended for tid, t in self.tasks.items()},
                self.tombstones,
            )
            now = self.wall_clock()
            for tid in plan.kill:
                self._request_kill(self.tasks[tid], "not_desired", now, grace=True)
            for tid in plan.forget:
                self._forget(tid, request.revision)
            for tid in plan.restore:
                self._restore(specs[tid])
            for tid in decisions.expired_tombstones(
                {t: int(stone.get("revision", 0)) for t, stone in self.tombstones.items()},
                request.revision,
            ):
                del self.tombstones[tid]
            for tid in plan.start:
                self.tasks[tid] = Task(spec=specs[tid], key=processes.sanitize(tid))
                self.queue.append(tid)
            if plan.start:
                self._queued.notify_all()
            report = self._report()
        self.wake()  # the pass that escalates the kills and saves the change
        self._save_if_dirty(force=False)
        return report

    def report(self) -> dict[str, Any]:
        with self._lock:
            return self._report()

    # --- what the log endpoints ask (borglet/logs.py) ------------------------------------------

    def log_keys(self) -> list[str]:
        """The log directories of tasks whose process runs: the ones that can still grow."""
        with self._lock:
            return [t.key for t in self.tasks.values() if t.pid is not None]

    @staticmethod
    def log_key(task_id: str) -> str:
        return processes.sanitize(task_id)

    # The two below are called from the HTTP server's event loop, so they do not take the
    # lock (a spawn or a supervisor pass may hold it): one dict lookup and one attribute read
    # each, atomic under the GIL; at worst the answer is one change old.

    def task_ended(self, task_id: str) -> bool:
        task = self.tasks.get(task_id)
        return task is None or task.ended

    def task_state(self, task_id: str) -> str | None:
        """'FAILED (spawn: ...)' for a known or forgotten task, None for one never seen here."""
        task = self.tasks.get(task_id)
        state, reason = (task.phase, task.reason) if task else (None, None)
        stone = self.tombstones.get(task_id) if task is None else None
        if stone is not None:
            state, reason = stone.get("state"), stone.get("reason")
        if state is None:
            return None
        return f"{state} ({reason})" if reason else str(state)

    # --- lifecycle ---------------------------------------------------------------------------

    def load(self) -> None:
        """Read tasks.json and re-adopt tasks whose processes survived the borglet's restart."""
        table = store.load(self.table_path)
        now = self.wall_clock()
        marked: dict[str, list[int]] | None = None
        labelled: dict[str, runtime.Started] | None = None
        with self._lock:
            fence = table.get("fence") or {"epoch": table.get("epoch", 0)}
            self.fence = decisions.Fence(
                int(fence.get("epoch", 0)), int(fence.get("seq", 0)), int(fence.get("revision", 0))
            )
            self.master = str(table.get("master", ""))
            self.uids = {str(user): int(uid) for user, uid in table.get("uids", {}).items()}
            self.tombstones = OrderedDict(table.get("tombstones", {}))
            for tid, record in table.get("tasks", {}).items():
                task = Task.from_record(record)
                self.tasks[tid] = task
                saved = decisions.Saved(
                    phase=task.phase,
                    reason=task.reason,
                    ended=task.ended,
                    launching=task.launching,
                    has_pid=task.pid is not None,
                    kill_reason=task.kill_reason,
                    backing_off=task.restart_at is not None,
                    health_checked=task.spec.health_check is not None,
                )
                found = False
                if not task.ended and task.launching and task.pid is None and self._in_container(task):
                    # Saved just before its container was made: found by its labels, if it runs.
                    if labelled is None:
                        labelled = {f.task_id: f.container for f in self._containers().owned()}
                    hit = labelled.get(tid)
                    if hit is not None:
                        found = True
                        task.pid, task.container, task.create_time = hit.pid, hit.container_id, hit.create_time
                        task.started_at = task.create_time or now
                    task.launching = False
                elif not task.ended and task.launching and task.pid is None:
                    # Saved just before its spawn: the process may exist; never spawn it again.
                    if marked is None:
                        marked = processes.marked_processes(self.config.state_dir)
                    pids = sorted(marked.get(tid, []))
                    if pids:
                        found = True
                        task.pid = pids[0]
                        task.create_time = processes.create_time(pids[0])
                        task.started_at = task.create_time or now
                    task.launching = False
                alive = (
                    not task.ended
                    and task.pid is not None
                    and processes.is_same_process(task.pid, task.create_time)
                )
                self._readopt(tid, task, decisions.readoption(replace(saved, found=found, alive=alive)), now)
            self._dirty = True
        self._save_if_dirty(force=True)

    def _readopt(self, tid: str, task: Task, verdict: decisions.Readoption, now: float) -> None:
        """Carry out the verdict on a task of the saved table (decisions.readoption)."""
        task.phase, task.reason = verdict.phase, verdict.reason
        if verdict.verdict == "queue":
            self.queue.append(tid)
        elif verdict.verdict == "adopt":
            # Not our child, so liveness is polled with psutil from now on.
            task.next_probe_at = now
            if task.kill_reason is not None:
                task.kill_deadline = now
            log.info("re-adopted %s (pid %d)", tid, task.pid)
        elif verdict.verdict == "resume":
            task.restart_at = now  # it was waiting out a backoff; carry on
        elif verdict.verdict == "lost":
            task.pid = None
            task.healthy = None if task.spec.health_check is None else False
            self._release(task)
            log.warning("%s was lost while the borglet was down", tid)

    def start(self) -> None:
        """Run the supervisor loop and the starter in background threads."""
        self._thread = threading.Thread(target=self._loop, name="borglet-supervisor", daemon=True)
        self._thread.start()
        self._starter = threading.Thread(target=self._start_loop, name="borglet-starter", daemon=True)
        self._starter.start()

    def stop(self, kill_tasks: bool = False, timeout_s: float | None = None) -> None:
        """Stop the loop; tasks keep running unless kill_tasks (tests, cell teardown)."""
        self._stop.set()
        self._wake.set()
        with self._lock:
            self._queued.notify_all()
        for thread in (self._thread, self._starter):
            if thread is not None:
                thread.join(timeout=5)
        if kill_tasks:
            self.kill_all("borglet_exit", timeout_s or self.config.kill_grace_s + 2)
            if self.containers is not None:
                self._to_remove.extend(self.containers.all_ids())  # nothing it ran outlives it
                self.release_groups()
        self._dirty = True
        self._save_if_dirty(force=True)
        self.prober.close()
        self.release_groups()
        if self.config.task_uids:
            with contextlib.suppress(OSError):  # only once no task's directory is left in it
                os.rmdir(self.config.work_root)
        # Removes only the borglet's empty cgroup subtrees; groups of running tasks stay.
        self.isolation.close()

    def kill_all(self, reason: str, timeout_s: float) -> None:
        """Kill every task and wait (bounded) until their processes are gone."""
        with self._lock:
            now = self.wall_clock()
            for task in self.tasks.values():
                self._request_kill(task, reason, now, grace=True)
        deadline = self.clock() + timeout_s
        while self.clock() < deadline:
            self.tick()
            with self._lock:
                if all(t.pid is None for t in self.tasks.values()):
                    break
            time.sleep(0.05)
        with self._lock:
            for task in self.tasks.values():
                if task.pid is not None:
                    processes.signal_session(task.pid, signal.SIGKILL)
        time.sleep(0.1)
        self.tick()
        # Whatever a task left outside its session (a daemon that called setsid) still carries
        # this borglet's marker: nothing it started outlives it.
        for tid, pids in processes.marked_processes(self.config.state_dir).items():
            log.warning("killing %d stray process(es) of %s", len(pids), tid or "?")
            for pid in pids:
                processes.signal_session(pid, signal.SIGKILL)
        self.release_groups()

    def wake(self) -> None:
        """Have the supervisor loop make a pass now (a child exited, the desired set changed)."""
        self._wake.set()

    def _loop(self) -> None:
        wait = self.config.tick_s
        while True:
            self._wake.wait(wait)
            self._wake.clear()  # before the pass: a wake during it asks for another
            if self._stop.is_set():
                return
            try:
                self.tick()
                wait = self._next_pass_in()
            except Exception:  # the loop must outlive any one bad pass
                log.exception("supervisor tick failed")
                wait = self.config.tick_s

    def _next_pass_in(self) -> float:
        """Seconds to the next pass: tick_s while anything is under way (a kill, a start, a
        probe, a cleanup, a queued start); otherwise until the next backoff, probe or save is
        due, at most IDLE_TICK_S. An exit of a task the borglet adopted or runs in a container
        (not its child: no SIGCHLD) is seen within IDLE_TICK_S."""
        tick = self.config.tick_s
        with self._lock:
            if self.queue or self._to_release or self._to_clean or self._to_remove:
                return tick
            now = self.wall_clock()
            due = now + IDLE_TICK_S
            if self._dirty:
                due = min(due, now + self._saved_at + SAVE_EVERY_S - self.clock())
            for task in self.tasks.values():
                if task.kill_deadline is not None or task.launching or task.probing:
                    return tick
                if task.restart_at is not None and not task.ended:
                    due = min(due, task.restart_at)
                if task.pid is not None and task.spec.health_check is not None:
                    due = min(due, task.next_probe_at)
        return min(IDLE_TICK_S, max(tick, due - now))

    def _start_loop(self) -> None:
        """Work through the queue: at most `start_rate` starts a second, one batch per second."""
        batch = max(1, int(self.config.start_rate))
        while not self._stop.is_set():
            with self._lock:
                if not self.queue:
                    # Until a sync queues a start or stop() is called: both notify under the
                    # lock, and stop is looked at under it, so neither can be missed.
                    if not self._stop.is_set():
                        self._queued.wait()
                    continue
            began = self.clock()
            try:
                started = self.start_queued(batch)
            except Exception:
                log.exception("starting queued tasks failed")
                started = 0
            if started:
                # Spread the next batch so the rate holds; stop promptly when asked.
                self._stop.wait(max(0.0, started / self.config.start_rate - (self.clock() - began)))
            else:
                self._stop.wait(self.config.tick_s)

    def start_queued(self, limit: int | None = None) -> int:
        """Start up to `limit` queued tasks whose index has no process still stopping here.

        The batch is first marked launching and saved; each process is then spawned under the
        lock, released between spawns so syncs and polls are answered meanwhile. A task killed
        while its batch waits is skipped. Returns how many processes were started.
        """
        with self._lock:
            stopping = self._stopping_indexes()
            taken = self._ports_in_use()
            batch: list[str] = []
            keep: deque[str] = deque()
            while self.queue and (limit is None or len(batch) < limit):
                tid = self.queue.popleft()
                task = self.tasks.get(tid)
                if task is None or task.phase != "QUEUED" or task.kill_reason is not None:
                    continue
                if decisions.start_blocked(task.spec.job, task.spec.index, stopping):
                    log.debug("%s waits for its index to stop", tid)
                    keep.append(tid)
                    continue
                if not task.port:
                    # Chosen before the write-ahead, so a process adopted after a crash keeps it.
                    try:
                        task.port = task.spec.port or ports.free_port(taken)  # not one given to a task
                    except OSError as err:
                        self._failed_to_start(task, f"setup: {err}")
                        continue
                    taken.add(task.port)
                task.launching = True
                batch.append(tid)
            keep.extend(self.queue)
            self.queue = keep
            if batch:
                self._dirty = True
        if not batch:
            return 0
        self._save_if_dirty(force=True)  # the write-ahead: launching is on disk before a spawn
        started = 0
        if self.containers is not None:
            # A container takes the engine a second or so to make and start, mostly waiting on
            # runc and the file system: several at once, where a process spawn takes a millisecond.
            with ThreadPoolExecutor(CONTAINER_STARTS, thread_name_prefix="borglet-start") as pool:
                started = sum(pool.map(lambda tid: not self._stop.is_set() and self._start_one(tid), batch))
        else:
            for tid in batch:
                if self._stop.is_set():
                    break
                if self._start_one(tid):
                    started += 1
        with self._lock:
            for tid in reversed(batch):  # any the loop did not reach go back to the front
                task = self.tasks.get(tid)
                if task is not None and task.phase == "QUEUED" and task.launching:
                    task.launching = False
                    self.queue.appendleft(tid)
            self._dirty = True
        return started

    def _stopping_indexes(self) -> frozenset[tuple[str, int]]:
        return decisions.stopping_indexes(
            (t.spec.job, t.spec.index, t.kill_reason is not None and not t.ended and t.pid is not None)
            for t in self.tasks.values()
        )

    # --- one supervisor pass -------------------------------------------------------------------

    def tick(self) -> None:
        """Observe exits, escalate kills, restart, sample usage, relieve memory pressure, probe."""
        with self._lock:
            now = self.wall_clock()
            tasks = list(self.tasks.values())
        if not processes.child_exited():
            # No process the borglet started has ended since the last pass: only the tasks
            # whose state can change otherwise are looked at (a restart or a kill deadline
            # due, a process it adopted or a container's, which are not its children).
            tasks = [t for t in tasks if t.proc is None or t.kill_deadline is not None]
        # In chunks, the lock let go between them: thousands of exits at once (a job's kill)
        # must not keep a sync waiting past its master's timeout.
        for i in range(0, len(tasks), OBSERVE_CHUNK):
            if i:
                time.sleep(0)  # let a thread waiting for the lock take it
            with self._lock:
                for task in tasks[i : i + OBSERVE_CHUNK]:
                    if self.tasks.get(task.spec.task_id) is task:
                        self._observe(task, now)
        with self._lock:
            due = [t for t in self.tasks.values() if t.pid is not None and now - t.sampled_at >= SAMPLE_EVERY_S]
            if len(due) > SAMPLES_PER_TICK:
                due = sorted(due, key=lambda t: t.sampled_at)[:SAMPLES_PER_TICK]
            for task in due:
                self._sample(task, now)
            if due:  # only a sample can raise what the tasks use
                self._relieve_memory_pressure(now)
            for task in self.tasks.values():
                self._maybe_probe(task, now)
        if self.containers is not None:
            self._tend_containers()
        self.release_groups(RELEASES_PER_TICK)
        self._save_if_dirty(force=False)

    def _tend_containers(self) -> None:
        """The engine's side of a pass, outside the lock: the list of images a report gives,
        and once after the first sync, the removal of every container no task wants (left by
        a run of this borglet that is no longer desired, or the borglet's restart)."""
        containers = self._containers()
        containers.refresh_images()
        if not self._sweep_due:
            return
        self._sweep_due = False
        try:
            labelled = containers.labelled()
        except Exception as err:  # an engine that does not answer: left for the next restart
            log.warning("cannot list this borglet's containers: %s", err)
            return
        with self._lock:
            for cid, tid in labelled.items():
                task = self.tasks.get(tid)
                if decisions.container_unwanted(
                    task is not None and not task.ended, task.container if task else "", cid
                ):
                    log.warning("removing container %s of %s: no task here wants it", cid[:12], tid or "?")
                    self._to_remove.append(cid)

    def release_groups(self, limit: int | None = None) -> int:
        """Remove the cgroups of ended tasks (killing what is left in them), outside the lock;
        a group that cannot go yet is retried on a later pass. Returns how many went."""
        done = 0
        for _ in range(len(self._to_release) if limit is None else min(limit, len(self._to_release))):
            try:
                group = self._to_release.popleft()
            except IndexError:
                break
            if self.isolation.release(group):
                done += 1
            else:
                self._to_release.append(group)
        for _ in range(len(self._to_clean) if limit is None else min(limit, len(self._to_clean))):
            processes.remove_workdir(self._to_clean.popleft())
        removed = False
        for _ in range(len(self._to_remove) if limit is None else min(limit, len(self._to_remove))):
            try:
                cid = self._to_remove.popleft()
            except IndexError:
                break
            if self._containers().remove(cid):
                done += 1
                removed = True
            else:
                self._to_remove.append(cid)
        if removed and self.isolation.alloc_groups:
            # The engine removed the container's group; its alloc's goes when no live task here
            # names the alloc (checked under the lock, so a task starting in it keeps it).
            with self._lock:
                busy = {a.directory for t in self.tasks.values() if not t.ended and (a := _alloc_group(t.spec))}
                self.isolation.release_idle_allocs(busy)
        return done

    def _observe(self, task: Task, now: float) -> None:
        if task.pid is None:
            if task.restart_at is not None and now >= task.restart_at and not task.ended:
                task.restarts += 1
                self._launch(task, now)
                self._dirty = True
            return
        if task.proc is not None:
            returncode = task.proc.poll()
            exited = returncode is not None
        else:
            returncode = None
            exited = not processes.is_same_process(task.pid, task.create_time)
        if exited:
            self._on_exit(task, returncode, now)
        elif task.kill_deadline is not None and now >= task.kill_deadline:
            processes.signal_session(task.pid, signal.SIGKILL)
            task.kill_deadline = None

    def _on_exit(self, task: Task, returncode: int | None, now: float) -> None:
        if task.container:
            # The engine knows how its container ended, OOM kill included (State.OOMKilled);
            # a task the borglet killed ends KILLED whatever it says, so the engine is not
            # asked, under the lock, once per container of a job's kill.
            if task.kill_reason is None:
                returncode, oom = self._containers().exit_status(task.container)
            else:
                oom = False
            self._to_remove.append(task.container)
            task.container = ""
        else:
            oom = self.isolation.oom_kills(task.group) > task.oom_base
        ran_for = now - task.started_at
        # Children the task left behind in its session die with it.
        processes.signal_session(task.pid, signal.SIGKILL)
        task.pid, task.proc, task.create_time = None, None, None
        task.exit_code = returncode
        task.healthy = None if task.spec.health_check is None else False
        task.cpu_milli, task.ram_bytes, task.cpu_sample = 0, 0, None
        task.kill_deadline = None
        self._dirty = True
        after = decisions.after_exit(
            task.spec.restart_policy, returncode, oom, task.kill_reason, task.attempt, ran_for, now
        )
        task.phase, task.reason, task.restart_at, task.attempt = after.phase, after.reason, after.restart_at, after.attempt
        if task.kill_reason is None:
            task.last_exit = decisions.ended_state(returncode, oom, None)[1] or "exit 0"
        if after.restart_at is not None:
            log.info("%s exited (%s); restart in %.1fs", task.spec.task_id, task.reason, after.restart_at - now)
            return
        log.info("%s ended: %s %s", task.spec.task_id, task.phase, task.reason or "")
        self._release(task)

    def _sample(self, task: Task, now: float) -> None:
        if task.pid is None:
            return
        task.sampled_at = now
        if task.container:
            sample = self._containers().sample(task.container, task.pid, self._container_parent(task))
        else:
            sample = self.isolation.sample(task.group, task.pid)
        task.ram_bytes = sample.ram_bytes
        if task.cpu_sample is None:
            task.cpu_sample = (now, sample.cpu_ns)
            return
        then, cpu_then = task.cpu_sample
        if now - then >= CPU_RATE_WINDOW_S:
            # ns of CPU per second of wall time / 1e6 = milli-CPU.
            task.cpu_milli = max(0, round((sample.cpu_ns - cpu_then) / 1e6 / (now - then)))
            task.cpu_sample = (now, sample.cpu_ns)

    def _relieve_memory_pressure(self, now: float) -> None:
        capacity = self.config.capacity.get("ram", 0)
        dying = sum(t.ram_bytes for t in self.tasks.values() if t.kill_reason and t.pid)
        candidates = [
            decisions.Candidate(t.spec.task_id, t.spec.priority, t.ram_bytes, t.started_at)
            for t in self.tasks.values()
            if t.pid is not None and t.kill_reason is None
        ]
        for tid in decisions.memory_pressure_victims(candidates, capacity - dying):
            log.warning("memory pressure: killing %s", tid)
            self._request_kill(self.tasks[tid], "memory_pressure", now, grace=False)

    def _maybe_probe(self, task: Task, now: float) -> None:
        check = task.spec.health_check
        if check is None or task.pid is None or task.probing or now < task.next_probe_at:
            return
        task.probing = True
        pid = task.pid

        def done(ok: bool) -> None:
            with self._lock:
                task.probing = False
                if task.pid != pid:
                    return  # the process changed while probing; this answer is about the old one
                if ok != task.healthy:
                    self._dirty = True
                task.healthy = ok
                if ok:
                    task.ever_healthy = True
                    if task.phase == "STARTING":
                        task.phase = "RUNNING"
                        task.reason = None
                interval = (
                    check.interval_s
                    if task.ever_healthy
                    else min(check.interval_s, STARTUP_PROBE_INTERVAL_S)
                )
                task.next_probe_at = self.wall_clock() + interval
            # A task turning RUNNING is persisted now, not on the next tick, so a borglet
            # killed right after reporting it re-adopts it as RUNNING.
            self._save_if_dirty(force=True)

        self.prober.submit(task.port, check.path, min(check.interval_s, 1.0), done)

    # --- starting, killing, forgetting ---------------------------------------------------

    def _start(self, tid: str) -> bool:
        """First start of a queued, launching task. Its cgroup and its process are made
        outside the lock (they take milliseconds of kernel time each), so syncs and polls are
        answered between starts; a task killed meanwhile has its new process killed at once."""
        with self._lock:
            task = self.tasks.get(tid)
            if task is None or task.phase != "QUEUED" or not task.launching:
                return False
            if task.kill_reason is not None:
                task.launching = False
                return False
            env = self._task_env(task)
            uid = self._run_as(task)
        spec = task.spec
        proc: subprocess.Popen | runtime.Started | None = None
        try:
            alloc = _alloc_group(spec)
            # A container's group is the engine's, made under its alloc's or the borglet's (containers.py).
            group = (
                {} if self._in_container(task)
                else self.isolation.prepare(task.key, spec.request.cpu, spec.request.ram, alloc, spec.pids_max)
            )
        except Exception as err:  # whatever it is, it is this task's alone
            with self._lock:
                self._failed_to_start(task, f"setup: {err}")
            return False
        try:
            proc = self._spawn(task, group, env, uid)
            error = None
        except Exception as err:  # a NUL byte, a missing program, a bad cwd: this task's alone
            error = self._spawn_error(task, err, env, uid)
        with self._lock:
            task.group = group
            if error is not None or proc is None:
                self._failed_to_start(task, error or "spawn: no process")
                return False
            if task.kill_reason is not None or self.tasks.get(tid) is not task:
                # Killed (or forgotten) while its process was being made: it never ran for
                # the cell; the process goes now, and its group with it.
                processes.signal_session(proc.pid, signal.SIGKILL)
                if isinstance(proc, runtime.Started):
                    self._to_remove.append(proc.container_id)
                task.launching = False
                self._release(task)
                return False
            self._launched(task, proc, self.wall_clock())
        return True

    def _start_one(self, tid: str) -> bool:
        """`_start`, with anything it raises made that task's failure: one task's bad input
        never stops the rest of its batch."""
        try:
            return self._start(tid)
        except Exception as err:
            log.exception("starting %s failed", tid)
            with self._lock:
                task = self.tasks.get(tid)
                if task is not None and task.phase == "QUEUED" and task.launching:
                    self._failed_to_start(task, f"spawn: {err}")
            return False

    def _failed_to_start(self, task: Task, reason: str) -> None:
        task.launching = False
        task.phase, task.reason, task.pid = "FAILED", reason, None
        task.last_exit = reason
        self._release(task)

    def _task_env(self, task: Task) -> dict[str, str]:
        """The task's environment, built from nothing: a PATH of the system's programs, a HOME
        of its own, the operator's --task-env, then Minborg's variables, then the job's env;
        the markers last. Nothing of the borglet's own environment (nor of whoever started
        it) reaches a task."""
        spec = task.spec
        if self._in_container(task):
            markers = {processes.TASK_MARKER: spec.task_id, processes.BORGLET_MARKER: self.config.state_dir}
            return runtime.task_env(spec, task.port, self.config.name, markers)
        env = {"PATH": processes.TASK_PATH, "HOME": self.workdir(task) if self.config.task_uids else spec.cwd or "/"}
        env.update(self.config.task_env)
        env.update(
            PORT=str(task.port),
            TASK_INDEX=str(spec.index),
            TASK_ID=spec.task_id,
            BNS_NAME=spec.bns,
            MINBORG_MACHINE=self.config.name,
        )
        env.update(spec.env)
        # Set last, so a job's environment cannot hide its processes from a /proc scan.
        env[processes.TASK_MARKER] = spec.task_id
        env[processes.BORGLET_MARKER] = self.config.state_dir
        return env

    def workdir(self, task: Task) -> str:
        """The task's own working directory, when tasks run as their users' uids."""
        return os.path.join(self.config.work_root, task.key)

    def _run_as(self, task: Task) -> int | None:
        """The uid the task runs as (its job user's, recorded on first use), or None: as the
        borglet's own user. Under the lock. A container always runs as its job user's uid."""
        if not self.config.task_uids and not self._in_container(task):
            return None
        user = taskusers.user_of(task.spec.job, task.spec.task_id)
        uid = taskusers.assign(user, self.uids)
        if self.uids.get(user) != uid:
            self.uids[user] = uid
            self._dirty = True
        return uid

    def _in_container(self, task: Task) -> bool:
        """Whether the task runs as a container: its job names an image and this borglet
        runs the docker runtime (one without an image runs as a process: docs/decisions.md)."""
        return self.containers is not None and bool(task.spec.image)

    def _containers(self) -> runtime.Containers:
        assert self.containers is not None, "a container task on a borglet without the docker runtime"
        return self.containers

    def _container_parent(self, task: Task) -> str:
        """The task's container's `cgroup_parent`: its alloc's group where allocs get groups here."""
        alloc = _alloc_group(task.spec)
        directory = alloc.directory if alloc is not None and self.isolation.alloc_groups else None
        return self._containers().parent_for(directory)

    def _spawn(
        self, task: Task, group: dict[str, str], env: dict[str, str], uid: int | None
    ) -> subprocess.Popen | runtime.Started:
        log_dir = logs.task_dir(self.config.state_dir, task.key)
        if self._in_container(task):
            assert uid is not None
            alloc = _alloc_group(task.spec)
            if alloc is not None and self.isolation.alloc_groups:
                self.isolation.prepare_alloc(alloc)  # before the engine makes the container beneath it
            return self._containers().run(task.spec, env, uid, log_dir, self._container_parent(task))
        cwd = task.spec.cwd
        if uid is not None:
            # Its HOME, and its working directory unless its job names one: only its uid enters.
            home = processes.make_workdir(self.workdir(task), uid)
            cwd = cwd or home
        confinement = self.isolation.confinement(group, task.spec.pids_max, task.spec.request.ram)
        return processes.spawn(task.spec.command, env, cwd, log_dir, uid, confinement)

    def _spawn_error(self, task: Task, err: Exception, env: dict[str, str], uid: int | None) -> str:
        """What a task's failed spawn is reported as: 'spawn: ...' saying what to change."""
        if self._in_container(task):
            return f"spawn: {err}"
        cwd = task.spec.cwd or (self.workdir(task) if uid is not None else None)
        return processes.spawn_error(err, task.spec.command, cwd, uid, env.get("PATH", ""))

    def _launch(self, task: Task, now: float) -> None:
        """A restart in place, under the lock (rare: backoffs spread restarts out)."""
        env, uid = self._task_env(task), self._run_as(task)
        try:
            proc = self._spawn(task, task.group, env, uid)
        except Exception as err:  # this task's alone, as in _start
            self._failed_to_start(task, self._spawn_error(task, err, env, uid))
            return
        self._launched(task, proc, now)

    def _launched(self, task: Task, proc: subprocess.Popen | runtime.Started, now: float) -> None:
        spec = task.spec
        task.oom_base = self.isolation.oom_kills(task.group)
        task.restart_at = None
        task.launching = False
        if isinstance(proc, runtime.Started):
            # Watched as an adopted process is, by its init's host pid; the engine is asked
            # only when it ends.
            task.proc, task.pid, task.container = None, proc.pid, proc.container_id
            task.create_time = proc.create_time
        else:
            task.proc, task.pid = proc, proc.pid
            task.create_time = processes.create_time(proc.pid)
        # The process's own creation time: the same figure a borglet that adopts the process
        # after a crash reads back, so a task's start time never changes under re-adoption.
        task.started_at = task.create_time or now
        # exit_code and reason describe the current process; the previous run's are gone.
        task.exit_code, task.reason = None, None
        task.cpu_sample = None
        task.ever_healthy = False
        if spec.health_check is None:
            task.phase, task.healthy = "RUNNING", None
        else:
            task.phase, task.healthy = "STARTING", False
            task.next_probe_at = now + FIRST_PROBE_DELAY_S
        log.info("started %s as pid %d on port %d", spec.task_id, proc.pid, task.port)

    def _request_kill(self, task: Task, reason: str, now: float, grace: bool) -> None:
        if task.ended or task.kill_reason is not None:
            return
        task.kill_reason = reason
        self._dirty = True
        if task.pid is None:  # between restarts: nothing to signal
            task.restart_at = None
            task.phase, task.reason = "KILLED", reason
            self._release(task)
            return
        task.reason = reason
        # Memory pressure cannot wait for a graceful exit; a user's kill can.
        processes.signal_session(task.pid, signal.SIGTERM if grace else signal.SIGKILL)
        task.kill_deadline = now + self.config.kill_grace_s

    def _forget(self, tid: str, revision: int) -> None:
        task = self.tasks.pop(tid)
        self.tombstones[tid] = task.tombstone(revision)

    def _restore(self, spec: TaskSpec) -> None:
        stone = self.tombstones[spec.task_id]
        self.tasks[spec.task_id] = Task.from_tombstone(
            spec, processes.sanitize(spec.task_id), stone
        )

    def _release(self, task: Task) -> None:
        """Hand the ended task's cgroup and working directory to `release_groups`."""
        if task.group:
            self._to_release.append(task.group)
            task.group = {}
        if task.container:  # a run the borglet did not see end (lost while it was down)
            self._to_remove.append(task.container)
            task.container = ""
        if self.config.task_uids:
            self._to_clean.append(self.workdir(task))

    def _ports_in_use(self) -> set[int]:
        return {t.port for t in self.tasks.values() if not t.ended and t.port}

    # --- reporting and persistence -----------------------------------------------------------

    def _report(self) -> dict[str, Any]:
        tasks = [t.report() for t in self.tasks.values()]
        stopping = self._stopping_indexes() if self.queue else frozenset()
        return {
            "machine": self.config.name,
            "capacity": dict(self.config.capacity),
            "attrs": dict(self.config.attrs),
            "failure_domain": self.config.failure_domain,
            "isolation": self.isolation.name,
            "runtime": "process" if self.containers is None else "docker",
            **({"images": self.containers.images()} if self.containers is not None else {}),
            "epoch": self.epoch,
            "usage": {
                "cpu_milli": sum(t["usage"]["cpu_milli"] for t in tasks),
                "ram_bytes": sum(t["usage"]["ram_bytes"] for t in tasks),
            },
            "tasks": tasks,
            "fence": {"epoch": self.fence.epoch, "seq": self.fence.seq, "revision": self.fence.revision},
            "queued": sum(1 for t in self.tasks.values() if t.phase == "QUEUED"),
            # Queued tasks whose index still has a process stopping here.
            "waiting": sorted(
                tid
                for tid, t in self.tasks.items()
                if t.phase == "QUEUED" and decisions.start_blocked(t.spec.job, t.spec.index, stopping)
            ),
        }

    def _save_if_dirty(self, force: bool = True) -> None:
        """Write the table if it changed: at once when forced, else at most every SAVE_EVERY_S
        (a lost unforced change is one the next sync or observation makes again)."""
        # Snapshot under the state lock, write under the save lock, never holding the save lock
        # while waiting for the state lock: callers may already hold the state lock.
        with self._lock:
            if not self._dirty:
                return
            if not force and self.clock() - self._saved_at < SAVE_EVERY_S:
                return
            self._dirty = False
            self._saved_at = self.clock()
            self._snapshots += 1
            seq = self._snapshots
            table = {
                "machine": self.config.name,
                "epoch": self.fence.epoch,
                "fence": {"epoch": self.fence.epoch, "seq": self.fence.seq, "revision": self.fence.revision},
                "master": self.master,
                "uids": dict(self.uids),
                "tasks": {tid: t.to_record() for tid, t in self.tasks.items()},
                "tombstones": dict(self.tombstones),
            }
        with self._save_lock:
            if seq <= self._saved:
                return  # a newer snapshot is already on disk
            store.save(self.table_path, table)
            self._saved = seq


def _alloc_group(spec: TaskSpec) -> AllocGroup | None:
    """The alloc the task runs in, as its cgroups name it; None: in no alloc."""
    return None if spec.alloc is None else AllocGroup(spec.alloc.name, spec.alloc.cpu, spec.alloc.ram)
