"""The scalar policies over many machines at once (numpy), bit for bit what `policies` gives one machine.

The pass fills and refreshes a class's sample a run of machines at a time; scoring each in a
Python call was half its time. Each function here takes the request as a vector and `free`,
`cap` as (machines, dimensions) arrays, `salt` as one number per machine, and returns the
scores. The arithmetic is the scalar policy's, operation by operation and in the same order
(a dimension the machine lacks adds 0.0 to a sum, which leaves it exact), so the scores are
the same floats: a test holds every pair to equality, which keeps a pass's choices the same.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .policies import MAX_SCORE, STRANDING_WEIGHT

BatchPolicy = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _leftovers(req: np.ndarray, free: np.ndarray, cap: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Per machine and dimension the fraction left after the placement (0.0 where the machine
    lacks the dimension), and which dimensions each machine has (None: all of them)."""
    has = cap > 0
    if has.all():
        return (free - req) / cap, None
    with np.errstate(divide="ignore", invalid="ignore"):
        left = (free - req) / np.where(has, cap, 1)
    return np.where(has, left, 0.0), has


def _sum(values: np.ndarray) -> np.ndarray:
    # Python's sum adds left to right: so do we, a column at a time.
    total = values[:, 0]
    for d in range(1, values.shape[1]):
        total = total + values[:, d]
    return total


def _count(values: np.ndarray, has: np.ndarray | None) -> np.ndarray | int:
    return values.shape[1] if has is None else has.sum(axis=1)


def _min(values: np.ndarray, has: np.ndarray | None) -> np.ndarray:
    return values.min(axis=1) if has is None else np.where(has, values, np.inf).min(axis=1)


def best_fit(req: np.ndarray, free: np.ndarray, cap: np.ndarray, salt: np.ndarray) -> np.ndarray:
    left, has = _leftovers(req, free, cap)
    return MAX_SCORE * (1.0 - _sum(left) / _count(left, has))


def worst_fit(req: np.ndarray, free: np.ndarray, cap: np.ndarray, salt: np.ndarray) -> np.ndarray:
    left, has = _leftovers(req, free, cap)
    return MAX_SCORE * _sum(left) / _count(left, has)


def borg_hybrid(req: np.ndarray, free: np.ndarray, cap: np.ndarray, salt: np.ndarray) -> np.ndarray:
    left, has = _leftovers(req, free, cap)
    lmin = _min(left, has)
    stranded = _sum(left) / _count(left, has) - lmin
    return MAX_SCORE * (1.0 - lmin) - STRANDING_WEIGHT * MAX_SCORE * stranded * (1.0 - lmin)


def random_fit(req: np.ndarray, free: np.ndarray, cap: np.ndarray, salt: np.ndarray) -> np.ndarray:
    return MAX_SCORE * salt


def dot_prod(req: np.ndarray, free: np.ndarray, cap: np.ndarray, salt: np.ndarray) -> np.ndarray:
    has = cap > 0
    c = np.where(has, cap, 1)
    terms = np.where(has, (req / c) * (free / c), 0.0)
    return MAX_SCORE * (1.0 - _sum(terms) / has.sum(axis=1))


BATCH_POLICIES: dict[str, BatchPolicy] = {
    "best_fit": best_fit,
    "worst_fit": worst_fit,
    "borg_hybrid": borg_hybrid,
    "random_fit": random_fit,
    "dot_prod": dot_prod,
}
