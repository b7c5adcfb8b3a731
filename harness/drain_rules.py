"""The maintenance rules of the stateful test: an admin drains a machine (optionally with a deadline) and uncordons it, over the API.

Besides the rules, a rolling maintenance runs through every example: each step, before the
poll that judges it, the machine it drained the step before is uncordoned and the next one
in turn drained (`each_step`), beside what the rules drain. Hypothesis's swarm testing turns
each rule off for a whole example with some chance, and CI's short run has three examples:
counts the report must reach (100 drains, uncordons and moves) cannot hang on a rule being
drawn.

A drain is an operation, not a fault: the cell's own maintenance, which the spec's `drain`,
`drain_move` and `uncordon` describe. Its effects are judged from the observations like every
other move (harness/transitions.py): the machine's `schedulable` flag moving is a spec
`drain` or `uncordon`, each task leaving it a `drain_move` (or an `evict` once the deadline
passed), a task placed on a machine drained in both polls a violation, and the named
invariant disruptions_within_budget holds every observed state to each job's
max_unavailable. Only machines the cell started with are drained, never the sheltered one,
and at most MAX_DRAINED at once by the rules and as many by the maintenance, so the cell
always keeps schedulable machines; an example's drains are uncordoned at its end.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from harness.context import SHELTERED, ConformanceViolation, ExampleState
from harness.history import Outcome

#: Machines the rules hold drained at once, and the rolling maintenance as many beside them:
#: with the sheltered one never drained, three of the started cell's five machines stay
#: schedulable.
MAX_DRAINED = 1
#: A drain's deadline: none (its tasks leave only within their budgets), or seconds after
#: which the rest are evicted.
DEADLINES = (None, None, 2.0, 10.0)
#: The rolling maintenance rests one step in this many (the poll after a rest sees its last
#: drain's moves settle).
MAINTAIN_EVERY = 4


class DrainRules(ExampleState):
    """An admin's maintenance: drain a machine, uncordon it."""

    def __init__(self) -> None:
        super().__init__()
        # Machines this example drained and has not uncordoned -> whether the cell said so
        # (False: the answer was unknown, so a 409 on uncordon is legal).
        self.drained: dict[str, bool] = {}
        self.uncordoned_at: dict[str, float] = {}  # when this example last uncordoned each machine
        # The rolling maintenance's own (`each_step`), apart from the rules' so that their
        # preconditions, and so the programs a seed draws, are what they were without it.
        self.maintained: dict[str, bool] = {}
        self.maintenance_rounds = 0
        self.maintenance_turn = 0

    def _drainable(self) -> list[str]:
        """The started cell's own machines (never removed by a rule), but the sheltered one,
        each once a poll since its last uncordon saw it schedulable: a machine uncordoned and
        drained again between two polls (a failover leaves gaps) may have taken tasks meanwhile
        that no poll saw it take."""
        assert self.c.cell is not None
        obs = self.prev
        names = [f"machine{i}" for i in range(self.c.cell.machines) if f"machine{i}" != SHELTERED]
        return [
            n for n in names
            if n not in self.uncordoned_at or (
                obs is not None and obs.t > self.uncordoned_at[n] and n in obs.state.machines
                and obs.state.machines[n].schedulable
            )
        ]  # fmt: skip

    def each_step(self) -> None:
        """The rolling maintenance: a drain round each step but every MAINTAIN_EVERY-th, the
        machines and deadlines in turn."""
        self.maintenance_turn += 1
        super().each_step()
        if self.c.cell is not None and self.c.drains and self.maintenance_turn % MAINTAIN_EVERY:
            self.maintenance_rounds += 1
            n = self.maintenance_rounds
            self._drain_round(self.maintained, n, DEADLINES[n % len(DEADLINES)])

    @precondition(lambda self: self.c.cell is not None and self.c.drains)
    @rule(i=st.integers(0, 10), deadline=st.sampled_from(DEADLINES))
    def drain_machine(self, i: int, deadline: float | None) -> None:
        """Uncordon the machine drained before (if MAX_DRAINED are), then drain another (one
        uncordoned since the last poll waits until a poll sees it schedulable)."""
        self._drain_round(self.drained, i, deadline)

    def _drain_round(self, held: dict[str, bool], i: int, deadline: float | None) -> None:
        """One round for the machines `held` drained (the rules' or the maintenance's)."""
        back = sorted(held)
        for name in back[: len(back) - MAX_DRAINED + 1]:
            self._uncordon(name, held)
        if len(held) >= MAX_DRAINED:
            return  # an uncordon went unanswered: drain no more until it is done
        # never one drained already, nor the one just uncordoned
        names = [n for n in self._drainable() if n not in self.drained and n not in self.maintained]
        if not names:
            return
        name = names[i % len(names)]
        body = None if deadline is None else {"deadline_s": deadline}
        r = self.api.request("POST", f"/v1/machines/{name}/drain", body, write=True)
        self.c.coverage.api_ops["drain"] += 1
        if r.outcome is not Outcome.FAILED:
            held[name] = r.outcome is Outcome.OK
        elif r.status in (404, 409):
            raise ConformanceViolation(f"[api_guard] the cell refused to drain {name} with {r.status}, but the spec allows it")

    @precondition(lambda self: self.c.cell is not None and bool(self.drained))
    @rule()
    def uncordon_machine(self) -> None:
        """Make every machine this example drained schedulable again."""
        for name in sorted(self.drained):
            self._uncordon(name)

    def _uncordon(self, name: str, held: dict[str, bool] | None = None) -> None:
        held = self.drained if held is None else held
        confirmed = held.pop(name)
        self.uncordoned_at[name] = self.clock()
        r = self.api.request("POST", f"/v1/machines/{name}/uncordon", write=True)
        self.c.coverage.api_ops["uncordon"] += 1
        if r.outcome is Outcome.FAILED and r.status in (404, 409) and confirmed:
            raise ConformanceViolation(f"[api_guard] the cell refused to uncordon {name} with {r.status}, but it drained it")
        if r.outcome is Outcome.FAILED and r.status != 409:
            held[name] = False  # not answered: still drained, perhaps; tried again later

    def undo_drains(self) -> None:
        """Leave every machine schedulable for the next example."""
        for name in sorted({*self.drained, *self.maintained}):
            self.api.request("POST", f"/v1/machines/{name}/uncordon", write=True)
        self.drained, self.maintained = {}, {}
