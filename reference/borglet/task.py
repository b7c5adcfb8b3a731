"""The borglet's record of one task: runtime state, its report form and its persisted form."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from typing import Any

from reference import proctime
from reference.borglet.protocol import ENDED_PHASES, READY_AFTER_S, Phase, TaskSpec

# Fields written to tasks.json; everything else is rebuilt after a borglet restart. The phase
# is written, and reported, as "state".
_PERSISTED = (
    "key", "phase", "pid", "port", "exit_code", "restarts", "healthy", "started_at", "reason",
    "group", "start_ticks", "kill_reason", "restart_at", "attempt", "oom_base", "ever_healthy", "last_exit",
    "launching", "container",
)  # fmt: skip

# A report's "phase" of each task, its phase coarsened: where it is between the master's sync
# and its process (every ended phase is "exited").
COARSE_PHASE = {"QUEUED": "queued", "STARTING": "starting", "RUNNING": "running"}


@dataclass
class Task:
    """Mutable runtime state of one task id on this machine; guarded by the borglet's lock."""

    spec: TaskSpec
    key: str  # file-system-safe name for its log directory and cgroups
    phase: Phase = "QUEUED"
    pid: int | None = None
    port: int = 0
    exit_code: int | None = None
    restarts: int = 0
    healthy: bool | None = None
    started_at: float = 0.0
    reason: str | None = None
    group: dict[str, str] = field(default_factory=dict)  # cgroup paths; empty in rlimit mode
    start_ticks: int | None = None  # the process's start in ticks since boot: its identity across restarts
    kill_reason: str | None = None  # set once the borglet decided to kill it
    kill_deadline: float | None = None  # when SIGTERM escalates to SIGKILL
    restart_at: float | None = None  # set while waiting out the restart backoff
    last_exit: str | None = None  # how its last process ended ('exit 3', 'spawn: ...'), kept across restarts
    attempt: int = 0  # backoff attempt of the next restart
    oom_base: int = 0  # the group's OOM-kill count when the current process started
    ever_healthy: bool = False
    cpu_milli: int = 0
    ram_bytes: int = 0
    proc: subprocess.Popen | None = None  # None for processes adopted after a borglet restart
    cpu_sample: tuple[float, int] | None = None  # (clock, cumulative CPU ns) of the last rate
    next_probe_at: float = 0.0
    probing: bool = False
    # Set (and persisted) before its process is spawned, cleared once its pid is known: a
    # borglet restarted in between looks for the process by its environment marker instead
    # of starting it again.
    launching: bool = False
    sampled_at: float = 0.0
    spec_record: dict[str, Any] | None = None  # the spec as saved; the spec never changes
    container: str = ""  # the id of the container the task runs in (--runtime docker)

    @property
    def ended(self) -> bool:
        return self.phase in ENDED_PHASES

    def report(self, now: float) -> dict[str, Any]:
        """The task's entry in the sync reply at `now` (the borglet's clock, its starts' scale)."""
        return {
            "task_id": self.spec.task_id,
            "state": self.phase,
            "phase": COARSE_PHASE.get(self.phase, "exited"),
            "pid": self.pid,
            "port": self.port,
            "exit_code": self.exit_code,
            "restarts": self.restarts,
            "healthy": self.healthy,
            "started_at": self.started_at,
            "usage": {"cpu_milli": self.cpu_milli, "ram_bytes": self.ram_bytes},
            "reason": self.reason,
            "last_exit": self.last_exit,
            "restart_at": self.restart_at,
            # Its process has run READY_AFTER_S and runs now: flips once per start, so a
            # shard relays it once (the rollout's confirmation, master/rollout.py).
            "ready": self.phase == "RUNNING" and self.started_at > 0 and now - self.started_at >= READY_AFTER_S,
        }

    def to_record(self) -> dict[str, Any]:
        record = {name: getattr(self, name) for name in _PERSISTED}
        record["state"] = record.pop("phase")
        if self.spec_record is None:
            self.spec_record = self.spec.model_dump(mode="json")
        record["spec"] = self.spec_record
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Task:
        values = {name: record[name] for name in _PERSISTED if name in record}
        if "start_ticks" not in record and record.get("create_time") is not None:
            # Written before starts were kept in ticks: psutil's create_time, btime + ticks.
            values["start_ticks"] = proctime.ticks_of_create_time(record["create_time"])
        if "state" in record:
            values["phase"] = record["state"]
        return cls(spec=TaskSpec.model_validate(record["spec"]), **values)

    def tombstone(self, revision: int) -> dict[str, Any]:
        """What is kept after the task is forgotten, so its id is never started again;
        `revision` is the one of the sync that forgot it (decisions.expired_tombstones)."""
        return {
            "revision": revision,
            "state": self.phase,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "restarts": self.restarts,
            "started_at": self.started_at,
            "port": self.port,
        }

    @classmethod
    def from_tombstone(cls, spec: TaskSpec, key: str, stone: dict[str, Any]) -> Task:
        values = {k: v for k, v in stone.items() if k not in ("revision", "state")}
        values["phase"] = stone["state"]
        return cls(spec=spec, key=key, **values)
