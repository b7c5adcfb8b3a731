"""Why a class fits nowhere: named reasons with machine counts, e.g. "cpu: 0 of 12 machines have 4000m free"."""

from __future__ import annotations

from spec.model import CPU, DISK, GPU, RAM, is_prod, may_preempt

from .cellview import CellView, gpu_take
from .classes import TaskClass, constraint_holds
from .plan import Reason


def amount(dim: str, a: int) -> str:
    if dim == CPU:
        return f"{a}m"
    if dim in (RAM, DISK):
        return f"{a / 2**30:.1f} GiB" if a >= 2**30 else f"{a / 2**20:.0f} MiB"
    if dim == GPU:
        return f"{a} milli-GPU"
    return str(a)


def diagnose(cls: TaskClass, cell: CellView, preemption: bool) -> tuple[Reason, ...]:
    """Count, over all machines, which checks pass: each constraint, then each resource on the
    machines that meet every constraint (counting what preemptible tasks hold, when allowed)."""
    n = len(cell.names)
    reasons: list[Reason] = []
    up = [mi for mi in range(n) if cell.up[mi]]
    if len(up) < n:
        reasons.append(Reason("machines", f"{n - len(up)} of {n} machines are down", len(up)))
    eligible = up
    for c, comp in zip(cls.constraints, cls.compiled, strict=True):
        ok = [mi for mi in up if constraint_holds(comp, cell.attrs[mi])]
        if len(ok) < len(up):
            reasons.append(Reason(f"constraint {c}", f"{len(ok)} of {len(up)} machines match", len(ok)))
        okset = set(ok)
        eligible = [mi for mi in eligible if mi in okset]
    if cls.constraints and not eligible:
        if all(r.machines for r in reasons if r.subject.startswith("constraint")):
            reasons.append(Reason("constraints", "no machine meets all of them together", 0))
        return tuple(reasons)
    avail: dict[int, tuple[list[int], list[int]]] = {}
    for mi in eligible:
        free, gfree = list(cell.free_for(mi, is_prod(cls.priority))), list(cell.gfree[mi])
        if preemption:
            for v in cell.victims[mi]:
                if may_preempt(cls.priority, v.priority):
                    for i, a in enumerate(v.req):
                        free[i] += a
                    for g, a in v.gpu_shares:
                        gfree[g] += a
        avail[mi] = (free, gfree)
    note = " (counting preemptible tasks)" if preemption and cls.priority > 0 else ""
    e = len(eligible)
    short_somewhere = False
    for d, a in cls.nz:
        dim = cell.dims[d]
        if dim == GPU:
            continue
        k = sum(1 for mi in eligible if avail[mi][0][d] >= a)
        if k < e:
            short_somewhere = short_somewhere or k == 0
            reasons.append(Reason(dim, f"{k} of {e} machines have {amount(dim, a)} free{note}", k))
    if cls.gpu_whole or cls.gpu_share:
        k = sum(
            1
            for mi in eligible
            if gpu_take(avail[mi][1], cell.gcap[mi], cls.gpu_whole, cls.gpu_share) is not None
        )
        if k < e:
            short_somewhere = short_somewhere or k == 0
            what = []
            if cls.gpu_whole:
                what.append(f"{cls.gpu_whole} whole free GPU(s)")
            if cls.gpu_share:
                what.append(f"a GPU with {cls.gpu_share} milli free")
            reasons.append(Reason(GPU, f"{k} of {e} machines have {' and '.join(what)}{note}", k))
    if not short_somewhere:
        need = ",".join(f"{cell.dims[d]}={amount(cell.dims[d], a)}" for d, a in cls.nz)
        reasons.append(
            Reason("resources together", f"0 of {e} machines have {need or 'it'} free at once{note}", 0)
        )
    return tuple(reasons)
