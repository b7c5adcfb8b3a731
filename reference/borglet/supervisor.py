"""The borglet's shell: threads, processes, cgroups and files around the task table's core.

The core (core.py) decides what each sync, launch, exit and probe means; this shell carries
it out. A sync only records what the master wants: new tasks join a queue that a starter
thread (starter.py) works through at a bounded rate, so a sync of thousands of tasks is answered at once and
a busy borglet keeps answering its polls. Each task is recorded as launching (and the record
saved) before its process is spawned, so a borglet restarted at any moment finds the process by
its environment marker instead of starting it a second time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from reference import channel
from reference.borglet import containers as runtime
from reference.borglet import decisions, processes, store
from reference.borglet.config import MachineConfig
from reference.borglet.core import Ready, SyncRefused, TaskTable
from reference.borglet.health import Prober
from reference.borglet.isolation import Isolation
from reference.borglet.launch import Launcher, alloc_group
from reference.borglet.protocol import SyncRequest
from reference.borglet.release import Releases
from reference.borglet.starter import Starter
from reference.borglet.task import Task

__all__ = ["Borglet", "MachineConfig", "SyncRefused"]

log = logging.getLogger(__name__)

SAMPLES_PER_TICK = 200  # usage samples taken per supervisor pass at most: the oldest first
# A task's usage is sampled this often. The master writes usage every 10 s
# (pollclock.USAGE_WRITE_EVERY_S), the reclaimer's estimates move over minutes, and the kernel
# enforces memory limits itself: sampling every second cost an idle borglet half its CPU,
# 0.13 ms per task per second, 1.3 cores for 10,000 tasks on one host (docs/decisions.md).
SAMPLE_EVERY_S = 3.0
SAVE_EVERY_S = 1.0  # the task table is rewritten at most this often, except before a start
RELEASES_PER_TICK = 200  # cgroups of ended tasks removed per pass, outside the lock
OBSERVE_CHUNK = 200  # tasks observed per hold of the lock in a pass
# The longest the supervisor loop sleeps when nothing is under way (no kill, start, cleanup or
# unsaved change; no backoff or probe due sooner). A child's exit (SIGCHLD) or a sync wakes it
# at once. A pass every tick_s whatever the state made a hundred idle borglets on one host
# spend a fifth of a core on waking up (docs/decisions.md).
IDLE_TICK_S = 1.0


class Borglet(Starter):
    """One machine's task table (core.TaskTable) behind one lock, and what carries out its
    decisions; the HTTP layer and the loop call in.

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
        self.launcher = Launcher(config, isolation, containers)
        self.clock = clock
        self.wall_clock = wall_clock
        self.prober = prober or Prober()
        self.table = TaskTable(key=processes.sanitize, kill_grace_s=config.kill_grace_s)
        self.uids: dict[str, int] = {}  # job user -> the uid its tasks run as (task_uids)
        self._lock = threading.RLock()
        self._queued = threading.Condition(self._lock)
        self._saved_at = 0.0
        self._save_lock = threading.Lock()
        self._snapshots = 0  # snapshots taken of the table
        self._saved = 0  # the newest snapshot written
        self._stop = threading.Event()
        self._wake = threading.Event()  # a supervisor pass is wanted now
        self._thread: threading.Thread | None = None
        self._starter: threading.Thread | None = None
        self.releases = Releases(self.launcher)  # what ended tasks left, removed outside the lock
        self._sweep_due = False  # after the first sync: remove the containers no task wants

    @property
    def table_path(self) -> str:
        return os.path.join(self.config.state_dir, "tasks.json")

    # --- the API the HTTP layer uses -------------------------------------------------------

    def sync(self, request: SyncRequest) -> dict[str, Any]:
        """Apply a sync (core.TaskTable.apply_sync): queue new tasks, kill dropped ones;
        returns the report. Raises SyncRefused, changing nothing, for one the core refuses."""
        with self._lock:
            self.table.apply_sync(request, self.wall_clock())
            if self.table.syncs == 1 and self.containers is not None:
                self._sweep_due = True
            save_now = self._carry_out(self.table.take())
            report = self._report()
        self.wake()  # the pass that escalates the kills and saves the change
        self._save_if_dirty(force=save_now)  # new tasks are on disk before the answer
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
        return self.table.state_of(task_id)

    def exec_target(self, task_id: str) -> tuple[Task, dict[str, str], int | None] | tuple[int, str]:
        """What `task exec` runs a command with (borglet/execute.py): the running task, its
        environment and the uid it runs as; or (status, why not) for a task not running here."""
        with self._lock:
            task = self.tasks.get(task_id)
            if task is None:
                return 404, f"machine {self.config.name} has no task {task_id}"
            if task.phase != "RUNNING" or task.pid is None or task.kill_reason is not None:
                state = "being killed" if task.kill_reason is not None else task.phase
                return 409, f"task {task_id} is {state} on machine {self.config.name}, not running: exec needs a running task"
            return task, self.launcher.env(task), self._run_as(task)

    # --- carrying out what the core decided ------------------------------------------------

    def _carry_out(self, ready: Ready) -> bool:
        """Signal, release and wake the starter as the core asks; under the lock. Returns
        whether the core wants the table saved now."""
        for _task, pid, sig in ready.signals:
            processes.signal_session(pid, sig)
        for task in ready.release:
            self.releases.add(task)
        if ready.start:
            self._queued.notify_all()
        return ready.save

    # --- lifecycle ---------------------------------------------------------------------------

    def load(self) -> None:
        """Read tasks.json and re-adopt tasks whose processes survived the borglet's restart."""
        saved_table = store.load(self.table_path)
        now = self.wall_clock()
        scans: dict[str, Any] = {}  # the machine's scans for processes and containers, once
        with self._lock:
            self.uids = {str(user): int(uid) for user, uid in saved_table.get("uids", {}).items()}
            for task in self.table.restore(saved_table):
                tid = task.spec.task_id
                saved = self.table.saved(task)
                # Saved just before its spawn: its process may exist; never spawn it again.
                found = not task.ended and task.launching and task.pid is None and self.launcher.find(task, now, scans)
                alive = (
                    not task.ended
                    and task.pid is not None
                    and processes.is_same_process(task.pid, task.start_ticks)
                )
                verdict = self.table.readopt(task, replace(saved, found=found, alive=alive), now)
                if verdict.verdict == "adopt":
                    log.info("re-adopted %s (pid %d)", tid, task.pid)
                elif verdict.verdict == "lost":
                    log.warning("%s was lost while the borglet was down", tid)
            self._carry_out(self.table.take())
        self._save_if_dirty(force=True)

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
                self.releases.containers.extend(self.containers.all_ids())  # nothing it ran outlives it
                self.release_groups()
        self.table.dirty = True
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
            self.table.kill_all(reason, self.wall_clock())
            self._carry_out(self.table.take())
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

    def stand_down(self, why: str) -> None:
        """Stop every task and forget the desired set: the cell has asked for
        `channel.STAND_DOWN_S` while this borglet refused all its requests (`why`: the refusal),
        and will start the tasks elsewhere (channel.StandDown). The next sync it accepts must
        be a whole desired set; what it names is started again."""
        with self._lock:
            running = sum(1 for t in self.tasks.values() if not t.ended)
            log.log(
                logging.WARNING if running else logging.DEBUG, "every request of the cell has been refused for %.0f s, and the cell asks this borglet to stand "
                "down: stopping its %d task(s). The refusal: %s", channel.STAND_DOWN_S, running, why,
            )  # fmt: skip
            self.table.kill_all(decisions.STOOD_DOWN, self.wall_clock())
            self.table.desired = None
            self._carry_out(self.table.take())
        self.wake()

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
            if self.releases:
                return tick
            now = self.wall_clock()
            due = self.table.next_due(now)
            if due is None:
                return tick
            due = min(due, now + IDLE_TICK_S)
            if self.table.dirty:
                due = min(due, now + self._saved_at + SAVE_EVERY_S - self.clock())
        return min(IDLE_TICK_S, max(tick, due - now))

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
                self._carry_out(self.table.take())
        with self._lock:
            due = [t for t in self.tasks.values() if t.pid is not None and now - t.sampled_at >= SAMPLE_EVERY_S]
            if len(due) > SAMPLES_PER_TICK:
                due = sorted(due, key=lambda t: t.sampled_at)[:SAMPLES_PER_TICK]
            for task in due:
                self._sample(task, now)
            if due:  # only a sample can raise what the tasks use
                for tid in self.table.relieve_memory_pressure(self.config.capacity.get("ram", 0), now):
                    log.warning("memory pressure: killing %s", tid)
            for task in self.table.probes_due(now):
                self._probe(task)
            self._carry_out(self.table.take())
        if self.containers is not None:
            self._tend_containers()
        self.release_groups(RELEASES_PER_TICK)
        self._save_if_dirty(force=False)

    def _observe(self, task: Task, now: float) -> None:
        if task.pid is None:
            if self.table.restart_due(task, now):
                self._launch(task, now)
            return
        if task.proc is not None:
            returncode = task.proc.poll()
            exited = returncode is not None
        else:
            returncode = None
            exited = not processes.is_same_process(task.pid, task.start_ticks)
        if exited:
            self._on_exit(task, returncode, now)
        else:
            self.table.escalate(task, now)

    def _on_exit(self, task: Task, returncode: int | None, now: float) -> None:
        if task.container:
            # The engine knows how its container ended, OOM kill included (State.OOMKilled);
            # a task the borglet killed ends KILLED whatever it says, so the engine is not
            # asked, under the lock, once per container of a job's kill.
            if task.kill_reason is None:
                returncode, oom = self.launcher.engine().exit_status(task.container)
            else:
                oom = False
            self.releases.containers.append(task.container)
            task.container = ""
        else:
            oom = self.isolation.oom_kills(task.group) > task.oom_base
        # Children the task left behind in its session die with it.
        processes.signal_session(task.pid, signal.SIGKILL)  # type: ignore[arg-type]
        after = self.table.exited(task, returncode, oom, now)
        if after.restart_at is not None:
            log.info("%s exited (%s); restart in %.1fs", task.spec.task_id, task.reason, after.restart_at - now)
        else:
            log.info("%s ended: %s %s", task.spec.task_id, task.phase, task.reason or "")

    def _sample(self, task: Task, now: float) -> None:
        if task.pid is not None:
            sample = self.launcher.sample(task)
            self.table.sampled(task, now, sample.cpu_ns, sample.ram_bytes)

    def _probe(self, task: Task) -> None:
        """Ask the prober about the task's process; its answer goes to the core (probed)."""
        check, pid = task.spec.health_check, task.pid
        assert check is not None and pid is not None

        def done(ok: bool) -> None:
            with self._lock:
                self.table.probed(task, pid, ok, self.wall_clock())
                if self._carry_out(self.table.take()):
                    self._save_if_dirty(force=True)

        self.prober.submit(task.port, check.path, min(check.interval_s, 1.0), done, self.config.host)

    def _tend_containers(self) -> None:
        """The engine's side of a pass, outside the lock: the list of images a report gives,
        and once after the first sync, the removal of every container no task wants (left by
        a run of this borglet that is no longer desired, or the borglet's restart)."""
        containers = self.launcher.engine()
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
                    self.releases.containers.append(cid)

    def release_groups(self, limit: int | None = None) -> int:
        """Remove what ended tasks left (release.Releases), outside the lock."""
        return self.releases.release(limit, self._busy_allocs)

    def _busy_allocs(self) -> set[str]:
        """The allocs a live task here names, whose groups stay."""
        with self._lock:
            return {a.directory for t in self.tasks.values() if not t.ended and (a := alloc_group(t.spec))}

    # --- reporting and persistence -----------------------------------------------------------

    def _report(self) -> dict[str, Any]:
        return self.table.report({
            "machine": self.config.name,
            "capacity": dict(self.config.capacity),
            "attrs": dict(self.config.attrs),
            "failure_domain": self.config.failure_domain,
            "isolation": self.isolation.name,
            "runtime": "process" if self.containers is None else "docker",
            **({"images": self.containers.images()} if self.containers is not None else {}),
        })  # fmt: skip

    def _save_if_dirty(self, force: bool = True) -> None:
        """Write the table if it changed: at once when forced, else at most every SAVE_EVERY_S
        (a lost unforced change is one the next sync or observation makes again)."""
        # Snapshot under the state lock, write under the save lock, never holding the save lock
        # while waiting for the state lock: callers may already hold the state lock.
        with self._lock:
            if not self.table.dirty:
                return
            if not force and self.clock() - self._saved_at < SAVE_EVERY_S:
                return
            self._saved_at = self.clock()
            self._snapshots += 1
            seq = self._snapshots
            table = {"machine": self.config.name, "uids": dict(self.uids), **self.table.snapshot()}
        with self._save_lock:
            if seq <= self._saved:
                return  # a newer snapshot is already on disk
            store.save(self.table_path, table)
            self._saved = seq
