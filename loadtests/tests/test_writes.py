"""The write-path measurement's arithmetic: counts read from /metrics, the ratio and its line."""

from __future__ import annotations

from loadtests.writes import Run, counts

METRICS = """# HELP minborg_txns_total Leader txns by outcome.
# TYPE minborg_txns_total counter
minborg_txns_total{outcome="committed"} 4474.0
minborg_txns_total{outcome="fenced"} 2.0
minborg_txns_created{outcome="committed"} 1.7954120226831439e+09
# HELP minborg_jobs Jobs in the cell.
# TYPE minborg_jobs gauge
minborg_jobs 9697.0
minborg_jobs_pending 3.0
"""


def test_counts_reads_committed_txns_and_jobs_only() -> None:
    assert counts(METRICS) == (4474, 9697)
    assert counts("") == (0, 0)


def test_ratio_and_line() -> None:
    run = Run("tls", 1600.0, 640.0, 12.0, 300, 660, 61.0, 27.0, 55.0, 4.2, 9.5)
    assert run.ratio == 0.4
    line = run.line()
    assert line.startswith("tls ") and "40%" in line and "2.2 per group" in line and "master 61%" in line
    assert "watch p50 4.20 ms, p99 9.50 ms" in line
    assert Run("plain", 0.0, 640.0, 12.0, 0, 0, 0.0, 0.0, 0.0).ratio == 0.0
