"""The scheduler's output: placements with their preemptions, and unschedulable tasks with reasons."""

from __future__ import annotations

from dataclasses import dataclass, field

from spec.model import TaskId


@dataclass(frozen=True, slots=True)
class Preemption:
    """A running task evicted (back to PENDING) to make room for a higher-priority one."""

    victim: TaskId
    preemptor: TaskId
    machine: str
    reason: str  # e.g. "priority 210 preempts 0 on m17 for cpu,ram"


@dataclass(frozen=True, slots=True)
class Placement:
    task: TaskId
    machine: str
    victims: tuple[TaskId, ...] = ()
    score: float = 0.0


@dataclass(frozen=True, slots=True)
class Reason:
    """One named reason why a task fits nowhere: what was short, and on how many machines."""

    subject: str  # "cpu", "gpu", "constraint gpu_model in V100", "machines", "alloc a1"
    detail: str  # "0 of 12 machines have 4000m free"
    machines: int = 0  # how many machines pass this check

    def __str__(self) -> str:
        return f"{self.subject}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Unschedulable:
    task: TaskId
    reasons: tuple[Reason, ...]

    def __str__(self) -> str:
        return "; ".join(str(r) for r in self.reasons)


@dataclass
class PassStats:
    """Counters of one pass, for benchmarks and the ablation (not part of the plan's meaning)."""

    processed: int = 0
    evaluations: int = 0  # feasibility checks plus scorings of one (task or class, machine) pair
    cache_hits: int = 0
    classes: int = 0
    skipped_by_dead_class: int = 0
    latencies: list[float] = field(default_factory=list)  # seconds per task, when a clock is given


@dataclass
class Plan:
    placements: list[Placement] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    unschedulable: list[Unschedulable] = field(default_factory=list)
    stats: PassStats = field(default_factory=PassStats)

    def placed_on(self) -> dict[TaskId, str]:
        return {p.task: p.machine for p in self.placements}
