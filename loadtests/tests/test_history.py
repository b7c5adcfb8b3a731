"""Failure-point detection on synthetic Locust CSVs (stats history and failures)."""

from __future__ import annotations

from pathlib import Path

from loadtests.history import (
    count_5xx,
    failure_point,
    read_failures,
    read_history,
    steps_from_history,
)
from loadtests.steps import StopReason, StopRules

HEADER = (
    "Timestamp,User Count,Type,Name,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,"
    "99.9%,99.99%,100%,Total Request Count,Total Failure Count,Total Median Response Time,"
    "Total Average Response Time,Total Min Response Time,Total Max Response Time,"
    "Total Average Content Size"
)


def row(t: int, users: int, p50: float, p95: float, p99: float, total: int, failed: int, name: str = "Aggregated") -> str:
    pct = ["N/A"] * 11 if total == 0 else [p50, p50, p50, p50, p95, p95, p99, p99, p99, p99, p99]
    return ",".join(
        str(x) for x in [t, users, "", name, 0, 0, *pct, total, failed, p50, p50, 1, p99, 100]
    )


def write_history(path: Path, steps: list[tuple[int, float, int, int]]) -> Path:
    """steps: (users, p95 ms, requests in the step, failures in the step), 10 rows each."""
    lines = [HEADER, row(100, 0, 0, 0, 0, 0, 0)]
    t, total, failed = 100, 0, 0
    for users, p95, requests, failures in steps:
        for i in range(10):
            t += 1
            total += requests // 10
            failed += failures // 10
            lines.append(row(t, users, p95 / 4, p95, p95 * 1.5, total, failed))
            if i == 0:
                lines.append(row(t, users, 1, 1, 1, total, failed, name="GET /x"))  # ignored
    path.write_text("\n".join(lines) + "\n")
    return path


RULES = StopRules(slo_p95_ms=250.0, max_users=40)


def test_steps_are_cut_at_each_user_count(tmp_path: Path) -> None:
    path = write_history(tmp_path / "h.csv", [(2, 20, 1000, 0), (6, 40, 2000, 0), (10, 80, 3000, 0)])
    steps = steps_from_history(read_history(path))
    assert [s.users for s in steps] == [2, 6, 10]
    assert [s.requests for s in steps] == [1000, 2000, 3000]
    assert steps[1].p95_ms == 40 and steps[1].seconds == 10
    assert steps[2].rps == 300


def test_no_failure_point_when_every_step_holds(tmp_path: Path) -> None:
    path = write_history(tmp_path / "h.csv", [(2, 20, 1000, 0), (6, 40, 2000, 0)])
    assert failure_point(steps_from_history(read_history(path)), RULES) is None


def test_latency_failure_point(tmp_path: Path) -> None:
    path = write_history(
        tmp_path / "h.csv", [(2, 20, 1000, 0), (6, 120, 2000, 0), (10, 400, 2000, 0), (14, 900, 2000, 0)]
    )
    verdict = failure_point(steps_from_history(read_history(path)), RULES)
    assert verdict is not None
    assert (verdict.reason, verdict.users, verdict.step, verdict.value) == (StopReason.P95_SLO, 10, 2, 400)


def test_error_failure_point_comes_first(tmp_path: Path) -> None:
    path = write_history(tmp_path / "h.csv", [(2, 20, 1000, 0), (6, 30, 2000, 100), (10, 900, 2000, 0)])
    verdict = failure_point(steps_from_history(read_history(path)), RULES)
    assert verdict is not None and verdict.reason is StopReason.ERROR_RATE and verdict.users == 6
    assert abs(verdict.value - 0.05) < 1e-9


def test_reaching_the_maximum_is_not_a_failure(tmp_path: Path) -> None:
    path = write_history(tmp_path / "h.csv", [(2, 20, 1000, 0), (40, 30, 2000, 0)])
    assert failure_point(steps_from_history(read_history(path)), RULES) is None


def test_failures_and_5xx(tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    path.write_text(
        "Method,Name,Error,Occurrences\n"
        "POST,write: submit,HTTP 503,7\n"
        "GET,read: show job,HTTP 404,2\n"
        'GET,read: cell,"ConnectionRefusedError(111, \'Connection refused\')",30\n'
        "DELETE,write: kill,HTTP 500,1\n"
    )
    kinds = read_failures(path)
    assert kinds[0].occurrences == 30 and kinds[0].name == "read: cell"
    assert count_5xx(path) == 8
    assert count_5xx(tmp_path / "missing.csv") == 0
