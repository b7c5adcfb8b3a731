"""The borglet's shell: applies syncs, watches task processes, restarts, kills and persists them."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reference.borglet import decisions, processes, store
from reference.borglet.health import Prober
from reference.borglet.isolation import Isolation
from reference.borglet.protocol import SyncRequest, TaskSpec
from reference.borglet.task import Task

log = logging.getLogger(__name__)

MAX_TOMBSTONES = 2000  # forgotten task ids remembered so none is started twice
CPU_RATE_WINDOW_S = 1.0  # CPU usage is a rate over at least this long; shorter is noise
FIRST_PROBE_DELAY_S = 0.1
STARTUP_PROBE_INTERVAL_S = 0.25  # probe quickly until a task is first healthy


class StaleEpoch(Exception):
    """A sync from a leader older than one already seen: fenced off."""

    def __init__(self, epoch: int, highest: int):
        super().__init__(f"sync epoch {epoch} is older than epoch {highest} already seen")
        self.epoch = epoch
        self.highest = highest


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


class Borglet:
    """All task state of one machine behind one lock; the HTTP layer and the loop call in."""

    def __init__(
        self,
        config: MachineConfig,
        isolation: Isolation,
        clock: Callable[[], float] = time.time,
        prober: Prober | None = None,
    ):
        self.config = config
        self.isolation = isolation
        self.clock = clock
        self.prober = prober or Prober()
        self.tasks: dict[str, Task] = {}
        # Desired tasks not started yet because another process of their index is still
        # stopping here; started by the supervisor loop once it is gone. Not persisted: the
        # master lists them again on every sync.
        self.waiting: dict[str, TaskSpec] = {}
        self.tombstones: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.epoch = 0
        self.master = ""
        self.syncs = 0
        self.stale_syncs = 0
        self._lock = threading.RLock()
        self._save_lock = threading.Lock()
        self._dirty = False
        self._snapshots = 0  # snapshots taken of the table
        self._saved = 0  # the newest snapshot written
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def table_path(self) -> str:
        return os.path.join(self.config.state_dir, "tasks.json")

    # --- the API the HTTP layer uses -------------------------------------------------------

    def sync(self, request: SyncRequest) -> dict[str, Any]:
        """Make the machine's tasks match the desired set; returns the report."""
        with self._lock:
            if request.epoch < self.epoch:
                self.stale_syncs += 1
                raise StaleEpoch(request.epoch, self.epoch)
            if request.epoch != self.epoch or request.master != self.master:
                self._dirty = True
            self.epoch, self.master = request.epoch, request.master
            self.syncs += 1
            specs = {spec.task_id: spec for spec in request.tasks}
            plan = decisions.reconcile(
                specs, {tid: not t.ended for tid, t in self.tasks.items()}, self.tombstones
            )
            now = self.clock()
            for tid in plan.kill:
                self._request_kill(self.tasks[tid], "not_desired", now, grace=True)
            for tid in plan.forget:
                self._forget(tid)
            for tid in plan.restore:
                self._restore(specs[tid])
            # Only what the master still lists may wait; a spec it dropped is never started.
            self.waiting = {tid: specs[tid] for tid in plan.start}
            self._start_unblocked(now)
            if plan.kill or plan.forget or plan.restore or plan.start:
                self._dirty = True
            report = self._report()
        self._save_if_dirty()
        return report

    def report(self) -> dict[str, Any]:
        with self._lock:
            return self._report()

    # --- lifecycle ---------------------------------------------------------------------------

    def load(self) -> None:
        """Read tasks.json and re-adopt tasks whose processes survived the borglet's restart."""
        table = store.load(self.table_path)
        now = self.clock()
        with self._lock:
            self.epoch = int(table.get("epoch", 0))
            self.master = str(table.get("master", ""))
            self.tombstones = OrderedDict(table.get("tombstones", {}))
            for tid, record in table.get("tasks", {}).items():
                task = Task.from_record(record)
                self.tasks[tid] = task
                if task.ended:
                    continue
                if task.pid is not None and processes.is_same_process(task.pid, task.create_time):
                    # Adopted: not our child, so liveness is polled with psutil from now on.
                    task.next_probe_at = now
                    if task.kill_reason is not None:
                        task.kill_deadline = now
                    log.info("re-adopted %s (pid %d)", tid, task.pid)
                elif task.pid is None and task.restart_at is not None and task.kill_reason is None:
                    task.restart_at = now  # it was waiting out a backoff; carry on
                else:
                    task.pid = None
                    task.healthy = None if task.spec.health_check is None else False
                    task.state, task.reason = "FAILED", "lost_on_restart"
                    if task.kill_reason is not None:
                        task.state, task.reason = "KILLED", task.kill_reason
                    self._release(task)
                    log.warning("%s was lost while the borglet was down", tid)
            self._dirty = True
        self._save_if_dirty()

    def start(self) -> None:
        """Run the supervisor loop in a background thread."""
        self._thread = threading.Thread(target=self._loop, name="borglet-supervisor", daemon=True)
        self._thread.start()

    def stop(self, kill_tasks: bool = False, timeout_s: float | None = None) -> None:
        """Stop the loop; tasks keep running unless kill_tasks (tests, cell teardown)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if kill_tasks:
            self.kill_all("borglet_exit", timeout_s or self.config.kill_grace_s + 2)
        self._dirty = True
        self._save_if_dirty()
        self.prober.close()
        # Removes only the borglet's empty cgroup subtrees; groups of running tasks stay.
        self.isolation.close()

    def kill_all(self, reason: str, timeout_s: float) -> None:
        """Kill every task and wait (bounded) until their processes are gone."""
        with self._lock:
            now = self.clock()
            for task in self.tasks.values():
                self._request_kill(task, reason, now, grace=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
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

    def _loop(self) -> None:
        while not self._stop.wait(self.config.tick_s):
            try:
                self.tick()
            except Exception:  # the loop must outlive any one bad pass
                log.exception("supervisor tick failed")

    # --- one supervisor pass -------------------------------------------------------------------

    def tick(self) -> None:
        """Observe exits, escalate kills, restart, sample usage, relieve memory pressure, probe."""
        with self._lock:
            now = self.clock()
            for task in list(self.tasks.values()):
                self._observe(task, now)
            self._start_unblocked(now)
            for task in self.tasks.values():
                self._sample(task, now)
            self._relieve_memory_pressure(now)
            for task in self.tasks.values():
                self._maybe_probe(task, now)
                if task.release_pending:
                    self._release(task)
        self._save_if_dirty()

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
        code_for_policy = -signal.SIGKILL if oom and returncode in (0, None) else returncode
        if decisions.should_restart(
            task.spec.restart_policy, code_for_policy, task.kill_reason is not None
        ):
            attempt = 0 if ran_for >= decisions.BACKOFF_RESET_AFTER_S else task.attempt
            task.restart_at = now + decisions.backoff_delay(attempt)
            task.attempt = attempt + 1
            task.state = "STARTING"
            task.reason = decisions.ended_state(returncode, oom, None)[1] or "exit 0"
            log.info(
                "%s exited (%s); restart in %.1fs",
                task.spec.task_id,
                task.reason,
                task.restart_at - now,
            )
            return
        task.restart_at = None
        task.state, task.reason = decisions.ended_state(returncode, oom, task.kill_reason)
        log.info("%s ended: %s %s", task.spec.task_id, task.state, task.reason or "")
        self._release(task)

    def _sample(self, task: Task, now: float) -> None:
        if task.pid is None:
            return
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
                    if task.state == "STARTING":
                        task.state = "RUNNING"
                        task.reason = None
                interval = (
                    check.interval_s
                    if task.ever_healthy
                    else min(check.interval_s, STARTUP_PROBE_INTERVAL_S)
                )
                task.next_probe_at = self.clock() + interval
            # A task turning RUNNING is persisted now, not on the next tick, so a borglet
            # killed right after reporting it re-adopts it as RUNNING.
            self._save_if_dirty()

        self.prober.submit(task.port, check.path, min(check.interval_s, 1.0), done)

    # --- starting, killing, forgetting ---------------------------------------------------

    def _start(self, spec: TaskSpec, now: float) -> None:
        task = Task(spec=spec, key=processes.sanitize(spec.task_id))
        self.tasks[spec.task_id] = task
        task.started_at = now
        try:
            task.port = spec.port or processes.free_port(self._ports_in_use())
            task.group = self.isolation.prepare(task.key, spec.request.cpu, spec.request.ram)
        except OSError as err:
            task.state, task.reason = "FAILED", f"setup: {err}"
            self._release(task)
            return
        self._launch(task, now)

    def _start_unblocked(self, now: float) -> None:
        """Start each waiting task whose index has no other process still stopping here."""
        for tid, spec in list(self.waiting.items()):
            blocker = self._blocker(spec)
            if blocker is not None:
                log.debug("%s waits for %s to stop", tid, blocker)
                continue
            del self.waiting[tid]
            self._start(spec, now)
            self._dirty = True

    def _blocker(self, spec: TaskSpec) -> str | None:
        others = (
            decisions.Running(tid, t.spec.job, t.spec.index, t.kill_reason is not None and not t.ended)
            for tid, t in self.tasks.items()
        )
        return decisions.start_blocker(spec.job, spec.index, spec.task_id, others)

    def _launch(self, task: Task, now: float) -> None:
        spec = task.spec
        env = dict(os.environ)
        env.update(
            PORT=str(task.port),
            TASK_INDEX=str(spec.index),
            TASK_ID=spec.task_id,
            BNS_NAME=spec.bns,
            MINBORG_MACHINE=self.config.name,
        )
        env.update(spec.env)
        log_path = os.path.join(self.config.state_dir, "tasks", task.key, "log")
        task.oom_base = self.isolation.oom_kills(task.group)
        task.restart_at = None
        try:
            proc = processes.spawn(
                spec.command, env, spec.cwd, log_path,
                self.isolation.preexec(task.group, spec.request.ram),
            )  # fmt: skip
        except (OSError, subprocess.SubprocessError) as err:
            task.state, task.reason, task.pid = "FAILED", f"spawn: {err}", None
            self._release(task)
            return
        task.proc, task.pid = proc, proc.pid
        task.create_time = processes.create_time(proc.pid)
        task.started_at = now
        # exit_code and reason describe the current process; the previous run's are gone.
        task.exit_code, task.reason = None, None
        task.cpu_sample = None
        task.ever_healthy = False
        if spec.health_check is None:
            task.state, task.healthy = "RUNNING", None
        else:
            task.state, task.healthy = "STARTING", False
            task.next_probe_at = now + FIRST_PROBE_DELAY_S
        log.info("started %s as pid %d on port %d", spec.task_id, proc.pid, task.port)

    def _request_kill(self, task: Task, reason: str, now: float, grace: bool) -> None:
        if task.ended or task.kill_reason is not None:
            return
        task.kill_reason = reason
        self._dirty = True
        if task.pid is None:  # between restarts: nothing to signal
            task.restart_at = None
            task.state, task.reason = "KILLED", reason
            self._release(task)
            return
        task.reason = reason
        # Memory pressure cannot wait for a graceful exit; a user's kill can.
        processes.signal_session(task.pid, signal.SIGTERM if grace else signal.SIGKILL)
        task.kill_deadline = now + self.config.kill_grace_s

    def _forget(self, tid: str) -> None:
        task = self.tasks.pop(tid)
        self.tombstones[tid] = task.tombstone()
        while len(self.tombstones) > MAX_TOMBSTONES:
            self.tombstones.popitem(last=False)

    def _restore(self, spec: TaskSpec) -> None:
        stone = self.tombstones[spec.task_id]
        self.tasks[spec.task_id] = Task.from_tombstone(
            spec, processes.sanitize(spec.task_id), stone
        )

    def _release(self, task: Task) -> None:
        task.release_pending = not self.isolation.release(task.group)
        if not task.release_pending:
            task.group = {}

    def _ports_in_use(self) -> set[int]:
        return {t.port for t in self.tasks.values() if not t.ended and t.port}

    # --- reporting and persistence -----------------------------------------------------------

    def _report(self) -> dict[str, Any]:
        tasks = [t.report() for t in self.tasks.values()]
        return {
            "machine": self.config.name,
            "capacity": dict(self.config.capacity),
            "attrs": dict(self.config.attrs),
            "failure_domain": self.config.failure_domain,
            "isolation": self.isolation.name,
            "epoch": self.epoch,
            "usage": {
                "cpu_milli": sum(t["usage"]["cpu_milli"] for t in tasks),
                "ram_bytes": sum(t["usage"]["ram_bytes"] for t in tasks),
            },
            "tasks": tasks,
            # Listed apart from `tasks`: no process of theirs exists yet.
            "waiting": sorted(self.waiting),
        }

    def _save_if_dirty(self) -> None:
        # Snapshot under the state lock, write under the save lock, never holding the save lock
        # while waiting for the state lock: callers may already hold the state lock.
        with self._lock:
            if not self._dirty:
                return
            self._dirty = False
            self._snapshots += 1
            seq = self._snapshots
            table = {
                "machine": self.config.name,
                "epoch": self.epoch,
                "master": self.master,
                "tasks": {tid: t.to_record() for tid, t in self.tasks.items()},
                "tombstones": dict(self.tombstones),
            }
        with self._save_lock:
            if seq <= self._saved:
                return  # a newer snapshot is already on disk
            store.save(self.table_path, table)
            self._saved = seq
