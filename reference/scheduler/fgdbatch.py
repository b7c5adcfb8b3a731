"""fgd's scores for a class without GPUs over a run of machines: what `Scorer.evaluate` gives each one, cheaper.

A task without GPUs changes a machine's GPU fragmentation only through the CPU it takes, and
only where there is free GPU to fragment: on a machine with no free GPU, F is 0 before and
after, so the score is exactly `fgd_score(0, 0)` (50). Those machines, most of a cell's, are
scored here without a call each; the others go through the pass's own `Scorer.fgd`, the
function `evaluate` calls, so every score is the same float either way and a pass places the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

import numpy as np

from .fragmentation import fgd_score

if TYPE_CHECKING:
    from .cellview import CellView
    from .fragmentation import ShapeMix

NO_FREE_GPU = fgd_score(0.0, 0.0)  # F = 0 before and after: 50.0


_HAS_GPUS: WeakKeyDictionary[CellView, np.ndarray] = WeakKeyDictionary()


class CpuScores:
    """The pass's fgd score of a class without GPUs (`ShapeMix.place_cpu`) as `fgd_many` takes
    it: one machine per call, or the machines with free GPU of a run in one call (`many`)."""

    __slots__ = ("mix", "ask", "gfree", "attrs")

    def __init__(self, mix: ShapeMix, ask: int, cell: CellView) -> None:
        self.mix, self.ask, self.gfree, self.attrs = mix, ask, cell.gfree, cell.attrs

    def __call__(self, mi: int, cpu: int, gfree: list[int]) -> float:
        return self.mix.place_cpu(mi, self.attrs[mi], cpu, self.ask, gfree)

    def many(self, mis: list[int], cpus: list[int]) -> list[float]:
        return self.mix.place_cpu_many(mis, cpus, self.ask, self.gfree, self.attrs)


def fgd_many(
    cell: CellView, mis: np.ndarray, free: np.ndarray, score: Callable[[int, int, list[int]], float]
) -> np.ndarray:
    """Scores of a class that asks no GPUs on machines `mis` of `cell`, `free` what it may use on
    each (rows): NO_FREE_GPU where a machine has no free GPU, else `score(machine, free cpu, the
    machine's free GPUs)` (the pass's own fgd score of the class there), taken for all those
    machines in one call where `score` is a `CpuScores`."""
    has = _HAS_GPUS.get(cell)
    if has is None:  # which machines have GPUs at all: fixed for the cell view
        has = _HAS_GPUS[cell] = np.array([bool(g) for g in cell.gcap], dtype=bool)
    out = np.full(len(mis), NO_FREE_GPU)
    gfree = cell.gfree
    rows = has[mis].nonzero()[0]
    if not len(rows):
        return out
    at, some, cpus = [], [], []
    for j, mi, cpu in zip(rows.tolist(), mis[rows].tolist(), free[rows, 0].tolist(), strict=True):
        if any(gfree[mi]):
            at.append(j)
            some.append(mi)
            cpus.append(cpu)
    if at:
        out[at] = (
            score.many(some, cpus)
            if isinstance(score, CpuScores)
            else [score(mi, cpu, gfree[mi]) for mi, cpu in zip(some, cpus, strict=True)]
        )
    return out
