"""The report's read figures from both ladders (mixed and reads-only), their scaling over replica
counts, and the Targets table drawn from a synthetic campaign directory, with and without the
reads-only phase."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadtests.figures import read_figures, relative_to_one
from loadtests.report import build, reads_cell
from loadtests.runs import Run

MACHINE = {
    "logical_cores": 2, "cpu_model": "test", "memory_total_gib": 1.0,
    "memory_available_gib": 1.0, "load_average": [0.0, 0.0, 0.0],
}  # fmt: skip


def step(users: int, reads: float, read_p99: float, writes: float = 0.0, t0: float = 0.0) -> dict[str, Any]:
    """One step of a shape JSON: a read group and, when `writes`, a write group."""
    groups = {"read": {"users": users, "rps": reads, "requests": int(reads * 10), "p50_ms": 2.0,
                       "p95_ms": read_p99 / 2, "p99_ms": read_p99, "error_rate": 0.0}}  # fmt: skip
    if writes:
        groups["write"] = {"users": users, "rps": writes, "requests": int(writes * 10),
                           "p50_ms": 20.0, "p95_ms": 100.0, "p99_ms": 200.0, "error_rate": 0.0}  # fmt: skip
    total = reads + writes
    return {"users": users, "rps": total, "requests": int(total * 10), "failures": 0,
            "p50_ms": 3.0, "p95_ms": 100.0 if writes else read_p99 / 2, "p99_ms": 200.0,
            "error_rate": 0.0, "started_at": t0, "ended_at": t0 + 10, "groups": groups}  # fmt: skip


def shape(steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"rules": {"slo_p95_ms": 250.0, "max_users": 10, "max_error_rate": 0.01},
            "step_seconds": 10.0, "settle_s": 1.0, "steps": steps,
            "verdict": {"reason": "max_users", "step": len(steps) - 1,
                        "users": steps[-1]["users"], "value": 10, "limit": 10}}  # fmt: skip


def run(replicas: int, mixed: list[dict[str, Any]], reads: list[dict[str, Any]] | None) -> Run:
    return Run(replicas=replicas, record={"machine": MACHINE, "phases": {}}, ladder=shape(mixed),
               reads=shape(reads) if reads is not None else None, submit=None, submit0=None,
               samples=[], failures=[], submit_failures=[])  # fmt: skip


MIXED = [step(2, 180, 30, writes=45), step(6, 200, 45, writes=45), step(10, 210, 90, writes=40)]
READS = [step(2, 400, 20), step(6, 700, 40), step(10, 800, 70)]


def test_read_figures_take_each_ladder_on_its_own() -> None:
    f = read_figures(run(1, MIXED, READS))
    assert f.mixed_best is not None and (f.mixed_best["rps"], f.mixed_best["users"]) == (200, 6)
    assert f.mixed_peak == (210, 10)
    assert f.only_measured
    assert f.only_best is not None and (f.only_best["rps"], f.only_best["users"]) == (700, 6)
    assert f.only_peak == (800, 10)


def test_a_run_without_the_reads_phase_has_no_reads_only_figures() -> None:
    f = read_figures(run(1, MIXED, None))
    assert not f.only_measured
    assert f.only_best is None and f.only_peak is None
    assert reads_cell(f.only_best, f.only_measured) == "not measured"


def test_a_reads_only_ladder_with_no_step_within_target_reads_none() -> None:
    f = read_figures(run(1, MIXED, [step(2, 300, 60)]))
    assert f.only_measured and f.only_best is None
    assert reads_cell(f.only_best, f.only_measured) == "none"
    assert reads_cell({"rps": 712.4, "users": 6}) == "712 (6)"


def test_relative_to_one_replica() -> None:
    assert relative_to_one({1: 200.0, 3: 150.0, 5: None}) == {1: 1.0, 3: 0.75, 5: None}
    assert relative_to_one({3: 150.0, 5: 100.0}) == {3: None, 5: None}  # no 1-replica run
    assert relative_to_one({1: None, 3: 150.0}) == {1: None, 3: None}
    assert relative_to_one({1: 0.0, 3: 150.0}) == {1: None, 3: None}


def write_campaign(root: Path, reads: dict[int, list[dict[str, Any]] | None]) -> Path:
    for n, reads_steps in reads.items():
        d = root / f"r{n}"
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps(
            {"target": "control-plane", "replicas": n, "machine": MACHINE, "phases": {}}))  # fmt: skip
        (d / "ladder_shape.json").write_text(json.dumps(shape(MIXED)))
        if reads_steps is not None:
            (d / "reads_shape.json").write_text(json.dumps(shape(reads_steps)))
    return root


def targets_rows(report: str) -> dict[str, list[str]]:
    """The Targets table's rows by replica count, cells stripped."""
    lines = report.split("## Targets (control plane)")[1].splitlines()
    table = [x for x in lines if x.startswith("| ")]
    rows = {}
    for line in table[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0].isdigit() and cells[0] not in rows:
            rows[cells[0]] = cells
    return rows


def test_report_gives_both_ladders_and_their_scaling(tmp_path: Path) -> None:
    half = [step(2, 200, 20), step(6, 350, 40), step(10, 400, 70)]
    root = write_campaign(tmp_path, {1: READS, 3: half})
    text = build(root).read_text()
    header = next(x for x in text.splitlines() if x.startswith("| replicas | reads/s"))
    assert "reads/s with p99 < 50 ms, mixed ladder (users)" in header
    assert "reads/s with p99 < 50 ms, reads-only ladder (users)" in header
    assert "submissions/s with p99 < 250 ms (users)" in header  # the existing columns stay
    assert "master/etcd" in header
    rows = targets_rows(text)
    assert rows["1"][1:3] == ["200 (6)", "700 (6)"]
    assert rows["3"][1:3] == ["200 (6)", "350 (6)"]
    scaling = next(x for x in text.splitlines() if x.startswith("| 3 | 210 (10)"))
    cells = [c.strip() for c in scaling.strip("|").split("|")]
    # mixed peak, x1; mixed within target, x1; reads-only peak, x1; reads-only within target, x1
    assert cells[1:] == ["210 (10)", "1.00x", "200 (6)", "1.00x", "400 (10)", "0.50x", "350 (6)", "0.50x"]
    assert "steps of the reads-only ladder" in text
    assert (root / "reads.png").exists()


def test_report_redraws_a_campaign_from_before_the_reads_phase(tmp_path: Path) -> None:
    root = write_campaign(tmp_path, {1: None, 3: None})
    text = build(root).read_text()
    rows = targets_rows(text)
    assert rows["1"][1:3] == ["200 (6)", "not measured"]
    assert "steps of the reads-only ladder" not in text
    assert not (root / "reads.png").exists()


@pytest.mark.parametrize("replicas", [(1,), (1, 3, 5)])
def test_reads_only_missing_in_some_runs_reads_not_measured_there(tmp_path: Path, replicas: tuple[int, ...]) -> None:
    reads = {n: (READS if n == 1 else None) for n in replicas}
    rows = targets_rows(build(write_campaign(tmp_path, reads)).read_text())
    assert rows["1"][2] == "700 (6)"
    assert all(rows[str(n)][2] == "not measured" for n in replicas if n != 1)
