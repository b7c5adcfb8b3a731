"""`python -m bench.draftcost` runs and prints a figure per cell size (no timing is asserted)."""

from __future__ import annotations

import re

import pytest

from bench import draftcost
from reference.master.cell import Tracked


def test_the_bench_prints_a_figure_per_size(capsys: pytest.CaptureFixture[str]) -> None:
    draftcost.main(["--tasks", "100,2000", "--changes", "3", "--writes", "10", "--repeats", "3"])
    out = capsys.readouterr().out
    assert re.search(r"^\s+100 tasks:\s+[\d.]+ ms per change$", out, re.M), out
    assert re.search(r"^\s+2,000 tasks:\s+[\d.]+ ms per change$", out, re.M), out
    assert "largest / smallest cell:" in out


def test_a_group_writes_what_it_says_over_an_untouched_base() -> None:
    base = draftcost.cell_of(50)
    before = dict(base.tasks)
    draftcost.group_cpu_s(base, changes=4, writes=5, first=0)
    assert base.tasks == before and not isinstance(base.tasks, Tracked)
