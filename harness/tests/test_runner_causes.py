"""A failed run's report leads with what the cell did wrong, not with Hypothesis's wrapper."""

from harness.judge import ConformanceViolation
from harness.runner import causes


def test_nested_groups_are_opened_and_the_violation_comes_out_first() -> None:
    violation = ConformanceViolation("[task_once] alice/web/0 twice")
    inner = ExceptionGroup("replay", [ValueError("strategy drew differently"), violation])
    outer = ExceptionGroup("flaky", [inner, KeyError("k")])
    found = causes(outer)
    assert [type(e) for e in found] == [ValueError, ConformanceViolation, KeyError]
    assert found[1] is violation


def test_a_plain_failure_has_no_causes() -> None:
    assert causes(ConformanceViolation("x")) == []
