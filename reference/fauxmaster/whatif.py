"""What-if questions on a cell, answered by a Fauxmaster on a copy: which tasks would move if a machine were removed."""

from __future__ import annotations

from typing import Any

from reference.master.cell import Cell
from reference.master.mutations import remove_machine as drain_and_remove
from reference.scheduler import SchedulerConfig
from spec.model import TaskState

from . import answers
from .simulator import Fauxmaster


def remove_machine(cell: Cell, name: str, seed: int = 0, config: SchedulerConfig | None = None) -> dict[str, Any]:
    """Remove machine `name` as `DELETE /v1/machines/{name}` does (its tasks evicted for
    maintenance), run one scheduling pass, and say where each of its tasks went or why it
    stays pending, and what the moves preempt. Raises `mutations.ApiError` (404) for an
    unknown machine. `cell` is not changed."""
    fm = Fauxmaster(cell, config=config)
    on = [t.id for t in fm.state.running_on(name)]
    fm.change(lambda d: drain_and_remove(d, name))
    result = fm.schedule_all_pending(seed)
    state = fm.state
    moves = [
        {"task": str(tid), "from": name, "to": state.tasks[tid].machine}
        for tid in on
        if state.tasks[tid].state is TaskState.RUNNING
    ]
    return {
        "remove_machine": name,
        "moves": moves,
        "pending": answers.pending(state, result.plan, on),
        "preempted": answers.preempted(state, [result.plan]),
        "revision": cell.revision,
        "seed": seed,
    }
