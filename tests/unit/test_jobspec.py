"""The job file model: quantities, bands, strict fields, error paths, round trip to the spec's Job."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest

from reference.jobspec import (
    AutoscaleSpec,
    ConstraintSpec,
    JobFileError,
    JobSpec,
    json_schema,
    load_job_file,
    parse_job,
)
from spec.model import ConstraintOp, RestartPolicy

BASE = {"name": "web", "user": "alice", "command": ["python", "-m", "examples.hello_world.server"]}


def errors_of(doc: dict) -> dict[str, str]:
    with pytest.raises(JobFileError) as info:
        parse_job(doc)
    return {e["field"]: e["error"] for e in info.value.errors}


@pytest.mark.parametrize(
    ("given", "milli"), [(0.25, 250), ("250m", 250), (1, 1000), ("2", 2000), ("1.5", 1500)]
)
def test_cpu_numbers_are_cores_and_m_is_milli(given: object, milli: int) -> None:
    assert parse_job({**BASE, "request": {"cpu": given}}).request["cpu"] == milli


@pytest.mark.parametrize(
    ("band", "priority"), [("best_effort", 0), ("batch", 100), ("production", 200), ("monitoring", 300), (250, 250)]
)
def test_priority_band_names_map_to_floors(band: object, priority: int) -> None:
    assert parse_job({**BASE, "priority": band}).priority == priority


def test_spec_job_carries_every_scheduling_field() -> None:
    spec = parse_job(
        {**BASE, "priority": "production", "task_count": 3,
         "request": {"cpu": "500m", "ram": "128MiB", "gpu": 1, "ssd": 2},
         "constraints": [{"attr": "rack", "op": "in", "values": ["r1", "r2"]}, {"attr": "arch", "value": "x86"}],
         "restart_policy": "always", "package": "web-v1"}
    )  # fmt: skip
    job = spec.to_spec_job()
    assert (job.key, job.priority, job.task_count) == ("alice/web", 200, 3)
    assert job.request.as_dict() == {"cpu": 500, "ram": 128 * 2**20, "gpu": 1, "ssd": 2}
    assert job.constraints[0].op is ConstraintOp.IN and job.constraints[0].values == ("r1", "r2")
    assert job.constraints[1].op is ConstraintOp.EQ
    assert job.restart_policy is RestartPolicy.ALWAYS and job.package == "web-v1"


def test_canonical_form_parses_back_to_the_same_job() -> None:
    spec = parse_job({**BASE, "request": {"cpu": 0.1, "ram": "1GiB"}, "health_check": {"path": "/h"}})
    assert JobSpec.model_validate(spec.canonical()) == spec


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"request": {"cpu": "fast"}}, "request.cpu"),
        ({"request": {"ram": "12 parsecs"}}, "request.ram"),
        ({"priority": 400}, "priority"),
        ({"priority": "urgent"}, "priority"),
        ({"name": "a/b"}, "name"),
        ({"task_count": -1}, "task_count"),
        ({"restart_policy": "sometimes"}, "restart_policy"),
        ({"health_check": {"path": "healthz"}}, "health_check.path"),
        ({"constraints": [{"attr": "rack", "op": "eq", "values": ["a", "b"]}]}, "constraints.0"),
        ({"constraints": [{"attr": "rack"}]}, "constraints.0"),
        ({"replicas": 3}, "replicas"),
        ({"command": []}, "command"),
    ],
)
def test_bad_fields_are_named(change: dict, field: str) -> None:
    assert field in errors_of({**BASE, **change})


def test_missing_fields_are_named() -> None:
    assert set(errors_of({"name": "x"})) >= {"user", "command"}


def test_load_job_file_reports_yaml_and_fields(tmp_path: Path) -> None:
    good = tmp_path / "job.yaml"
    good.write_text("name: web\nuser: alice\ncommand: [sleep, '10']\nrequest: {cpu: 250m, ram: 64MiB}\n")
    assert load_job_file(good).request == {"cpu": 250, "ram": 64 * 2**20}
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    with pytest.raises(JobFileError, match="not valid YAML"):
        load_job_file(broken)
    with pytest.raises(JobFileError, match="cannot read"):
        load_job_file(tmp_path / "absent.yaml")
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(JobFileError):
        load_job_file(listy)


def test_json_schema_forbids_extra_fields() -> None:
    schema = json_schema()
    assert schema["additionalProperties"] is False
    assert {"name", "user", "command"} <= set(schema["required"])


# --- the job file's JSON Schema states the model's cross-field rules --------------------------


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (ConstraintSpec, {"attr": "rack", "value": "r1"}),
        (ConstraintSpec, {"attr": "rack", "op": "in", "values": ["r1", "r2"]}),
        (ConstraintSpec, {"attr": "rack", "op": "ne", "values": ["r1"], "value": None}),
        (ConstraintSpec, {"attr": "rack"}),  # neither
        (ConstraintSpec, {"attr": "rack", "value": "r1", "values": ["r1"]}),  # both
        (ConstraintSpec, {"attr": "rack", "op": "in", "values": []}),
        (ConstraintSpec, {"attr": "rack", "values": ["r1", "r2"]}),  # eq takes one value
        (ConstraintSpec, {"attr": "rack", "op": "ne", "values": ["r1", "r2"]}),
        (AutoscaleSpec, {"min": 1, "max": 3, "metric": "cpu", "target": 1000}),
        (AutoscaleSpec, {"min": 1, "max": 3, "metric": "cpu", "target": 1001}),  # percent: at most 1000
        (AutoscaleSpec, {"min": 1, "max": 3, "metric": "requests_per_task", "target": 5000}),
    ],
)  # fmt: skip
def test_the_schema_and_the_model_agree(model: type, body: dict) -> None:
    schema = JobSpec.model_json_schema()
    valid = jsonschema.Draft202012Validator({**schema["$defs"][model.__name__], "$defs": schema["$defs"]}).is_valid(body)
    try:
        model.model_validate(body)
        accepted = True
    except ValueError:
        accepted = False
    assert valid == accepted


def test_max_below_min_is_the_rule_the_schema_says_in_words() -> None:
    # JSON Schema cannot compare two figures: the document says it, the model refuses it.
    assert "at least `min`" in JobSpec.model_json_schema()["$defs"]["AutoscaleSpec"]["properties"]["max"]["description"]
    with pytest.raises(ValueError, match=r"max \(1\) must be at least min \(3\)"):
        AutoscaleSpec.model_validate({"min": 3, "max": 1, "metric": "cpu", "target": 70})


def test_a_job_file_reads_the_same_on_both_command_lines(tmp_path):
    """JSON is read as JSON (no YAML import on the fast path), YAML's flow style and block style
    as YAML, and the full command line's reader and the fast path's agree on each."""
    from reference import jobtext
    from reference.cli import fastjobs

    cases = {
        "a.json": ('{"name": "x", "user": "u", "task_count": 1e0}', {"name": "x", "user": "u", "task_count": 1.0}),
        "b.yaml": ("{name: x, user: u}", {"name": "x", "user": "u"}),
        "c.yaml": ("name: x\nuser: u\ntask_count: 2\n", {"name": "x", "user": "u", "task_count": 2}),
    }
    for file, (text, expected) in cases.items():
        path = tmp_path / file
        path.write_text(text)
        assert jobtext.parse(text) == expected, file
        assert fastjobs.read_job_file(str(path)) == expected, file
    with pytest.raises(jobtext.NotParsed):
        jobtext.parse("name: [unclosed")
    (tmp_path / "d.yaml").write_text("name: [unclosed")
    with pytest.raises(fastjobs.Refused):
        fastjobs.read_job_file(str(tmp_path / "d.yaml"))
    with pytest.raises(JobFileError, match="not valid YAML"):
        load_job_file(tmp_path / "d.yaml")
