"""fgd's scores for a class without GPUs over a run of machines: what `Pass.evaluate` gives each one, cheaper.

A task without GPUs changes a machine's GPU fragmentation only through the CPU it takes, and
only where there is free GPU to fragment: on a machine with no free GPU, F is 0 before and
after, so the score is exactly `fgd_score(0, 0)` (50). Those machines, most of a cell's, are
scored here without a call each; the others go through the pass's own `_fgd`, the function
`evaluate` calls, so every score is the same float either way and a pass places the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

import numpy as np

from .fragmentation import fgd_score

if TYPE_CHECKING:
    from .classes import TaskClass
    from .engine import Pass

NO_FREE_GPU = fgd_score(0.0, 0.0)  # F = 0 before and after: 50.0


_HAS_GPUS: WeakKeyDictionary[Pass, np.ndarray] = WeakKeyDictionary()


def fgd_many(p: Pass, cls: TaskClass, mis: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Scores of `cls` (no GPUs asked) on machines `mis`, `free` what it may use on each (rows)."""
    has = _HAS_GPUS.get(p)
    if has is None:  # which machines have GPUs at all: fixed for the pass
        has = _HAS_GPUS[p] = np.array([bool(g) for g in p.cell.gcap], dtype=bool)
    out = np.full(len(mis), NO_FREE_GPU)
    gfree = p.cell.gfree
    for j in has[mis].nonzero()[0].tolist():
        mi = int(mis[j])
        if any(gfree[mi]):
            out[j] = p._fgd(cls, mi, [int(free[j, 0])], gfree[mi])[0]
    return out
