"""The campaign's ladder: a replica count stops at its first size that misses the SLOs, unless
every size is asked for (to compare the leader's CPU per task across sizes in one run)."""

from __future__ import annotations

from pathlib import Path

from loadtests import scale
from loadtests.scale_results import Result


def _fake_run_one(missing_at: set[tuple[int, int]], ran: list[tuple[int, int]]):
    def run_one(cfg: scale.Config, machines: int, replicas: int) -> Result:
        ran.append((machines, replicas))
        r = Result(machines, replicas, cfg.replica_cpu, fill_tasks=10, fill_confirmed=10, fill_s=1.0,
                   poll={"p50": 2.0, "p95": 2.5, "max": 3.0}, read_p50_s=0.01, read_p99_s=0.1,
                   arrived=0, arrivals_confirmed=0, index_twice=0, declared_down=0)  # fmt: skip
        if (machines, replicas) in missing_at:
            r.read_p99_s = 2.0  # over the SLO
        return r

    return run_one


def test_the_ladder_stops_at_a_miss(tmp_path: Path) -> None:
    ran: list[tuple[int, int]] = []
    cfg = scale.Config(machines=(100, 1000, 10000), replicas=(1, 5), out=tmp_path)
    results = scale.run(cfg, run_one=_fake_run_one({(1000, 1)}, ran))
    assert ran == [(100, 1), (100, 5), (1000, 1), (1000, 5), (10000, 5)]
    assert [r.slo_met for r in results] == [True, True, False, True, True]
    assert (tmp_path / "results.json").exists()


def test_every_size_runs_past_a_miss(tmp_path: Path) -> None:
    ran: list[tuple[int, int]] = []
    cfg = scale.Config(machines=(1000, 10000), replicas=(5,), every_size=True, out=tmp_path)
    scale.run(cfg, run_one=_fake_run_one({(1000, 5)}, ran))
    assert ran == [(1000, 5), (10000, 5)]
