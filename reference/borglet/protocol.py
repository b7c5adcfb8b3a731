"""The master<->borglet sync protocol: the desired task set a master sends, as validated models.

A sync is fenced and ordered: the borglet applies it only when its (epoch, seq) is newer than the
last one it applied and its revision (the etcd revision the desired set was computed at) is not
older than any it applied. A sync carries either the whole desired set (`tasks`) or, for a
machine with many tasks, only what changed since an earlier sync the borglet applied (`delta`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# A task's phase on its machine. The cell knows a task by spec.model.TaskState (PENDING,
# RUNNING, DEAD); a borglet sees the finer phases of one that is RUNNING there: waiting for its
# process (QUEUED), started but not yet healthy or waiting out a restart backoff (STARTING),
# RUNNING; and how a DEAD one ended (FINISHED, FAILED, KILLED). Reports carry it as "state".
Phase = Literal["QUEUED", "STARTING", "RUNNING", "FINISHED", "FAILED", "KILLED"]
RestartPolicy = Literal["never", "on_failure", "always"]
ENDED_PHASES: frozenset[str] = frozenset({"FINISHED", "FAILED", "KILLED"})
# How long a task's process must have run, on its borglet's own clock, before the borglet's
# report says it is "ready": the master's rollout counts a replacement up only then (Kubernetes'
# minReadySeconds). The borglet judges it because it alone sees the process: a master judging by
# its own clock counted a replacement up once a second had passed since its reported start,
# though the process had exited and the exit was not reported yet, or the clocks differed.
READY_AFTER_S = 1.0


class HealthCheck(BaseModel):
    """An HTTP health probe of a task: GET http://<its machine's address>:<port><path> every
    interval_s (the address it is given as $HOST: 127.0.0.1 on a loopback cell)."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    path: str = "/healthz"
    interval_s: float = Field(default=1.0, gt=0)


class Request(BaseModel):
    """Resources a task asked for; they become its cgroup limits."""

    model_config = ConfigDict(frozen=True, extra="allow")
    cpu: int = Field(default=0, ge=0, description="milli-CPU")
    ram: int = Field(default=0, ge=0, description="bytes")


class AllocLimits(BaseModel):
    """The alloc a task runs in: its name ("user/set/index") and limits, the cgroup its task's goes beneath."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_/-]+$")
    cpu: int = Field(default=0, ge=0, description="milli-CPU")
    ram: int = Field(default=0, ge=0, description="bytes")


class TaskSpec(BaseModel):
    """One task the master wants running on this machine."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    task_id: str = Field(min_length=1)
    job: str = ""
    index: int = 0
    incarnation: int = 0
    bns: str = ""
    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    port: int = Field(default=0, ge=0, le=65535)
    request: Request = Field(default_factory=Request)
    priority: int = 0
    restart_policy: RestartPolicy = "never"
    health_check: HealthCheck | None = None
    image: str = Field(default="", description="a container image to run the task in (--runtime docker)")
    alloc: AllocLimits | None = None  # absent: the task runs in no alloc
    pids_max: int = Field(default=1024, ge=1, description="processes and threads the task may have at once")


class Delta(BaseModel):
    """The desired set as a change to the one of sync `base_seq` (same epoch)."""

    model_config = ConfigDict(extra="forbid")
    base_seq: int = Field(ge=0)
    add: list[TaskSpec] = Field(default_factory=list)
    remove: list[str] = Field(default_factory=list)


class SyncRequest(BaseModel):
    """What this machine should run, fenced by the leader's epoch and ordered by `seq`."""

    model_config = ConfigDict(extra="ignore")
    master: str = ""
    epoch: int = Field(default=0, ge=0)
    seq: int = Field(default=0, ge=0, description="orders the syncs of one epoch")
    revision: int = Field(default=0, ge=0, description="etcd revision the set was computed at")
    tasks: list[TaskSpec] = Field(default_factory=list, description="the whole desired set")
    delta: Delta | None = Field(default=None, description="instead of `tasks`: what changed")
