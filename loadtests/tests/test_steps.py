"""The step shape's stop rules and per-step arithmetic, as pure functions."""

from __future__ import annotations

import pytest

from loadtests.steps import (
    StopReason,
    StopRules,
    check,
    diff,
    group_of,
    step_stats,
    user_ladder,
)

RULES = StopRules(slo_p95_ms=100.0, max_users=20, max_error_rate=0.01, min_requests=20)


def stats(users: int = 4, requests: int = 1000, failures: int = 0, hist: dict[int, int] | None = None):
    return step_stats(users, 10.0, hist if hist is not None else {10: 1000}, requests, failures)


def test_a_healthy_step_below_the_maximum_passes() -> None:
    assert check(stats(), 0, RULES) is None


def test_error_rate_over_one_percent_trips() -> None:
    verdict = check(stats(failures=11), 3, RULES)
    assert verdict is not None
    assert (verdict.reason, verdict.step, verdict.users) == (StopReason.ERROR_RATE, 3, 4)
    assert verdict.value == pytest.approx(0.011)


def test_error_rate_of_exactly_one_percent_holds() -> None:
    assert check(stats(failures=10), 0, RULES) is None


def test_p95_over_the_slo_trips() -> None:
    hist = {10: 900, 150: 100}  # p95 falls in the 150 ms bucket
    verdict = check(stats(hist=hist), 2, RULES)
    assert verdict is not None and verdict.reason is StopReason.P95_SLO
    assert verdict.value == 150.0 and verdict.limit == 100.0


def test_errors_are_judged_before_latency() -> None:
    verdict = check(stats(failures=50, hist={500: 950}), 0, RULES)
    assert verdict is not None and verdict.reason is StopReason.ERROR_RATE


def test_too_few_requests_cannot_trip_the_slo() -> None:
    assert check(stats(requests=5, hist={900: 5}), 0, RULES) is None


def test_the_maximum_step_ends_the_ladder() -> None:
    verdict = check(stats(users=20), 5, RULES)
    assert verdict is not None and verdict.reason is StopReason.MAX_USERS


def test_a_step_without_requests_is_not_an_error() -> None:
    assert check(stats(requests=0, hist={}), 0, RULES) is None


def test_diff_keeps_only_the_new_samples() -> None:
    assert diff({1: 5, 2: 3, 7: 1}, {1: 5, 2: 1}) == {2: 2, 7: 1}


def test_rates() -> None:
    s = stats(requests=500, failures=5)
    assert s.rps == 50.0 and s.error_rate == 0.01


@pytest.mark.parametrize(
    ("start", "step", "top", "rungs"),
    [(2, 4, 14, [2, 6, 10, 14]), (2, 4, 12, [2, 6, 10, 12]), (5, 5, 5, [5])],
)
def test_user_ladder(start: int, step: int, top: int, rungs: list[int]) -> None:
    assert user_ladder(start, step, top) == rungs


def test_bad_ladder() -> None:
    with pytest.raises(ValueError):
        user_ladder(5, 1, 2)


def test_group_of_request_names() -> None:
    assert group_of("read: list jobs") == "read"
    assert group_of("write: submit") == "write"
    assert group_of("plain") == "other"
