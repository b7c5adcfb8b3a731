"""The stateful test: Hypothesis rules drive a live cell (API operations and faults) beside the spec as its model.

`CellMachine` is composed of the user's rules (harness/user_rules.py), the alloc set rules
(harness/alloc_rules.py), the fault rules
(harness/fault_rules.py), the drain rules (harness/drain_rules.py) and the judging after every step (harness/judge.py), over the state
an example keeps (harness/context.py). Hypothesis collects the rules of every base and orders
them by name, so where a rule lives does not change the programs a seed draws.
"""

from __future__ import annotations

from harness.alloc_rules import AllocRules
from harness.drain_rules import DrainRules
from harness.fault_rules import FaultRules
from harness.judge import Judging
from harness.user_rules import UserRules


class CellMachine(AllocRules, UserRules, FaultRules, DrainRules, Judging):
    def teardown(self) -> None:
        """Leave the cell as the next example expects it: machines back, this example's jobs and alloc sets gone
        (the sets first: a machine holding an alloc cannot be removed)."""
        self.clear_alloc_sets()
        self.undo_drains()
        self.undo_faults()
        self.clear_jobs()
