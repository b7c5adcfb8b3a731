"""Schemathesis hooks for the master's contract run: a read that would stream (a watch, followed logs, the events) ends within a second, a revision floor is one the cache has reached, a `task exec` ends within a second, an autoscale `max` is not below its `min`, and a job file's PUT names the job of its path."""

from __future__ import annotations

import re
from typing import Any

import schemathesis

from reference.jobspec import NAME_PATTERN

_TRUE = {"1", "true", "yes", "on"}


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    """A valid value replaced by another valid one, so the case stays as valid or invalid as generated."""
    _autoscale_in_order(case.body)
    _exec_within_a_second(case)
    _file_names_its_path(case)
    query = case.query
    if query is None:
        return
    for flag in ("watch", "follow"):
        if str(query.get(flag, "")).lower() in _TRUE:
            query[flag] = "false"
    # A floor ahead of the cache is a 503 by design (docs/api.md, Freshness of reads).
    floor = query.get("min_revision")
    if isinstance(floor, list):  # the parameter given more than once: each floor, as one
        query["min_revision"] = ["0" if str(v).strip().isdigit() else v for v in floor]
    elif str(floor if floor is not None else "").strip().isdigit():
        query["min_revision"] = "0"
    if case.path == "/v1/events":
        timeout = query.get("timeout_s")
        try:
            valid = timeout is None or 0 < float(timeout) <= 300
        except (TypeError, ValueError):
            valid = False
        if valid:
            query["timeout_s"] = 1


def _autoscale_in_order(body: Any) -> None:
    """`max` at least `min` is the one rule of a job body that JSON Schema cannot state (the
    document says it in words); both have the same schema, so swapping them keeps the case
    exactly as valid or invalid as it was generated, and a 422 stays a failure for valid data."""
    autoscale = body.get("autoscale") if isinstance(body, dict) else None
    if not isinstance(autoscale, dict):
        return
    low, high = autoscale.get("min"), autoscale.get("max")
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high)) and high < low:
        autoscale["min"], autoscale["max"] = high, low


def _exec_within_a_second(case: Any) -> None:
    """A `task exec` whose valid limit is cut to a second: a generated command may run (`yes`)."""
    body = case.body
    if not case.path.endswith("/exec") or not isinstance(body, dict):
        return
    limit = body.get("timeout_s", 60)  # left out: the default, 60 s
    if isinstance(limit, int | float) and not isinstance(limit, bool) and 0 < limit <= 600:
        body["timeout_s"] = 1


def _file_names_its_path(case: Any) -> None:
    """A `PUT /v1/jobs/{user}/{name}` whose file names another job is refused (422): the one rule
    between a path and its body that JSON Schema cannot state. The path (any strings) takes the
    body's user and name when both are valid names, so the case stays as valid or invalid as
    generated and a 422 stays a failure for valid data."""
    body, path = case.body, case.path_parameters
    if case.method.upper() != "PUT" or case.path != "/v1/jobs/{user}/{name}" or not isinstance(body, dict) or path is None:
        return
    if all(isinstance(body.get(k), str) and re.fullmatch(NAME_PATTERN, body[k]) for k in ("user", "name")):
        path["user"], path["name"] = body["user"], body["name"]
