"""The master<->borglet sync protocol: the desired task set a master sends, as validated models."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

TaskState = Literal["STARTING", "RUNNING", "FINISHED", "FAILED", "KILLED"]
RestartPolicy = Literal["never", "on_failure", "always"]
ENDED_STATES: frozenset[str] = frozenset({"FINISHED", "FAILED", "KILLED"})


class HealthCheck(BaseModel):
    """An HTTP health probe of a task: GET http://127.0.0.1:<port><path> every interval_s."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    path: str = "/healthz"
    interval_s: float = Field(default=1.0, gt=0)


class Request(BaseModel):
    """Resources a task asked for; they become its cgroup limits."""

    model_config = ConfigDict(frozen=True, extra="allow")
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


class SyncRequest(BaseModel):
    """The complete desired set for this machine, fenced by the leader's epoch."""

    model_config = ConfigDict(extra="ignore")
    master: str = ""
    epoch: int = 0
    tasks: list[TaskSpec] = Field(default_factory=list)
