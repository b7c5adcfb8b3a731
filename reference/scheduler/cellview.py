"""The scheduler's compact, mutable working copy of a snapshot: ints in flat lists, indexed by machine number.

Built once per pass; the pass mutates it as it places tasks, never the snapshot. Plain
lists beat numpy for the one-machine-at-a-time reads of the hot path; numpy arrays are kept
only where a whole candidate set is scored at once (package locality, see engine).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from spec.model import CPU, GPU, RAM, TaskId, is_prod

from .snapshot import RunningTask, Snapshot

GPU_UNIT = 1000  # milli-GPUs in one whole GPU


@dataclass(slots=True)
class Victim:
    """A running task that a higher-priority task may preempt, with the GPU shares it holds."""

    id: TaskId
    job: str
    priority: int
    req: tuple[int, ...]
    gpu_shares: list[tuple[int, int]] = field(default_factory=list)  # (gpu index, milli)


@dataclass(slots=True)
class AllocState:
    name: str
    machine: int
    free: list[int]  # the alloc's resources minus what its running tasks use


def resource_dims(snapshot: Snapshot) -> tuple[str, ...]:
    """CPU and RAM first (policies rely on it), then every other name seen, sorted."""
    names: set[str] = set()
    for m in snapshot.machines:
        names |= m.capacity.names()
    for t in snapshot.pending:
        names |= t.request.names()
    for t in snapshot.running:
        names |= t.request.names()
    return (CPU, RAM, *sorted(names - {CPU, RAM}))


def gpu_layout(capacity_milli: int) -> list[int]:
    """Per-GPU capacity in milli: whole GPUs of 1000, a smaller last one if the total is not whole."""
    whole, rest = divmod(max(0, capacity_milli), GPU_UNIT)
    return [GPU_UNIT] * whole + ([rest] if rest else [])


def split_gpu(milli: int) -> tuple[int, int]:
    """A GPU request as (whole GPUs, share of one more GPU in milli)."""
    return divmod(milli, GPU_UNIT)


def gpu_take(
    gfree: list[int], gcap: list[int], whole: int, share: int
) -> list[tuple[int, int]] | None:
    """Which GPUs a request would use: `whole` untouched GPUs plus one GPU with `share` free.

    The share goes to the fullest GPU that still fits it, keeping untouched GPUs for tasks
    that need whole ones (the fragmentation that GPU-sharing clusters suffer from).
    """
    picks: list[tuple[int, int]] = []
    if whole:
        for i, f in enumerate(gfree):
            if f == gcap[i] == GPU_UNIT:
                picks.append((i, GPU_UNIT))
                if len(picks) == whole:
                    break
        else:
            return None
    if share:
        taken = {i for i, _ in picks}
        best = -1
        for i, f in enumerate(gfree):
            if f >= share and i not in taken and (best < 0 or f < gfree[best]):
                best = i
        if best < 0:
            return None
        picks.append((best, share))
    return picks


class CellView:
    """Machines as numbered rows: capacity, free resources, per-GPU free, victims, version."""

    def __init__(self, snapshot: Snapshot, seed: int) -> None:
        self.dims = resource_dims(snapshot)
        self.dim_index = {d: i for i, d in enumerate(self.dims)}
        self.gpu_dim = self.dim_index.get(GPU)
        machines = snapshot.machines
        self.names = [m.name for m in machines]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.cap: list[tuple[int, ...]] = [self.vec(m.capacity.as_dict()) for m in machines]
        self.free: list[list[int]] = [list(c) for c in self.cap]
        self.up = [m.up and m.schedulable for m in machines]  # a drained machine takes nothing new
        self.attrs = [dict(m.attrs) for m in machines]
        domains: dict[str, int] = {}
        # A machine without a failure domain is a domain of its own.
        self.dom = [domains.setdefault(m.failure_domain or f"machine:{m.name}", len(domains)) for m in machines]
        self.domains = len(domains)
        g = self.gpu_dim
        self.gcap: list[list[int]] = [gpu_layout(c[g]) if g is not None else [] for c in self.cap]
        self.gfree: list[list[int]] = [list(x) for x in self.gcap]
        # Reclaimed resources (Borg's reservations below requests): `free` is what a prod
        # task may use (prod tasks at their requests, others at their reservations); a
        # non-prod task may also use `slack`, what prod tasks requested but do not reserve.
        # Prod tasks are never preempted, so slack stays fixed for a pass.
        self.slack: list[list[int]] = [[0] * len(self.dims) for _ in machines]
        self.reclaimed: list[bool] = [False] * len(machines)
        self.victims: list[list[Victim]] = [[] for _ in machines]
        self.vmin: list[int] = [1 << 30] * len(machines)  # lowest victim priority on each machine
        self.version = np.zeros(len(machines), dtype=np.int64)  # read a whole sample at once
        self.bumps = 0  # version bumps so far, of any machine: a sample that saw this many has none stale
        self.ref_free: list[list[int]] = [list(c) for c in self.cap]
        # The GPU requests (whole, share) of the tasks on each machine, counted: GpuClustering's input.
        self.gkinds: list[dict[tuple[int, int], int]] = [{} for _ in machines]
        self.pkgs: list[set[str]] = [set(snapshot.packages.get(n, ())) for n in self.names]
        rng = random.Random(seed)
        self.salt = [rng.random() for _ in machines]
        self.allocs: dict[str, AllocState] = {}
        self.alloc_rows: dict[int, list[tuple[int, ...]]] = {}  # machine -> the resources of each alloc on it
        for a in snapshot.allocs:
            mi = self.index.get(a.machine)
            if mi is None:
                continue
            r = self.vec(a.resources.as_dict())
            self.allocs[a.name] = AllocState(
                a.name, mi, [x - y for x, y in zip(r, self.vec(a.used.as_dict()), strict=True)]
            )
            self.alloc_rows.setdefault(mi, []).append(r)
            self._consume(mi, r)
        for t in snapshot.running:
            mi = self.index.get(t.machine)
            if mi is not None and not t.in_alloc:
                self._count_running(mi, t)
        for mi, vs in enumerate(self.victims):
            self.vmin[mi] = min((v.priority for v in vs), default=1 << 30)
        self.ref_free = [list(f) for f in self.free]
        self.ref_gfree = [list(g) for g in self.gfree]

    def _count_running(self, mi: int, t: RunningTask) -> None:
        """Take a running task (not in an alloc) into machine `mi`'s row, as a possible victim."""
        g = self.gpu_dim
        req = self.vec(t.request.as_dict())
        shares = self._take_gpus_anyway(mi, req[g] if g is not None else 0)
        if t.reservation is not None and t.reservation != t.request:
            held = self.vec(t.reservation.as_dict())
            if is_prod(t.priority):
                self.slack[mi] = [s + a - h for s, a, h in zip(self.slack[mi], req, held, strict=True)]
                self.reclaimed[mi] = True
            else:
                req = held  # counts, and is released by preemption, at its reservation
        self._consume(mi, req)
        self.add_kind(mi, req)
        self.victims[mi].append(Victim(t.id, t.id.job, t.priority, req, shares))

    def redo_row(self, mi: int, schedulable: bool, running: Iterable[RunningTask], packages: Iterable[str]) -> None:
        """Machine `mi`'s row made again, as a view built afresh would make it: the machine
        up and `schedulable` or not, its allocs as they were, `running` (its running tasks
        outside allocs, in the snapshot's order) and the `packages` it holds. Its capacity,
        attributes and failure domain are the ones it was built with."""
        self.up[mi] = schedulable
        self.free[mi] = list(self.cap[mi])
        self.gfree[mi] = list(self.gcap[mi])
        self.slack[mi] = [0] * len(self.dims)
        self.reclaimed[mi] = False
        self.victims[mi] = []
        self.gkinds[mi] = {}
        self.pkgs[mi] = set(packages)
        for r in self.alloc_rows.get(mi, ()):
            self._consume(mi, r)
        for t in running:
            self._count_running(mi, t)
        self.vmin[mi] = min((v.priority for v in self.victims[mi]), default=1 << 30)
        self.ref_free[mi] = list(self.free[mi])
        self.ref_gfree[mi] = list(self.gfree[mi])

    def working_copy(self) -> CellView:
        """A copy for one pass to change: what a pass changes (free resources and GPUs,
        victims, versions, packages, allocs) copied, what it only reads shared."""
        c = CellView.__new__(CellView)
        c.__dict__.update(self.__dict__)
        c.free = [list(f) for f in self.free]
        c.gfree = [list(g) for g in self.gfree]
        c.up = list(self.up)
        c.slack = [list(s) for s in self.slack]
        c.reclaimed = list(self.reclaimed)
        c.victims = [list(v) for v in self.victims]
        c.vmin = list(self.vmin)
        c.version = self.version.copy()
        c.ref_free = [list(f) for f in self.ref_free]
        c.ref_gfree = [list(g) for g in self.ref_gfree]
        c.gkinds = [dict(k) for k in self.gkinds]
        c.pkgs = [set(p) for p in self.pkgs]
        c.salt = list(self.salt)
        c.allocs = {n: AllocState(a.name, a.machine, list(a.free)) for n, a in self.allocs.items()}
        return c

    def free_for(self, mi: int, prod: bool) -> list[int]:
        """What a task may use on machine `mi`: prod beside prod requests, others beside reservations."""
        if prod or not self.reclaimed[mi]:
            return self.free[mi]
        return [f + s for f, s in zip(self.free[mi], self.slack[mi], strict=True)]

    def vec(self, d: dict[str, int]) -> tuple[int, ...]:
        return tuple(d.get(name, 0) for name in self.dims)

    def _consume(self, mi: int, req: tuple[int, ...]) -> None:
        f = self.free[mi]
        for i, a in enumerate(req):
            f[i] -= a

    def _take_gpus_anyway(self, mi: int, milli: int) -> list[tuple[int, int]]:
        """Assign a running task's GPU milli to GPUs, overcommitting one if the spec's scalar
        accounting allowed a packing that whole GPUs cannot hold (it then reads as full)."""
        if not milli:
            return []
        whole, share = split_gpu(milli)
        gfree, gcap = self.gfree[mi], self.gcap[mi]
        picks = gpu_take(gfree, gcap, whole, share)
        if picks is None:
            picks, rest = [], milli
            order = sorted(range(len(gfree)), key=lambda i: -gfree[i]) or []
            for i in order:
                take = min(rest, max(gfree[i], 0))
                if take:
                    picks.append((i, take))
                    rest -= take
            if rest and order:
                picks.append((order[0], rest))
        for i, a in picks:
            gfree[i] -= a
        return picks

    def gpu_kind(self, req: tuple[int, ...]) -> tuple[int, int] | None:
        milli = req[self.gpu_dim] if self.gpu_dim is not None else 0
        return split_gpu(milli) if milli else None

    def add_kind(self, mi: int, req: tuple[int, ...]) -> None:
        kind = self.gpu_kind(req)
        if kind is not None:
            kinds = self.gkinds[mi]
            kinds[kind] = kinds.get(kind, 0) + 1

    def forget_kind(self, mi: int, req: tuple[int, ...]) -> None:
        kind = self.gpu_kind(req)
        kinds = self.gkinds[mi]
        if kind in kinds:
            kinds[kind] -= 1
            if not kinds[kind]:
                del kinds[kind]

    def touch(self, mi: int, threshold: float) -> bool:
        """Bump the machine's version when any resource drifted more than `threshold` of its
        capacity since the last bump, or when any GPU changed: cached scores older than the
        version are stale."""
        f, ref, cap = self.free[mi], self.ref_free[mi], self.cap[mi]
        moved = self.gfree[mi] != self.ref_gfree[mi]
        if not moved:
            for i in range(len(f)):
                if abs(f[i] - ref[i]) > threshold * cap[i]:
                    moved = True
                    break
        if moved:
            self.version[mi] += 1
            self.bumps += 1
            self.ref_free[mi] = list(f)
            self.ref_gfree[mi] = list(self.gfree[mi])
        return moved
