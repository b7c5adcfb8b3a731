"""The borglet's starter: the thread that works through the start queue at `start_rate`, spawning each task's process outside the lock, and a restart in place.

A sync only queues a task (core.TaskTable); this thread takes a batch, has the core mark it
launching and saved, then makes each task's cgroup and process with the lock let go between
spawns, so syncs and polls are answered meanwhile. `Starter` is mixed into
`supervisor.Borglet`, whose table, lock and launcher it works on.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from reference import ports, proctime
from reference.borglet import containers as runtime
from reference.borglet import processes, taskusers
from reference.borglet.config import MachineConfig
from reference.borglet.core import Ready, TaskTable
from reference.borglet.launch import Launcher
from reference.borglet.release import Releases
from reference.borglet.task import Task

log = logging.getLogger(__name__)

CONTAINER_STARTS = 8  # containers the starter makes at once (--runtime docker)


class Starter:
    """The starting side of the borglet: its start thread and the spawns it makes."""

    # The borglet's state this side works on (supervisor.Borglet sets it).
    config: MachineConfig
    containers: runtime.Containers | None
    launcher: Launcher
    table: TaskTable
    releases: Releases
    uids: dict[str, int]
    clock: Callable[[], float]
    wall_clock: Callable[[], float]
    _lock: threading.RLock
    _queued: threading.Condition
    _stop: threading.Event

    @property
    def tasks(self) -> dict[str, Task]:
        return self.table.tasks

    # supervisor.Borglet's methods this side calls (declared for type checkers; the class
    # that mixes this in defines them).
    _carry_out: Callable[[Ready], bool]
    _save_if_dirty: Callable[..., None]

    def _start_loop(self) -> None:
        """Work through the queue: at most `start_rate` starts a second, one batch per second."""
        batch = max(1, int(self.config.start_rate))
        while not self._stop.is_set():
            with self._lock:
                if not self.table.queue:
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

        The batch is first marked launching and saved (core.TaskTable.take_batch); each
        process is then spawned under the lock, released between spawns so syncs and polls are
        answered meanwhile. A task killed while its batch waits is skipped. Returns how many
        processes were started.
        """
        with self._lock:
            batch = self.table.take_batch(limit, ports.free_port)  # a port not given to a task
            write_ahead = self._carry_out(self.table.take())
        if not batch:
            return 0
        if write_ahead:
            self._save_if_dirty(force=True)  # launching is on disk before a spawn
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
            self.table.requeue(batch)  # any the loop did not reach go back to the front
        return started

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
            env = self.launcher.env(task)
            uid = self._run_as(task)
        proc: subprocess.Popen | runtime.Started | None = None
        try:
            group = self.launcher.prepare(task)
        except Exception as err:  # whatever it is, it is this task's alone
            with self._lock:
                self._failed_to_start(task, f"setup: {err}")
            return False
        try:
            proc = self.launcher.spawn(task, group, env, uid)
            error = None
        except Exception as err:  # a NUL byte, a missing program, a bad cwd: this task's alone
            error = self.launcher.spawn_error(task, err, env, uid)
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
                    self.releases.containers.append(proc.container_id)
                task.launching = False
                self.releases.add(task)
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
        self.table.failed_to_start(task, reason)
        self._carry_out(self.table.take())

    def _run_as(self, task: Task) -> int | None:
        """The uid the task runs as (its job user's, recorded on first use), or None: as the
        borglet's own user. Under the lock. A container always runs as its job user's uid."""
        if not self.config.task_uids and not self.launcher.in_container(task):
            return None
        user = taskusers.user_of(task.spec.job, task.spec.task_id)
        uid = taskusers.assign(user, self.uids)
        if self.uids.get(user) != uid:
            self.uids[user] = uid
            self.table.dirty = True
        return uid

    def _launch(self, task: Task, now: float) -> None:
        """A restart in place, under the lock (rare: backoffs spread restarts out)."""
        env, uid = self.launcher.env(task), self._run_as(task)
        try:
            proc = self.launcher.spawn(task, task.group, env, uid)
        except Exception as err:  # this task's alone, as in _start
            self._failed_to_start(task, self.launcher.spawn_error(task, err, env, uid))
            return
        self._launched(task, proc, now)

    def _launched(self, task: Task, proc: subprocess.Popen | runtime.Started, now: float) -> None:
        oom_base = self.isolation.oom_kills(task.group)
        if isinstance(proc, runtime.Started):
            # Watched as an adopted process is, by its init's host pid; the engine is asked
            # only when it ends.
            self.table.launched(
                task, proc.pid, proc.start_ticks, now, container=proc.container_id, oom_base=oom_base,
                started_at=processes.start_time(proc.pid) if proc.pid else None,
            )
        else:
            self.table.launched(
                task, proc.pid, proctime.start_ticks(proc.pid), now, proc=proc, oom_base=oom_base,
                started_at=processes.start_time(proc.pid),
            )
        log.info("started %s as pid %d on port %d", task.spec.task_id, proc.pid, task.port)
