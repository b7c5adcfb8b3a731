"""Fragmentation Gradient Descent (FGD, Weng et al., USENIX ATC '23): the policy `fgd`, pure.

A machine's GPU fragmentation, measured against a mix of task shapes, is the GPU capacity
(milli) that a task drawn from the mix could not use there: all of the machine's free GPU
when the task does not fit at all (too little CPU, too few suitable GPUs, a GPU model it may
not use), else the free GPU left on GPUs too small for it (a share cannot span GPUs; a task
of whole GPUs can use only untouched ones). Averaged over the mix this is

    F = free GPU - E[usable],   usable = free milli on the GPUs that can host the shape's
                                          per-GPU demand, 0 when the shape does not fit,

and FGD places a task where F grows least. As in the paper, only CPU and GPUs decide
whether a shape fits (memory is left out), and tasks without GPUs count as shapes that can
use none of the GPU. The score is 100 * sigmoid((F before - F after) / 1000): monotone in
the change, so it ranks exactly as the change does.
"""

from __future__ import annotations

import math
from bisect import bisect_right, insort
from collections.abc import Callable, Mapping, Sequence

from .feasibility import constraint_holds

GPU_UNIT = 1000
MAX_SCORE = 100
# A GPU-demand group: (whole GPUs, share milli, compiled constraints).
Group = tuple[int, int, tuple]


class ShapeMix:
    """The task shapes seen so far: per GPU-demand group, the sorted CPU demands of its tasks.

    `version` moves when the mix has drifted more than `threshold` in L1 distance from the mix
    at the last move; `frozen` is the mix as of that move, which is what scores read, so a
    cached score is exact for the mix it was computed with.

    `place` is `fgd_place` against the frozen mix, remembered until the version moves: within
    a version the score is a pure function of the machine's free CPU and GPUs, the task's
    CPU and GPU demand and which groups' constraints hold there, and most calls of a pass
    repeat one (many classes ask the same CPU; a machine keeps its state between placements).
    Where one is new, the fragmentation of each (free CPU, free GPUs) it reads is remembered
    too: F before a placement is the same for every task asked on that machine state.
    """

    def __init__(self, threshold: float = 0.0) -> None:
        self.threshold = threshold
        self.version = 0
        self.live: dict[Group, list[int]] = {}
        self.nogpu = 0
        self.total = 0
        self.frozen: tuple[tuple[Group, list[int]], ...] = ()
        self.frozen_total = 0
        self.constrained = False  # some group has constraints: check them per machine
        self._at_freeze: dict[tuple[Group, int], int] = {}
        self._shapes: dict[tuple[Group, int], int] = {}
        # No drift can pass the threshold before the mix holds this many tasks (see `add`).
        self._quiet_until = 0
        # Per machine, its attributes as a hashable key (fixed for the mix's life, one pass);
        # per version, per such key, which frozen groups' constraints hold (None: all).
        self._attrs_key: dict[int, tuple] = {}
        self._allowed: dict[tuple, tuple[int, list[bool] | None]] = {}
        self._memo: dict[tuple, tuple[float, list[tuple[int, int]]]] = {}
        self._frag: dict[tuple, float] = {}
        # Per version: per machine, which frozen groups' constraints hold there (`_allowed`'s
        # number, -1: no group is constrained); the scores of tasks without GPUs (`place_cpu`).
        self._which: dict[int, int] = {}
        self._cpu_memo: dict[tuple, float] = {}
        self._usable: dict[tuple, list[tuple[list[int], int]]] = {}  # per (GPUs free, which): each group's usable GPU

    def add(self, group: Group | None, cpu: int) -> bool:
        """Counts one task (group None: no GPU); True when the frozen mix moved."""
        self.total += 1
        if group is None:
            self.nogpu += 1
        else:
            insort(self.live.setdefault(group, []), cpu)
        key = (group, cpu)
        self._shapes[key] = self._shapes.get(key, 0) + 1
        if self.frozen_total and (self.total < self._quiet_until or self._stays(self._drift())):
            return False
        self.frozen = tuple((g, list(c)) for g, c in self.live.items())
        self.frozen_total = self.total
        self.constrained = any(g[2] for g, _ in self.frozen)
        self._at_freeze = dict(self._shapes)
        self.version += 1
        self._quiet_until = 0
        self._allowed.clear()
        self._memo.clear()
        self._frag.clear()
        self._which.clear()
        self._cpu_memo.clear()
        self._usable.clear()
        return True

    def _stays(self, drift: float) -> bool:
        """Whether `drift`, the mix's now, is within the threshold; if so, how many more tasks
        the mix may take before its drift could pass it. One task moves the mix by
        2 (n - c) / (n (n + 1)) <= 2 / (n + 1) in L1 (n tasks, c of the new one's shape), so
        after j more the drift is at most drift + 2 j / (n + 1): while that stays under the
        threshold by a margin far above float rounding, `_drift` would say the same and is
        not computed. Exact as it was: the version moves at the same task."""
        if drift > self.threshold:
            return False
        room = self.threshold - drift - 1e-9
        if room > 0:
            self._quiet_until = self.total + 1 + int(room * (self.total + 1) / 2)
        return True

    def _drift(self) -> float:
        n, m = self.total, self.frozen_total
        before = self._at_freeze
        d = sum(abs(c / n - before.get(k, 0) / m) for k, c in self._shapes.items())
        return d + sum(c / m for k, c in before.items() if k not in self._shapes)

    def place(
        self, mi: int, attrs: Mapping[str, str], cpu_free: int, cpu_ask: int, gfree: Sequence[int], whole: int, share: int
    ) -> tuple[float, list[tuple[int, int]]]:
        """`fgd_place` of the task on machine `mi` (attributes `attrs`) against the frozen mix:
        the same score and GPUs, remembered for the version."""
        if not whole and not share and not any(gfree):
            return NO_FREE_GPU, []  # F is 0 before and after: what fgd_place gives, without the work
        which, allowed = self._held(mi, attrs)
        key = (cpu_free, cpu_ask, tuple(gfree), whole, share, which)
        got = self._memo.get(key)
        if got is None:
            known = self._frag

            def frag(cpu: int, g: Sequence[int]) -> float:
                gt = tuple(g)
                at = (cpu, gt, which)  # F before is shared by every task asking there
                f = known.get(at)
                if f is None:
                    f = known[at] = self._fragmentation(cpu, gt, which, allowed)
                return f

            got = self._memo[key] = fgd_place(cpu_free, cpu_ask, gfree, whole, share, self.frozen, self.frozen_total, allowed, frag)
        return got[0], list(got[1])


    def _fragmentation(self, cpu: int, g: tuple[int, ...], which: int, allowed: Sequence[bool] | None) -> float:
        """`fragmentation` against the frozen mix, the same float: what each group could use
        on these GPUs (which does not depend on the CPU) is remembered for the version, and
        the groups that could use none, which add nothing to the sum, are left out."""
        free = sum(g)
        total = self.frozen_total
        if not total or not free:
            return float(free)
        terms = self._usable.get((g, which))
        if terms is None:
            terms = self._usable[g, which] = [
                (cpus, u)
                for i, ((whole, share, _), cpus) in enumerate(self.frozen)
                if (allowed is None or allowed[i]) and (u := usable(g, whole, share))
            ]
        expected = 0
        for cpus, u in terms:
            fit = bisect_right(cpus, cpu)
            if fit:
                expected += fit * u
        return free - expected / total

    def place_cpu(self, mi: int, attrs: Mapping[str, str], cpu_free: int, cpu_ask: int, gfree: Sequence[int]) -> float:
        """`place`'s score of a task without GPUs, remembered for the version by what it reads."""
        which = self._which.get(mi)
        if which is None:
            which = self._which[mi] = self._held(mi, attrs)[0]
        key = (cpu_free, cpu_ask, tuple(gfree), which)
        got = self._cpu_memo.get(key)
        if got is None:
            got = self._cpu_memo[key] = self.place(mi, attrs, cpu_free, cpu_ask, gfree, 0, 0)[0]
        return got

    def place_cpu_many(
        self, mis: list[int], cpus: list[int], cpu_ask: int, gfrees: Sequence[Sequence[int]], attrs: Sequence[Mapping[str, str]]
    ) -> list[float]:
        """`place_cpu` of one task without GPUs on each machine `mis[j]` with `cpus[j]` CPU free
        (`gfrees`, `attrs`: every machine's), in one call."""
        which_of, memo, out = self._which, self._cpu_memo, []
        for mi, cpu in zip(mis, cpus, strict=True):
            gfree = gfrees[mi]
            which = which_of.get(mi)
            if which is None:
                which = which_of[mi] = self._held(mi, attrs[mi])[0]
            got = memo.get((cpu, cpu_ask, tuple(gfree), which))
            out.append(self.place_cpu(mi, attrs[mi], cpu, cpu_ask, gfree) if got is None else got)
        return out

    def _held(self, mi: int, attrs: Mapping[str, str]) -> tuple[int, list[bool] | None]:
        """Which frozen groups' constraints hold on machine `mi`: a number for the set, and
        the set (-1 and None when no group has constraints)."""
        if not self.constrained:
            return -1, None
        k = self._attrs_key.get(mi)
        if k is None:
            k = self._attrs_key[mi] = tuple(sorted(attrs.items()))
        held = self._allowed.get(k)
        if held is None:
            allowed = [all(constraint_holds(c, attrs) for c in g[2]) for g, _ in self.frozen]
            held = self._allowed[k] = (len(self._allowed), allowed)
        return held


def usable(gfree: Sequence[int], whole: int, share: int) -> int:
    """Free GPU milli a shape could use on these GPUs: on GPUs with room for its per-GPU
    demand, when there are enough of them; else 0. A shape of whole GPUs plus a share (rare)
    is judged as one more whole GPU."""
    if share and not whole:
        need, count = share, 1
    else:
        need, count = GPU_UNIT, whole + (1 if share else 0)
    room = [f for f in gfree if f >= need]
    if len(room) < count:
        return 0
    return sum(room)


def fragmentation(cpu_free: int, gfree: Sequence[int], mix: Sequence[tuple[Group, list[int]]], total: int, allowed: Sequence[bool] | None = None) -> float:
    """F in milli-GPUs: free GPU minus the mix's expected usable GPU on this machine.

    `mix` holds (group, sorted CPU demands); `total` counts every task, those without GPUs
    included; `allowed[i]` says whether group i's constraints hold here (None: all hold).
    """
    free = sum(gfree)
    if not total or not free:
        return float(free)
    expected = 0
    for i, ((whole, share, _), cpus) in enumerate(mix):
        if allowed is not None and not allowed[i]:
            continue
        fit = bisect_right(cpus, cpu_free)
        if fit:
            expected += fit * usable(gfree, whole, share)
    return free - expected / total


def fgd_score(before: float, after: float) -> float:
    """100 * sigmoid((before - after) / 1000): 50 when F does not move, higher when it shrinks."""
    x = (before - after) / GPU_UNIT
    return MAX_SCORE / (1.0 + math.exp(-x))


def fgd_place(
    cpu_free: int,
    cpu_ask: int,
    gfree: Sequence[int],
    whole: int,
    share: int,
    mix: Sequence[tuple[Group, list[int]]],
    total: int,
    allowed: Sequence[bool] | None = None,
    frag: Callable[[int, Sequence[int]], float] | None = None,
) -> tuple[float, list[tuple[int, int]]]:
    """FGD's score for placing the task on this machine and the GPUs it would take.

    A share goes to the GPU that leaves the least fragmentation (the first such GPU); whole
    GPUs are untouched ones, the first in index order (which untouched GPUs does not matter).
    The caller has checked that the task fits. `frag(cpu free, GPUs free)`, if given, is
    `fragmentation` against this mix on this machine (ShapeMix's remembers its answers).
    """
    if frag is None:
        def frag(cpu: int, g: Sequence[int]) -> float:
            return fragmentation(cpu, g, mix, total, allowed)

    before = frag(cpu_free, gfree)
    cpu_after = cpu_free - cpu_ask
    after = list(gfree)
    picks = []
    for g, f in enumerate(gfree):
        if len(picks) == whole:
            break
        if f == GPU_UNIT:
            picks.append((g, GPU_UNIT))
            after[g] = 0
    if not share:
        return fgd_score(before, frag(cpu_after, after)), picks
    best: tuple[float, int] | None = None
    tried: set[int] = set()
    for g, f in enumerate(after):
        if f < share or f in tried:
            continue  # GPUs with the same free milli leave the same fragmentation
        tried.add(f)
        after[g] = f - share
        here = frag(cpu_after, after)
        after[g] = f
        if best is None or here < best[0]:
            best = (here, g)
    assert best is not None, "the caller checked that the share fits"
    return fgd_score(before, best[0]), [*picks, (best[1], share)]


NO_FREE_GPU = fgd_score(0.0, 0.0)  # F = 0 before and after: 50.0
