"""What the stateful test's examples share: the run's context, the jobs they submit, and the state one example keeps beside the cell.

The runner sets `CTX` before Hypothesis builds machines. `ExampleState` is the base the rule
modules build on (harness/user_rules.py, harness/fault_rules.py, harness/judge.py): the spec
model beside the cell, the jobs and machines the example touched, and the last observation.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis.stateful import RuleBasedStateMachine

from harness.api import Api
from harness.coverage import Coverage
from harness.history import History, Outcome
from harness.localcell import LocalCell
from harness.observe import Observation, Observer
from spec.model import CellState, Job, RestartPolicy

#: The machine no fault touches.
SHELTERED = "machine0"
RESIDENTS = 2
RESIDENT_AGE_S = 60.0
RAM = 16 * 1024 * 1024
#: What tasks run: cheap programs, so many fit on a two-core host. The borglet restarts a
#: failing task in place unless its policy is "never", so the fragile kind is the one
#: whose failures reach the master.
#: The image jobs name on a docker-runtime cell: the base image holds `sleep` and `sh`, all KINDS need.
DOCKER_IMAGE = "minborg/base"
KINDS: dict[str, tuple[list[str], RestartPolicy]] = {
    "service": (["sleep", "3600"], RestartPolicy.ALWAYS),
    "batch": (["sleep", "2"], RestartPolicy.ON_FAILURE),
    "fragile": (["sh", "-c", "sleep 2; exit 3"], RestartPolicy.NEVER),
    "quick": (["sh", "-c", "test $TASK_INDEX = 0"], RestartPolicy.NEVER),  # index 0 finishes, the others fail, at once
}


@dataclass
class Context:
    """What every example shares: set by the runner before Hypothesis builds machines."""

    api: Api
    cell: LocalCell | None
    coverage: Coverage = field(default_factory=Coverage)
    history: History = field(default_factory=History)
    samples: list[dict[str, Any]] = field(default_factory=list)
    lost_windows: list[tuple[str, float, float]] = field(default_factory=list)
    examples: itertools.count = field(default_factory=itertools.count)
    failures: list[str] = field(default_factory=list)
    residents: dict[str, float] = field(default_factory=dict)  # job key -> when submitted
    resident_count: itertools.count = field(default_factory=itertools.count)
    #: The test's clock: on the scale of the observer's (monotonic) times, which lost windows
    #: are compared with.
    clock: Callable[[], float] = time.monotonic
    #: The image every job names (a docker-runtime cell runs them as containers); None: none.
    image: str | None = None
    #: Whether the admin's drain rules run (harness/drain_rules.py; `--no-drains` leaves them out).
    drains: bool = True


CTX: Context | None = None


def ctx() -> Context:
    assert CTX is not None, "the runner sets harness.context.CTX before running the test"
    return CTX


class ConformanceViolation(AssertionError):
    """The cell did something the spec forbids, or failed to converge where the spec says it must.

    Each is also kept in the context: a replay of a live cell may not fail the same way (or
    may draw differently), and the first finding must reach the report even then."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        if CTX is not None:
            CTX.failures.append(message)


class ExampleState(RuleBasedStateMachine):
    """One example's view of the cell: the spec model beside it, the jobs it submitted, the
    faults it holds and the last observation. The rule modules read and write these."""

    def __init__(self) -> None:
        super().__init__()
        c = ctx()
        self.c = c
        self.api = c.api
        self.clock = c.clock
        self.example = next(c.examples)
        self.model = CellState()
        self.keys: set[str] = set()
        self.kinds: dict[str, str] = {}
        self.submitted: dict[str, Job] = {}  # as last submitted or updated
        self.files: dict[str, dict[str, Any]] = {}  # each job's file as last sent (PUT changes any field)
        self.counter = itertools.count()
        # Jobs the observer reads tasks of: every job this example touched, until a killed one
        # is seen gone with all its tasks DEAD (it can change no more; the jobs list would show
        # it back). self.keys keeps them all, for convergence and the history's reads.
        self.watch: set[str] = set()
        self.observer = Observer(self.api, self.watch)
        self.prev: Observation | None = None
        self.down_since: dict[str, float] = {}
        self.events_since: int | None = None  # the revision the machine events were read to
        self.events_read_t = 0.0  # and when
        self.added: list[str] = []
        self.phantoms: list[str] = []
        self.phantom_since: dict[str, float] = {}
        self.revived: set[str] = set()  # phantoms a borglet now answers for
        self.phantom_address: dict[str, str] = {}
        self.squeezer: str | None = None
        self.leader_kills = 0
        # Alloc sets this example asked for and has not deleted, whatever the cell answered:
        # the alloc rules' preconditions read this, so a replay draws the same rules even
        # where the cell answers otherwise (a refusal, an unknown outcome).
        self.alloc_keys: list[str] = []
        self.releases = 0  # new versions `each_step` has made (harness/user_rules.py)
        self.released_at = 0.0  # and when it made the last
        self.steps = 0  # steps taken (each_step counts them)
        self._rotate_residents()

    def _rotate_residents(self) -> None:
        """Keep RESIDENTS long-running service jobs in a cell this suite started, beside the
        examples' own: the master estimates a task's reservation only after it has run for a
        while (ten seconds and more), longer than most tasks of an example live, and lowers it
        step by step for about a minute after. Each is replaced once older than RESIDENT_AGE_S.
        They are no example's jobs: observed and judged like every job, but not killed at teardown."""
        if self.c.cell is None:
            return
        now = self.clock()
        for key, since in sorted(self.c.residents.items()):
            if now - since > RESIDENT_AGE_S and self.api.kill(key).outcome is not Outcome.FAILED:
                del self.c.residents[key]
        while len(self.c.residents) < RESIDENTS:
            name = f"resident{next(self.c.resident_count)}"
            command, policy = KINDS["service"]
            doc = {"name": name, "user": "carol", "priority": 100, "task_count": 4, "request": {"cpu": "500m", "ram": RAM},
                   "command": command, "restart_policy": policy.value, "appclass": "batch"}  # fmt: skip
            if self.c.image is not None:
                doc["image"] = self.c.image
            if self.api.submit(doc).outcome is Outcome.FAILED:
                return
            self.c.residents[f"carol/{name}"] = now

    def each_step(self) -> None:
        """What goes on beside the rules, once a step before the poll that judges it (the
        admin's rolling maintenance, the user's releases): each rule module that adds to it
        calls super() first, so every one of them runs."""

    def _live(self) -> list[str]:
        """The example's jobs the spec model holds, in order."""
        return sorted(self.model.jobs)
