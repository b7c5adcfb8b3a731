"""The one percentile convention (nearest-rank), checked by hand on small tables."""

from __future__ import annotations

import random

import pytest

from bench.stats import histogram_percentile, nearest_rank, percentile

TEN = [70.0, 10.0, 100.0, 40.0, 20.0, 90.0, 60.0, 30.0, 80.0, 50.0]  # 10..100, shuffled


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.0, 10.0),  # rank max(1, ceil(0 * 10)) = 1: the smallest
        (0.10, 10.0),  # ceil(0.10 * 10) = 1
        (0.11, 20.0),  # ceil(1.1) = 2
        (0.50, 50.0),  # ceil(5.0) = 5: the 5th of 10, not the 6th
        (0.90, 90.0),  # ceil(9.0) = 9
        (0.95, 100.0),  # ceil(9.5) = 10
        (0.99, 100.0),  # ceil(9.9) = 10
        (1.0, 100.0),  # ceil(10.0) = 10: the largest
    ],
)
def test_percentile_of_ten_values(q: float, expected: float) -> None:
    assert percentile(TEN, q) == expected


def test_percentile_of_a_hundred_values_is_the_value_at_its_rank() -> None:
    hundred = [float(i) for i in range(1, 101)]
    # ceil(0.95 * 100) = 95, ceil(0.99 * 100) = 99: the 99th of 100, not the maximum.
    assert (percentile(hundred, 0.5), percentile(hundred, 0.95), percentile(hundred, 0.99)) == (50.0, 95.0, 99.0)


def test_one_value_is_every_percentile() -> None:
    assert {percentile([7.0], q) for q in (0.0, 0.5, 0.99, 1.0)} == {7.0}


def test_no_values_have_no_percentile() -> None:
    assert percentile([], 0.95) is None
    assert histogram_percentile({}, 0.95) is None


def test_a_percent_instead_of_a_fraction_is_refused() -> None:
    with pytest.raises(ValueError, match=r"fraction in \[0, 1\] such as 0.99, got 99"):
        percentile([1.0, 2.0], 99)
    with pytest.raises(ValueError, match="at least one sample"):
        nearest_rank(0, 0.5)


def test_percentile_of_a_histogram() -> None:
    hist = {1: 50, 2: 45, 30: 4, 200: 1}  # 100 samples; cumulative 50, 95, 99, 100
    assert histogram_percentile(hist, 0.5) == 1.0  # rank 50: the last of the 1s
    assert histogram_percentile(hist, 0.95) == 2.0  # rank 95: the last of the 2s
    assert histogram_percentile(hist, 0.99) == 30.0  # rank 99
    assert histogram_percentile(hist, 1.0) == 200.0  # rank 100


def test_a_histogram_gives_the_percentile_of_the_samples_it_counts() -> None:
    rng = random.Random(7)
    for _ in range(200):
        hist = {rng.randrange(1, 500): rng.randrange(1, 20) for _ in range(rng.randrange(1, 12))}
        samples = [float(bucket) for bucket, count in hist.items() for _ in range(count)]
        for q in (0.0, 0.5, 0.9, 0.95, 0.99, 1.0):
            assert histogram_percentile(hist, q) == percentile(samples, q)
