"""The job file's `autoscale` field: accepted forms and the errors it names."""

from __future__ import annotations

import pytest

from reference.jobspec import AutoscaleMetric, JobFileError, parse_job

BASE = {"name": "web", "user": "u", "command": ["python", "-m", "x"]}


def test_autoscale_is_optional_and_parsed() -> None:
    assert parse_job(BASE).autoscale is None
    spec = parse_job({**BASE, "autoscale": {"min": 1, "max": 4, "metric": "requests_per_task", "target": 20}})
    assert spec.autoscale is not None
    assert spec.autoscale.metric is AutoscaleMetric.REQUESTS_PER_TASK
    assert (spec.autoscale.scale_up_cooldown, spec.autoscale.scale_down_cooldown) == (5.0, 30.0)
    again = parse_job(spec.canonical())
    assert again.autoscale == spec.autoscale


@pytest.mark.parametrize(
    ("autoscale", "field", "error"),
    [
        ({"min": 3, "max": 1, "metric": "cpu", "target": 70}, "autoscale", "max (1) must be at least min (3)"),
        ({"min": 0, "max": 2, "metric": "cpu", "target": 70}, "autoscale.min", "greater than or equal to 1"),
        ({"min": 1, "max": 2, "metric": "rps", "target": 70}, "autoscale.metric", "'cpu' or 'requests_per_task'"),
        ({"min": 1, "max": 2, "metric": "cpu", "target": 0}, "autoscale.target", "greater than 0"),
        ({"min": 1, "max": 2, "metric": "cpu", "target": 5000}, "autoscale", "percent of the request"),
        ({"min": 1, "max": 2, "metric": "cpu", "target": 70, "scale_up_cooldown": -1}, "autoscale.scale_up_cooldown", "greater"),
        ({"min": 1, "max": 2, "metric": "cpu", "target": 70, "cooldown": 3}, "autoscale.cooldown", "unknown field"),
        ({"max": 2, "metric": "cpu", "target": 70}, "autoscale.min", "required field is missing"),
    ],
)
def test_autoscale_errors_name_the_field(autoscale: dict, field: str, error: str) -> None:
    with pytest.raises(JobFileError) as info:
        parse_job({**BASE, "autoscale": autoscale})
    assert any(e["field"] == field and error in e["error"] for e in info.value.errors), info.value.errors
