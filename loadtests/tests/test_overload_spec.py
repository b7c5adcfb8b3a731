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
