"""What saturated during a step: per-process CPU and RSS from the samples, and the machine's busy share.

A Python process runs its Python code on one core at a time (the GIL), so a master at ~90%
or more of one core is at its ceiling however many cores are idle; the machine is saturated
when all cores together are ~90% busy, and then every process (the load generator too) is
competing for the same CPUs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from statistics import fmean

from loadtests.sampler import Sample

PROCESS_CEILING = 90.0  # percent of one core
MACHINE_CEILING = 90.0  # percent of all cores
LIMIT_SHARE = 0.8  # a process using this share of its own CPU limit is held by the limit


@dataclass(frozen=True)
class ProcessLoad:
    role: str
    name: str
    cpu_mean: float  # percent of one core
    cpu_max: float
    rss_max_mib: float


@dataclass(frozen=True)
class Saturation:
    machine_cpu: float  # mean percent of all cores
    load1: float
    others: float  # percent of one core used by processes outside the cell and the load generator
    processes: list[ProcessLoad]  # busiest first
    verdict: str


def window(samples: list[Sample], start: float, end: float) -> list[Sample]:
    return [s for s in samples if start <= s.t <= end]


def loads(samples: list[Sample]) -> list[ProcessLoad]:
    """Per (role, name) CPU mean/max and peak RSS; several Locust workers stay apart by name."""
    by: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    for s in samples:
        by[(s.role, s.name)].append(s)
    out = [
        ProcessLoad(
            role, name,
            cpu_mean=fmean(x.cpu_percent for x in xs),
            cpu_max=max(x.cpu_percent for x in xs),
            rss_max_mib=max(x.rss_bytes for x in xs) / 2**20,
        )  # fmt: skip
        for (role, name), xs in by.items()
    ]
    return sorted(out, key=lambda p: -p.cpu_mean)


def role_share(processes: list[ProcessLoad]) -> dict[str, float]:
    """CPU by role, in percent of one core (so 200 means two whole cores)."""
    share: dict[str, float] = defaultdict(float)
    for p in processes:
        share[p.role] += p.cpu_mean
    return dict(sorted(share.items(), key=lambda kv: -kv[1]))


def saturation(
    samples: list[Sample], cores: int, limits: dict[str, float] | None = None
) -> Saturation:
    """Name what ran out in these samples: the whole machine's CPU, one process's core, a
    process's own CPU limit (`limits`: role -> percent of one core, e.g. a task's cgroup
    quota), or nothing."""
    if not samples:
        return Saturation(0.0, 0.0, 0.0, [], "no samples in this window")
    # One machine reading per sampling round; rounds share a timestamp.
    rounds = {s.t: (s.machine_cpu, s.load1) for s in samples}
    machine = fmean(m for m, _ in rounds.values())
    load1 = max(load for _, load in rounds.values())
    procs = loads(samples)
    # Whatever the machine spent beyond the followed processes: other users' work.
    others = max(0.0, machine * cores - sum(p.cpu_mean for p in procs))
    pinned = [p for p in procs if p.cpu_mean >= PROCESS_CEILING and p.role != "locust"]
    shares = ", ".join(f"{role} {cpu:.0f}%" for role, cpu in role_share(procs).items())
    shares += f", other processes on the machine {others:.0f}%"
    if machine >= MACHINE_CEILING:
        head = f"machine CPU saturated ({machine:.0f}% of {cores} cores busy, load {load1:.1f})"
    else:
        head = f"machine CPU {machine:.0f}% of {cores} cores (load {load1:.1f})"
    capped = [
        p for p in procs
        if limits and p.role in limits and p.cpu_mean >= LIMIT_SHARE * limits[p.role]
    ]  # fmt: skip
    if capped:
        names = ", ".join(f"{p.name} {p.cpu_mean:.0f}%" for p in capped)
        head += (
            f"; at their CPU limit ({limits[capped[0].role]:.0f}% of one core, "  # type: ignore[index]
            f"throttled by the quota): {names}"
        )
    if pinned:
        names = ", ".join(f"{p.name} ({p.role}) at {p.cpu_mean:.0f}% of one core" for p in pinned)
        head += f"; at its single-core ceiling: {names}"
    elif procs:
        top = procs[0]
        head += f"; busiest: {top.name} ({top.role}) at {top.cpu_mean:.0f}% of one core"
    return Saturation(machine, load1, others, procs, f"{head}. CPU by role (% of one core): {shares}")
