"""Counts how often each spec action was exercised, each spec invariant checked and each fault injected during a run."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from harness.faults import STEPS
from spec.actions import ACTIONS
from spec.invariants import INVARIANTS


@dataclass
class Coverage:
    #: spec actions seen in explained task transitions and in the model's own steps
    actions_observed: Counter[str] = field(default_factory=Counter)
    actions_model: Counter[str] = field(default_factory=Counter)
    invariant_checks: Counter[str] = field(default_factory=Counter)
    invariant_failures: Counter[str] = field(default_factory=Counter)
    api_ops: Counter[str] = field(default_factory=Counter)
    #: faults and their undos, by their names in the catalogue (harness/faults.py)
    faults: Counter[str] = field(default_factory=Counter)
    observations: int = 0
    transitions: int = 0
    convergence_checks: int = 0
    history_ops: int = 0
    task_intervals: int = 0
    lost_windows: int = 0
    #: lost windows opened by the cell's machine events: machines declared down between reads
    declared_downs: int = 0
    #: (user, band) pairs whose admitted jobs were judged against a quota the cell showed
    quota_judged: int = 0
    #: running tasks of jobs in alloc sets, each held to its alloc once per observed state
    alloc_judged: int = 0

    def injected(self, step: str) -> None:
        """Count one fault or undo; its name must be the catalogue's."""
        if step not in STEPS:
            raise ValueError(f"{step!r} is neither a fault nor an undo in harness/faults.py")
        self.faults[step] += 1

    def action_total(self, name: str) -> int:
        """How often the action was exercised: an API operation applied to the model is also
        seen in the cell, so the two counts overlap and the larger is the honest total."""
        return max(self.actions_observed[name], self.actions_model[name])

    def merge(self, other: Coverage) -> None:
        for name in ("actions_observed", "actions_model", "invariant_checks", "invariant_failures", "api_ops", "faults"):
            getattr(self, name).update(getattr(other, name))
        for name in ("observations", "transitions", "convergence_checks", "history_ops", "task_intervals", "quota_judged",
                     "alloc_judged", "lost_windows", "declared_downs"):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @staticmethod
    def action_names() -> list[str]:
        return list(ACTIONS)

    @staticmethod
    def invariant_names() -> list[str]:
        return [i.name for i in INVARIANTS]
