"""Scoring policies: each a small pure function, 0..100, higher is better.

Most policies see one machine as a (request, free, capacity) triple, one number per
resource. The GPU-aware ones (`GPU_POLICIES`, the baselines of the FGD paper) also see the
machine's GPUs one by one; `fgd` itself lives in `fragmentation.py`.

Arguments are equal-length sequences over the cell's resource dimensions, CPU first and RAM
second (the Kubernetes formulas look at those two only). `free` is what the machine has free
before the placement, counting what preempted victims would release; `salt` is a seeded
per-machine random number in [0, 1) that only `random_fit` uses. Dimensions the machine does
not have (capacity 0) are left out, so a CPU-only machine is judged on what it has.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence

Vec = Sequence[int]
Policy = Callable[[Vec, Vec, Vec, float], float]
MAX_SCORE = 100
STRANDING_WEIGHT = 4  # borg_hybrid's: how much a stranded excess outweighs tightness (see there)


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
    beyond `lmin` is at risk of being stranded once the dominant one runs out (Borg, section
    3.2: resources "that cannot be used because another resource on the machine is fully
    allocated"). The penalty is STRANDING_WEIGHT * 100 * the mean of those excesses, scaled
    by how much of the dominant resource is taken, 1 - lmin: an excess strands nothing yet
    on a machine with most of every resource free, and all of itself once the dominant
    resource is gone. Put otherwise, the dominant resource's best-fit score discounted by
    STRANDING_WEIGHT times the mean excess. (Unscaled, with a weight of 1 this would be
    plain best fit.) The unscaled penalty, doubled, ranked a nearly empty machine where a
    task balanced above a fuller one, and left more GPU unallocated than best fit on the
    openb trace; docs/decisions.md has the weights tried.
    """
    # `_leftovers`, their sum (left to right, as `sum` adds), count and least in one loop: the
    # pass calls this for most machines it scores, and one loop makes the same floats in less
    # than half the time of a list and three passes over it (zip's strict check alone costs a
    # third; the vectors are the cell's dimensions, equal in length by construction).
    total, count, lmin = 0.0, 0, math.inf
    for r, f, c in zip(req, free, cap):  # noqa: B905
        if c > 0:
            x = (f - r) / c
            total += x
            count += 1
            if x < lmin:
                lmin = x
    if not count:
        raise ValueError("borg_hybrid: the machine has no capacity in any dimension")
    stranded = total / count - lmin  # the mean of (x - lmin) over the resources
    return MAX_SCORE * (1.0 - lmin) - STRANDING_WEIGHT * MAX_SCORE * stranded * (1.0 - lmin)


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


def dot_prod(req: Vec, free: Vec, cap: Vec, salt: float = 0.0) -> float:
    """Tetris's alignment as FGD's simulator ranks it: the smaller the dot product of the
    request and what is free (each as a fraction of capacity), the better.

    100 * (1 - mean over resources of (req / cap) * (free / cap)), `free` before the placement.
    """
    terms = [(r / c) * (f / c) for r, f, c in zip(req, free, cap, strict=True) if c > 0]
    return MAX_SCORE * (1.0 - sum(terms) / len(terms))


def random_fit(req: Vec, free: Vec, cap: Vec, salt: float = 0.0) -> float:
    """The baseline: any feasible machine, chosen by the seeded per-machine salt."""
    return MAX_SCORE * salt


def gpu_packing(whole: int, share: int, gfree: Sequence[int], gunit: int = 1000) -> float:
    """GpuPacking (FGD's baseline): GPUs already in use first, then idle GPUs on a machine in
    use, then an idle machine; integer maths as in the simulator.

    - no GPU asked: 0;
    - every GPU idle: 100 // 3 - idle GPUs, at least the idle GPUs;
    - the request needs idle GPUs (whole ones, or a share that fits no GPU in use):
      100 // 2 - idle GPUs taken, at least 100 // 3;
    - a share on a GPU in use (the fullest that fits): 100 - (free % of that GPU) // 10, at least 50.
    """
    if not whole and not share:
        return 0.0
    idle = sum(1 for f in gfree if f == gunit)
    if idle == len(gfree):
        return float(max(MAX_SCORE // 3 - idle, idle))
    if whole:
        return float(max(MAX_SCORE // 2 - whole, MAX_SCORE // 3))
    fitting = [f for f in gfree if f >= share]
    if not fitting:
        return 0.0  # infeasible: the engine never asks
    fullest = min(fitting)
    if fullest == gunit:
        return float(max(MAX_SCORE // 2 - 1, MAX_SCORE // 3))
    return float(max(MAX_SCORE - (fullest * 100 // gunit) // 10, MAX_SCORE // 2))


def gpu_clustering(kind: object, kinds_here: Collection[object], gpu_free: int, gpu_max: int) -> float:
    """GpuClustering (FGD's baseline): tasks with the same GPU request together.

    `kind` is the task's GPU request (None: no GPU), `kinds_here` the GPU requests of the tasks
    on the machine, `gpu_free` its free GPU milli, `gpu_max` the largest machine's GPU milli.
    A fullness term 25 * (gpu_max - gpu_free) // gpu_max is added to a base: 75 where only this
    kind runs, 50 where it runs among others, 25 on a machine without GPU tasks, 0 elsewhere.
    """
    if kind is None or gpu_max <= 0:
        return 0.0
    full = (MAX_SCORE // 4) * (gpu_max - gpu_free) // gpu_max
    if kind in kinds_here:
        base = 75 if len(kinds_here) == 1 else 50
    else:
        base = 25 if not kinds_here else 0
    return float(base + full)


POLICIES: dict[str, Policy] = {
    "best_fit": best_fit,
    "worst_fit": worst_fit,
    "borg_hybrid": borg_hybrid,
    "k8s_least_allocated": k8s_least_allocated,
    "k8s_balanced": k8s_balanced,
    "random_fit": random_fit,
    "dot_prod": dot_prod,
}
# Policies that see each GPU: the engine calls them through adapters (see engine.Pass).
GPU_POLICIES = ("gpu_packing", "gpu_clustering", "fgd")
POLICY_NAMES: tuple[str, ...] = (*POLICIES, *GPU_POLICIES)


def policy_named(name: str) -> Policy | None:
    """The scalar policy of that name, None for a GPU-aware one; ValueError if there is none."""
    if name in GPU_POLICIES:
        return None
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}") from None
