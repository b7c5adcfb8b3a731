"""A scale campaign's results: one run's figures, what kept it from Borg's SLOs, the largest cell that met them, read back from results.json (pure)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SLO_POLL_P95_S = 10.0  # Borg's: 95th percentile of the borglet polling interval
SLO_READ_P99_S = 1.0  # Borg's: 99th percentile UI (read) response time
ARRIVAL_PER_MIN = 10_000  # the campaign's default rate of arriving tasks (the target)
# A cell sustains the offered arrivals when it starts at least this share of their rate (the
# starts are measured from the first to the last, so a rate a little under the offered one is
# the window's edges, not a backlog) and no submit fails.
SUSTAINED_SHARE = 0.9
CONFIRM_S = 60.0  # the campaign's default wait after the window for arrivals to be confirmed


@dataclass
class Result:
    machines: int
    replicas: int
    replica_cpu: float | None
    up_s: float = 0.0
    fill_tasks: int = 0
    fill_confirmed: int = 0
    fill_s: float | None = None
    # Seconds from the borglets running every fill task to the leader's records saying so (its
    # `running_confirmed`): the work the fill left the leader; None: not waited for (older
    # results, `--no-settle`) or not reached within the fill's timeout.
    settle_s: float | None = None
    poll: dict[str, float] = field(default_factory=dict)  # p50/p95/max of the worst shard
    shards: list[dict[str, Any]] = field(default_factory=list)
    read_p50_s: float | None = None
    read_p99_s: float | None = None
    reads: int = 0
    read_errors: int = 0
    reads_to: str | None = None  # "followers" or "all" (scale.READS); None: older results, every replica in turn
    leader_read_p50_s: float | None = None  # the leader's own reads, when the readers avoided it
    leader_read_p99_s: float | None = None
    write_p50_s: float | None = None
    write_p99_s: float | None = None
    writes: int = 0
    write_errors: int = 0
    # What each failed submit got, as the client saw it ("503 <first words>", "ReadTimeout"); []: none, or older results
    write_failures: list[str] = field(default_factory=list)
    arrived: int = 0
    arrivals_confirmed: int | None = None  # arriving tasks confirmed running; None: older results
    confirmed_per_min: float = 0.0  # older results: confirmed by the window's end, over the window
    offered_per_min: int | None = None  # the rate the window's writers offered; None: older results, not judged on it
    start_latency_p50_s: float | None = None
    start_latency_p95_s: float | None = None
    cpu: dict[str, float] = field(default_factory=dict)  # role -> cores used during the window
    # role -> CPU milliseconds per task confirmed, over the fill (from /proc); {}: not measured
    fill_cpu_ms_per_task: dict[str, float] = field(default_factory=dict)
    # the same from the fill's start until the leader's records confirmed every fill task
    # (`settle_s`): the fill's whole cost; {}: not measured
    settled_cpu_ms_per_task: dict[str, float] = field(default_factory=dict)
    settled_work_per_task: dict[str, float] = field(default_factory=dict)  # the leader's work counters, the same way
    # role -> cores used with the machines up and no task yet, before the fill; {}: not measured
    idle_cores: dict[str, float] = field(default_factory=dict)
    # the leader's work counters over the fill per task confirmed (`work` kinds); {}: not measured
    fill_work_per_task: dict[str, float] = field(default_factory=dict)
    etcd_db_bytes: int = 0
    started_twice: int = 0
    index_twice: int | None = None  # task indices with two processes running at the end; None: not counted (older results)
    declared_down: int | None = None  # times a master marked a machine down (its logs); None: not counted
    error: str | None = None

    @property
    def slo_met(self) -> bool:
        return not failures(self)


def poll_summary(shards: list[dict[str, Any]]) -> dict[str, float]:
    """The cell's polling interval from its replicas' `/v1/shard` answers: the median of their
    p50s, the worst p95 and the worst max ({} when no shard measured one)."""
    intervals = [s.get("poll_interval_s") or {} for s in shards]
    p95s = [i["p95"] for i in intervals if "p95" in i]
    if not p95s:
        return {}
    return {
        "p50": round(statistics.median(i["p50"] for i in intervals if "p50" in i), 3),
        "p95": max(p95s),
        "max": max(i["max"] for i in intervals if "max" in i),
    }


def sustained_per_min(confirmed: int, starts: list[tuple[float, float]], submits: list[float]) -> float:
    """Arriving tasks confirmed started per minute, at the rate the cell kept up: `confirmed`
    tasks over the time from the first job's first start to the last job's last start
    (`starts`: per confirmed job, its first and last start, wall clock), and never over less
    than the time the submits took (`submits`: wall clock of each accepted submit), so a
    burst of starts cannot read faster than the tasks arrived. 0.0 without two jobs' worth."""
    if not confirmed or len(starts) < 2 or len(submits) < 2:
        return 0.0
    span = max(max(last for _, last in starts) - min(first for first, _ in starts), max(submits) - min(submits))
    return round(confirmed / (span / 60.0), 1) if span > 0 else 0.0


def broke_a_promise(r: Result) -> bool:
    """A run that failed, started a task id twice, ended with an index running twice, or did
    not complete its fill: what `--check` refuses (the SLOs are measured, not checked)."""
    return bool(r.error or r.started_twice or r.index_twice or r.fill_confirmed < r.fill_tasks)


def failures(r: Result, arrivals: bool = True) -> list[str]:
    """What kept a run from meeting the SLOs, the most basic first (empty: it met them).
    `arrivals`: also that every task that arrived in the window was confirmed started within
    the wait after it (the cell kept up with the arrival rate); older results that did not
    count them (None) are not judged on it."""
    out = []
    if r.error:
        out.append(f"run failed: {r.error}")
    if r.started_twice:
        out.append(f"{r.started_twice} task id(s) started twice")
    if r.index_twice:
        out.append(f"{r.index_twice} task index(es) running twice at the end")
    if r.declared_down:
        out.append(f"machines declared down {r.declared_down} time(s) (none fails in this cell)")
    if r.fill_confirmed < r.fill_tasks:
        out.append(f"fill incomplete: {r.fill_confirmed} of {r.fill_tasks} tasks confirmed started")
    if r.settled_cpu_ms_per_task and r.settle_s is None:
        out.append("the leader's records did not confirm the fill within its timeout")
    p95 = r.poll.get("p95")
    if p95 is None:
        out.append("no polling interval measured")
    elif p95 >= SLO_POLL_P95_S:
        out.append(f"polling p95 {p95:.1f} s >= {SLO_POLL_P95_S:.0f} s")
    if r.read_p99_s is None:
        out.append("no read answered")
    elif r.read_p99_s >= SLO_READ_P99_S:
        out.append(f"read p99 {r.read_p99_s:.2f} s >= {SLO_READ_P99_S:.0f} s")
    if arrivals and r.arrivals_confirmed is not None and r.arrivals_confirmed < r.arrived:
        out.append(f"arrivals: {r.arrivals_confirmed:,} of {r.arrived:,} tasks confirmed started within the wait")
    if arrivals and r.offered_per_min:
        if r.confirmed_per_min < SUSTAINED_SHARE * r.offered_per_min:
            out.append(f"arrivals: {r.confirmed_per_min:,.0f} tasks/min started of {r.offered_per_min:,} offered")
        if r.write_errors:
            seen = f" ({'; '.join(sorted(set(r.write_failures))[:3])})" if r.write_failures else ""
            out.append(f"arrivals: {r.write_errors} of {r.writes + r.write_errors} submits refused or unanswered{seen}")
    return out


def largest_meeting(results: list[Result]) -> dict[int, dict[str, Any]]:
    """Per replica count: the largest cell that met the SLOs and, for the next size tried,
    what failed first."""
    out: dict[int, dict[str, Any]] = {}
    for replicas in sorted({r.replicas for r in results}):
        runs = sorted((r for r in results if r.replicas == replicas), key=lambda r: r.machines)
        met = [r.machines for r in runs if r.slo_met]
        best = max(met) if met else None
        beyond = next((r for r in runs if (best is None or r.machines > best) and not r.slo_met), None)
        out[replicas] = {
            "largest": best,
            "failed_at": beyond.machines if beyond else None,
            "first_failure": failures(beyond)[0] if beyond else None,
        }
    return out


def load(path: Path) -> tuple[dict[str, Any], list[Result]]:
    doc = json.loads(path.read_text())
    return doc["config"], [Result(**r) for r in doc["results"]]


DOWN_LINE = "marking it down"  # what a master logs when it declares a machine down (master/poller.py)


def count_declared_down(lines: Iterable[str]) -> int:
    """How many times the masters' log lines say a machine was declared down."""
    return sum(1 for line in lines if DOWN_LINE in line)
