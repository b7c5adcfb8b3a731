"""The four policy comparisons of Verma et al. 2015, section 5, each as compaction trials over one workload.

Each experiment returns rows: a label, the machines the policy needs over the trials
(`Summary`: 90th percentile, min, max, each trial) and any extra figures. Trial t uses seed t
for the machine order, the scheduler and any random split of the workload, so rows of one
experiment compare the same draws. When a policy splits the workload over several cells, cell
j of trial t draws its own machine order (seed `cell_seed(t, j)`; cell 0 is the trial's own):
cells that shared one order would all start with the same few machines, and the sum over 10
subcells would carry ten times the luck of that start instead of averaging it out. Reclamation is off unless a row says otherwise: section
5.1's explanation of the segregation result is reclamation, so that experiment runs both ways.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from statistics import median

from spec.model import CPU, RAM, Machine, Resources

from .compaction import Compacted, compact, seeds, summarize
from .workload import GiB, Work

# Safety margins of the reservation estimate (reservation = usage x (1 + margin), at most the
# limit). The paper names three settings without figures; ours: medium is the cell's own
# default (reference.elastic.reservation.DEFAULT_MARGIN), baseline twice it, aggressive 10%.
MARGINS = {"baseline": 0.50, "medium": 0.25, "aggressive": 0.10}
SUBCELLS = (1, 2, 5, 10)
# Section 5.3: "rounding up CPU and memory to the next power of two, starting at 0.5 cores for
# CPU and 1 GiB for RAM".
CPU_BUCKET_MILLI = 500
RAM_BUCKET_BYTES = GiB


def cell_seed(trial: int, cell: int) -> int:
    return trial + 1000 * cell


def total(found: Sequence[int | None]) -> int | None:
    return None if any(f is None for f in found) else sum(f for f in found if f is not None)


def row(label: str, found: Sequence[int | None], **extra: object) -> dict:
    return {"label": label, **summarize(found).as_dict(), **extra}


def segregation(pool: Sequence[Machine], work: Sequence[Work], trials: int) -> list[dict]:
    """Shared cell vs a prod cell plus a non-prod cell, with reclamation off and at the medium margin."""
    prod = [w for w in work if w.prod]
    nonprod = [w for w in work if not w.prod]
    rows = []
    for name, margin in (("off", None), ("medium", MARGINS["medium"])):
        shared, apart, p_only, n_only = [], [], [], []
        for s in seeds(trials):
            shared.append(compact(pool, work, s, margin).machines)
            p = compact(pool, prod, cell_seed(s, 1), margin).machines
            n = compact(pool, nonprod, cell_seed(s, 2), margin).machines
            p_only.append(p)
            n_only.append(n)
            apart.append(total([p, n]))
        rows.append(row(f"shared, reclamation {name}", shared))
        rows.append(row(f"segregated, reclamation {name}", apart, prod=summarize(p_only).as_dict(), nonprod=summarize(n_only).as_dict()))
    return rows


def split_jobs(work: Sequence[Work], parts: int, seed: int) -> list[list[Work]]:
    """Each job, whole, to a random one of `parts` subcells (section 5.2 partitions jobs randomly)."""
    rng = random.Random(seed)
    where: dict[str, int] = {}
    out: list[list[Work]] = [[] for _ in range(parts)]
    for w in work:
        job = w.task.id.job
        if job not in where:
            where[job] = rng.randrange(parts)
        out[where[job]].append(w)
    return out


def subcells(pool: Sequence[Machine], work: Sequence[Work], trials: int, counts: Sequence[int] = SUBCELLS) -> list[dict]:
    """One cell vs the workload's jobs split at random into 2, 5, 10 subcells, each compacted on its own."""
    rows = []
    for k in counts:
        found = [
            total([compact(pool, part, cell_seed(s, j)).machines for j, part in enumerate(split_jobs(work, k, s))])
            for s in seeds(trials)
        ]
        rows.append(row("1 cell" if k == 1 else f"{k} subcells", found))
    return rows


def next_power(amount: int, unit: int) -> int:
    """`amount` rounded up to unit x 2^k (k >= 0): 300 -> 500, 501 -> 1000, 1000 -> 1000, in 500s."""
    size = unit
    while size < amount:
        size *= 2
    return size


def bucketed(work: Sequence[Work], machines: Sequence[Machine] = ()) -> list[Work]:
    """Every task's CPU and RAM request rounded up to the next power-of-two bucket, usage unchanged.

    Given `machines`, a task whose buckets would fit none of them keeps its own request: a cell
    offering buckets would not offer one larger than any of its machines.
    """
    shapes = {m.capacity for m in machines}
    out = []
    for w in work:
        req = w.task.request.as_dict()
        for r, unit in ((CPU, CPU_BUCKET_MILLI), (RAM, RAM_BUCKET_BYTES)):
            req[r] = next_power(req.get(r, 0), unit)
        coarse = Resources.of(req)
        if shapes and not any(coarse.fits_in(c) for c in shapes):
            coarse = w.task.request
        out.append(replace(w, task=replace(w.task, request=coarse)))
    return out


def asked(work: Sequence[Work], resource: str) -> int:
    return sum(w.task.request.get(resource) for w in work)


def bucketing(pool: Sequence[Machine], work: Sequence[Work], trials: int) -> list[dict]:
    """Fine-grained requests vs the same tasks with power-of-two buckets (a task whose buckets fit no machine keeps its own request)."""
    coarse = bucketed(work, pool)
    rows = []
    for label, tasks in (("fine-grained", work), ("power-of-two buckets", coarse)):
        found = [compact(pool, tasks, s).machines for s in seeds(trials)]
        rows.append(row(label, found, requested={r: asked(tasks, r) for r in (CPU, RAM)}))
    return rows


def reclaimed(runs: Sequence[Compacted]) -> dict[str, float | None]:
    """The median over trials of the share of the workload in reclaimed resources, at the compacted size."""
    out: dict[str, float | None] = {}
    for r in (CPU, RAM):
        shares = [c.result.reclaimed_share[r] for c in runs if c.result is not None]
        out[r] = round(median(shares), 4) if shares else None
    return out


def reclamation(pool: Sequence[Machine], work: Sequence[Work], trials: int) -> list[dict]:
    """Reclamation off, then on at each safety margin: machines needed and the share run in reclaimed resources."""
    rows = []
    settings: list[tuple[str, float | None]] = [("off", None), *MARGINS.items()]
    for name, margin in settings:
        runs = [compact(pool, work, s, margin) for s in seeds(trials)]
        label = "reclamation off" if margin is None else f"{name} (margin {margin:.0%})"
        rows.append(row(label, [c.machines for c in runs], reclaimed_share=reclaimed(runs)))
    return rows


EXPERIMENTS = {
    "segregation": segregation,
    "subcells": subcells,
    "bucketing": bucketing,
    "reclamation": reclamation,
}


def overhead(rows: Sequence[dict], base: int = 0) -> list[float | None]:
    """Each row's p90 over the base row's p90, minus 1 (0.25: 25% more machines)."""
    ref = rows[base]["p90"]
    return [None if not ref or r["p90"] is None else r["p90"] / ref - 1 for r in rows]


