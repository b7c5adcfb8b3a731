"""Strings the kernel cannot take are refused at the door: a NUL byte in a command item, an env
name or value or the cwd, and '=' in (or an empty) env name are a 422 naming the field from the
API, its dry run and the CLI's own check; nothing is written and nothing answers 5xx.

The attack this replays: a job whose env value held a NUL was accepted (201); the borglet's
start batch then raised `ValueError: embedded null byte`, and that task and the six batched
after it stayed QUEUED, holding their reservations.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from reference import jobspec
from tests.integration.cellkit import REPO, LocalCell, sleeper_job

pytestmark = pytest.mark.integration

# (what the job file holds, the field the refusal names)
BAD: list[tuple[dict[str, Any], str]] = [
    ({"env": {"FOO": "a\x00b"}}, "env.FOO"),
    ({"env": {"F\x00O": "a"}}, "env.F\\x00O"),
    ({"env": {"LD_PRELOAD=/evil.so": "x"}}, "env.LD_PRELOAD=/evil.so"),
    ({"env": {"": "x"}}, "env"),
    ({"command": ["/bin/sle\x00ep", "1"]}, "command.0"),
    ({"command": ["/bin/sleep", "1\x002"]}, "command.1"),
    ({"cwd": "/tmp\x00/x"}, "cwd"),
]
IDS = ["env-value-nul", "env-name-nul", "env-name-equals", "env-name-empty", "program-nul", "argument-nul", "cwd-nul"]


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCell]:
    c = LocalCell(tmp_path_factory.mktemp("badinput"), masters=1, borglets=1)
    with c:
        yield c
    assert c.leftovers() == [], "processes of the cell are still running"


def bad_job(name: str, extra: dict[str, Any]) -> dict[str, Any]:
    return sleeper_job(name, user="mallory", **extra)


def jobs_of(cell: LocalCell, user: str) -> list[str]:
    return [j["name"] for j in cell.get("/v1/jobs", params={"user": user})["jobs"]]


def refused_fields(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 422, (answer.status_code, answer.text)
    return [item["field"] for item in answer.json()["detail"]]


@pytest.mark.parametrize(("extra", "field"), BAD, ids=IDS)
def test_the_api_refuses_it_naming_the_field_and_writes_nothing(cell: LocalCell, extra: dict[str, Any], field: str) -> None:
    name = f"bad-{IDS[BAD.index((extra, field))]}"
    fields = refused_fields(cell.request("POST", "/v1/jobs", json=bad_job(name, extra)))
    assert fields == [field]
    dry = cell.request("POST", "/v1/jobs", params={"dry_run": "true"}, json=bad_job(name, extra))
    assert refused_fields(dry) == [field]
    assert name not in jobs_of(cell, "mallory")


def test_every_error_says_what_to_change(cell: LocalCell) -> None:
    answer = cell.request("POST", "/v1/jobs", json=bad_job("nul", {"env": {"FOO": "a\x00b"}}))
    assert answer.json()["detail"] == [{"field": "env.FOO", "error": "contains a NUL byte; remove it"}]
    answer = cell.request("POST", "/v1/jobs", json=bad_job("eq", {"env": {"A=B": "x"}}))
    assert "'='" in answer.json()["detail"][0]["error"] and "rename" in answer.json()["detail"][0]["error"]


def test_a_raw_nul_byte_in_the_body_is_a_4xx_not_a_5xx(cell: LocalCell) -> None:
    """A NUL written into the JSON text itself (not escaped): not JSON at all, a 422."""
    text = json.dumps(bad_job("raw", {})).replace('"import time', '"\x00import time').encode()
    assert b"\x00" in text
    answer = cell.request("POST", "/v1/jobs", content=text, headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert "raw" not in jobs_of(cell, "bob")


def test_what_the_kernel_takes_is_still_accepted(cell: LocalCell) -> None:
    """'=' in a value, and a name with every other character, are ordinary environment entries."""
    job = sleeper_job("fine", user="mallory", env={"OPTS": "a=b=c", "lower.dotted-name": "x y"}, cwd="/tmp")
    answer = cell.submit(job)
    assert answer.status_code == 201, answer.text
    assert "fine" in jobs_of(cell, "mallory")
    assert cell.request("DELETE", "/v1/jobs/mallory/fine").status_code == 200


def test_the_job_schema_states_the_rules() -> None:
    schema = jobspec.json_schema()["properties"]
    assert re.search(schema["env"]["propertyNames"]["pattern"], "A=B") is None
    assert re.search(schema["env"]["propertyNames"]["pattern"], "") is None
    assert re.search(schema["env"]["additionalProperties"]["pattern"], "a\x00b") is None
    assert re.search(schema["command"]["items"]["pattern"], "a\x00b") is None
    assert re.search(schema["command"]["prefixItems"][0]["allOf"][0]["pattern"], "a\x00b") is None
    assert re.search(schema["cwd"]["anyOf"][0]["pattern"], "/t\x00") is None
    assert re.search(schema["env"]["propertyNames"]["pattern"], "PATH") is not None


@pytest.mark.parametrize(("extra", "field"), BAD, ids=IDS)
def test_the_cli_refuses_the_file_before_sending_it(cell: LocalCell, tmp_path: Path, extra: dict[str, Any], field: str) -> None:
    name = f"cli-{IDS[BAD.index((extra, field))]}"
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(bad_job(name, extra)))
    assert yaml.safe_load(path.read_text()) == bad_job(name, extra)  # the NUL survives YAML
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINBORG_")}
    env.update(PYTHONPATH=str(REPO), COLUMNS="200", MINBORG_TOKEN=cell.admin_token)
    done = subprocess.run(
        [sys.executable, "-m", "reference.cli", "job", "submit", str(path), "--detach", "--master", cell.masters[0].url],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0, done.stdout + done.stderr
    assert field in done.stdout + done.stderr, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert name not in jobs_of(cell, "mallory")
