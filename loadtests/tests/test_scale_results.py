"""The scale campaign's verdicts: what keeps a run from Borg's SLOs and the largest cell per replica count that met them."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.scale_results import (
    Result,
    broke_a_promise,
    count_declared_down,
    failures,
    largest_meeting,
    poll_summary,
    sustained_per_min,
)


def _run(machines: int, replicas: int, p95: float | None = 2.0, read_p99: float | None = 0.2, **kw: object) -> Result:
    r = Result(machines, replicas, 0.3, fill_tasks=10 * machines, fill_confirmed=10 * machines, **kw)  # type: ignore[arg-type]
    r.poll = {"p50": 1.0, "p95": p95, "max": 5.0} if p95 is not None else {}
    r.read_p99_s = read_p99
    return r


def test_a_run_within_every_slo_meets_them() -> None:
    assert failures(_run(100, 1)) == []
    assert _run(100, 1).slo_met


def test_each_slo_and_promise_is_checked() -> None:
    assert failures(_run(100, 1, p95=12.0)) == ["polling p95 12.0 s >= 10 s"]
    assert failures(_run(100, 1, read_p99=1.5)) == ["read p99 1.50 s >= 1 s"]
    assert failures(_run(100, 1, started_twice=2))[0] == "2 task id(s) started twice"
    incomplete = _run(100, 1)
    incomplete.fill_confirmed = 900
    assert failures(incomplete) == ["fill incomplete: 900 of 1000 tasks confirmed started"]
    assert failures(_run(100, 1, p95=None, read_p99=None)) == ["no polling interval measured", "no read answered"]
    assert failures(_run(100, 1, error="cell up: boom"))[0] == "run failed: cell up: boom"
    # The cell kept up with the arrivals only when every task that arrived was seen started;
    # results from before they were counted (None) are not judged on it.
    lagging = _run(100, 1, arrived=3400, arrivals_confirmed=0)
    assert failures(lagging) == ["arrivals: 0 of 3,400 tasks confirmed started within the wait"]
    assert not lagging.slo_met and failures(lagging, arrivals=False) == []
    assert failures(_run(100, 1, arrived=3400, arrivals_confirmed=3400)) == []
    assert failures(_run(100, 1, arrived=3400, arrivals_confirmed=None)) == []
    assert failures(_run(100, 1, index_twice=3)) == ["3 task index(es) running twice at the end"]
    assert failures(_run(100, 1, declared_down=2)) == ["machines declared down 2 time(s) (none fails in this cell)"]
    assert failures(_run(100, 1, index_twice=0, declared_down=0)) == []


def test_check_refuses_broken_promises_not_missed_slos() -> None:
    assert not broke_a_promise(_run(100, 1, p95=12.0, read_p99=1.5, declared_down=1))
    assert broke_a_promise(_run(100, 1, index_twice=1))
    assert broke_a_promise(_run(100, 1, started_twice=1))
    assert broke_a_promise(_run(100, 1, error="boom"))
    incomplete = _run(100, 1)
    incomplete.fill_confirmed = 999
    assert broke_a_promise(incomplete)


def test_machines_declared_down_are_counted_from_the_masters_log_lines() -> None:
    lines = [
        "2026-11-24 20:07:41,281 master[master0] WARNING reference.master.poller: machine machine1 missed 5 polls: marking it down",
        "2026-11-24 20:07:42,000 master[master0] INFO reference.master.poller: holding a/j/0#1@1 back",
        "2026-11-24 20:07:45,348 master[master0] WARNING reference.master.poller: machine machine3 missed 5 polls: marking it down",
    ]
    assert count_declared_down(lines) == 2
    assert count_declared_down([]) == 0


def test_largest_cell_meeting_the_slos_per_replica_count() -> None:
    runs = [
        _run(100, 1), _run(1000, 1, p95=14.0), _run(5000, 1, p95=40.0),
        _run(100, 5), _run(1000, 5), _run(5000, 5, read_p99=2.0),
        _run(100, 3, p95=11.0),
    ]  # fmt: skip
    best = largest_meeting(runs)
    assert best[1] == {"largest": 100, "failed_at": 1000, "first_failure": "polling p95 14.0 s >= 10 s"}
    assert best[5] == {"largest": 1000, "failed_at": 5000, "first_failure": "read p99 2.00 s >= 1 s"}
    assert best[3] == {"largest": None, "failed_at": 100, "first_failure": "polling p95 11.0 s >= 10 s"}


def test_the_cells_polling_interval_is_the_median_p50_and_the_worst_p95_and_max() -> None:
    shards = [
        {"poll_interval_s": {"count": 9, "p50": 2.0, "p95": 2.5, "max": 3.0}},
        {"poll_interval_s": {"count": 9, "p50": 2.2, "p95": 4.0, "max": 4.5}},
        {"poll_interval_s": {"count": 9, "p50": 3.1, "p95": 3.5, "max": 6.0}},
        {"poll_interval_s": {"count": 0}},  # a shard that has polled nothing yet
        {"url": "http://h:1", "error": "no answer"},
    ]
    # median(2.0, 2.2, 3.1) = 2.2; max(2.5, 4.0, 3.5) = 4.0; max(3.0, 4.5, 6.0) = 6.0
    assert poll_summary(shards) == {"p50": 2.2, "p95": 4.0, "max": 6.0}
    assert poll_summary([{"poll_interval_s": {"count": 0}}]) == {}


def test_sustained_rate_is_confirmed_tasks_over_the_span_of_their_starts() -> None:
    # 3 jobs of 100 tasks, starting 10 s behind their submits: the lag does not lower the rate
    starts = [(110.0, 111.0), (120.0, 121.0), (130.0, 136.0)]
    submits = [100.0, 110.0, 120.0]
    assert sustained_per_min(300, starts, submits) == round(300 / (26.0 / 60.0), 1)


def test_a_burst_of_starts_reads_no_faster_than_the_submits_came() -> None:
    starts = [(150.0, 150.5), (150.2, 151.0)]
    submits = [100.0, 130.0]
    assert sustained_per_min(200, starts, submits) == round(200 / (30.0 / 60.0), 1)


def test_no_rate_without_two_confirmed_jobs() -> None:
    assert sustained_per_min(0, [], [1.0, 2.0]) == 0.0
    assert sustained_per_min(100, [(5.0, 6.0)], [1.0, 2.0]) == 0.0


def test_readers_call_the_followers_when_the_cell_has_any() -> None:
    from loadtests.scale import read_targets

    urls = ["http://a", "http://b", "http://c"]
    assert read_targets(urls, "http://b", "followers") == ["http://a", "http://c"]
    assert read_targets(urls, "http://b", "all") == urls
    # One replica, or a leader the readers cannot tell: every replica, as before.
    assert read_targets(["http://a"], "http://a", "followers") == ["http://a"]
    assert read_targets(urls, None, "followers") == urls
    assert read_targets(urls, "http://elsewhere", "followers") == urls
    with pytest.raises(ValueError, match="reads must be one of"):
        read_targets(urls, "http://b", "leader")


def test_campaigns_run_alike_are_judged_together(tmp_path: Path) -> None:
    import json
    from dataclasses import asdict

    from loadtests.scale_report import across_campaigns

    def campaign(name: str, runs: list[Result], reads: str = "followers") -> Path:
        path = tmp_path / name / "results.json"
        path.parent.mkdir()
        config = {"replica_cpu": 0.2, "tasks_per_machine": 10, "reads": reads, "out": f"reports/{name}"}
        path.write_text(json.dumps({"config": config, "results": [asdict(r) for r in runs]}))
        return path

    a = campaign("a", [_run(300, 1), _run(600, 1, read_p99=1.2), _run(300, 5)])
    b = campaign("b", [_run(2000, 5), _run(2000, 5, read_p99=1.5), _run(3000, 5, p95=12.0)])
    rows = [line for line in across_campaigns([a, b]) if line.startswith("| 0.2")]
    assert rows[0].split(" | ")[3:6] == ["1", "300", "600"]
    assert rows[1].split(" | ")[3:6] == ["5", "2000", "3,000, 2,000 (another run met it)"]
    assert "polling p95 12.0 s" in rows[1]
    # A campaign alone, or campaigns read differently, get no table: their sections say it all.
    assert across_campaigns([a]) == []
    assert across_campaigns([a, campaign("c", [_run(300, 5)], reads="all")]) == []



def test_the_estimate_extends_the_leaders_cost_per_task_and_a_followers_per_machine(tmp_path: Path) -> None:
    import json
    from dataclasses import asdict

    from loadtests.scale_report import estimate

    def run(machines: int, fill_s: float, followers: float) -> Result:
        r = _run(machines, 5, cpu={"leader": 0.2, "followers": followers})
        r.replica_cpu, r.fill_s = 0.2, fill_s
        return r

    # 1 ms of leader CPU per task at 1,000 machines, 2 ms at 2,000; a follower 0.05 + 0.1 millicores a machine.
    runs = [run(1000, 50.0, 4 * (0.05 + 0.0001 * 200)), run(2000, 200.0, 4 * (0.05 + 0.0001 * 400))]
    path = tmp_path / "results.json"
    config = {"replica_cpu": 0.2, "tasks_per_machine": 10, "reads": "followers", "poll_interval": 2.0,
              "arrival_per_min": 10_000, "out": "reports/x"}  # fmt: skip
    path.write_text(json.dumps({"config": config, "results": [asdict(r) for r in runs]}))
    text = "\n".join(estimate([path], machines=10_000, host_cores=2.0))
    assert "1.00 ms at 1,000 machines, 2.00 ms at 2,000 machines" in text
    assert "10.0 ms of leader CPU per task" in text  # 2 ms + 8 x 1 ms per 1,000 machines
    assert "about 0.25 cores per replica" in text  # 0.05 + 0.0001 x 2,000
    assert "needs about 1.7 cores" in text and "within reach" in text
    config["reads"] = "all"
    path.write_text(json.dumps({"config": config, "results": [asdict(r) for r in runs]}))
    assert estimate([path]) == []


def test_arrivals_started_below_the_offered_rate_miss_the_slo() -> None:
    # All 4,500 tasks the cell accepted started within the wait, but at 2,979 a minute of the
    # 10,000 offered, and 11 submits failed: the cell did not sustain the arrivals.
    slow = _run(10_000, 5, arrived=4_500, arrivals_confirmed=4_500, confirmed_per_min=2_979.0,
                offered_per_min=10_000, writes=45, write_errors=11)  # fmt: skip
    assert failures(slow) == [
        "arrivals: 2,979 tasks/min started of 10,000 offered",
        "arrivals: 11 of 56 submits refused or unanswered",
    ]
    # What the failed submits got is named beside their count.
    refused = _run(10_000, 5, arrived=9_000, arrivals_confirmed=9_000, confirmed_per_min=9_500.0, offered_per_min=10_000,
                   writes=90, write_errors=2, write_failures=["503 leader busy", "ReadTimeout after 60.0 s"])  # fmt: skip
    assert failures(refused) == ["arrivals: 2 of 92 submits refused or unanswered (503 leader busy; ReadTimeout after 60.0 s)"]
    kept_up = _run(1_000, 5, arrived=10_000, arrivals_confirmed=10_000, confirmed_per_min=9_961.0,
                   offered_per_min=10_000, writes=100)  # fmt: skip
    assert kept_up.slo_met
    # Older results did not record the offered rate and are not judged on it.
    assert _run(300, 1, arrived=100, arrivals_confirmed=100, confirmed_per_min=10.0).slo_met


def test_the_leaders_cost_per_task_is_set_beside_the_smallest_sizes(tmp_path: Path) -> None:
    import json
    from dataclasses import asdict

    from loadtests.scale_report import estimate, measured_cost

    def run(machines: int, leader_ms: float) -> Result:
        r = _run(machines, 5, fill_s=30.0, fill_cpu_ms_per_task={"leader": leader_ms, "followers": 0.8, "hollow": 0.3})
        r.replica_cpu = 0.3
        return r

    path = tmp_path / "results.json"
    config = {"replica_cpu": 0.3, "tasks_per_machine": 10, "reads": "followers", "poll_interval": 5.0,
              "arrival_per_min": 10_000, "out": "reports/x"}  # fmt: skip
    path.write_text(json.dumps({"config": config, "results": [asdict(run(1000, 0.5)), asdict(run(10_000, 1.4))]}))
    rows = [line for line in measured_cost([path]) if line.startswith("| `reports/x`")]
    assert [row.split(" | ")[5:7] for row in rows] == [["**0.500**", "1.00"], ["**1.400**", "2.80 (over 1.5)"]]
    path.write_text(json.dumps({"config": config, "results": [asdict(run(1000, 0.5)), asdict(run(10_000, 0.7))]}))
    assert "1.40 (within 1.5)" in "\n".join(measured_cost([path]))
    # A cell of the estimate's size was measured: it is no anchor of the estimate.
    assert estimate([path], machines=10_000) == []
    # One size alone has nothing to set beside.
    path.write_text(json.dumps({"config": config, "results": [asdict(run(1000, 0.5))]}))
    assert measured_cost([path]) == []


def test_the_leaders_idle_rate_is_shown_with_what_it_comes_to_per_task(tmp_path: Path) -> None:
    import json
    from dataclasses import asdict

    from loadtests.scale_report import measured_cost

    small = _run(1000, 5, fill_s=20.0, fill_cpu_ms_per_task={"leader": 0.5})
    big = _run(10_000, 5, fill_s=400.0, fill_cpu_ms_per_task={"leader": 1.1},
               idle_cores={"leader": 0.05, "followers": 0.4})  # fmt: skip
    path = tmp_path / "results.json"
    config = {"replica_cpu": 0.3, "tasks_per_machine": 10, "out": "reports/x", "commit": "abc1234"}
    path.write_text(json.dumps({"config": config, "results": [asdict(small), asdict(big)]}))
    rows = [line for line in measured_cost([path]) if line.startswith("| `reports/x`")]
    # 0.05 cores over a 400 s fill of 100,000 tasks: 0.2 ms a task; not measured: "-".
    assert [row.split(" | ")[8] for row in rows] == ["-", "0.050, 0.200"]


def test_the_fill_until_the_leader_confirmed_it_is_shown_and_judged(tmp_path: Path) -> None:
    import json
    from dataclasses import asdict

    from loadtests.scale_report import measured_cost

    small = _run(1000, 5, fill_s=20.0, settle_s=3.0, fill_cpu_ms_per_task={"leader": 0.5},
                 settled_cpu_ms_per_task={"leader": 0.6})  # fmt: skip
    big = _run(10_000, 5, fill_s=300.0, settle_s=95.0, fill_cpu_ms_per_task={"leader": 0.7},
               settled_cpu_ms_per_task={"leader": 1.2})  # fmt: skip
    older = _run(10_000, 5, fill_s=300.0, fill_cpu_ms_per_task={"leader": 0.7})
    path = tmp_path / "results.json"
    config = {"replica_cpu": 0.3, "tasks_per_machine": 10, "out": "reports/x"}
    path.write_text(json.dumps({"config": config, "results": [asdict(small), asdict(big)]}))
    rows = [line for line in measured_cost([path]) if line.startswith("| `reports/x`")]
    # The fill's ratio (0.7 / 0.5) passes; to the leader's confirmation (1.2 / 0.6) it does not.
    assert [row.split(" | ")[6:8] for row in rows] == [
        ["1.00", "3 s, 0.600"], ["1.40 (within 1.5)", "95 s, 1.200, 2.00 (over 1.5)"],
    ]
    path.write_text(json.dumps({"config": config, "results": [asdict(small), asdict(older)]}))
    rows = [line for line in measured_cost([path]) if line.startswith("| `reports/x`")]
    assert rows[1].split(" | ")[7] == "-"
    # A leader that never confirmed the fill fails the run; one that did, or was not asked, does not.
    never = _run(10_000, 5, fill_s=300.0, settled_cpu_ms_per_task={"leader": 3.0})
    assert failures(never) == ["the leader's records did not confirm the fill within its timeout"]
    assert failures(big) == [] and failures(older) == []


def test_the_settle_wait_reads_the_leaders_confirmed_count_until_it_holds_the_fill(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    from loadtests import scale

    answers = iter([503, 40, 90, 100])

    def handler(request: httpx.Request) -> httpx.Response:
        code = next(answers)
        if code == 503:
            return httpx.Response(503, json={"detail": "busy"})
        return httpx.Response(200, json={"tasks": {"running_confirmed": code, "RUNNING": 100}})

    sleeps: list[float] = []
    monkeypatch.setattr(scale.time, "sleep", sleeps.append)
    with httpx.Client(transport=httpx.MockTransport(handler)) as http:
        took = scale.settle(http, "http://leader", 100, timeout_s=60.0)
    assert took is not None and len(sleeps) == 3  # a busy answer and two short counts were asked again
    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, json={"tasks": {"running_confirmed": 5}}))) as http:
        assert scale.settle(http, "http://leader", 100, timeout_s=0.0) is None


def test_results_name_the_commit_they_ran_on() -> None:
    from loadtests.scale import Config, config_json

    commit = config_json(Config())["commit"]
    assert commit == "" or commit.rstrip("+").isalnum()


def test_growth_per_task_counts_a_new_counter_from_zero_and_keeps_the_order() -> None:
    from loadtests.scale import per_task

    got = per_task({"leader": 3.0, "followers": 5.0}, {"leader": 1.0, "followers": 1.0}, 1000, scale=1000)
    assert list(got.items()) == [("leader", 2.0), ("followers", 4.0)]
    assert per_task({"txns": 40.0, "views": 3.0}, {"txns": 10.0}, 10) == {"txns": 3.0, "views": 0.3}
    assert per_task({"txns": 4.0}, {}, 0) == {"txns": 4.0}  # no task confirmed: per one, not a division by zero
