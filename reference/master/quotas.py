"""Quotas the admin manages: `GET`, `PUT` and `DELETE /v1/quotas/{user}/{band}`, and the pure checks and changes they make.

A quota is cell state the scheduler's admission reads (`spec.model.CellState.quota_for`: the
user's own entry, else user "*"'s), so a change goes through the leader's writer like a
machine added, and a follower forwards it. A quota lowered below what a user's jobs already
request kills nothing: admission is checked when a job is submitted or grows, never again
for work already admitted (docs/decisions.md, "Quotas set through the API").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fastapi import Body, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from reference.jobspec import RESOURCE_NAME_PATTERN, parse_request_value
from reference.master import contract
from reference.master.access import USER_NAME, USER_NAME_RULE
from reference.master.cell import Cell, Draft
from reference.master.mutations import ApiError
from reference.resources import CELL_MACHINES
from spec.model import Band, QuotaKey, Resources

DEFAULT_USER = "*"  # the entry of every user without one of their own
QUOTA_BANDS = (Band.BATCH, Band.PRODUCTION, Band.MONITORING)  # best effort is never limited (Borg)
_RESOURCE_NAME = re.compile(RESOURCE_NAME_PATTERN)

Write = Callable[[Request, Any, Callable[[Draft], Any], Callable[[Any, int], JSONResponse]], Any]


def quota_key(user: str, band: str) -> QuotaKey:
    """The entry a path names; ApiError 422 naming `user` or `band` when it names none."""
    if user != DEFAULT_USER and not USER_NAME.fullmatch(user):
        raise ApiError(422, "user", f'a user name {USER_NAME_RULE}, or "*" for every user without a quota of its own')
    names = ", ".join(b.value for b in QUOTA_BANDS)
    if band == Band.BEST_EFFORT.value:
        raise ApiError(422, "band", f"{band} has no quota: the lowest band is never limited; use one of {names}")
    try:
        parsed = Band(band)
    except ValueError:
        raise ApiError(422, "band", f"unknown band {band!r}; use one of {names}") from None
    return QuotaKey(user, parsed)


def parse_quota_body(payload: Any) -> Resources:
    """A quota's figures as written, with a job request's rules at the scale of the cell
    (`parse_request_value` with `CELL_MACHINES`); ApiError 422 naming the resource at fault.

    A resource the quota does not name is zero, as in `--default-quota`: `{}` lets the user
    admit nothing in the band."""
    if not isinstance(payload, dict):
        raise ApiError(422, "", 'the body must be a JSON object of resources, e.g. {"cpu": "100", "ram": "1TiB"}')
    errors: list[dict[str, str]] = []
    amounts: dict[str, int] = {}
    for name, value in payload.items():
        if not _RESOURCE_NAME.fullmatch(name):
            errors.append({"field": name, "error": "a resource name is lowercase letters, digits and '_', starting with a letter"})
            continue
        try:
            amounts[name] = parse_request_value(name, value, CELL_MACHINES)
        except ValueError as err:
            errors.append({"field": name, "error": str(err)})
    if errors:
        raise ApiError(422, errors[0]["field"], errors[0]["error"], errors)
    return Resources.of(amounts)


def set_quota(d: Draft, key: QuotaKey, amount: Resources) -> QuotaKey:
    """Write the entry. Only later admissions see it: nothing admitted is checked again."""
    d.quotas[key] = amount
    return key


def delete_quota(d: Draft, key: QuotaKey) -> QuotaKey:
    """Remove the user's own entry (it falls back to "*"'s); ApiError 404 when it has none."""
    if key not in d.state.quotas:
        raise ApiError(404, "user", f"{key.user} has no quota of its own in {key.band.value}")
    d.quotas[key] = None
    return key


def quota_view(cell: Cell, user: str, band: Band) -> dict[str, Any] | None:
    """The entry that applies to `user` in `band` (its own, else "*"'s) and what its jobs
    there request; None when neither has one (unlimited)."""
    state = cell.state
    limit = state.quota_for(user, band)
    if limit is None:
        return None
    applies = user if QuotaKey(user, band) in state.quotas else DEFAULT_USER
    return {
        "user": user, "band": band.value, "applies": applies, "limit": limit.as_dict(),
        "used": state.quota_used(user, band).as_dict(),
    }  # fmt: skip


def _refused(err: ApiError) -> JSONResponse:
    return JSONResponse(status_code=err.status, content={"detail": err.errors})


def install(app: FastAPI, replica: Any, write: Write, read: Callable[..., Any]) -> None:
    """Add /v1/quotas/{user}/{band} to a master's app; `write` runs a change on the leader (a
    follower forwards it) and `read` declares a read of the watch cache."""

    def stamped(body: dict[str, Any], revision: int) -> JSONResponse:
        body["revision"] = revision
        return JSONResponse(content=body, headers={"X-Minborg-Revision": str(revision)})

    @read("/v1/quotas/{user}/{band}", responses=contract.answers(404, 503))
    async def get_quota(user: contract.QuotaUser, band: contract.QuotaBand) -> JSONResponse:
        """The quota that applies to a user in a band (its own, else user "*"'s) and what its jobs there request."""
        try:
            key = quota_key(user, band)
        except ApiError as err:
            return _refused(err)
        cell = replica.cache.cell()
        view = quota_view(cell, key.user, key.band)
        if view is None:
            return _refused(ApiError(404, "user", f"no quota applies to {user} in {band}, nor a default (*): unlimited"))
        return stamped({"quota": view}, cell.revision)

    @app.put("/v1/quotas/{user}/{band}", responses=contract.answers(503))
    async def put_quota(user: contract.QuotaUser, band: contract.QuotaBand, request: Request,
                        payload: Any = Body(None)) -> Response:  # fmt: skip
        """Set a user's quota in a band; only admissions after it are checked against it."""
        try:
            key, amount = quota_key(user, band), parse_quota_body(payload)
        except ApiError as err:
            return _refused(err)
        return await write(
            request, payload, lambda d: set_quota(d, key, amount),
            lambda k, rev: stamped({"quota": quota_view(replica.cache.cell(), k.user, k.band)}, rev),
        )  # fmt: skip

    @app.delete("/v1/quotas/{user}/{band}", responses=contract.answers(404, 503))
    async def delete_quota_entry(user: contract.QuotaUser, band: contract.QuotaBand, request: Request) -> Response:
        """Remove a user's own quota in a band: the user falls back to user "*"'s."""
        try:
            key = quota_key(user, band)
        except ApiError as err:
            return _refused(err)
        return await write(
            request, None, lambda d: delete_quota(d, key),
            lambda k, rev: stamped(
                {"deleted": {"user": k.user, "band": k.band.value}, "quota": quota_view(replica.cache.cell(), k.user, k.band)},
                rev,
            ),
        )  # fmt: skip
