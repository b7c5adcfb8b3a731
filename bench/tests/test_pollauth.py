"""The poll-path bench's figures, checked by hand: run order, CPU per poll, medians and ratio, the verdict and the report."""

from __future__ import annotations

from typing import Any

import pytest

from bench.pollauth import (
    METRICS,
    compare,
    in_process_us,
    order,
    report,
    run_figures,
    table,
    verdict,
)

SHARD = {"polls": 15_500, "poll_interval_s": {"count": 20_000, "p50": 2.0, "p95": 2.6, "max": 3.1}}


def test_runs_alternate_which_side_goes_first() -> None:
    assert order(1) == [True, False]
    assert order(3) == [True, False, False, True, True, False]  # S U, U S, S U
    assert order(2).count(True) == order(2).count(False) == 2


def test_one_runs_figures() -> None:
    reads = [0.010, 0.020, 0.030, 0.040, 0.100]
    f = run_figures(15_000, {"master": 4.5, "hollow": 1.2}, 30.0, SHARD, reads)
    assert f["master_us_per_poll"] == 300.0  # 4.5 s / 15,000 polls = 300 µs
    assert f["hollow_us_per_poll"] == 80.0  # 1.2 s / 15,000 = 80 µs
    assert f["polls_per_s"] == 500.0  # 15,000 / 30 s
    assert f["master_cores"] == 0.15  # 4.5 s / 30 s
    assert (f["poll_p50_s"], f["poll_p95_s"]) == (2.0, 2.6)  # the shard's, as the scale campaign takes them
    # nearest rank of 5 reads: p50 the ceil(2.5) = 3rd = 30 ms, p99 the ceil(4.95) = 5th = 100 ms
    assert (f["read_p50_ms"], f["read_p99_ms"], f["reads"]) == (30.0, 100.0, 5)


def test_no_polls_or_reads_give_no_figure_rather_than_a_division_by_zero() -> None:
    f = run_figures(0, {"master": 1.0, "hollow": 0.0}, 30.0, {"poll_interval_s": {"count": 0}}, [])
    assert f["master_us_per_poll"] is None and f["poll_p95_s"] is None and f["read_p99_ms"] is None


def run(side: str, **figures: float) -> dict[str, Any]:
    return {"side": side, "figures": {m: figures.get(m, 1.0) for m in METRICS}}


def test_medians_of_each_side_and_their_ratio() -> None:
    runs = [
        run("signed", master_us_per_poll=330.0),
        run("unsigned", master_us_per_poll=300.0),
        run("unsigned", master_us_per_poll=320.0),
        run("signed", master_us_per_poll=310.0),
        run("signed", master_us_per_poll=500.0),  # an outlier the median ignores
        run("unsigned", master_us_per_poll=280.0),
        {"side": "signed", "error": "cell up: timed out"},  # a failed run counts on neither side
    ]
    s = compare(runs)["master_us_per_poll"]
    # median(330, 310, 500) = 330; median(300, 320, 280) = 300; 330 / 300 = 1.1: not under 1.1
    assert (s["signed"], s["unsigned"], s["ratio"], s["meets_target"]) == (330.0, 300.0, 1.1, False)
    assert compare(runs)["read_p99_ms"]["meets_target"] is True  # 1.0 / 1.0
    assert compare(runs)["polls_per_s"]["meets_target"] is None  # shown, not judged


def test_the_verdict_names_what_exceeds_the_target_and_by_how_much() -> None:
    runs = [run("signed", poll_p95_s=2.5, read_p99_ms=50.0), run("unsigned", poll_p95_s=2.0, read_p99_ms=48.0)]
    # 2.5 / 2.0 = 1.25: +25%; 50 / 48 = 1.042: under 10%
    assert verdict(compare(runs)) == "target not met: signing adds 10% or more to poll_p95_s +25%"
    # another unsigned run at 3.0 s: median(2.0, 3.0) = 2.5, ratio 1.0; with one at 2.2 the
    # median is 2.1 (2.5 / 2.1 = 1.19) and the unsigned runs 2.0..2.2 miss the signed 2.5
    assert compare([*runs, run("unsigned", poll_p95_s=3.0)])["poll_p95_s"]["overlap"] is True
    assert compare([*runs, run("unsigned", poll_p95_s=2.2)])["poll_p95_s"]["overlap"] is False
    # signed median(2.5, 2.4, 1.5) = 2.4, 2.4 / 2.0 = 1.2; the signed runs' 1.5..2.5 hold the unsigned 2.0
    spread = [run("signed", poll_p95_s=p) for p in (2.5, 2.4, 1.5)] + [run("unsigned", poll_p95_s=2.0)]
    assert verdict(compare(spread)) == (
        "target not met: signing adds 10% or more to poll_p95_s +20% "
        "(within the runs' spread, the two sides' runs overlapping: poll_p95_s)"
    )
    assert verdict(compare([run("signed"), run("unsigned")])).startswith("target met")
    assert verdict(compare([run("signed")])).startswith("target not judged")


@pytest.mark.parametrize("failed", [False, True])
def test_the_report_names_its_commands_and_carries_the_table(failed: bool) -> None:
    runs = [run("signed"), run("unsigned")]
    if failed:
        runs.append({"side": "signed", "error": "cell up: timed out", "load_before": 3.0})
    doc = {
        "command": "python -m bench.pollauth --machines 10", "host_cores": 2, "runs": runs,
        "config": {"machines": 10, "tasks_per_machine": 2, "rounds": 1, "replica_cpu": 0.3,
                   "poll_interval": 2.0, "window_s": 30.0, "readers": 2},
    }  # fmt: skip
    doc["in_process_us"] = {"sign_us": 7.0, "check_us": 13.5}
    text = report([doc], "python -m bench.pollauth --report-from a.json --report r.md")
    assert "7 µs for the master to sign, 13.5 µs for the hollow server to check" in text
    assert "This file: `python -m bench.pollauth --report-from a.json --report r.md`" in text
    assert "Produced by `python -m bench.pollauth --machines 10`" in text
    assert "| ratio | signed / unsigned | 1 |" in text and "**Target met" in text
    assert ("cell up: timed out" in table(doc)) is failed


def test_the_channels_own_work_per_poll_is_timed_signing_and_checking_a_real_signature() -> None:
    costs = in_process_us(polls=50)  # check_request asserts every one of them passes
    assert costs["sign_us"] > 0 and costs["check_us"] > 0
