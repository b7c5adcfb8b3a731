"""The scheduler: a pure library that turns a snapshot of the cell into a plan of placements and preemptions."""

from .adapter import PlanRejected, apply_plan, plan_for, plan_steps, snapshot_from_state
from .admission import Admission, admit, admit_alloc_set
from .config import QueueOrder, SchedulerConfig
from .engine import plan_pass
from .plan import PassStats, Placement, Plan, Preemption, Reason, Unschedulable
from .policies import POLICIES, policy_named
from .snapshot import AllocView, PendingTask, RunningTask, Snapshot

__all__ = [
    "POLICIES",
    "Admission",
    "AllocView",
    "PassStats",
    "PendingTask",
    "Placement",
    "Plan",
    "PlanRejected",
    "Preemption",
    "QueueOrder",
    "Reason",
    "RunningTask",
    "SchedulerConfig",
    "Snapshot",
    "Unschedulable",
    "admit",
    "admit_alloc_set",
    "apply_plan",
    "plan_for",
    "plan_pass",
    "plan_steps",
    "policy_named",
    "snapshot_from_state",
]
