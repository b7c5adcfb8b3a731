"""The scheduler's settings: policy, built-in score weights, preemption, disruption limit, scale techniques."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum


class QueueOrder(StrEnum):
    PRIORITY_ROUND_ROBIN = "priority_round_robin"  # Borg: high to low priority, users round-robin
    GIVEN = "given"  # the snapshot's order, e.g. a trace's arrival order


@dataclass(frozen=True)
class SchedulerConfig:
    policy: str = "borg_hybrid"
    # Built-in terms, in score points (policies score 0..100).
    preemption_per_victim: float = 100.0  # preempting is a last resort: costs more than any fit
    preemption_per_priority: float = 0.25  # per priority unit of each victim: lowest victims first
    spread_weight: float = 10.0  # a job's tasks away from domains that already hold many of them
    skew_weight: float = 10.0  # per task of the job a machine holds beyond the sample's least-loaded one
    locality_weight: float = 5.0  # a machine that already holds the job's package
    # Preemption and disruption.
    preemption: bool = True
    max_disruptions_per_job: int | None = None  # per caller's window; None: unlimited
    # Borg's scalability techniques, each switchable for the ablation.
    equivalence_classes: bool = True
    score_cache: bool = True
    relaxed_randomization: bool = True
    cache_threshold: float = 0.02  # fraction of capacity a machine's free may drift before rescoring
    mix_threshold: float = 0.05  # L1 drift of fgd's mix of task shapes before rescoring
    relaxed_min_feasible: int = 50
    relaxed_fraction: float = 0.05
    relaxed_shared_start: bool = True  # every class walks the random order from one start
    queue_order: QueueOrder = QueueOrder.PRIORITY_ROUND_ROBIN

    def sample_size(self, machines: int) -> int:
        """How many feasible machines relaxed randomization collects before picking the best."""
        if not self.relaxed_randomization:
            return machines
        return max(self.relaxed_min_feasible, math.ceil(machines * self.relaxed_fraction))

    def without_techniques(self) -> SchedulerConfig:
        return replace(
            self, equivalence_classes=False, score_cache=False, relaxed_randomization=False
        )
