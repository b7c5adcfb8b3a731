"""The scheduler process's loop: one pass plans what is pending in a `View` of the cell and proposes it to the `Leader`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from reference.scheduler import Plan, SchedulerConfig
from reference.scheduler.carried import CarriedCell
from reference.scheduler.pairing import IndexKey
from reference.scheduler.setaside import SetAside
from reference.scheduler.wire import crashes_from_json, plan_to_json
from reference.store.client import StoreError
from spec.model import CellState, TaskId

log = logging.getLogger(__name__)

HEARTBEAT_S = 0.5  # an idle scheduler tells the leader it is there this often


@dataclass(frozen=True)
class View:
    """What a pass reads of the cell."""

    revision: int
    state: CellState
    leader: tuple[str, str] | None  # (name, url) of the leader; None while the cell has none
    capacity_epoch: int = -1  # moves whenever capacity may have been freed (-1: unknown)
    work: Collection[TaskId] | None = None  # tasks a pass may have to look at; None: all
    running: Collection[TaskId] | None = None  # RUNNING tasks; None: read them from `state`
    images: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # machine -> images it holds


class CellSource(Protocol):
    """The cell as the scheduler process reads it."""

    def view(self) -> View: ...

    def wait_revision(self, revision: int, timeout: float) -> bool: ...

    def on_change(self, fn: Callable[[int], None]) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Lease(Protocol):
    """The cell's scheduler lease (`store.election.Election` on `Keys.scheduler`): one process
    schedules at a time."""

    def start(self) -> None: ...

    def resign(self) -> None: ...


class Leader(Protocol):
    """Where plans go."""

    def propose(self, leader: tuple[str, str], doc: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """POST the plan document to the leader; (status, answer), or None when not delivered."""
        ...

    def close(self) -> None: ...


class SchedulerProcess:
    def __init__(
        self, *, name: str, cell: CellSource, leader: Leader,
        lease: Callable[[Callable[[int], None], Callable[[str], None]], Lease], config: SchedulerConfig | None = None,
    ) -> None:  # fmt: skip
        """`lease(on_elected, on_deposed)` makes the scheduler lease this process campaigns for."""
        self.name = name
        self.cell = cell
        self.leader = leader
        self.config = config or SchedulerConfig()
        self.election = lease(self._elected, self._deposed)
        self._active = threading.Event()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)
        self._beat = threading.Thread(target=self._beat_while_planning, name="scheduler-beat", daemon=True)
        self._last_sent = 0.0  # when the last proposal (a plan or a heartbeat) was answered
        self._planning: View | None = None  # the view a pass plans on, while it does
        self.unschedulable = SetAside()
        self.carried = CarriedCell()  # the cell view each pass starts from, carried from the last
        self.passes = 0
        self.proposed = {"plans": 0, "placements": 0, "placed": 0, "conflicts": 0, "refused": 0}
        # The leader's memory of crashing task::machine pairings (scheduler/pairing.py), as its
        # last answer carried it; None until this process has heard from a leader.
        self.crashes: dict[IndexKey, dict[str, int]] | None = None

    def start(self) -> None:
        self.cell.start()
        self.cell.on_change(lambda _rev: self._wake.set())
        self.election.start()
        self._thread.start()
        self._beat.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        try:
            self.election.resign()
        except StoreError as err:
            log.info("resign failed: %s", err)
        self._thread.join(5)
        self._beat.join(5)
        self.cell.stop()
        self.leader.close()

    def _elected(self, token: int) -> None:
        log.info("%s schedules the cell (lease %d)", self.name, token)
        self._active.set()
        self._wake.set()

    def _deposed(self, reason: str) -> None:
        log.warning("%s no longer schedules: %s", self.name, reason)
        self._active.clear()

    # --- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(HEARTBEAT_S)
            self._wake.clear()
            if not self._active.is_set():
                continue
            try:
                self.step(heartbeat=time.monotonic() - self._last_sent >= HEARTBEAT_S)
            except Exception:  # one bad pass must not end scheduling
                log.exception("scheduling pass failed")

    def _beat_while_planning(self) -> None:
        """While a pass plans (a large one takes seconds), tell the leader this process is
        there every HEARTBEAT_S, as the idle loop does: a leader that heard nothing for its
        grace would plan the same tasks itself, inside its one writer."""
        while not self._stop.wait(HEARTBEAT_S):
            view = self._planning
            if view is None or not self._active.is_set() or time.monotonic() - self._last_sent < HEARTBEAT_S:
                continue
            try:
                self._propose(view, None)
            except Exception:  # a failed heartbeat is the next one's to make up
                log.exception("heartbeat during a pass failed")

    def step(self, heartbeat: bool = False) -> bool:
        """One pass: plan what is pending and propose it; with `heartbeat`, propose even an
        empty plan. Returns whether a proposal went out."""
        view = self.cell.view()
        if view.leader is None:
            return False
        # The pending tasks to plan, chosen as the leader's own pass chooses them.
        to_plan = self.unschedulable.next(view.state, view.work, view.capacity_epoch)
        # What changed since the last view read, planned on or not, for the pass's cell view.
        self.carried.follow(view.state)
        if not to_plan and not heartbeat:
            return False
        if self.unschedulable.left:
            self._wake.set()  # the rest of the queue in the next pass, once this plan is committed
        if to_plan and self.crashes is None and self._propose(view, None) is None:
            return False  # the leader's crashing pairings come first: its answer to an empty plan holds them
        plan = None
        if to_plan:
            self._planning = view
            try:
                plan = self.carried.plan(
                    view.state, self.config, self.passes, to_plan, images=view.images, crashes=self.crashes
                )
            finally:
                self._planning = None
            self.passes += 1
            self.proposed["placements"] += len(plan.placements)
        answer = self._propose(view, plan)
        if answer is None:
            return False
        if plan is not None:
            # Set aside only the tasks the pass found no place for, with reasons; a task it did
            # not get to is planned again at once.
            self.unschedulable.found((u.task for u in plan.unschedulable), view.capacity_epoch)
            # Plan again only on the state the leader's commit made.
            self.cell.wait_revision(int(answer.get("revision") or 0), 5.0)
        return True

    def _propose(self, view: View, plan: Plan | None) -> dict[str, Any] | None:
        """Propose `plan` (None: an empty one, a heartbeat) computed on `view` to its leader;
        the leader's answer, or None when it was not delivered or refused. Each answer carries
        the crashing pairings the leader remembers, which the next pass plans with."""
        assert view.leader is not None
        doc = {"scheduler": self.name, "revision": view.revision, "plan": plan_to_json(plan) if plan is not None else {}}
        answered = self.leader.propose(view.leader, doc)
        if answered is None:
            return None
        status, answer = answered
        if status != 200:
            self.proposed["refused"] += 1
            log.info("the leader refused the plan: %d %s", status, str(answer)[:200])
            return None
        self._last_sent = time.monotonic()
        self.proposed["plans"] += 1
        self.proposed["placed"] += int(answer.get("placed") or 0)
        self.proposed["conflicts"] += int(answer.get("conflicts") or 0)
        try:
            self.crashes = crashes_from_json(answer.get("crashes"))
        except ValueError as err:
            log.warning("the leader's crashing pairings not read: %s", err)
        return answer
