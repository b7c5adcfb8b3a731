"""The source stage of a pass: the cell's machines in one seeded random order, which each class walks from a start."""

from __future__ import annotations

import random


class Walk:
    """The random order of the machines and where each class's walk of it starts.

    With a shared start (`relaxed_shared_start`), every class walks the same order from the
    same place: the samples of different classes overlap and placements fill the same machines
    first (see docs/decisions.md for what this buys in packing and costs in speed); otherwise
    each class starts at a random place of its own.
    """

    __slots__ = ("n", "rng", "order", "offset", "shared")

    def __init__(self, n: int, seed: int, shared_start: bool) -> None:
        self.n = n
        self.rng = random.Random(seed)
        self.order = list(range(n))
        self.rng.shuffle(self.order)
        self.offset = self.rng.randrange(max(n, 1))
        self.shared = shared_start

    def start(self) -> int:
        """Where a new class's walk of the order begins."""
        return self.offset if self.shared else self.rng.randrange(max(self.n, 1))

    def salt(self) -> list[float]:
        """random_fit's salt, falling along the walk from the shared start: the feasible machine
        it prefers is the first one the walk reaches, whether the sample holds k or every
        machine, so relaxed randomization leaves its choice as it is (first fit in a random order)."""
        return walk_salt(self.order, self.offset)


def walk_salt(order: list[int], offset: int) -> list[float]:
    """Per machine a number in [0, 1) that falls along the walk: (n - 1 - j) / n for the machine
    j places after `offset` in the random `order`."""
    n = len(order)
    salt = [0.0] * n
    for j in range(n):
        salt[order[(offset + j) % n]] = (n - 1 - j) / n
    return salt
