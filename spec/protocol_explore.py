"""Breadth-first model checker for the sync protocol: `python -m spec.protocol_explore`.

Explores every state reachable within the bounds, checks every invariant after every step,
and on a violation prints the shortest trace to it, step by step with the state after each.
`--rules old` checks the rules the borglet had before (epoch-only fence, tombstones dropped
at any time); `--no-symmetry` turns the reduction over machines and indices off.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .invariants import Invariant
from .protocol_actions import Step, actions_for, prune
from .protocol_invariants import INVARIANTS, violations
from .protocol_model import RULES, Bounds, ProtocolState, Rules, describe, initial_state
from .protocol_symmetry import canonical
from .search import breadth_first

Transition = Callable[[ProtocolState, Step], "ProtocolState | None"]


def transitions(rules: Rules, bounds: Bounds, pruning: bool = True) -> Transition:
    """The step function: an action of the table, then (with pruning) the dead syncs dropped."""
    table = actions_for(rules, bounds)

    def step_to(s: ProtocolState, step: Step) -> ProtocolState | None:
        nxt = table[step.action](s, *step.args)
        return nxt if nxt is None or not pruning else prune(nxt, rules)

    return step_to


def enabled_steps(bounds: Bounds, s: ProtocolState) -> Iterator[Step]:
    """Every step worth trying from `s`: the actions' guards decide which are enabled."""
    for i in range(bounds.indices):
        yield Step("commit_kill", (i,))
        for m in range(bounds.machines):
            yield Step("commit_place", (i, m))
    for view in range(s.revision + 1):
        yield Step("elect", (view,))
    for leader in s.leaders:
        yield Step("catch_up", (leader.epoch,))
        for m in range(bounds.machines):
            yield Step("send_sync", (leader.epoch, m))
    for msg in sorted(set(s.network)):
        yield Step("deliver", (msg,))
        yield Step("duplicate", (msg,))
        yield Step("drop", (msg,))
    for m, b in enumerate(s.borglets):
        for x in b.queue:
            yield Step("start_next", (m, x))
        for x, _ in b.tasks:
            yield Step("process_exits", (m, x))
            yield Step("stop_finished", (m, x))
        yield Step("restart_borglet", (m,))
        for x, _ in b.tombstones:
            yield Step("drop_tombstone", (m, x))


@dataclass
class Violation:
    invariants: list[str]
    messages: list[str]
    trace: list[tuple[Step, ProtocolState]]  # each step with the state after it


@dataclass
class Result:
    states: int = 0
    transitions: int = 0
    depth: int = 0
    seconds: float = 0.0
    complete: bool = True
    violation: Violation | None = None
    actions_fired: Counter[str] = field(default_factory=Counter)


def explore(
    bounds: Bounds,
    rules: Rules,
    symmetry: bool = True,
    max_states: int | None = None,
    invariants: tuple[Invariant, ...] = INVARIANTS,
    pruning: bool = True,
) -> Result:
    """Breadth-first search of every reachable state; stops at the first violation, whose
    trace is then a shortest one."""
    table = transitions(rules, bounds, pruning)
    norm: Callable[[ProtocolState], ProtocolState] = canonical if symmetry else (lambda s: s)
    res = Result()
    t0 = time.perf_counter()
    init = norm(initial_state(bounds.machines, bounds.indices))

    def successors(s: ProtocolState) -> Iterator[tuple[Step, ProtocolState]]:
        for step in enabled_steps(bounds, s):
            nxt = table(s, step)
            if nxt is not None:
                yield step, nxt

    def check(s: ProtocolState, step: Step, nxt: ProtocolState, new: bool) -> list[tuple[str, str]]:
        # State invariants are checked once per state (they hold of a whole symmetry class
        # or of none); step invariants on every transition.
        return violations(s, step, nxt, invariants, states=new)

    found = breadth_first(init, successors, check, norm, max_states=max_states)
    res.transitions, res.depth, res.complete = found.transitions, found.depth, found.complete
    res.actions_fired = found.actions_fired
    if found.rejected is not None:
        r = found.rejected
        path = found.states_to(r.before)
        trace = replay(bounds, table, path, norm, r.step, r.after) if symmetry else _unreduced(bounds, table, path, r.step)
        # named as in the concrete trace, which may rename machines and indices
        before = trace[-2][1] if len(trace) > 1 else initial_state(bounds.machines, bounds.indices)
        bad = violations(before, trace[-1][0], trace[-1][1], invariants)
        res.violation = Violation(sorted({n for n, _ in bad}), [m for _, m in bad], trace)
    res.states = len(found.parent)
    res.seconds = time.perf_counter() - t0
    return res


def _steps_between(bounds: Bounds, table: Transition, s: ProtocolState, want: ProtocolState,
                   norm: Callable[[ProtocolState], ProtocolState]) -> tuple[Step, ProtocolState]:
    for step in enabled_steps(bounds, s):
        nxt = table(s, step)
        if nxt is not None and norm(nxt) == want:
            return step, nxt
    raise AssertionError("no step links two states of a stored path")


def _unreduced(bounds: Bounds, table: Transition, path: list[ProtocolState], last: Step) -> list[tuple[Step, ProtocolState]]:
    trace = [_steps_between(bounds, table, a, b, lambda s: s) for a, b in zip(path, path[1:], strict=False)]
    end = table(path[-1], last)
    return trace + [(last, end)]


def replay(bounds: Bounds, table: Transition, path: list[ProtocolState],
           norm: Callable[[ProtocolState], ProtocolState], last: Step, last_state: ProtocolState
           ) -> list[tuple[Step, ProtocolState]]:
    """A concrete trace from the initial state along a path of representatives.

    The stored states are each their class's least member, so consecutive ones may be named
    differently; from the concrete state reached so far, the step whose result has the next
    representative is found again, and the final step is renamed the same way.
    """
    concrete = initial_state(bounds.machines, bounds.indices)
    trace: list[tuple[Step, ProtocolState]] = []
    for want in path[1:]:
        step, concrete = _steps_between(bounds, table, concrete, want, norm)
        trace.append((step, concrete))
    target = norm(last_state)
    for step in enabled_steps(bounds, concrete):
        nxt = table(concrete, step)
        if nxt is not None and norm(nxt) == target and violations(concrete, step, nxt):
            return trace + [(step, nxt)]
    raise AssertionError("the violating step has no image in the concrete trace")


def report(res: Result, bounds: Bounds, rules: Rules, symmetry: bool, quiet: bool = False) -> str:
    lines = [
        f"protocol scope: {bounds} rules={rules.name} symmetry={'on' if symmetry else 'off'}",
        f"distinct states: {res.states}",
        f"transitions: {res.transitions}",
        f"max depth: {res.depth}{'' if res.complete else ' (stopped at --max-states: not exhaustive)'}",
        f"time: {res.seconds:.2f} s",
    ]
    if not quiet:
        lines.append("actions fired: " + ", ".join(f"{k}={v}" for k, v in sorted(res.actions_fired.items())))
    if res.violation is None:
        lines.append("violations: 0")
        return "\n".join(lines)
    v = res.violation
    lines.append(f"VIOLATION of {', '.join(v.invariants)}")
    lines += [f"  {m}" for m in v.messages]
    lines.append(f"trace ({len(v.trace)} steps):")
    for n, (step, after) in enumerate(v.trace, 1):
        lines.append(f"  {n}. {step}")
        if not quiet:
            lines.append(describe(after))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spec.protocol_explore", description=__doc__)
    d = Bounds()
    p.add_argument("--machines", type=int, default=d.machines)
    p.add_argument("--indices", type=int, default=d.indices)
    p.add_argument("--incarnations", type=int, default=d.incarnations)
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--syncs-per-epoch", type=int, default=d.syncs_per_epoch)
    p.add_argument("--in-flight", type=int, default=d.in_flight)
    p.add_argument("--deposed-send", action="store_true", help="a deposed leader keeps sending syncs")
    p.add_argument("--rules", choices=sorted(RULES), default="new")
    p.add_argument("--no-symmetry", action="store_true", help="explore without the symmetry reduction")
    p.add_argument("--no-pruning", action="store_true",
                   help="keep syncs their borglets will refuse forever in the network")
    p.add_argument("--max-states", type=int, default=None)
    p.add_argument("--expect-violation", action="store_true",
                   help="exit 0 only if a violation is found (for checking that the old rules fail)")
    p.add_argument("--quiet", action="store_true", help="no per-action counts, no state after each trace step")
    a = p.parse_args(argv)
    bounds = Bounds(a.machines, a.indices, a.incarnations, a.epochs, a.syncs_per_epoch, a.in_flight, a.deposed_send)
    rules = RULES[a.rules]
    res = explore(bounds, rules, symmetry=not a.no_symmetry, max_states=a.max_states, pruning=not a.no_pruning)
    print(report(res, bounds, rules, not a.no_symmetry, a.quiet))
    found = res.violation is not None
    return 0 if found == a.expect_violation else 1


if __name__ == "__main__":
    sys.exit(main())
