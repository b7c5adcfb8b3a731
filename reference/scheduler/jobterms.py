"""The job's own score terms of a pass, added to a class's cached scores when one of the job's tasks is picked.

Tasks of different jobs with the same needs share a class, its sample and its scores; what
tells them apart is added here, over the whole sample at once: failure-domain and machine
spreading of the job's tasks, the locality of its package, and the machines its task index
crashed on lately (`pairing`). The pass tells this stage each placement (`placed`), so the
spreading and locality of later tasks see it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from .cellview import CellView
from .config import SchedulerConfig
from .pairing import penalties
from .sample import Sample
from .snapshot import PendingTask, Snapshot
from .terms import locality_bonus, skew_penalty, spread_penalty


class JobTerms:
    """Where each job's tasks are, which machines hold each package, and recent crashes, as the pass moves on."""

    __slots__ = ("cell", "cfg", "job_on", "running_of", "job_spread", "job_skew", "job_hosts", "pkg_has", "pkg_bonus",
                 "pkg_machines", "crashes")  # fmt: skip

    def __init__(
        self, snapshot: Snapshot, cell: CellView, cfg: SchedulerConfig,
        running_of: Callable[[str], Iterable[str]] | None = None,
    ) -> None:  # fmt: skip
        """`running_of(job)`: the machines of the job's running tasks, asked once for each job
        the pass places, instead of the snapshot's running tasks read for every job."""
        self.cell, self.cfg = cell, cfg
        self.running_of = running_of
        # Where each job's tasks are (running, then placed by this pass), and, once a task of
        # the job is scored beside them, the same counted per failure domain and per machine.
        self.job_on: dict[str, list[int]] = {}
        self.job_spread: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.job_hosts: dict[str, int] = {}  # machines holding a task of the job, for the jobs in job_spread
        # Per job in job_spread, skew_penalty's weight * tasks on each machine, kept as tasks land.
        self.job_skew: dict[str, np.ndarray] = {}
        if running_of is None:
            for t in snapshot.running:
                mi = cell.index.get(t.machine)
                if mi is not None:
                    self.job_on.setdefault(t.id.job, []).append(mi)
        self.pkg_has: dict[str, np.ndarray] = {}
        self.pkg_bonus: dict[str, np.ndarray] = {}  # locality_bonus of each machine, per package in pkg_has
        self.pkg_machines: dict[str, list[int]] | None = None
        # Recent crashes of a task index by machine row (pairing.py).
        self.crashes = {k: {cell.index[m]: n for m, n in c.items() if m in cell.index}
                        for k, c in snapshot.crashes.items()}  # fmt: skip

    def totals(self, s: Sample, task: PendingTask) -> np.ndarray:
        """The sample's cached class scores plus the job's own terms, one per slot."""
        size = s.size
        total = s.scores[:size]
        machines = s.machines[:size]
        cfg, job = self.cfg, task.id.job
        own = False  # whether `total` is an array of this call's own, to add to in place
        if cfg.spread_weight or cfg.skew_weight:
            placed = len(self.on(job))
            if placed:
                per_dom, per_machine = self._job_spread(job)
                if cfg.spread_weight:
                    total, own = total - spread_penalty(cfg.spread_weight, placed, per_dom[s.doms[:size]]), True
                if cfg.skew_weight:
                    # A sample of distinct machines (one walk) larger than the job's hosts holds
                    # a machine without the job's tasks: its least count is 0.
                    if not s.preempting and self.job_hosts[job] < size:  # least 0: weight * here
                        skew = self.job_skew[job][machines]
                    else:
                        skew = skew_penalty(cfg.skew_weight, per_machine[machines])
                    if own:
                        total -= skew  # the same floats as `total - skew`, without a new array
                    else:
                        total, own = total - skew, True
        if cfg.locality_weight and task.package:
            bonus = self.pkg_bonus.get(task.package)
            if bonus is None:
                bonus = self.pkg_bonus[task.package] = locality_bonus(cfg.locality_weight, self._package_on(task.package))
            if own:
                total += bonus[machines]
            else:
                total, own = total + bonus[machines], True
        crashes = self.crashes.get((job, task.id.index))
        if crashes:
            total = total - penalties(crashes, machines)
        return total

    def on(self, job: str) -> list[int]:
        """The machine rows of the job's tasks: running, then placed by this pass."""
        rows = self.job_on.get(job)
        if rows is None:
            index = self.cell.index
            rows = self.job_on[job] = (
                [mi for m in self.running_of(job) if (mi := index.get(m)) is not None] if self.running_of else []
            )
        return rows

    def _job_spread(self, job: str) -> tuple[np.ndarray, np.ndarray]:
        """The job's tasks counted per failure domain and per machine (a machine is the
        smallest failure domain: a job's tasks spread over machines within a rack too).
        Built only for a job that has a task to place beside others, so a cell of many
        one-task jobs keeps no per-machine array."""
        spread = self.job_spread.get(job)
        if spread is None:
            cell = self.cell
            doms = np.zeros(cell.domains, dtype=np.float64)  # counts, exact: no cast where they are weighed
            machines = np.zeros(len(cell.names), dtype=np.int32)
            for mi in self.on(job):
                doms[cell.dom[mi]] += 1
                machines[mi] += 1
            spread = self.job_spread[job] = (doms, machines)
            self.job_hosts[job] = int(np.count_nonzero(machines))
            self.job_skew[job] = skew_penalty(self.cfg.skew_weight, machines, 0)
        return spread

    def _package_on(self, package: str) -> np.ndarray:
        """Which machines hold the package."""
        has = self.pkg_has.get(package)
        if has is None:
            if self.pkg_machines is None:  # one inverted index instead of a scan per package
                self.pkg_machines = {}
                for mi, pkgs in enumerate(self.cell.pkgs):
                    for p in pkgs:
                        self.pkg_machines.setdefault(p, []).append(mi)
            has = np.zeros(len(self.cell.names), dtype=bool)
            has[self.pkg_machines.get(package, [])] = True
            self.pkg_has[package] = has
        return has

    def placed(self, task: PendingTask, mi: int) -> None:
        """The task now runs on machine `mi`: the job's spreading counts it, and the machine holds its package."""
        cfg, cell = self.cfg, self.cell
        if cfg.spread_weight or cfg.skew_weight:
            job = task.job
            self.on(job).append(mi)
            spread = self.job_spread.get(job)
            if spread is not None:
                per_dom, per_machine = spread
                per_dom[cell.dom[mi]] += 1
                here = int(per_machine[mi]) + 1
                per_machine[mi] = here
                if here == 1:
                    self.job_hosts[job] += 1
                self.job_skew[job][mi] = cfg.skew_weight * here
        if task.package and task.package not in cell.pkgs[mi]:
            cell.pkgs[mi].add(task.package)
            if self.pkg_machines is not None:
                self.pkg_machines.setdefault(task.package, []).append(mi)
            if task.package in self.pkg_has:
                self.pkg_has[task.package][mi] = True
            if task.package in self.pkg_bonus:
                self.pkg_bonus[task.package][mi] = self.cfg.locality_weight * True
