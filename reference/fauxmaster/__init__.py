"""The Fauxmaster: the master's decision code on a cell held in memory, for debugging, capacity planning and "would it fit?".

- `Fauxmaster` (simulator.py): a cell from a checkpoint or a workload, a simulated clock and
  stub borglets; `apply_job`, `schedule_all_pending(seed)`, `fail_machine`, `fail_rack`,
  `advance(seconds)`, each through the code the leader runs.
- `checkpoint`: the cell at one etcd revision as a versioned JSON file (docs/checkpoint.md).
- What would move if a machine left, and where a job would go, are the master's dry run
  (`master.dryrun`), one pass on a draft: the pass each `schedule_all_pending` runs.
- `pack(machines, jobs, seed)`: one scheduling pass of a workload on an empty cell, for
  experiments that pack through the scheduler; returns {task id: machine} of what was placed.
  For the reasons of what was not, use `Fauxmaster.from_workload(...).schedule_all_pending(seed).plan`.
"""

from __future__ import annotations

from collections.abc import Iterable

from reference.scheduler import SchedulerConfig
from spec.model import Job, Machine, TaskId

from .checkpoint import CheckpointError
from .simulator import Fauxmaster, PassResult


def pack(
    machines: Iterable[Machine], jobs: Iterable[Job], seed: int = 0, config: SchedulerConfig | None = None
) -> dict[TaskId, str]:
    """Submit `jobs` (spec jobs, no quota) to a cell of `machines`, run one scheduling pass
    with `seed`, and return where each placed task went."""
    result = Fauxmaster.from_workload(machines, jobs, config=config).schedule_all_pending(seed)
    return {p.task: p.machine for p in result.plan.placements}


__all__ = ["CheckpointError", "Fauxmaster", "PassResult", "pack"]
