"""Table tests of the job autoscaler's pure decision logic and metric arithmetic."""

from __future__ import annotations

import math

import pytest

from reference.elastic.decisions import (
    Policy,
    Why,
    clamp,
    counter_rate,
    decide,
    parse_counter,
    raw_desired,
)

P = Policy(min=1, max=5, target=10.0, scale_up_cooldown=5.0, scale_down_cooldown=30.0, stabilization=10.0)


@pytest.mark.parametrize(
    ("current", "ready", "unready", "want"),
    [
        (1, [10.0], 0, 1),  # on target
        (1, [10.9], 0, 1),  # inside the 10% band
        (1, [11.5], 0, 2),  # ceil(1 * 1.15)
        (1, [30.0], 0, 3),  # ceil(1 * 3)
        (2, [30.0, 30.0], 0, 6),
        (3, [12.0, 12.0, 12.0], 0, 4),  # 3.6 -> 4
        (4, [2.0, 2.0, 2.0, 2.0], 0, 1),  # 0.8 -> 1
        (4, [0.0, 0.0, 0.0, 0.0], 0, 0),  # no load at all: clamp to min happens later
        (2, [], 2, 2),  # nothing measured: hold
        (3, [30.0], 2, 3),  # up: the 2 unmeasured count as idle -> avg 10 -> on target
        (3, [60.0], 2, 6),  # up: (60 + 0 + 0) / 3 = 20 -> ratio 2 -> 6
        (3, [2.0], 2, 3),  # down: unmeasured count as on target -> (2+10+10)/3=7.3 -> 0.73 -> ceil(2.2)=3
        (4, [1.0], 3, 4),  # down: (1+30)/4 = 7.75 -> ratio .775 -> ceil(3.1) = 4
        (5, [0.0, 0.0], 3, 3),  # down: (0+30)/5 = 6 -> 0.6 -> 3
    ],
)
def test_raw_desired(current: int, ready: list[float], unready: int, want: int) -> None:
    assert raw_desired(current, ready, unready, 10.0) == want


def test_raw_desired_holds_when_the_guess_flips_direction() -> None:
    # Measured says up (15 > 10), but with two idle tasks the average is 5: hold.
    assert raw_desired(3, [15.0], 2, 10.0) == 3


def test_raw_desired_whole_products_do_not_round_up() -> None:
    assert raw_desired(3, [12.000000001] * 3, 0, 4.0) == 9


@pytest.mark.parametrize(("n", "want"), [(0, 1), (1, 1), (3, 3), (5, 5), (9, 5)])
def test_clamp(n: int, want: int) -> None:
    assert clamp(n, P) == want


@pytest.mark.parametrize(
    ("now", "current", "rec", "last_up", "history", "want", "why"),
    [
        # up at once when no resize happened yet
        (100.0, 1, 3, None, (), 3, Why.SCALE_UP),
        # up clamped to max
        (100.0, 1, 9, None, (), 5, Why.SCALE_UP),
        # up within the up cooldown: hold
        (100.0, 1, 3, 97.0, (), 1, Why.UP_COOLDOWN),
        # up just after the up cooldown
        (100.0, 1, 3, 95.0, (), 3, Why.SCALE_UP),
        # steady
        (100.0, 3, 3, 10.0, (), 3, Why.STEADY),
        # down, but a higher recommendation within the stabilization window holds it
        (100.0, 4, 1, 10.0, ((95.0, 4),), 4, Why.STABILIZING),
        # down to the highest recent recommendation below current
        (100.0, 4, 1, 10.0, ((95.0, 2), (97.0, 3)), 3, Why.SCALE_DOWN),
        # a recommendation older than the window no longer counts
        (100.0, 4, 1, 10.0, ((89.0, 4), (95.0, 2)), 2, Why.SCALE_DOWN),
        # down within the down cooldown: hold
        (100.0, 4, 1, 80.0, (), 4, Why.DOWN_COOLDOWN),
        # down to zero load is clamped at min
        (100.0, 4, 0, 10.0, (), 1, Why.SCALE_DOWN),
        # outside the bounds (a user resized past max): corrected at once, cooldown or not
        (100.0, 8, 8, 99.0, (), 5, Why.BOUNDS),
        (100.0, 0, 0, 99.0, (), 1, Why.BOUNDS),
    ],
)
def test_decide(
    now: float, current: int, rec: int, last_up: float | None, history: tuple, want: int, why: Why
) -> None:
    d = decide(now, current, rec, P, last_up, history)
    assert (d.desired, d.why) == (want, why)


def test_decide_keeps_only_the_window() -> None:
    d = decide(100.0, 2, 2, P, None, ((80.0, 5), (95.0, 3)))
    assert d.recommendations == ((95.0, 3), (100.0, 2))


def test_a_dip_shorter_than_the_window_does_not_shrink_the_job() -> None:
    history: tuple = ()
    current = 4
    for t, rec in [(0, 4), (2, 4), (4, 1), (6, 1), (8, 4), (10, 4)]:
        d = decide(100.0 + t, current, rec, P, 0.0, history)
        history, current = d.recommendations, d.desired
        assert current == 4


@pytest.mark.parametrize(
    ("samples", "want"),
    [
        ([], None),
        ([(0.0, 5.0)], None),
        ([(0.0, 5.0), (0.0, 9.0)], None),  # no time passed
        ([(0.0, 0.0), (2.0, 20.0)], 10.0),
        ([(0.0, 0.0), (1.0, 10.0), (3.0, 30.0)], 10.0),
        ([(0.0, 100.0), (1.0, 110.0), (2.0, 4.0)], 7.0),  # restart: 10 then 4 from zero
    ],
)
def test_counter_rate(samples: list, want: float | None) -> None:
    got = counter_rate(samples)
    assert got == want if want is None else math.isclose(got or 0.0, want)


METRICS = """# HELP hello_requests_total Requests served, by path and status code.
# TYPE hello_requests_total counter
hello_requests_total{path="/",code="200"} 41
hello_requests_total{path="/healthz",code="200"} 7
hello_requests_total{path="other",code="404"} 2
hello_inflight 3
"""


def test_parse_counter() -> None:
    assert parse_counter(METRICS, "hello_requests_total") == 50
    assert parse_counter(METRICS, "hello_requests_total", ('path="/healthz"',)) == 43
    assert parse_counter(METRICS, "hello_inflight") == 3
    assert parse_counter(METRICS, "hello_requests") is None
    assert parse_counter("garbage\n", "hello_requests_total") is None
