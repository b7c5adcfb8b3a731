"""A job's versions as its record keeps them: each version's job file, when it was written and what changed (pure).

Submitting a job records version 0; each change of its file (`PUT /v1/jobs/{user}/{name}`,
`job run`, `job update`, a revert) records the next one. The record keeps the last `KEPT`
versions, so `job history` lists them and `job revert` can go back to any of them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from reference.jobspec import JobSpec
from reference.master.cell import JobInfo

KEPT = 10  # versions kept in a job's record

Version = tuple[int, float, str, tuple[str, ...]]  # (version, at, the file as JSON, fields changed)


def changed_fields(old: dict[str, Any] | None, new: dict[str, Any]) -> tuple[str, ...]:
    """The top-level fields of a job file that differ between two canonical files (all of
    `new`'s fields when there is no `old`)."""
    if old is None:
        return tuple(sorted(new))
    return tuple(sorted(k for k in {*old, *new} if old.get(k) != new.get(k)))


def file_json(spec: JobSpec) -> str:
    return json.dumps(spec.canonical(), sort_keys=True)


def recorded(info: JobInfo, spec: JobSpec, at: float, version: int) -> JobInfo:
    """`info` with `spec` as its file and `version` appended to its kept versions."""
    before = json.loads(info.versions[-1][2]) if info.versions else info.spec.canonical()
    changes = changed_fields(None if version == 0 else before, spec.canonical())
    kept = (*info.versions, (version, at, file_json(spec), changes))[-KEPT:]
    return replace(info, spec=spec, versions=kept)


def first(spec: JobSpec, at: float) -> JobInfo:
    """The record of a job just submitted: its file, as version 0, and the count it declares."""
    return recorded(JobInfo(spec, at, declared_count=spec.task_count), spec, at, 0)


def find(info: JobInfo, version: int) -> dict[str, Any] | None:
    """The job file of a kept version, None when it is not kept."""
    for v, _, text, _ in info.versions:
        if v == version:
            return dict(json.loads(text))
    return None


def listing(info: JobInfo, current: int) -> list[dict[str, Any]]:
    """The kept versions, newest first, as `GET .../history` answers them."""
    return [
        {"version": v, "at": at, "changed": list(changes), "current": v == current, "file": json.loads(text)}
        for v, at, text, changes in reversed(info.versions)
    ]
