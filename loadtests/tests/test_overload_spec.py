"""The overload bench's run specs: TASKSxMACHINESxREPLICAS, and the machines' CPU group after it."""

from __future__ import annotations

import argparse

import pytest

from loadtests.overload import RunSpec


def test_an_overload_run_may_put_its_machines_in_a_cpu_group() -> None:
    assert RunSpec.parse("10000x100x1") == RunSpec(10000, 100, 1, None)
    grouped = RunSpec.parse("10000x100x1s2048")
    assert grouped == RunSpec(10000, 100, 1, 2048)
    assert str(grouped) == "10000 tasks, 100 machines, 1 replica(s), machines weighing 2048"
    for bad in ("10000x100x1s", "10000x100x1s1", "10000x100", "10000x100x2s2048"):
        with pytest.raises(argparse.ArgumentTypeError):
            RunSpec.parse(bad)


def test_failed_reads_are_counted_with_what_they_got() -> None:
    from loadtests.overload import RunResult, read_errors_cell

    r = RunResult(RunSpec.parse("1000x2x1"))
    assert read_errors_cell(r) == "0"
    r.read_errors, r.read_error_kinds = 3, {"ReadTimeout": 1, "HTTP 503": 2}
    assert read_errors_cell(r) == "3 (HTTP 503: 2, ReadTimeout: 1)"
    assert r.summary()["read_error_kinds"] == {"ReadTimeout": 1, "HTTP 503": 2}


def test_step_downs_are_counted_with_their_reasons_from_every_masters_log(tmp_path) -> None:
    from loadtests.overload import step_downs

    logs = tmp_path / "logs"
    logs.mkdir()
    assert step_downs(tmp_path) == {}  # no master logs
    (logs / "master0.log").write_text(
        "master[master0] INFO leader term 6: scheduling\n"
        "master[master0] WARNING reference.master.replica: master0 no longer leads: lease not refreshed within 2.0s\n"
    )
    (logs / "master1.log").write_text(
        "master[master1] WARNING reference.master.replica: master1 no longer leads: deposed\n"
        "master[master1] WARNING reference.master.replica: master1 no longer leads: lease not refreshed within 2.0s\n"
    )
    (logs / "machine0.log").write_text("machine0 no longer leads: not a master's log\n")
    assert step_downs(tmp_path) == {"lease not refreshed within 2.0s": 2, "deposed": 1}


def test_a_runs_step_downs_are_counted_in_its_summary() -> None:
    from loadtests.overload import RunResult

    r = RunResult(RunSpec.parse("1000x2x1"))
    assert r.leaders_deposed == 0 and r.summary()["leaders_deposed"] == 0
    r.deposed_why = {"lease not refreshed within 2.0s": 2, "deposed": 1}
    assert r.leaders_deposed == 3 and r.summary()["leaders_deposed"] == 3


def test_the_report_names_the_command_and_the_commit_its_runs_were_made_on(tmp_path) -> None:
    from loadtests.overload import RunResult, report

    r = RunResult(RunSpec.parse("1000x2x1"))
    r.all_scheduled_s, r.all_started_s, r.timeline = 0.6, 3.2, [(0.0, 0, 0, 0), (3.2, 1000, 1000, 1000)]
    out = tmp_path / "overload.md"
    report([r], "minborg bench overload --runs 1000x2x1", out, "abc1234+")
    text = out.read_text()
    assert "Regenerate with `minborg bench overload --runs 1000x2x1`" in text
    assert "made on commit abc1234+." in text
    report([r], "minborg bench overload --runs 1000x2x1", out)  # outside a checkout: no commit claimed
    assert "commit" not in out.read_text().split("\n")[2]
