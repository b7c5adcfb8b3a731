"""Why a class fits nowhere, named from the rejections the pass counted: "cpu: 0 of 12 machines have 4000m free"."""

from __future__ import annotations

from spec.model import CPU, DISK, GPU, RAM

from .classes import TaskClass
from .feasibility import Tally
from .plan import Reason


def amount(dim: str, a: int) -> str:
    if dim == CPU:
        return f"{a}m"
    if dim in (RAM, DISK):
        return f"{a / 2**30:.1f} GiB" if a >= 2**30 else f"{a / 2**20:.0f} MiB"
    if dim == GPU:
        return f"{a} milli-GPU"
    return str(a)


def explain(tally: Tally, cls: TaskClass, dims: tuple[str, ...], preemption: bool) -> tuple[Reason, ...]:
    """Each check with how many machines pass it, from a tally of a walk that rejected every
    machine: each constraint among the up machines, then each resource among the machines
    that meet every constraint (counting what preemptible tasks hold, when allowed).

    A check every machine passes is not named; when no single resource is short everywhere,
    the request as a whole is ("resources together").
    """
    n = tally.machines
    up = n - tally.down
    reasons: list[Reason] = []
    if tally.down:
        reasons.append(Reason("machines", f"{tally.down} of {n} machines are down", up))
    for c, unmet in zip(cls.constraints, tally.unmet, strict=True):
        ok = up - unmet
        if ok < up:
            reasons.append(Reason(f"constraint {c}", f"{ok} of {up} machines match", ok))
    e = up - tally.constrained
    if cls.constraints and not e:
        if all(r.machines for r in reasons if r.subject.startswith("constraint")):
            reasons.append(Reason("constraints", "no machine meets all of them together", 0))
        return tuple(reasons)
    note = " (counting preemptible tasks)" if preemption and cls.priority > 0 else ""
    short_somewhere = False
    for d, a in cls.nz:
        dim = dims[d]
        if dim == GPU:
            continue
        k = e - tally.short[d]
        if k < e:
            short_somewhere = short_somewhere or k == 0
            reasons.append(Reason(dim, f"{k} of {e} machines have {amount(dim, a)} free{note}", k))
    if cls.gpu:
        k = e - tally.gpus
        if k < e:
            short_somewhere = short_somewhere or k == 0
            what = []
            if cls.gpu_whole:
                what.append(f"{cls.gpu_whole} whole free GPU(s)")
            if cls.gpu_share:
                what.append(f"a GPU with {cls.gpu_share} milli free")
            reasons.append(Reason(GPU, f"{k} of {e} machines have {' and '.join(what)}{note}", k))
    if not short_somewhere:
        need = ",".join(f"{dims[d]}={amount(dims[d], a)}" for d, a in cls.nz)
        reasons.append(
            Reason("resources together", f"0 of {e} machines have {need or 'it'} free at once{note}", 0)
        )
    return tuple(reasons)
