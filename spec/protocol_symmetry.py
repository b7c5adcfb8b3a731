"""Symmetry reduction for the protocol explorer: one representative per permutation class.

Machines are interchangeable (same borglet, no capacities in this model) and so are task
indices (same job, no order between them), and no action or invariant reads a machine's or an
index's number except to tell them apart. So permuting machine numbers and index numbers maps
reachable states to reachable states and violations to violations; the explorer keeps only the
least state of each class, which divides the space by up to machines! * indices!.
"""

from __future__ import annotations

from functools import cache
from itertools import permutations

from .protocol_model import (
    NOWHERE,
    Borglet,
    Cell,
    Ghost,
    Inc,
    ProtocolState,
    Slot,
    Sync,
)


@cache
def _perms(n: int) -> tuple[tuple[int, ...], ...]:
    return tuple(permutations(range(n)))


def _inc(x: Inc, pi: tuple[int, ...]) -> Inc:
    return (pi[x[0]], x[1])


def _cell(cell: Cell, sigma: tuple[int, ...], pi: tuple[int, ...]) -> Cell:
    out: list[Slot] = [cell[0]] * len(cell)
    for i, slot in enumerate(cell):
        m = slot.machine if slot.machine == NOWHERE else sigma[slot.machine]
        out[pi[i]] = Slot(slot.incarnation, m, slot.desired)
    return tuple(out)


def _borglet(b: Borglet, pi: tuple[int, ...]) -> Borglet:
    return Borglet(
        b.fence,
        tuple(sorted((_inc(x, pi), p) for x, p in b.tasks)),
        tuple(sorted(_inc(x, pi) for x in b.queue)),
        tuple(sorted((_inc(x, pi), r) for x, r in b.tombstones)),
    )


def permute(s: ProtocolState, sigma: tuple[int, ...], pi: tuple[int, ...],
            history: tuple[Cell, ...] | None = None) -> ProtocolState:
    """The state with machine m renamed sigma[m] and index i renamed pi[i]."""
    borglets: list[Borglet] = list(s.borglets)
    for m, b in enumerate(s.borglets):
        borglets[sigma[m]] = _borglet(b, pi)
    network = tuple(sorted(
        Sync(g.epoch, g.seq, g.revision, sigma[g.machine], tuple(sorted(_inc(x, pi) for x in g.desired)))
        for g in s.network
    ))
    ghost = Ghost(
        tuple(sorted((_inc(x, pi), sigma[m]) for x, m in s.ghost.started)),
        tuple(sorted((_inc(x, pi), sigma[m]) for x, m in s.ghost.killed)),
    )
    return ProtocolState(
        history=_history(s, sigma, pi) if history is None else history,
        leaders=s.leaders,
        network=network,
        borglets=tuple(borglets),
        ghost=ghost,
    )


def _history(s: ProtocolState, sigma: tuple[int, ...], pi: tuple[int, ...]) -> tuple[Cell, ...]:
    return tuple(_cell(c, sigma, pi) for c in s.history)


def canonical(s: ProtocolState) -> ProtocolState:
    """The least of the state's images under every permutation of machines and of indices.

    States order by their history first, so an image whose history is already greater is
    passed over without renaming the rest.
    """
    best = s
    for sigma in _perms(len(s.borglets)):
        for pi in _perms(len(s.cell)):
            if all(a == b for a, b in enumerate(sigma)) and all(a == b for a, b in enumerate(pi)):
                continue
            history = _history(s, sigma, pi)
            if history > best.history:
                continue
            img = permute(s, sigma, pi, history)
            if img < best:
                best = img
    return best
