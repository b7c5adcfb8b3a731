"""The borglet's core: one machine's task table, with no thread, process, cgroup or file of its own.

Its shell tells it what happened (a sync arrived, a process was launched, one exited, a probe
answered, a sample raised the memory in use) and it updates the table, deciding with
`decisions` what each event means; what the shell must do about it (signal a process, start
the queued tasks, release an ended task's resources, save the table now) collects in `Ready`,
which the shell takes with `take()` and carries out, as etcd's raft hands its caller a `Ready`.
The real borglet (supervisor.py) and the hollow machines (hollow.py) both run this core, so a
result measured on hollow machines is the real borglet's fencing, reconciliation and report.

Not thread-safe: the supervisor calls it under its lock, a hollow machine from one thread.
"""

from __future__ import annotations

import signal
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reference.borglet import decisions
from reference.borglet.protocol import SyncRequest, TaskSpec
from reference.borglet.task import Task

CPU_RATE_WINDOW_S = 1.0  # CPU usage is a rate over at least this long; shorter is noise
FIRST_PROBE_DELAY_S = 0.1
STARTUP_PROBE_INTERVAL_S = 0.25  # probe quickly until a task is first healthy


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


@dataclass
class Ready:
    """What the shell must do after the core's last calls, in order of decision.

    signals: (task, pid, signal) for the process session of a task being killed; start: a
    sync queued new tasks (wake the starter); release: tasks that ended, whose cgroups,
    container and working directory go; save: write the table now, not on the next pass (a
    write-ahead before a spawn, a sync that queued tasks, a task turning RUNNING)."""

    signals: list[tuple[Task, int, int]] = field(default_factory=list)
    start: list[str] = field(default_factory=list)
    release: list[Task] = field(default_factory=list)
    save: bool = False


def _same(tid: str) -> str:
    return tid


class TaskTable:
    """Every task one machine knows, the queue of those to start, the tombstones of those it
    forgot, and the fence of the newest sync applied.

    `key` names a task's log directory and cgroups after its id; `kill_grace_s` is how long a
    killed task's process has between SIGTERM and SIGKILL. Times passed in (`now`) are one wall
    clock, the scale of a process's creation time.
    """

    def __init__(self, key: Callable[[str], str] = _same, kill_grace_s: float = 3.0) -> None:
        self.key, self.kill_grace_s = key, kill_grace_s
        self.tasks: dict[str, Task] = {}
        # Task ids in the order they are to be started; an id whose task is no longer QUEUED
        # (killed before it started) is skipped when its turn comes.
        self.queue: deque[str] = deque()
        self.tombstones: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.fence = decisions.Fence()
        self.master = ""
        # The desired set of the last applied sync, the base of the next delta; None until a
        # whole set was applied since this table was made.
        self.desired: dict[str, TaskSpec] | None = None
        self.syncs = 0
        self.refused: Counter[str] = Counter()
        self.dirty = False  # changed since the shell last took a snapshot
        # Ids of tasks killed while their process ran: the only ones whose process may still
        # be stopping (stopping_indexes), so a report need not look at every task.
        self._killed_running: set[str] = set()
        self._ready = Ready()

    def take(self) -> Ready:
        """What the shell is to do now; the core forgets it."""
        ready, self._ready = self._ready, Ready()
        return ready

    # --- the master's sync ---------------------------------------------------------------------

    def apply_sync(self, request: SyncRequest, now: float) -> None:
        """Record the desired set: queue new tasks, kill dropped ones, forget ended ones.

        Raises SyncRefused, changing nothing, for a sync that is not newer than the last one
        applied (decisions.refusal) or a delta whose base is not the last one applied.
        """
        reason, specs = decisions.accept_sync(self.fence, self.desired, request)
        if reason is not None:
            self.refused[reason] += 1
            raise SyncRefused(reason, self.fence, request)
        self.fence = decisions.Fence(request.epoch, request.seq, request.revision)
        self.master, self.desired = request.master, specs
        self.syncs += 1
        self.dirty = True
        plan = decisions.reconcile(
            specs, {tid: not t.ended for tid, t in self.tasks.items()}, self.tombstones
        )
        for tid in plan.kill:
            self.kill(self.tasks[tid], "not_desired", now, grace=True)
        for tid in plan.forget:
            self.tombstones[tid] = self.tasks.pop(tid).tombstone(request.revision)
            self._killed_running.discard(tid)
        for tid in plan.restore:
            self.tasks[tid] = Task.from_tombstone(specs[tid], self.key(tid), self.tombstones[tid])
        for tid in decisions.expired_tombstones(
            {t: int(stone.get("revision", 0)) for t, stone in self.tombstones.items()},
            request.revision,
        ):
            del self.tombstones[tid]
        for tid in plan.start:
            self.tasks[tid] = Task(spec=specs[tid], key=self.key(tid))
            self.queue.append(tid)
        self._ready.start.extend(plan.start)
        if plan.start:
            # On disk before the sync is answered: a borglet restarted before it starts them
            # restores each with the file it was sent. A task id is known by id alone, and the
            # master sends its job's current file for every task of the job, stale ones too:
            # a task lost from the table would come back with a later version's file.
            self._ready.save = True

    # --- kills -----------------------------------------------------------------------------------

    def kill(self, task: Task, reason: str, now: float, grace: bool) -> None:
        """Decide to kill a task: one with no process (queued, or between restarts) ends
        KILLED at once; one with a process is signalled, SIGTERM and SIGKILL after the grace
        (`grace`), or SIGKILL at once. A task already ended or being killed is left alone."""
        if task.ended or task.kill_reason is not None:
            return
        task.kill_reason = reason
        self.dirty = True
        if task.pid is None:  # nothing to signal
            task.restart_at = None
            task.phase, task.reason = "KILLED", reason
            self._ready.release.append(task)
            return
        task.reason = reason
        self._killed_running.add(task.spec.task_id)
        # Memory pressure cannot wait for a graceful exit; a user's kill can.
        self._ready.signals.append((task, task.pid, signal.SIGTERM if grace else signal.SIGKILL))
        task.kill_deadline = now + self.kill_grace_s

    def kill_all(self, reason: str, now: float) -> None:
        for task in self.tasks.values():
            self.kill(task, reason, now, grace=True)

    def escalate(self, task: Task, now: float) -> None:
        """SIGKILL a killed task's process whose grace is over."""
        if task.pid is not None and task.kill_deadline is not None and now >= task.kill_deadline:
            self._ready.signals.append((task, task.pid, signal.SIGKILL))
            task.kill_deadline = None

    def relieve_memory_pressure(self, capacity_ram: int, now: float) -> list[str]:
        """Kill, without grace, the tasks decisions.memory_pressure_victims names while the
        tasks' summed memory (less what killed ones still hold) is over `capacity_ram`."""
        dying = sum(t.ram_bytes for t in self.tasks.values() if t.kill_reason and t.pid)
        candidates = [
            decisions.Candidate(t.spec.task_id, t.spec.priority, t.ram_bytes, t.started_at)
            for t in self.tasks.values()
            if t.pid is not None and t.kill_reason is None
        ]
        victims = decisions.memory_pressure_victims(candidates, capacity_ram - dying)
        for tid in victims:
            self.kill(self.tasks[tid], "memory_pressure", now, grace=False)
        return victims

    # --- starts ----------------------------------------------------------------------------------

    def stopping_indexes(self) -> frozenset[tuple[str, int]]:
        """decisions.stopping_indexes of the tasks killed while their process ran."""
        tasks = [t for tid in self._killed_running if (t := self.tasks.get(tid)) is not None]
        return decisions.stopping_indexes(
            (t.spec.job, t.spec.index, t.kill_reason is not None and t.pid is not None and not t.ended)
            for t in tasks
        )

    def ports_in_use(self) -> set[int]:
        return {t.port for t in self.tasks.values() if not t.ended and t.port}

    def take_batch(self, limit: int | None, port_for: Callable[[Collection[int]], int]) -> list[str]:
        """Up to `limit` queued task ids to start now, marked launching: those whose index has
        no process still stopping here (the others keep their place in the queue). A task with
        no port gets one from `port_for(ports taken)` (OSError: it fails to start)."""
        stopping = self.stopping_indexes()
        taken = self.ports_in_use()
        batch: list[str] = []
        keep: deque[str] = deque()
        while self.queue and (limit is None or len(batch) < limit):
            tid = self.queue.popleft()
            task = self.tasks.get(tid)
            if task is None or task.phase != "QUEUED" or task.kill_reason is not None:
                continue
            if decisions.start_blocked(task.spec.job, task.spec.index, stopping):
                keep.append(tid)
                continue
            if not task.port:
                # Chosen before the write-ahead, so a process adopted after a crash keeps it.
                try:
                    task.port = task.spec.port or port_for(taken)
                except OSError as err:
                    self.failed_to_start(task, f"setup: {err}")
                    continue
                taken.add(task.port)
            task.launching = True
            batch.append(tid)
        keep.extend(self.queue)
        self.queue = keep
        if batch:
            self.dirty = True
            self._ready.save = True  # the write-ahead: launching is on disk before a spawn
        return batch

    def requeue(self, batch: Iterable[str]) -> None:
        """Put back at the front of the queue the tasks of a batch still launching (the
        starter stopped before it reached them)."""
        for tid in reversed(list(batch)):
            task = self.tasks.get(tid)
            if task is not None and task.phase == "QUEUED" and task.launching:
                task.launching = False
                self.queue.appendleft(tid)
        self.dirty = True

    def launched(
        self, task: Task, pid: int, start_ticks: int | None, now: float, *,
        proc: Any = None, container: str = "", oom_base: int = 0, started_at: float | None = None,
    ) -> None:  # fmt: skip
        """A process was started for the task (its first start or a restart in place);
        `start_ticks`: its start in ticks since boot, its identity (reference/proctime.py);
        `started_at`: its start on the wall clock, read from the kernel (processes.start_time),
        else `now`."""
        task.oom_base = oom_base
        task.restart_at = None
        task.launching = False
        task.proc, task.pid, task.container, task.start_ticks = proc, pid, container, start_ticks
        # The process's own start, as the kernel has it: the same figure a borglet that adopts
        # the process after a crash reads back, so a task's start time never changes under
        # re-adoption.
        task.started_at = started_at or now
        # exit_code and reason describe the current process; the previous run's are gone.
        task.exit_code, task.reason = None, None
        task.cpu_sample = None
        task.ever_healthy = False
        task.phase, task.healthy = decisions.started(task.spec.health_check is not None)
        if task.spec.health_check is not None:
            task.next_probe_at = now + FIRST_PROBE_DELAY_S
        self.dirty = True

    def failed_to_start(self, task: Task, reason: str) -> None:
        """Its process could not be made ('setup: ...', 'spawn: ...'): it ends FAILED."""
        task.launching = False
        task.phase, task.reason, task.pid = "FAILED", reason, None
        task.last_exit = reason
        self.dirty = True
        self._ready.release.append(task)

    def restart_due(self, task: Task, now: float) -> bool:
        """Whether a task waiting out its restart backoff is to be launched again now (its
        restart counted)."""
        if task.pid is not None or task.restart_at is None or now < task.restart_at or task.ended:
            return False
        task.restarts += 1
        self.dirty = True
        return True

    # --- exits and probes ------------------------------------------------------------------------

    def exited(self, task: Task, returncode: int | None, oom: bool, now: float) -> decisions.Exit:
        """Its process is gone (`oom`: the kernel's OOM killer took it): restarted by policy
        after a backoff, or ended (and released)."""
        ran_for = now - task.started_at
        self._killed_running.discard(task.spec.task_id)
        task.pid, task.proc, task.start_ticks, task.container = None, None, None, ""
        task.exit_code = returncode
        task.healthy = None if task.spec.health_check is None else False
        task.cpu_milli, task.ram_bytes, task.cpu_sample = 0, 0, None
        task.kill_deadline = None
        self.dirty = True
        after = decisions.after_exit(
            task.spec.restart_policy, returncode, oom, task.kill_reason, task.attempt, ran_for, now
        )
        task.phase, task.reason, task.restart_at, task.attempt = after.phase, after.reason, after.restart_at, after.attempt
        if task.kill_reason is None:
            task.last_exit = decisions.ended_state(returncode, oom, None)[1] or "exit 0"
        if after.restart_at is None:
            self._ready.release.append(task)
        return after

    def sampled(self, task: Task, now: float, cpu_ns: int, ram_bytes: int) -> None:
        """A sample of what the task's process uses: its memory now, and its CPU time so far,
        made a rate once CPU_RATE_WINDOW_S has passed since the last rate."""
        task.sampled_at = now
        task.ram_bytes = ram_bytes
        if task.cpu_sample is None:
            task.cpu_sample = (now, cpu_ns)
            return
        then, cpu_then = task.cpu_sample
        if now - then >= CPU_RATE_WINDOW_S:
            # ns of CPU per second of wall time / 1e6 = milli-CPU.
            task.cpu_milli = max(0, round((cpu_ns - cpu_then) / 1e6 / (now - then)))
            task.cpu_sample = (now, cpu_ns)

    def probes_due(self, now: float) -> list[Task]:
        """Tasks whose health probe is due, marked as being probed."""
        due = []
        for task in self.tasks.values():
            check = task.spec.health_check
            if check is None or task.pid is None or task.probing or now < task.next_probe_at:
                continue
            task.probing = True
            due.append(task)
        return due

    def probed(self, task: Task, pid: int, ok: bool, now: float) -> None:
        """A probe of the task's process `pid` answered: a STARTING task turns RUNNING on its
        first good answer (saved at once, so a borglet killed right after reporting it
        re-adopts it as RUNNING); an answer about a process since replaced is dropped."""
        task.probing = False
        if task.pid != pid or task.spec.health_check is None:
            return
        if ok != task.healthy:
            self.dirty = True
        task.healthy = ok
        if ok:
            task.ever_healthy = True
            if task.phase == "STARTING":
                task.phase, task.reason = "RUNNING", None
        check = task.spec.health_check
        interval = check.interval_s if task.ever_healthy else min(check.interval_s, STARTUP_PROBE_INTERVAL_S)
        task.next_probe_at = now + interval
        self._ready.save = True

    # --- after a borglet restart -----------------------------------------------------------------

    def restore(self, table: Mapping[str, Any]) -> list[Task]:
        """Take back a saved table (`snapshot`): its fence, master and tombstones, and its
        tasks, returned for the shell to look for their processes and `readopt` each."""
        fence = table.get("fence") or {"epoch": table.get("epoch", 0)}
        self.fence = decisions.Fence(
            int(fence.get("epoch", 0)), int(fence.get("seq", 0)), int(fence.get("revision", 0))
        )
        self.master = str(table.get("master", ""))
        self.tombstones = OrderedDict(table.get("tombstones", {}))
        for tid, record in table.get("tasks", {}).items():
            self.tasks[tid] = task = Task.from_record(record)
            if task.kill_reason is not None:
                self._killed_running.add(tid)
        self.dirty = True
        return list(self.tasks.values())

    @staticmethod
    def saved(task: Task) -> decisions.Saved:
        """A task of the restored table as decisions.readoption reads it, before the shell
        looks for its process (and fills in `found` and `alive`)."""
        return decisions.Saved(
            phase=task.phase, reason=task.reason, ended=task.ended, launching=task.launching,
            has_pid=task.pid is not None, kill_reason=task.kill_reason,
            backing_off=task.restart_at is not None, health_checked=task.spec.health_check is not None,
        )  # fmt: skip

    def readopt(self, task: Task, saved: decisions.Saved, now: float) -> decisions.Readoption:
        """Carry out decisions.readoption on a task of the restored table (`saved`, with what
        the shell found of its process)."""
        verdict = decisions.readoption(saved)
        task.phase, task.reason = verdict.phase, verdict.reason
        if verdict.verdict == "queue":
            self.queue.append(task.spec.task_id)
        elif verdict.verdict == "adopt":
            task.next_probe_at = now  # not our child: liveness is polled from now on
            if task.kill_reason is not None:
                task.kill_deadline = now
        elif verdict.verdict == "resume":
            task.restart_at = now  # it was waiting out a backoff; carry on
        elif verdict.verdict == "lost":
            task.pid = None
            task.healthy = None if task.spec.health_check is None else False
            self._ready.release.append(task)
        self.dirty = True
        return verdict

    # --- what the table says ---------------------------------------------------------------------

    def report(self, machine: Mapping[str, Any], now: float | None = None) -> dict[str, Any]:
        """The sync reply and GET /v1/state at `now` (default: the wall clock): what `machine`
        says of itself, then the tasks."""
        now = time.time() if now is None else now
        tasks = [t.report(now) for t in self.tasks.values()]
        stopping = self.stopping_indexes() if self.queue else frozenset()
        return {
            **machine,
            "epoch": self.fence.epoch,
            "usage": {
                "cpu_milli": sum(t["usage"]["cpu_milli"] for t in tasks),
                "ram_bytes": sum(t["usage"]["ram_bytes"] for t in tasks),
            },
            "tasks": tasks,
            "fence": {"epoch": self.fence.epoch, "seq": self.fence.seq, "revision": self.fence.revision},
            "queued": sum(1 for t in self.tasks.values() if t.phase == "QUEUED"),
            # Queued tasks whose index still has a process stopping here.
            "waiting": sorted(
                tid for tid, t in self.tasks.items()
                if t.phase == "QUEUED" and decisions.start_blocked(t.spec.job, t.spec.index, stopping)
            ) if stopping else [],
        }  # fmt: skip

    def snapshot(self) -> dict[str, Any]:
        """The table as saved (tasks.json, beside what the shell adds); clears `dirty`."""
        self.dirty = False
        return {
            "epoch": self.fence.epoch,
            "fence": {"epoch": self.fence.epoch, "seq": self.fence.seq, "revision": self.fence.revision},
            "master": self.master,
            "tasks": {tid: t.to_record() for tid, t in self.tasks.items()},
            "tombstones": dict(self.tombstones),
        }

    def state_of(self, task_id: str) -> str | None:
        """'FAILED (spawn: ...)' for a known or forgotten task, None for one never seen here.
        Reads one dict entry and two attributes only: safe without the shell's lock."""
        task = self.tasks.get(task_id)
        phase, reason = (task.phase, task.reason) if task else (None, None)
        stone = self.tombstones.get(task_id) if task is None else None
        if stone is not None:
            phase, reason = stone.get("state"), stone.get("reason")
        if phase is None:
            return None
        return f"{phase} ({reason})" if reason else str(phase)

    def next_due(self, now: float) -> float | None:
        """When a task next changes without an event (a backoff ends, a probe is due), at the
        earliest; None while something is under way (a kill, a launch, a probe, a queued start)."""
        if self.queue:
            return None
        due = float("inf")
        for task in self.tasks.values():
            if task.kill_deadline is not None or task.launching or task.probing:
                return None
            if task.restart_at is not None and not task.ended:
                due = min(due, task.restart_at)
            if task.pid is not None and task.spec.health_check is not None:
                due = min(due, task.next_probe_at)
        return due
