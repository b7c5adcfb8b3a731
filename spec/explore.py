"""Explicit-state model checker for the spec: breadth-first search or a seeded random walk.

`python -m spec.explore --machines 2 --tasks 3 --priorities 2` explores every state reachable
in a bounded scope (a catalog of machines, jobs and an alloc the environment may use), checks
every invariant after every step, and on a violation prints the shortest trace to it.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from .actions import ACTIONS, EvictReason, Step, apply
from .fmap import FMap
from .invariants import INVARIANTS, Invariant, check_state, check_step
from .model import (
    Alloc,
    Band,
    CellState,
    Constraint,
    ConstraintOp,
    Job,
    Machine,
    QuotaKey,
    Resources,
    RestartPolicy,
    TaskState,
)
from .search import breadth_first

#: Priorities the scope draws from, in order: one batch level, then prod levels, then best effort.
PRIORITY_LEVELS = (100, 200, 250, 0, 300)
POLICIES = (RestartPolicy.ON_FAILURE, RestartPolicy.ALWAYS, RestartPolicy.NEVER)
SMALL = Resources.of(cpu=1000)
LARGE = Resources.of(cpu=2000)


@dataclass(frozen=True)
class Scope:
    """The bounded world the explorer searches: what the environment may submit and change."""

    machines: int = 2
    tasks: int = 3
    priorities: int = 2
    max_incarnation: int = 1
    allocs: bool = False
    churn: bool = False  # machines may also be removed and added back
    prod_quota: int = 2000  # milli-CPU of production-band quota each user gets
    reclaim: bool = False  # running tasks' reservations may drop to half their request and back
    drains: bool = False  # machines may be drained (their tasks moved off within budgets) and uncordoned

    def machine_catalog(self) -> list[Machine]:
        return [
            Machine(
                name=f"m{i}",
                capacity=Resources.of(cpu=2000),
                attrs=(("rack", f"r{i % 2}"),),
                failure_domain=f"r{i % 2}",
            )
            for i in range(self.machines)
        ]

    def alloc_catalog(self) -> list[Alloc]:
        if not self.allocs or self.machines == 0:
            return []
        # One alloc set, "a0", with an alloc on each of the first two machines: a job in it
        # runs task 0 on m0 and task 1 on m1 (the index rule).
        return [
            Alloc("a0", i, f"m{i}", Resources.of(cpu=1000), priority=200, user="alice")
            for i in range(min(2, self.machines))
        ]

    def job_catalog(self) -> list[Job]:
        """One job per priority level, the task slots dealt out among them round-robin.

        The second job is constrained to rack r0; with allocs on, the third runs in the alloc set
        (or the first, when there are fewer jobs).
        """
        levels = PRIORITY_LEVELS[: max(1, self.priorities)]
        n_jobs = max(1, min(len(levels), self.tasks))
        counts = [self.tasks // n_jobs + (1 if i < self.tasks % n_jobs else 0) for i in range(n_jobs)]
        jobs = []
        for i in range(n_jobs):
            constraints: tuple[Constraint, ...] = ()
            if i == 1:
                constraints = (Constraint("rack", ConstraintOp.EQ, ("r0",)),)
            alloc = "a0" if self.allocs and i == min(2, n_jobs - 1) else None
            jobs.append(
                Job(
                    user="alice" if i % 2 == 0 else "bob",
                    name=f"j{i}",
                    priority=levels[i],
                    task_count=counts[i],
                    request=SMALL,
                    constraints=constraints,
                    restart_policy=POLICIES[i % len(POLICIES)],
                    alloc=alloc,
                )
            )
        return jobs


def initial_state(scope: Scope) -> CellState:
    """All catalog machines up, no jobs; every user has the scope's production quota."""
    quotas = FMap({QuotaKey("*", Band.PRODUCTION): Resources.of(cpu=scope.prod_quota)})
    machines = FMap({m.name: m for m in scope.machine_catalog()})
    return CellState(machines=machines, quotas=quotas)


def enabled_steps(scope: Scope, s: CellState) -> Iterator[Step]:
    """Every step the environment or the cell may take next within the scope.

    Guards are the actions' own; this only proposes arguments, and bounds what would make
    the space infinite (incarnations, total tasks).
    """
    def under_bound(job_key: str, index: int) -> bool:
        latest = s.latest(job_key, index)
        return latest is None or latest.id.incarnation < scope.max_incarnation

    for n, job in enumerate(scope.job_catalog()):
        if job.key not in s.jobs:
            if all(under_bound(job.key, i) for i in range(job.task_count)):
                yield Step("submit", (job,))
        else:
            cur = s.jobs[job.key]
            yield Step("kill_job", (job.key,))
            yield Step("update", (job.key, None, LARGE if cur.request == SMALL else SMALL))
            if n == 0:  # any other field, on the first job (each job doubles the space): a
                # new template (command, image... as a digest) that a rolling update rolls out
                yield Step("update", (job.key, None, None, replace(cur, template="v1" if cur.template == "" else "")))
            # resize within [1, the catalog's count]: a shrink kills, a grow adds PENDING
            if cur.task_count > 1:
                yield Step("update", (job.key, cur.task_count - 1, None))
            if cur.task_count < job.task_count and under_bound(job.key, cur.task_count):
                yield Step("update", (job.key, cur.task_count + 1, None))
    machines = sorted(s.machines.values(), key=lambda m: m.name)
    pending = [t for t in s.tasks.values() if t.state is TaskState.PENDING]
    for t in sorted(s.tasks.values(), key=lambda t: str(t.id)):
        if t.state is TaskState.PENDING:
            for m in machines:
                yield Step("schedule", (t.id, m.name))
            yield Step("kill", (t.id,))
        elif t.state is TaskState.RUNNING:
            for name in ("finish", "fail", "lost", "kill"):
                yield Step(name, (t.id,))
            if t.id.incarnation < scope.max_incarnation:
                yield Step("roll", (t.id,))
            if scope.reclaim:
                half = Resources.of({k: v // 2 for k, v in t.request.items})
                yield Step("reserve", (t.id, t.request if t.reservation is not None else half))
            yield Step("evict", (t.id, EvictReason.MAINTENANCE, None))
            if scope.drains:
                yield Step("drain_move", (t.id,))
            for p in pending:
                yield Step("evict", (t.id, EvictReason.PREEMPTION, p.id))
        elif t.id.incarnation < scope.max_incarnation:
            yield Step("restart", (t.id,))
    catalog = {m.name: m for m in scope.machine_catalog()}
    for name, m in catalog.items():
        if name in s.machines:
            yield Step("machine_down" if s.machines[name].up else "machine_up", (name,))
            if scope.drains:
                yield Step("uncordon" if not s.machines[name].schedulable else "drain", (name,))
            if scope.churn:
                yield Step("machine_remove", (name,))
        else:
            yield Step("machine_add", (m,))
    for a in scope.alloc_catalog():
        yield Step("alloc_delete" if a.name in s.allocs else "alloc_create", (a.name,) if a.name in s.allocs else (a,))


def canonical(s: CellState) -> CellState:
    """The state with job versions zeroed: no guard reads a version, so states that differ
    only there behave alike, and without this every update would make the space infinite."""
    if all(j.version == 0 for j in s.jobs.values()):
        return s
    return s.with_(jobs=FMap({k: replace(j, version=0) for k, j in s.jobs.items()}))


@dataclass
class Violation:
    invariants: list[str]
    messages: list[str]
    trace: list[Step]


@dataclass
class Result:
    states: int = 0
    transitions: int = 0
    seconds: float = 0.0
    depth: int = 0
    complete: bool = True  # False when stopped by --depth or --max-states
    violation: Violation | None = None
    actions_fired: Counter[str] = field(default_factory=Counter)
    invariant_checks: Counter[str] = field(default_factory=Counter)

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else 0.0


def _check(
    before: CellState | None,
    step: Step | None,
    after: CellState,
    invariants: tuple[Invariant, ...],
    counts: Counter[str],
) -> list[tuple[str, str]]:
    bad = check_state(after, invariants)
    for inv in invariants:
        if inv.state_check is not None or (inv.step_check is not None and step is not None):
            counts[inv.name] += 1
    if before is not None and step is not None:
        bad += check_step(before, step, after, invariants)
    return bad


def explore(
    scope: Scope,
    depth: int | None = None,
    max_states: int | None = None,
    actions: dict[str, Callable[..., Any]] | None = None,
    invariants: tuple[Invariant, ...] = INVARIANTS,
) -> Result:
    """Breadth-first search of every reachable state; stops at the first violation."""
    table = ACTIONS if actions is None else actions
    res = Result()
    t0 = time.perf_counter()
    init = initial_state(scope)
    bad = _check(None, None, init, invariants, res.invariant_checks)
    if bad:
        res.violation = Violation([n for n, _ in bad], [m for _, m in bad], [])
        res.states, res.seconds = 1, time.perf_counter() - t0
        return res

    def successors(s: CellState) -> Iterator[tuple[Step, CellState]]:
        for step in enabled_steps(scope, s):
            nxt = apply(s, step, table)
            if nxt is not None:
                yield step, nxt

    def check(s: CellState, step: Step, nxt: CellState, _new: bool) -> list[tuple[str, str]]:
        return _check(s, step, nxt, invariants, res.invariant_checks)

    found = breadth_first(init, successors, check, canonical, depth=depth, max_states=max_states)
    res.transitions, res.depth, res.complete = found.transitions, found.depth, found.complete
    res.actions_fired = found.actions_fired
    if found.rejected is not None:
        r = found.rejected
        trace = [step for _, step in found.path_to(r.before)] + [r.step]
        res.violation = Violation([n for n, _ in r.broken], [m for _, m in r.broken], trace)
    res.states = len(found.parent)
    res.seconds = time.perf_counter() - t0
    return res


def walk(
    scope: Scope,
    steps: int,
    seed: int,
    reset_every: int = 200,
    actions: dict[str, Callable[..., Any]] | None = None,
    invariants: tuple[Invariant, ...] = INVARIANTS,
) -> Result:
    """A seeded random walk: from the initial state, take a random enabled step, check, repeat.

    Starts over every `reset_every` steps (or when no step is enabled) so that walks cover
    many short histories; a violation reports the walk since its last start.
    """
    table = ACTIONS if actions is None else actions
    rng = random.Random(seed)
    res = Result(complete=False)
    seen: set[int] = set()
    t0 = time.perf_counter()
    s = initial_state(scope)
    path: list[Step] = []
    for _ in range(steps):
        if len(path) >= reset_every:
            s, path = initial_state(scope), []
        options = list(enabled_steps(scope, s))
        rng.shuffle(options)
        for step in options:
            nxt = apply(s, step, table)
            if nxt is None:
                continue
            res.transitions += 1
            res.actions_fired[step.action] += 1
            path.append(step)
            bad = _check(s, step, nxt, invariants, res.invariant_checks)
            if bad:
                res.violation = Violation([n for n, _ in bad], [m for _, m in bad], list(path))
                res.states = len(seen)
                res.seconds = time.perf_counter() - t0
                return res
            s = canonical(nxt)
            seen.add(hash(s))
            break
        else:
            s, path = initial_state(scope), []
        res.depth = max(res.depth, len(path))
    res.states = len(seen)
    res.seconds = time.perf_counter() - t0
    return res


def report(res: Result, scope: Scope, mode: str, quiet: bool = False) -> str:
    lines = [
        f"scope: machines={scope.machines} tasks={scope.tasks} priorities={scope.priorities} "
        f"max_incarnation={scope.max_incarnation} allocs={scope.allocs} churn={scope.churn} "
        f"reclaim={scope.reclaim} "
        f"mode={mode}",
        f"distinct states: {res.states}",
        f"transitions: {res.transitions}",
        f"max depth: {res.depth}{'' if res.complete else ' (bounded: not exhaustive)'}",
        f"time: {res.seconds:.2f} s, {res.states_per_second:,.0f} states/s, "
        f"{(res.transitions / res.seconds if res.seconds else 0):,.0f} transitions/s",
    ]
    if not quiet:
        lines.append("actions fired: " + ", ".join(f"{k}={v}" for k, v in sorted(res.actions_fired.items())))
        lines.append("invariant checks: " + ", ".join(f"{k}={v}" for k, v in sorted(res.invariant_checks.items())))
    if res.violation is None:
        lines.append("violations: 0")
    else:
        v = res.violation
        lines.append(f"VIOLATION of {', '.join(sorted(set(v.invariants)))}")
        lines += [f"  {m}" for m in v.messages]
        lines.append(f"trace ({len(v.trace)} steps):")
        lines += [f"  {i + 1}. {step}" for i, step in enumerate(v.trace)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spec.explore", description=__doc__)
    p.add_argument("--machines", type=int, default=2)
    p.add_argument("--tasks", type=int, default=3)
    p.add_argument("--priorities", type=int, default=2)
    p.add_argument("--max-incarnation", type=int, default=1)
    p.add_argument("--allocs", action="store_true", help="add an alloc set (an alloc on m0 and m1) and a job that runs in it")
    p.add_argument("--churn", action="store_true", help="machines may be removed and added")
    p.add_argument("--reclaim", action="store_true", help="reservations may drop below requests")
    p.add_argument("--drains", action="store_true", help="machines may be drained and uncordoned")
    p.add_argument("--depth", type=int, default=None, help="stop expanding past this depth")
    p.add_argument("--max-states", type=int, default=None)
    p.add_argument("--walk", action="store_true", help="seeded random walk instead of BFS")
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    if not 1 <= a.priorities <= len(PRIORITY_LEVELS):
        p.error(f"--priorities must be between 1 and {len(PRIORITY_LEVELS)}")
    scope = Scope(a.machines, a.tasks, a.priorities, a.max_incarnation, a.allocs, a.churn,
                  reclaim=a.reclaim, drains=a.drains)
    if a.walk:
        res = walk(scope, a.steps, a.seed)
        mode = f"walk steps={a.steps} seed={a.seed}"
    else:
        res = explore(scope, depth=a.depth, max_states=a.max_states)
        mode = "bfs" + (f" depth<={a.depth}" if a.depth is not None else "")
    print(report(res, scope, mode, a.quiet))
    return 1 if res.violation is not None else 0


if __name__ == "__main__":
    sys.exit(main())
