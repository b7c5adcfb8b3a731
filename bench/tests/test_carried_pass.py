"""`python -m bench.scheduler.carried_pass` at a small size: both views plan alike, most carried."""

from __future__ import annotations

import re

import pytest

from bench.scheduler import carried_pass


def test_the_carried_view_plans_what_a_view_built_afresh_plans(capsys: pytest.CaptureFixture[str]) -> None:
    carried_pass.main(["--machines", "200", "--tasks-per-machine", "5", "--passes", "4", "--arrival", "20"])
    out = capsys.readouterr().out
    assert "200 machines, 1080 running tasks" in out  # the fill and each pass's 20 placed
    assert "the same plan in 4 of 4" in out
    built, carried = map(int, re.search(r"views built (\d+), carried (\d+)", out).groups())  # type: ignore[union-attr]
    assert (built, carried) == (1, 4)
