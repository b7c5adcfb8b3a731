"""The elastic campaign's arithmetic: stages, per-second series, reaction times."""

from __future__ import annotations

import pytest

from loadtests.elastic.analysis import (
    Request,
    Sample,
    parse_stages,
    per_second,
    scale_down_s,
    settled_after,
    step_reactions,
)


def test_parse_stages() -> None:
    assert parse_stages("30:6, 0:2") == [(0.0, 2), (30.0, 6)]
    with pytest.raises(ValueError, match="AT_S:USERS"):
        parse_stages("0:2,30")


def test_per_second() -> None:
    reqs = [Request(100.2, 10.0, True, "", ""), Request(100.7, 30.0, True, "", ""),
            Request(101.5, 0.0, False, "", "refused")]  # fmt: skip
    s = per_second(reqs, 100.0, 102.0)
    assert [x["rps"] for x in s] == [2.0, 1.0]
    assert [x["errors"] for x in s] == [0.0, 1.0]
    assert s[1]["p95_ms"] == 30.0  # the window reaches back over the previous second


@pytest.mark.parametrize(
    ("values", "want"),
    [
        ([100, 100, 100], 0.0),  # never over
        ([300, 300, 100, 100], 2.0),
        ([300, 100, 300, 100, 100], 3.0),  # over again: counts from the last time
        ([100, 300], None),  # still over at the end of the stage
    ],
)
def test_settled_after(values: list[float], want: float | None) -> None:
    series = [(10.0 + i, float(v)) for i, v in enumerate(values)]
    assert settled_after(series, 10.0, 100.0, 250.0) == want


def sample(at: float, count: int, serving: int, draining: int = 0) -> Sample:
    return Sample(at, count, serving, draining, 1)


def test_step_reactions_and_scale_down() -> None:
    stages = [(0.0, 2), (10.0, 6), (30.0, 1), (50.0, 0)]
    samples = [sample(float(t), 1, 1) for t in range(0, 13)]
    samples += [sample(13.0, 3, 1), sample(14.0, 3, 2), sample(18.0, 3, 3), sample(25.0, 3, 3)]
    samples += [sample(35.0, 3, 2, 1), sample(41.0, 1, 1), sample(45.0, 1, 1)]
    (step,) = step_reactions(stages, samples, [(12.0, 400.0), (15.0, 100.0)], 250.0)
    assert (step.users_before, step.users_after, step.tasks_before, step.tasks_after) == (2, 6, 1, 3)
    assert (step.decided_s, step.ready_s, step.p95_ok_s) == (3.0, 8.0, 3.0)
    assert scale_down_s(30.0, samples, 1) == (11.0, 11.0)
