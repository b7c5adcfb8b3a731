"""Breadth-first search over a state graph, shared by the cell's and the sync protocol's model checkers.

A checker gives the initial state, its successors (each step with the state it leads to),
a canonical form (one representative per symmetry class, or the state itself) and a check of
each transition; the search stores one representative per state, stops at the first
transition the check rejects, and keeps each state's parent so a shortest path can be read
back.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar


class Named(Protocol):
    @property
    def action(self) -> str: ...


S = TypeVar("S", bound=Hashable)
A = TypeVar("A", bound=Named)

#: What a check reports of one transition: (invariant name, message) for each one broken.
Broken = list[tuple[str, str]]


@dataclass
class Rejected(Generic[S, A]):
    """The first transition the check rejected: from `before` by `step` to `after`."""

    before: S
    step: A
    after: S
    broken: Broken


@dataclass
class Search(Generic[S, A]):
    parent: dict[S, tuple[S, A] | None]
    transitions: int = 0
    depth: int = 0
    complete: bool = True  # False when stopped by the depth or state bound
    actions_fired: Counter[str] = field(default_factory=Counter)
    rejected: Rejected[S, A] | None = None

    def path_to(self, s: S) -> list[tuple[S, A]]:
        """The (state, step) pairs that lead from the initial state to `s`, in order."""
        links: list[tuple[S, A]] = []
        link = self.parent[s]
        while link is not None:
            links.append(link)
            link = self.parent[link[0]]
        return links[::-1]

    def states_to(self, s: S) -> list[S]:
        """The stored states from the initial state to `s`, both included."""
        return [before for before, _ in self.path_to(s)] + [s]


def breadth_first(
    init: S,
    successors: Callable[[S], Iterable[tuple[A, S]]],
    check: Callable[[S, A, S, bool], Broken],
    canonical: Callable[[S], S] = lambda s: s,
    depth: int | None = None,
    max_states: int | None = None,
) -> Search[S, A]:
    """Every state reachable from `init` (canonical), level by level.

    `check(before, step, after, new)` sees the successor as the step made it (not its
    representative); `new` says whether its representative was not seen before, so a check
    of the state alone can be made once per state.
    """
    found: Search[S, A] = Search(parent={init: None})
    frontier: deque[tuple[S, int]] = deque([(init, 0)])
    while frontier:
        s, d = frontier.popleft()
        found.depth = max(found.depth, d)
        if depth is not None and d >= depth:
            found.complete = False
            continue
        for step, nxt in successors(s):
            found.transitions += 1
            found.actions_fired[step.action] += 1
            key = canonical(nxt)
            new = key not in found.parent
            broken = check(s, step, nxt, new)
            if broken:
                found.rejected = Rejected(s, step, nxt, broken)
                return found
            if new:
                found.parent[key] = (s, step)
                frontier.append((key, d + 1))
                if max_states is not None and len(found.parent) >= max_states:
                    found.complete = False
                    return found
    return found
