"""Figures of a chaos run from its files: availability, failover times, hello_world uptime, double runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.stats import percentile
from chaos import checker, events
from chaos.history import Op, Outcome, read_ops

# After a machine returns, its borglet needs one sync to kill duplicates: runs this long after
# a lost-machine window still count as inside it.
LOST_MACHINE_GRACE_S = 10.0
# Faults during which the cell may have no leader: their windows are failover windows. Fault
# kinds here are those of chaos.events.fault_kind (earlier runs' names read as these).
FAILOVER_FAULTS = frozenset({"kill_leader", "cut_leader_from_etcd", events.ETCD_MAJORITY})


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class RunData:
    ops: list[Op]
    hello: list[dict[str, Any]]
    timeline: list[dict[str, Any]]
    events: list[dict[str, Any]]

    @classmethod
    def load(cls, root: Path) -> RunData:
        final_t = checker.final_time(root)
        ops = [op for op in read_ops(root / "history.jsonl") if op.invoke_t < final_t]
        return cls(ops, read_jsonl(root / "hello.jsonl"), read_jsonl(root / "timeline.jsonl"),
                   events.read(root))  # fmt: skip

    @property
    def t0(self) -> float:
        times = [op.invoke_t for op in self.ops] + [e["t"] for e in self.events]
        return min(times) if times else 0.0


def availability(ops: list[Op], start: float, end: float) -> float | None:
    """Share of operations invoked in [start, end] that succeeded."""
    window = [op for op in ops if start <= op.invoke_t <= end]
    return sum(op.outcome == Outcome.OK for op in window) / len(window) if window else None


def hello_availability(hello: list[dict[str, Any]], start: float, end: float) -> float | None:
    window = [h for h in hello if start <= h["t"] <= end]
    return sum(h["ok"] for h in window) / len(window) if window else None


def write_recovery(ops: list[Op], start: float) -> float | None:
    """Seconds from a fault's start until a write invoked after it succeeds: the failover
    time as the load sees it."""
    done = [op.complete_t for op in ops
            if op.is_write and op.invoke_t >= start and op.outcome == Outcome.OK and op.complete_t]  # fmt: skip
    return min(done) - start if done else None


def failover_windows(data: RunData) -> list[tuple[float, float]]:
    """Windows with possibly no leader: the fault, then until writes succeed again."""
    windows = []
    for kind, start, end in events.fault_windows(data.events):
        if kind in FAILOVER_FAULTS:
            recovered = write_recovery(data.ops, end)
            windows.append((start, end + (recovered if recovered is not None else 0.0)))
    # A killed leader's failover ends when a write succeeds, even while the fault is open.
    return windows


def outside(ops: list[Op], windows: list[tuple[float, float]]) -> list[Op]:
    return [op for op in ops if not any(s <= op.invoke_t <= e for s, e in windows)]


def double_runs(data: RunData) -> tuple[int, int]:
    """(samples with a task on two borglets outside lost-machine windows, inside them)."""
    lost = [(s, e + LOST_MACHINE_GRACE_S) for kind, s, e in events.fault_windows(data.events)
            if kind == "cut_borglet"]  # fmt: skip
    out = inside = 0
    for sample in data.timeline:
        if sample.get("double"):
            if any(s <= sample["t"] <= e for s, e in lost):
                inside += 1
            else:
                out += 1
    return out, inside


def masters_down_windows(data: RunData) -> list[tuple[float, float]]:
    """Stretches of the watcher's timeline where no master claimed to lead."""
    windows: list[tuple[float, float]] = []
    start = None
    for sample in data.timeline:
        leading = any(role == "leader" for role in sample.get("roles", {}).values())
        if not leading and start is None:
            start = sample["t"]
        elif leading and start is not None:
            windows.append((start, sample["t"]))
            start = None
    if start is not None and data.timeline:
        windows.append((start, data.timeline[-1]["t"]))
    return windows


def summarize(root: Path) -> dict[str, Any]:
    """The figures of one run directory."""
    data = RunData.load(root)
    faults = events.fault_windows(data.events)
    per_fault = []
    for kind, start, end in faults:
        per_fault.append({
            "fault": kind, "start_s": round(start - data.t0, 2), "duration_s": round(end - start, 2),
            "api_availability": availability(data.ops, start, end),
            "write_recovery_s": write_recovery(data.ops, start) if kind in FAILOVER_FAULTS else None,
            "hello_availability": hello_availability(data.hello, start, end),
        })  # fmt: skip
    fo = failover_windows(data)
    quiet = outside(data.ops, fo)
    out, inside = double_runs(data)
    no_leader = masters_down_windows(data)
    hello_no_leader = [h for h in data.hello if any(s <= h["t"] <= e for s, e in no_leader)]
    latencies = [op.complete_t - op.invoke_t for op in data.ops if op.complete_t]
    measures = [e for e in data.events if e["event"] == "measure"]
    return {
        "ops": len(data.ops),
        "api_availability": availability(data.ops, 0, float("inf")),
        "api_availability_outside_failover": availability(quiet, 0, float("inf")),
        "hello_availability": hello_availability(data.hello, 0, float("inf")),
        "hello_calls_without_leader": len(hello_no_leader),
        "hello_availability_without_leader": (
            sum(h["ok"] for h in hello_no_leader) / len(hello_no_leader)
            if hello_no_leader
            else None
        ),
        "op_latency_p99_s": percentile(latencies, 0.99),
        "double_running_samples_outside_lost_machine": out,
        "double_running_samples_inside_lost_machine": inside,
        "faults": per_fault,
        "measures": measures,
    }
