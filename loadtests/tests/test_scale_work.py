"""The scale campaign reads the leader's work from the metrics a master serves."""

from __future__ import annotations

from loadtests.scale import work_counts
from reference.master import work
from reference.master.cell import Cell
from reference.master.metrics import MasterMetrics


def test_the_leaders_work_and_writes_are_read_from_its_metrics() -> None:
    metrics = MasterMetrics(lambda: Cell())
    metrics.on_txn("committed", 40)
    metrics.on_txn("committed", 2)
    metrics.on_txn("conflict", 7)  # refused: wrote nothing
    before = dict(work.counts)
    try:
        work.add("hold_checks", 5)
        counts = work_counts(metrics.render().decode())
    finally:
        work.counts.clear()
        work.counts.update(before)
    assert counts["records_written"] == 42 and counts["txns"] == 2
    assert counts["hold_checks"] == before.get("hold_checks", 0) + 5
    assert work_counts("") == {}
