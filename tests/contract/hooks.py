"""Schemathesis hooks for the master's contract run: a read that would stream (a watch, followed logs, the events) ends within a second, a revision floor is one the cache has reached, a `task exec` ends within a second, and an autoscale `max` is not below its `min`."""

from __future__ import annotations

from typing import Any

import schemathesis

_TRUE = {"1", "true", "yes", "on"}


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    """A valid value replaced by another valid one, so the case stays as valid or invalid as generated."""
    _autoscale_in_order(case.body)
    _exec_within_a_second(case)
    query = case.query
    if query is None:
        return
    for flag in ("watch", "follow"):
        if str(query.get(flag, "")).lower() in _TRUE:
            query[flag] = "false"
    # A floor ahead of the cache is a 503 by design (docs/api.md, Freshness of reads).
    if str(query.get("min_revision", "")).strip().isdigit():
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
