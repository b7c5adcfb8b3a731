"""Alloc sets in API v1: `POST /v1/allocs` places one through the spec's `alloc_create`, all or nothing; list, show and delete.

An alloc set reserves the same resources on `count` distinct machines. A set over its user's
quota in its band is refused first, with a 403 as a job is (reference/scheduler/admission.py).
Placement is first-fit over the machines by name, each alloc through the spec's own guard (so
what the API accepts is what the spec allows); an alloc that fits no machine refuses the whole
set with a 409 that says why each machine was passed over, and since a change that raises
leaves no trace in the writer, nothing of the set is written. Deleting a set kills the jobs that name it first: the
spec's `alloc_delete` refuses while a job names the set (docs/decisions.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Body, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from reference.allocspec import AllocSetSpec, parse_alloc_set
from reference.jobspec import JobFileError
from reference.master import contract, guard
from reference.master.cell import Draft
from reference.master.mutations import ApiError
from reference.scheduler import admit_alloc_set
from spec.actions import alloc_free
from spec.model import Alloc, CellState, Machine, Resources

Write = Callable[[Request, Any, Callable[[Draft], Any], Callable[[Any, int], JSONResponse]], Awaitable[Response]]


# --- the pure part: why a machine cannot take an alloc, the set's views -----------------------


def passed_over(state: CellState, spec: AllocSetSpec, machine: Machine, alloc: Alloc) -> str | None:
    """Why `machine` cannot hold `alloc` of the set (None: it can), said at the moment it is
    passed over, as the scheduler's reasons are."""
    if not machine.up:
        return "down"
    if any(a.set == alloc.set and a.machine == machine.name for a in state.allocs.values()):
        return "holds another alloc of the set"
    for c in spec.spec_constraints():
        if not c.holds(machine):
            return f"constraint {c}"
    short = alloc.resources.shortfall(alloc_free(state, alloc))
    if short:
        return f"{','.join(short)} short"
    return None


def place_alloc_set(d: Draft, spec: AllocSetSpec) -> list[Alloc]:
    """Create the set's allocs on distinct machines, first-fit by machine name, through the
    spec's `alloc_create`; ApiError 409 naming why, when one of them fits nowhere."""
    if d.state.alloc_set(spec.key):
        raise ApiError(409, "name", f"alloc set {spec.key} exists; delete it or choose another name")
    # The set takes quota as a job does, all of it at once (the jobs in it then take none).
    admission = admit_alloc_set(d.state, spec.user, spec.priority, Resources.of(spec.resources), spec.count)
    if not admission:
        raise ApiError(403, "resources", admission.reason)
    placed = []
    for index in range(spec.count):
        reasons: Counter[str] = Counter()
        for name in sorted(d.state.machines):
            alloc = spec.alloc(index, name)
            why = passed_over(d.state, spec, d.state.machines[name], alloc)
            if why is None and d.step("alloc_create", alloc, reason=f"alloc set {spec.key} created"):
                placed.append(alloc)
                break
            reasons[why or "refused by the cell"] += 1
        else:
            said = "; ".join(f"{n} {why}" for why, n in sorted(reasons.items())) or "the cell has no machines"
            raise ApiError(
                409, "count",
                f"alloc {index} of {spec.count} fits no machine ({said}); nothing was reserved",
            )  # fmt: skip
    return placed


def delete_alloc_set(d: Draft, key: str) -> dict[str, Any]:
    """Kill the jobs naming the set, then release each of its allocs."""
    allocs = d.state.alloc_set(key)
    if not allocs:
        raise ApiError(404, "name", f"no alloc set {key}")
    jobs = sorted(k for k, j in d.state.jobs.items() if j.alloc == key)
    for job in jobs:
        d.step("kill_job", job, reason=f"alloc set {key} deleted")
    for a in allocs:
        if not d.step("alloc_delete", a.name, reason=f"alloc set {key} deleted"):
            raise ApiError(409, "name", f"the cell refuses to delete alloc {a.name}")
    return {"deleted": key, "allocs": len(allocs), "killed_jobs": jobs}


def alloc_set_view(state: CellState, key: str) -> dict[str, Any]:
    """An alloc set as the API shows it: its allocs, what runs in each, and the jobs naming it."""
    allocs = state.alloc_set(key)
    first = allocs[0]
    user, _, name = key.partition("/")
    return {
        "key": key,
        "user": user,
        "name": name,
        "priority": first.priority,
        "count": len(allocs),
        "resources": first.resources.as_dict(),
        "allocs": [
            {"index": a.index, "machine": a.machine, "resources": a.resources.as_dict(),
             "used": state.alloc_used(a.name).as_dict()}
            for a in allocs
        ],  # fmt: skip
        "jobs": sorted(k for k, j in state.jobs.items() if j.alloc == key),
    }


def alloc_set_keys(state: CellState) -> list[str]:
    return sorted({a.set for a in state.allocs.values()})


# --- the shell: the endpoints ------------------------------------------------------------------


def install(app: FastAPI, replica: Any, write: Write, read: Callable[..., Any], stamped: Callable[..., JSONResponse]) -> None:
    """Add /v1/allocs to a master's app; writes go through the app's `write` (the leader's writer, or forwarded)."""

    def refusal(status: int, field: str, error: str) -> JSONResponse:
        return JSONResponse(status_code=status, content={"detail": [{"field": field, "error": error}]})

    @app.post("/v1/allocs", status_code=201, responses=contract.answers(403, 409, 503))
    async def post_alloc_set(request: Request, payload: Any = Body(None)) -> Response:
        try:
            spec = parse_alloc_set(payload)
        except JobFileError as err:
            return JSONResponse(status_code=422, content={"detail": err.errors})
        who = guard.identity_of(request.scope)
        if who is not None and not who.admin and who.name != spec.user:
            return refusal(403, "user", f"the alloc set belongs to user {spec.user}; user {who.name} may create only its own")
        return await write(
            request,
            payload,
            lambda d: place_alloc_set(d, spec),
            lambda _, rev: stamped({"alloc_set": alloc_set_view(replica.cache.cell().state, spec.key)}
                                   if replica.cache.cell().state.alloc_set(spec.key) else {"alloc_set": {"key": spec.key}},
                                   rev, 201),
        )  # fmt: skip

    @read("/v1/allocs")
    async def list_alloc_sets(user: str | None = None) -> JSONResponse:
        cell = replica.cache.cell()
        keys = [k for k in alloc_set_keys(cell.state) if user is None or k.partition("/")[0] == user]
        return stamped({"alloc_sets": [alloc_set_view(cell.state, k) for k in keys]}, cell.revision)

    @read("/v1/allocs/{user}/{name}", responses=contract.answers(404, 503))
    async def get_alloc_set(user: str, name: str) -> JSONResponse:
        cell = replica.cache.cell()
        key = f"{user}/{name}"
        if not cell.state.alloc_set(key):
            return refusal(404, "name", f"no alloc set {key}")
        return stamped({"alloc_set": alloc_set_view(cell.state, key)}, cell.revision)

    @app.delete("/v1/allocs/{user}/{name}", responses=contract.answers(404, 409, 503))
    async def delete_alloc_set_endpoint(user: str, name: str, request: Request) -> Response:
        key = f"{user}/{name}"
        return await write(request, None, lambda d: delete_alloc_set(d, key), lambda out, rev: stamped(out, rev))
