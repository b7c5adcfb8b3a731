"""The packing guard's verdict: a policy's mean off its baseline by more than its seeds' spread
(at least the floor) fails, either way; the arithmetic beside each row."""

import json

import pytest

from bench.scheduler import packing_guard
from bench.scheduler.packing_guard import baseline_of, drifts, tolerance

BASE = {
    "seeds": 3,
    "floor": 0.1,
    "figures": {
        "default.csv": {
            # seeds 4.5, 4.6, 4.7: mean 4.6, pstdev sqrt((0.01 + 0 + 0.01) / 3) = 0.0816 < floor: 0.1
            "fgd": {"mean": 4.6, "std": 0.0816, "seeds": [4.5, 4.6, 4.7]},
            # seeds 5.0, 6.0, 7.0: mean 6.0, pstdev sqrt((1 + 0 + 1) / 3) = 0.8165 > floor
            "best_fit": {"mean": 6.0, "std": 0.8165, "seeds": [5.0, 6.0, 7.0]},
        }
    },
}


def test_tolerance_is_the_seeds_spread_or_the_floor():
    assert tolerance([4.5, 4.6, 4.7]) == 0.1  # pstdev 0.0816, below the floor
    assert tolerance([5.0, 6.0, 7.0]) == pytest.approx(0.8165, abs=1e-4)
    assert tolerance([4.0]) == 0.1  # one seed: no spread


@pytest.mark.parametrize(
    ("fgd", "best_fit", "failing"),
    [
        ([4.5, 4.6, 4.7], [5.0, 6.0, 7.0], []),  # the baseline itself
        ([4.6, 4.7, 4.75], [5.0, 6.0, 7.0], []),  # fgd mean 4.683: +0.083 <= 0.1
        ([4.7, 4.7, 4.8], [5.0, 6.0, 7.0], ["fgd"]),  # fgd mean 4.733: +0.133 > 0.1
        ([4.4, 4.5, 4.5], [5.0, 6.0, 7.0], ["fgd"]),  # fgd mean 4.467: -0.133, better still moved
        ([4.5, 4.6, 4.7], [6.0, 6.5, 7.0], []),  # best_fit mean 6.5: +0.5 <= 0.8165
        ([4.5, 4.6, 4.7], [6.5, 6.9, 7.2], ["best_fit"]),  # best_fit mean 6.867: +0.867 > 0.8165
        # the regression of a class sample widened to the whole cell, 3 seeds: fgd 4.63 -> 5.5
        ([5.4, 5.5, 5.6], [6.5, 6.9, 7.2], ["fgd", "best_fit"]),
    ],
)
def test_a_mean_off_by_more_than_the_tolerance_fails(fgd, best_fit, failing):
    got = drifts(BASE, {"default.csv": {"fgd": fgd, "best_fit": best_fit}})
    assert [d.policy for d in got] == failing


def test_a_policy_the_run_lacks_fails():
    (d,) = drifts(BASE, {"default.csv": {"fgd": [4.5, 4.6, 4.7]}})
    assert d.policy == "best_fit" and "nan" in str(d)


def test_the_baseline_written_is_the_baseline_read():
    b = baseline_of({"default.csv": {"fgd": [4.5, 4.6, 4.7]}}, 3, "first")
    assert b["why"] == "first" and b["figures"]["default.csv"]["fgd"]["mean"] == 4.6
    assert drifts(json.loads(json.dumps(b)), {"default.csv": {"fgd": [4.5, 4.6, 4.7]}}) == []


def test_the_guard_on_tiny_files_checks_and_fails_on_a_doctored_baseline(tmp_path, monkeypatch):
    pods = "cpu_milli,memory_mib,num_gpu,gpu_milli\n4000,1024,1,500\n2000,512,1,1000\n8000,2048,2,1000\n"
    for name in packing_guard.PODS:
        (tmp_path / name).write_text(pods)
    (tmp_path / packing_guard.GPU_MACHINES).write_text(
        "sn,cpu_milli,memory_mib,num_gpu,model\nm1,32000,65536,2,V100M16\nm2,32000,65536,4,T4\n"
    )
    monkeypatch.setattr(packing_guard, "POLICIES", ("best_fit",))
    base = tmp_path / "baseline.json"
    common = ["--trace", str(tmp_path), "--baseline", str(base), "--jobs", "1"]
    assert packing_guard.main([*common, "--write", "--seeds", "2"]) == 2  # no reason given
    assert packing_guard.main([*common, "--write", "--seeds", "2", "--why", "first"]) == 0
    assert packing_guard.main(common) == 0
    doctored = json.loads(base.read_text())
    doctored["figures"]["openb_pod_list_default.csv"]["best_fit"]["mean"] += 1.0
    base.write_text(json.dumps(doctored))
    assert packing_guard.main(common) == 1
    assert packing_guard.main(["--trace", str(tmp_path / "none"), "--baseline", str(base)]) == 2
