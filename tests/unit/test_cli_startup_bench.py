"""`minborg bench cli`'s verdicts: the targets on wall time, the CPU ratio beside them, and the CPU
of each run taken from the process that ran (not from the clock)."""

from __future__ import annotations

import argparse
import json
import sys

from loadtests import cli_startup


def figures(times: cli_startup.Times, capsys) -> tuple[int, dict]:
    args = argparse.Namespace(json=True, runs=3)
    rc = cli_startup.report(times, {"now": cli_startup.REPO}, args)
    return rc, json.loads(capsys.readouterr().out)["figures"]["now"]


def test_a_command_over_3x_the_interpreter_misses_and_its_cpu_ratio_is_reported(capsys, monkeypatch) -> None:
    monkeypatch.setattr(cli_startup, "NOT_EVERYDAY", ("job submit --dry-run",))
    base = [(0.030, 0.020)] * 3
    times = {
        ("now", cli_startup.BASELINE): base,
        ("now", "minborg job list"): [(0.060, 0.040), (0.061, 0.041), (0.059, 0.039)],
        ("now", "minborg job kill"): [(0.095, 0.045), (0.100, 0.046), (0.090, 0.044)],
        ("now", "minborg job submit --dry-run"): [(0.9, 0.8)] * 3,  # the full command line: not held to it
    }
    rc, got = figures(times, capsys)
    assert rc == 1
    assert got["minborg job list"]["ok"] and got["minborg job list"]["ratio"] == 2.0
    kill = got["minborg job kill"]
    assert not kill["ok"] and kill["ratio"] == 3.17
    assert kill["cpu_s"] == 0.045 and kill["cpu_ratio"] == 2.25  # its own work under 3x: the rest is waiting
    assert got["minborg job submit --dry-run"]["ok"] and not got["minborg job submit --dry-run"]["everyday"]


def test_a_run_s_cpu_is_the_child_s_own() -> None:
    import subprocess

    before = cli_startup.children_cpu()
    subprocess.run([sys.executable, "-c", "x = sum(range(3_000_000))"], check=True)
    spent = cli_startup.children_cpu() - before
    assert 0.01 < spent < 5.0
