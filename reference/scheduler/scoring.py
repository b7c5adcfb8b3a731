"""The score stage of a pass: a feasible machine's score for a class, one machine or a run of machines at a time."""

from __future__ import annotations

import numpy as np

from spec.model import is_prod

from .batchscore import BATCH_POLICIES
from .cellview import CellView, Victim, gpu_take
from .classes import TaskClass
from .config import SchedulerConfig
from .feasibility import Feasibility, Rejection, release
from .fgdbatch import NO_FREE_GPU, CpuScores, fgd_many
from .fragmentation import ShapeMix
from .plan import PassStats
from .policies import gpu_clustering, gpu_packing, policy_named
from .terms import preemption_cost

UNCOUNTED = Rejection(short=(-1,))  # `plain`'s rejection where no tally counts it: why is not worked out


class Scorer:
    """The policy's score of what a class may use on a machine, less what its victims cost.

    `evaluate` is a machine through feasibility and then this stage: its score, or the
    `Rejection` feasibility returned. A scalar policy with a numpy twin (`batchscore`), and
    fgd for a class without GPUs (`fgdbatch`), also score a run of machines in one call
    (`many`), where the class takes no GPUs and preempts nothing: the prefilter's verdict is
    then exact, and the scores are the same floats as one at a time.
    """

    __slots__ = ("cell", "cfg", "feasible", "stats", "policy", "mix", "gpu_max", "batch", "cap", "salt")

    def __init__(self, cell: CellView, cfg: SchedulerConfig, feasible: Feasibility, stats: PassStats) -> None:
        self.cell = cell
        self.cfg = cfg
        self.feasible = feasible
        self.stats = stats
        self.policy = policy_named(cfg.policy)  # None: a GPU-aware policy, see `gpu_score`
        # fgd's mix of task shapes seen so far in the pass, moved on by `Pass.run`.
        self.mix = ShapeMix(cfg.mix_threshold if cfg.score_cache else 0.0) if cfg.policy == "fgd" else None
        self.gpu_max = max((sum(g) for g in cell.gcap), default=0)
        self.batch = BATCH_POLICIES.get(cfg.policy)
        n = len(cell.names)
        self.cap = np.array(cell.cap, dtype=np.int64).reshape(n, len(cell.dims))
        self.salt = np.array(cell.salt, dtype=np.float64)

    def evaluate(self, cls: TaskClass, mi: int, preempt: bool = True) -> float | Rejection:
        """The machine's score for the class, or why it is not feasible (without preemption
        when `preempt` is False)."""
        self.stats.evaluations += 1
        got = self.feasible.check(cls, mi, preempt)
        if got.__class__ is Rejection:
            return got  # type: ignore[return-value]
        cell = self.cell
        free = cell.free[mi]
        if cell.reclaimed[mi] and not is_prod(cls.priority):
            free = cell.free_for(mi, False)
        if not got:
            if self.policy is None:
                return self.gpu_score(cls, mi, free)
            return self.policy(cls.req, free, cell.cap[mi], cell.salt[mi])
        victims: list[Victim] = got  # type: ignore[assignment]
        free = list(free)
        gfree = list(cell.gfree[mi]) if self.policy is None else None
        for v in victims:
            release(v, free, gfree)
        cfg = self.cfg
        penalty = preemption_cost((v.priority for v in victims), cfg.preemption_per_victim, cfg.preemption_per_priority)
        if self.policy is None:
            # judged on the GPUs as the eviction leaves them, where the commit will place it
            return self.gpu_score(cls, mi, free, gfree) - penalty
        return self.policy(cls.req, free, cell.cap[mi], cell.salt[mi]) - penalty

    def plain(self, cls: TaskClass, mis: list[int], why: bool = True) -> list[float | Rejection]:
        """`evaluate` without preemption of a batched class (`batched`: it takes no GPUs) on
        machines that are up and meet its constraints, as a sample's are: the same scores and
        rejections, without a chain of calls per machine. Only what the request needs is
        checked (the resources); fgd scores a machine without free GPU `NO_FREE_GPU`, as
        `ShapeMix.place` does for such a class. Without `why` (no tally records it), a machine
        that no longer fits is `UNCOUNTED`, its reason not worked out."""
        self.stats.evaluations += len(mis)
        cell, policy, mix = self.cell, self.policy, self.mix
        frees, reclaimed, gfrees, caps, salts, attrs = cell.free, cell.reclaimed, cell.gfree, cell.cap, cell.salt, cell.attrs
        nz, req, prod = cls.nz, cls.req, is_prod(cls.priority)
        out: list[float | Rejection] = []
        for mi in mis:
            free = frees[mi]
            if reclaimed[mi] and not prod:
                free = cell.free_for(mi, False)
            for d, a in nz:
                if free[d] < a:
                    out.append(Rejection(short=tuple(d for d, a in nz if free[d] < a)) if why else UNCOUNTED)
                    break
            else:
                if policy is not None:
                    out.append(policy(req, free, caps[mi], salts[mi]))
                else:
                    gfree = gfrees[mi]
                    if any(gfree):
                        assert mix is not None
                        out.append(mix.place_cpu(mi, attrs[mi], free[0], req[0], gfree))
                    else:
                        out.append(NO_FREE_GPU)
        return out

    def gpu_score(self, cls: TaskClass, mi: int, free: list[int], gfree: list[int] | None = None) -> float:
        """The GPU-aware policies, fed from the working cell (or from `gfree`, the GPUs after an eviction)."""
        cell, name = self.cell, self.cfg.policy
        gfree = cell.gfree[mi] if gfree is None else gfree
        if name == "fgd":
            return self.fgd(cls, mi, free, gfree)[0]
        if name == "gpu_packing":
            return gpu_packing(cls.gpu_whole, cls.gpu_share, gfree)
        kind = (cls.gpu_whole, cls.gpu_share) if cls.gpu else None
        return gpu_clustering(kind, cell.gkinds[mi], sum(gfree), self.gpu_max)

    def fgd(self, cls: TaskClass, mi: int, free: list[int], gfree: list[int]) -> tuple[float, list[tuple[int, int]]]:
        """fgd's score of the class on the machine, and the GPUs it would take there."""
        mix = self.mix
        assert mix is not None
        return mix.place(mi, self.cell.attrs[mi], free[0], cls.req[0], gfree, cls.gpu_whole, cls.gpu_share)

    def gpus(self, cls: TaskClass, mi: int) -> list[tuple[int, int]]:
        """The GPUs a placement takes: fgd's own choice, else the fullest GPU that fits a share."""
        cell = self.cell
        if self.mix is not None:
            return self.fgd(cls, mi, cell.free_for(mi, is_prod(cls.priority)), cell.gfree[mi])[1]
        picks = gpu_take(cell.gfree[mi], cell.gcap[mi], cls.gpu_whole, cls.gpu_share)
        assert picks is not None, "checked by pick"
        return picks

    def batched(self, cls: TaskClass, preempting: bool) -> bool:
        """Whether the class's sample is scored a run of machines at a time (`many`)."""
        return (self.batch is not None or self.mix is not None) and not cls.gpu and not preempting

    def many(self, cls: TaskClass, mis: np.ndarray, free: np.ndarray) -> np.ndarray:
        """The scores of a batched class on machines `mis`, `free` what it may use on each (rows)."""
        if self.mix is not None:  # fgd, a class without GPUs: fgdbatch
            return fgd_many(self.cell, mis, free, CpuScores(self.mix, cls.req[0], self.cell))
        need = cls.need
        if need is None:
            need = cls.need = np.array(cls.req, dtype=np.int64)
        assert self.batch is not None
        return self.batch(need, free, self.cap[mis], self.salt[mis])
