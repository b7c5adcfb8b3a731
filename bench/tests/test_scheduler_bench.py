"""The benchmark shell and the trace reader, on small inputs."""

import json
from pathlib import Path

import pytest

from bench.scheduler import bench
from bench.scheduler.study import busiest_moment, lower_bound
from bench.scheduler.trace import pod_gpu_milli, read_trace

TRACE = Path(__file__).resolve().parents[3] / "shared" / "traces" / "alibaba-openb-2023"


def test_synthetic_bench_with_ablation(capsys):
    assert bench.main(["--machines", "200", "--tasks", "600", "--ablation", "--ablation-sample", "50", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run"]["tasks"] == 600 and out["run"]["placed"] > 0
    assert set(out["ablation"]["sample"]) >= {"all on", "all off"}
    assert out["ablation"]["speedup_on_vs_off_same_sample"] > 0


def test_the_bench_times_the_passs_cpu_beside_the_wall(capsys):
    assert bench.main(["--machines", "200", "--tasks", "300", "--policy", "fgd", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    assert run["placed"] > 0 and 0 < run["cpu_seconds"]
    # placements over CPU-seconds, from the same figures the run prints (to the microsecond, so that a
    # pass of a few milliseconds is not off by the rounding), and never below the wall's rate (one thread)
    assert run["placements_per_cpu_second"] == pytest.approx(run["placed"] / run["cpu_seconds"], rel=0.001)
    assert run["placements_per_cpu_second"] >= run["placements_per_second"] * 0.9


def test_gpu_share_mapping():
    assert pod_gpu_milli(1, 460) == 460
    assert pod_gpu_milli(1, 1000) == 1000
    assert pod_gpu_milli(8, 1000) == 8000
    assert pod_gpu_milli(0, 0) == 0


@pytest.mark.skipif(not TRACE.exists(), reason="the openb trace is not checked out beside the project")
def test_trace_reads_and_bounds():
    machines, pods = read_trace(TRACE)
    assert len(machines) == 1523 and len(pods) == 8152
    _, live = busiest_moment(pods)
    assert 0 < lower_bound(machines, live) <= len(machines)
