"""What the kernel cannot take in a job file (reference/jobspec.py): a NUL byte in a command
item, an env name or value or the cwd, '=' in an env name, an empty env name; each refused with
the field named, as the API, its dry run and `minborg job submit` report it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from reference.jobspec import JobFileError, json_schema, parse_job

BASE: dict[str, Any] = {"name": "j", "user": "u", "command": ["/bin/sleep", "1"]}


@pytest.mark.parametrize(
    ("extra", "field", "error"),
    [
        ({"env": {"FOO": "a\x00b"}}, "env.FOO", "contains a NUL byte; remove it"),
        ({"env": {"F\x00O": "a"}}, "env.F\\x00O", "the variable's name contains a NUL byte; remove it"),
        ({"env": {"A=B": "a"}}, "env.A=B", "a variable's name cannot contain '=' (the kernel reads NAME=VALUE); rename it"),
        ({"env": {"": "a"}}, "env", "a variable's name must not be empty"),
        ({"command": ["/bin/sl\x00eep"]}, "command.0", "contains a NUL byte; remove it"),
        ({"command": ["/bin/sleep", "1", "\x00"]}, "command.2", "contains a NUL byte; remove it"),
        ({"cwd": "/tmp/\x00"}, "cwd", "contains a NUL byte; remove it"),
    ],
)
def test_refused_with_the_field_named(extra: dict[str, Any], field: str, error: str) -> None:
    with pytest.raises(JobFileError) as caught:
        parse_job({**BASE, **extra})
    assert caught.value.errors == [{"field": field, "error": error}]


def test_every_bad_string_of_a_file_is_named_at_once() -> None:
    with pytest.raises(JobFileError) as caught:
        parse_job({**BASE, "env": {"A=B": "x", "C": "\x00"}, "cwd": "\x00"})
    assert sorted(e["field"] for e in caught.value.errors) == ["cwd", "env.A=B", "env.C"]


def test_what_the_kernel_takes_is_accepted() -> None:
    spec = parse_job({**BASE, "env": {"OPTS": "a=b", "lower.dotted-name": "", "é": "ü"}, "cwd": "/tmp/x y"})
    assert spec.env == {"OPTS": "a=b", "lower.dotted-name": "", "é": "ü"}


def test_the_schema_states_each_rule() -> None:
    props = json_schema()["properties"]
    names, values = props["env"]["propertyNames"]["pattern"], props["env"]["additionalProperties"]["pattern"]
    assert [bool(re.search(names, n)) for n in ("PATH", "a.b", "A=B", "", "A\x00")] == [True, True, False, False, False]
    assert [bool(re.search(values, v)) for v in ("", "a=b", "a\x00")] == [True, True, False]
    program = props["command"]["prefixItems"][0]
    assert re.search(program["pattern"], "  ") is None  # the program must hold a non-space
    assert re.search(program["allOf"][0]["pattern"], "/bin/\x00") is None
    assert re.search(props["command"]["items"]["pattern"], "x\x00") is None
    assert re.search(props["cwd"]["anyOf"][0]["pattern"], "/\x00") is None


@pytest.mark.parametrize(
    ("extra", "valid"),
    [
        ({}, True),
        ({"env": {"OPTS": "a=b"}, "cwd": "/tmp"}, True),
        ({"env": {"FOO": "a\x00b"}}, False),
        ({"env": {"A=B": "x"}}, False),
        ({"env": {"": "x"}}, False),
        ({"command": ["/bin/sl\x00eep"]}, False),
        ({"command": ["/bin/sleep", "\x00"]}, False),
        ({"command": ["  "]}, False),
        ({"cwd": "/\x00"}, False),
    ],
)
def test_a_json_schema_validator_agrees_with_the_model(extra: dict[str, Any], valid: bool) -> None:
    """The schema as an editor or schemathesis reads it (2020-12: `items` skips the first item,
    which `prefixItems` covers), against what the model takes."""
    jsonschema = pytest.importorskip("jsonschema")
    document = {**BASE, **extra}
    errors = list(jsonschema.Draft202012Validator(json_schema()).iter_errors(document))
    assert (not errors) is valid, errors
    try:
        parse_job(document)
        taken = True
    except JobFileError:
        taken = False
    assert taken is valid
