"""Scoring policies: each a small pure function of one (request, free, capacity) triple, 0..100, higher is better.

Arguments are equal-length sequences over the cell's resource dimensions, CPU first and RAM
second (the Kubernetes formulas look at those two only). `free` is what the machine has free
before the placement, counting what preempted victims would release; `salt` is a seeded
per-machine random number in [0, 1) that only `random_fit` uses. Dimensions the machine does
not have (capacity 0) are left out, so a CPU-only machine is judged on what it has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Vec = Sequence[int]
Policy = Callable[[Vec, Vec, Vec, float], float]
MAX_SCORE = 100


def _leftovers(req: Vec, free: Vec, cap: Vec) -> list[float]:
    """Fraction of each resource left free after the placement."""
    return [(f - r) / c for r, f, c in zip(req, free, cap, strict=True) if c > 0]


def best_fit(req: Vec, free: Vec, cap: Vec, salt: float = 0.0) -> float:
    """Tightest machine first: 100 * (1 - mean leftover fraction)."""
    left = _leftovers(req, free, cap)
    return MAX_SCORE * (1.0 - sum(left) / len(left))


def worst_fit(req: Vec, free: Vec, cap: Vec, salt: float = 0.0) -> float:
    """Emptiest machine first (E-PVM-like spreading of load): 100 * mean leftover fraction."""
    left = _leftovers(req, free, cap)
    return MAX_SCORE * sum(left) / len(left)


def borg_hybrid(req: Vec, free: Vec, cap: Vec, salt: float = 0.0) -> float:
    """Best fit on the dominant resource, minus what would be stranded beside it.

    After the placement, the dominant resource is the one with the least left (`lmin`).
    Filling it is the best-fit part: 100 * (1 - lmin). Whatever other resources have left
    beyond `lmin` is at risk of being stranded once the dominant one runs out; the penalty
    is 100 * the mean of those excesses, doubled so that balance outweighs tightness (with a
    weight of 1 the formula would reduce to plain best fit).
    """
    left = _leftovers(req, free, cap)
    lmin = min(left)
    stranded = sum(left) / len(left) - lmin  # the mean of (x - lmin) over the resources
    return MAX_SCORE * (1.0 - lmin) - 2 * MAX_SCORE * stranded


def k8s_least_allocated(req: Vec, free: Vec, cap: Vec, salt: float = 0.0) -> float:
    """Kubernetes NodeResourcesFit LeastAllocated on cpu and memory, weights 1, integer maths.

    score_r = (capacity - requested) * 100 // capacity, where requested includes the task;
    the node score is the weighted mean, also floored.
    """
    total = weights = 0
    for i in (0, 1):
        if cap[i] <= 0:
            continue
        requested = cap[i] - free[i] + req[i]
        total += (cap[i] - requested) * MAX_SCORE // cap[i]
        weights += 1
    return float(total // weights) if weights else 0.0


def k8s_balanced(req: Vec, free: Vec, cap: Vec, salt: float = 0.0) -> float:
    """Kubernetes NodeResourcesBalancedAllocation on cpu and memory.

    fraction_r = requested / capacity (at most 1), with the task included;
    for two resources std = |f_cpu - f_mem| / 2; score = int((1 - std) * 100).
    """
    fractions = [
        min(1.0, (cap[i] - free[i] + req[i]) / cap[i]) for i in (0, 1) if cap[i] > 0
    ]
    if len(fractions) == 2:
        std = abs(fractions[0] - fractions[1]) / 2
    else:
        std = 0.0
    return float(int((1 - std) * MAX_SCORE))


def random_fit(req: Vec, free: Vec, cap: Vec, salt: float = 0.0) -> float:
    """The baseline: any feasible machine, chosen by the seeded per-machine salt."""
    return MAX_SCORE * salt


POLICIES: dict[str, Policy] = {
    "best_fit": best_fit,
    "worst_fit": worst_fit,
    "borg_hybrid": borg_hybrid,
    "k8s_least_allocated": k8s_least_allocated,
    "k8s_balanced": k8s_balanced,
    "random_fit": random_fit,
}


def policy_named(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}") from None
