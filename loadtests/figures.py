"""The numbers a load report gives, computed from a campaign's runs: best and peak rates within a
latency target, read and write figures, scaling over replica counts, saturation and throttling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadtests.analysis import Saturation, saturation, window
from loadtests.runs import Run, group

READ_P99_MS = 50.0  # the control plane's read target: p99 under this
WRITE_P99_MS = 250.0  # and the submissions' target


def best_within(steps: list[dict[str, Any]], name: str | None, p99_ms: float) -> dict[str, Any] | None:
    """The step with the highest rate of `name` (all requests if None) whose p99 is under `p99_ms`."""
    ok = []
    for s in steps:
        g = s if name is None else group(s, name)
        if g and g.get("requests") and g["p99_ms"] < p99_ms and g.get("error_rate", 0) <= 0.01:
            ok.append((g["rps"], s["users"], g))
    if not ok:
        return None
    rps, users, g = max(ok, key=lambda x: x[0])
    return {"rps": rps, "users": users, "p99_ms": g["p99_ms"], "p95_ms": g["p95_ms"]}


def peak(steps: list[dict[str, Any]], name: str | None = None) -> tuple[float, int]:
    rates = [((s if name is None else group(s, name)).get("rps", 0.0), s["users"]) for s in steps]
    return max(rates, default=(0.0, 0))


def relative_to_one(values: dict[int, float | None]) -> dict[int, float | None]:
    """Each replica count's value over the 1-replica value; None where either is missing (or
    the 1-replica value is 0)."""
    base = values.get(1)
    return {n: (v / base if base and v is not None else None) for n, v in values.items()}


@dataclass(frozen=True)
class ReadFigures:
    """A run's read throughput from both ladders: the mixed one (reads beside submit/kill) and
    the reads-only one (None: that ladder was not run)."""

    mixed_best: dict[str, Any] | None  # best_within the read target
    mixed_peak: tuple[float, int]  # (reads/s, users)
    only_best: dict[str, Any] | None
    only_peak: tuple[float, int] | None

    @property
    def only_measured(self) -> bool:
        return self.only_peak is not None


def read_figures(run: Run) -> ReadFigures:
    only = run.reads is not None
    return ReadFigures(
        mixed_best=best_within(run.steps, "read", READ_P99_MS),
        mixed_peak=peak(run.steps, "read"),
        only_best=best_within(run.reads_steps, "read", READ_P99_MS) if only else None,
        only_peak=peak(run.reads_steps, "read") if only else None,
    )


def limits(run: Run) -> dict[str, float]:
    """Role -> CPU limit in percent of one core, where the cell enforces one (task cgroups)."""
    cell_info = run.record.get("cell", {})
    task_mcpu = cell_info.get("task_cpu_millis")
    if task_mcpu and cell_info.get("isolation", "").startswith("cgroup"):
        return {"task": task_mcpu / 10.0}
    return {}


def step_saturation(run: Run, step: dict[str, Any]) -> Saturation:
    return saturation(
        window(run.samples, step["started_at"], step["ended_at"]), run.cores, limits(run)
    )


def failing_step(run: Run) -> dict[str, Any] | None:
    v = run.verdict
    return run.steps[v["step"]] if v and v["step"] < len(run.steps) else (run.steps[-1] if run.steps else None)


def write_figures(run: Run) -> dict[str, Any]:
    """Master write path against direct etcd, from the submit-only ladder and the etcd bench."""
    etcd = run.record["phases"].get("etcd_direct")
    if not etcd or not run.submit:
        return {}
    clients = etcd["clients"]
    steps = run.submit.get("steps", [])
    same = next((s for s in steps if s["users"] == clients), steps[0] if steps else None)
    best = best_within(steps, None, WRITE_P99_MS)
    top = max(steps, key=lambda s: s["rps"]) if steps else None
    alone = (run.submit0 or {}).get("steps", [])
    alone_step = alone[0] if alone else None
    return {
        "clients": clients,
        "alone": alone_step,
        "alone_ratio": (alone_step["rps"] / etcd["txn"]["ops_per_s"])
        if alone_step and etcd["txn"]["ops_per_s"]
        else None,
        "etcd_txn": etcd["txn"]["ops_per_s"],
        "etcd_put": etcd["put"]["ops_per_s"],
        "etcd_txn_p99": etcd["txn"]["p99_ms"],
        "master_same": same,
        "ratio": (same["rps"] / etcd["txn"]["ops_per_s"]) if same and etcd["txn"]["ops_per_s"] else None,
        "best": best,
        "top": top,
    }


THROTTLED_SHARE = 0.1  # tasks throttled in this share of CFS periods are held by their quota


def throttled_share(run: Run) -> float | None:
    counters = (run.record.get("task_throttling") or {}).values()
    periods = sum(c["nr_periods"] for c in counters)
    return sum(c["nr_throttled"] for c in counters) / periods if periods else None
