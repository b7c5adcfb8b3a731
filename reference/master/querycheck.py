"""Refuse a query parameter the operation does not declare: a typo (`?usr=alice`) is a 422 naming it, not silently ignored."""

from __future__ import annotations

from fastapi import Query, Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from reference.master import freshness


def declared_query(dependant: Dependant) -> frozenset[str]:
    """The query parameters an operation reads: its own and its dependencies', by the name a client sends."""
    names = {field.alias for field in dependant.query_params}
    for sub in dependant.dependencies:
        names |= declared_query(sub)
    return frozenset(names)


# Each operation's declared names, computed on its first request (a route is not hashable).
_DECLARED: dict[int, frozenset[str]] = {}


async def known_query(request: Request) -> None:
    """A dependency of every operation: RequestValidationError (a 422) for each undeclared query parameter."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    declared = _DECLARED.get(id(route))
    if declared is None:
        declared = _DECLARED[id(route)] = declared_query(route.dependant)
    unknown = sorted(set(request.query_params) - declared)
    if unknown:
        takes = ", ".join(sorted(declared)) or "none"
        raise RequestValidationError(
            [
                {"loc": ("query", name), "msg": f"unknown query parameter; this operation takes: {takes}", "type": "extra_forbidden"}
                for name in unknown
            ]
        )


async def freshness_query(
    min_revision: str | None = Query(
        None, alias=freshness.MIN_REVISION_QUERY, pattern=freshness.MIN_REVISION_PATTERN,
        description="answer only once this replica's cache reached this etcd revision (or the "
        f"{freshness.MIN_REVISION_HEADER} header); 503 with Retry-After if it does not soon",
    ),
    allow_stale: str | None = Query(
        None, alias=freshness.ALLOW_STALE_QUERY,
        description="1, true, yes or on: answer even from a cache older than the staleness bound "
        f"(or the {freshness.ALLOW_STALE_HEADER} header)",
    ),
) -> None:  # fmt: skip
    """A dependency of the `GET /v1/...` reads that declares the freshness controls: `ReadGate`
    reads and checks them before the operation runs, so here they are only declared."""
