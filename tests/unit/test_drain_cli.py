"""`minborg machine drain` and `uncordon`: the progress lines, the watch until empty (its sleep injected), and the machine list's mark."""

from __future__ import annotations

from typer.testing import CliRunner

from reference.cli import drain as cli_drain
from reference.cli.app import app
from reference.cli.views import machine_drain, machine_rows


def view(left: int | None, schedulable: bool = False, deadline: float | None = None) -> dict:
    drain = None if schedulable else {"state": "draining" if left else "drained", "tasks_left": left, "since": 1.0,
                                      "deadline": deadline}  # fmt: skip
    return {"name": "m1", "state": "up", "schedulable": schedulable, "drain": drain, "tasks": ["x"] * (left or 0)}


def test_progress_lines():
    assert cli_drain.progress_line(view(3)) == "m1: draining, 3 task(s) left"
    assert cli_drain.progress_line(view(0)).startswith("m1: drained, empty")
    assert cli_drain.progress_line(view(None, schedulable=True)) == "m1: schedulable"
    assert "the rest evicted in" in cli_drain.progress_line(view(2, deadline=10**12))


def test_watch_prints_each_change_until_empty():
    answers = iter([view(3), view(3), view(2), view(1), view(0)])
    said, slept = [], []
    done = cli_drain.watch_drain(lambda: next(answers), said.append, sleep=slept.append)
    assert done is True
    assert said[:3] == ["m1: draining, 3 task(s) left", "m1: draining, 2 task(s) left", "m1: draining, 1 task(s) left"]
    assert said[-1].startswith("m1: drained, empty") and len(said) == 4  # the repeat is not printed again
    assert slept == [cli_drain.POLL_S] * 4


def test_watch_stops_when_uncordoned_or_out_of_time():
    assert cli_drain.watch_drain(lambda: view(None, schedulable=True), [].append, sleep=lambda s: None) is False
    ticks = iter(range(100))
    assert cli_drain.watch_drain(lambda: view(2), [].append, sleep=lambda s: None,
                                 clock=lambda: float(next(ticks)), for_s=5) is False  # fmt: skip


def test_machine_list_marks_a_drained_machine():
    assert machine_drain(view(2), False) == ",SchedulingDisabled (draining, 2 left)"
    assert machine_drain(view(0), False) == ",SchedulingDisabled (drained)"
    assert machine_drain(view(None, schedulable=True), False) == ""
    _, rows = machine_rows([{**view(2), "capacity": {"cpu": 4000}}])
    assert rows[0][1] == "up,SchedulingDisabled (draining, 2 left)"


def test_the_commands_are_under_machine():
    runner = CliRunner()
    out = runner.invoke(app, ["machine", "--help"]).output
    assert "drain" in out and "uncordon" in out
    out = runner.invoke(app, ["machine", "drain", "--help"]).output
    assert "--deadline" in out and "--detach" in out
    bad = runner.invoke(app, ["machine", "drain", "m1", "--deadline", "0"])
    assert bad.exit_code == 2  # at least 1 second
