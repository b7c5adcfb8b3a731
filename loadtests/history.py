"""Locust's CSV output as steps: the stats history cut at each change of user count, the failures, and the failure point.

The shape's JSON has each step's exact stats; these functions recover the same ladder from
Locust's own `*_stats_history.csv` (one Aggregated row a second), so a run whose shape file is
missing, or any Locust run, can still be judged with the same rules.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from loadtests.steps import StepStats, StopRules, Verdict, check


@dataclass(frozen=True)
class HistoryRow:
    t: int
    users: int
    total_requests: int
    total_failures: int
    p50_ms: float
    p95_ms: float
    p99_ms: float


def _ms(text: str) -> float:
    return 0.0 if text in ("", "N/A") else float(text)


def read_history(path: Path) -> list[HistoryRow]:
    """The Aggregated rows of a stats history CSV, in time order."""
    with path.open(newline="") as src:
        return [
            HistoryRow(
                t=int(float(r["Timestamp"])),
                users=int(r["User Count"]),
                total_requests=int(r["Total Request Count"]),
                total_failures=int(r["Total Failure Count"]),
                p50_ms=_ms(r["50%"]),
                p95_ms=_ms(r["95%"]),
                p99_ms=_ms(r["99%"]),
            )
            for r in csv.DictReader(src)
            if r["Name"] == "Aggregated"
        ]


def steps_from_history(rows: list[HistoryRow]) -> list[StepStats]:
    """One StepStats per run of rows at the same non-zero user count. Counts are the step's
    own (differences of the running totals); percentiles are Locust's sliding window at the
    step's last row, which covers the step's last seconds."""
    steps: list[StepStats] = []
    runs: list[list[HistoryRow]] = []
    for row in rows:
        if row.users == 0:
            continue
        if runs and runs[-1][0].users == row.users:
            runs[-1].append(row)
        else:
            runs.append([row])
    prev_req = prev_fail = 0
    prev_t: int | None = None
    for run in runs:
        last = run[-1]
        start_t = prev_t if prev_t is not None else run[0].t - 1
        steps.append(
            StepStats(
                users=last.users,
                seconds=float(max(1, last.t - start_t)),
                requests=last.total_requests - prev_req,
                failures=last.total_failures - prev_fail,
                p50_ms=last.p50_ms,
                p95_ms=last.p95_ms,
                p99_ms=last.p99_ms,
            )
        )
        prev_req, prev_fail, prev_t = last.total_requests, last.total_failures, last.t
    return steps


def failure_point(steps: list[StepStats], rules: StopRules) -> Verdict | None:
    """The first step that breaks the error-rate or p95 rule; None if every step held (a
    ladder that only reached its maximum has not failed)."""
    for index, step in enumerate(steps):
        verdict = check(step, index, rules)
        if verdict is not None and verdict.reason != "max_users":
            return verdict
    return None


@dataclass(frozen=True)
class FailureKind:
    method: str
    name: str
    error: str
    occurrences: int


def read_failures(path: Path) -> list[FailureKind]:
    """Locust's `*_failures.csv`: one row per (request, error) with its count, most first."""
    if not path.exists():
        return []
    with path.open(newline="") as src:
        kinds = [
            FailureKind(r["Method"], r["Name"], r["Error"], int(r["Occurrences"]))
            for r in csv.DictReader(src)
        ]
    return sorted(kinds, key=lambda k: -k.occurrences)


def count_5xx(path: Path) -> int:
    """Failures whose error is an HTTP 5xx status, from a failures CSV."""
    return sum(
        k.occurrences for k in read_failures(path) if "HTTP 5" in k.error or "HTTPError('5" in k.error
    )
