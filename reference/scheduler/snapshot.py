"""The scheduler's input: an immutable snapshot of machines, running tasks, allocs and the pending queue."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from spec.model import Constraint, Machine, Resources, TaskId


@dataclass(frozen=True, slots=True)
class RunningTask:
    """A task holding resources on a machine: a possible preemption victim."""

    id: TaskId
    machine: str
    priority: int
    request: Resources
    in_alloc: bool = False  # counted through its alloc, never a victim on its own
    reservation: Resources | None = None  # Borg's estimate, at most the request; None: the request


@dataclass(frozen=True, slots=True)
class PendingTask:
    """A task waiting for a machine, with what the scheduler needs from its job."""

    id: TaskId
    user: str
    priority: int
    request: Resources
    constraints: tuple[Constraint, ...] = ()
    package: str = ""
    alloc: str | None = None  # run inside this alloc (its machine, its resources): alloc i of the job's set

    @property
    def job(self) -> str:
        return self.id.job


@dataclass(frozen=True, slots=True)
class AllocView:
    """An alloc: resources reserved on one machine, and what its running tasks use of them."""

    name: str
    machine: str
    resources: Resources
    priority: int
    used: Resources = Resources()


@dataclass(frozen=True)
class Snapshot:
    """Everything one scheduling pass reads. `packages` maps a machine to the packages it holds."""

    machines: tuple[Machine, ...]
    running: tuple[RunningTask, ...] = ()
    pending: tuple[PendingTask, ...] = ()
    allocs: tuple[AllocView, ...] = ()
    packages: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # (job, index) -> machine -> recent crashes of the index there (pairing.CrashMemory.snapshot)
    crashes: Mapping[tuple[str, int], Mapping[str, int]] = field(default_factory=dict)
