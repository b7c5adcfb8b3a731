"""Declared jobs: `PUT /v1/jobs/{user}/{name}` (create or change a job from its whole file), its history and a revert.

A PUT of the file a job already runs changes nothing (no new version; the answer says
`unchanged`), so a client may send its file again harmlessly, as `kubectl apply` and
`nomad job run` allow. A changed file is a new version: the spec's `update` takes every
field at once; what a running task cannot take without a restart (its command, environment,
image, health check, constraints, request, band...) is rolled out by the leader
(master/rollout.py); the task count, a priority within its band, the restart policy and
`max_unavailable` apply in place. `dry_run=true` answers the same plan and writes nothing,
and says where each replaced or added task would go (`whatif`: the leader's passes on the
draft, wave by wave).

An autoscaled job's count belongs to its autoscaler: a PUT whose file declares the count its
last file declared (`JobInfo.declared_count`) keeps the count the autoscaler (or a PATCH) set
since, within the file's min and max, as `kubectl apply`'s three-way merge leaves alone a field
the file did not change; a file that changes the count sets it (docs/decisions.md).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from fastapi import Body, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from reference.jobspec import JobFileError, JobSpec, parse_job
from reference.master import contract, rollout, versions
from reference.master.cell import Cell, Draft, JobInfo
from reference.master.mutations import ApiError, check_alloc_set, submit_job
from reference.scheduler import admit
from spec.model import CellState, Job, TaskState, is_stale


class Plan(BaseModel):
    """What a new version does to the job's tasks."""

    replaced: list[int] = Field(description="indices whose running task is replaced by a rolling update")
    in_place: list[int] = Field(description="indices whose running task takes the change without a restart")
    added: list[int] = Field(description="indices added (the task count grows)")
    removed: list[int] = Field(description="indices killed (the task count shrinks)")


class WouldGo(BaseModel):
    """Where a replaced or added task would run, by the dry run's passes."""

    index: int
    task: str = Field(description="the new task's id, user/job/index#incarnation")
    was_on: str | None = Field(description="the machine of the task it replaces; null for an added task")
    machine: str | None = Field(description="where it would run; null: it would wait (see reason)")
    reason: str = Field("", description="why it would wait: the scheduler's reasons")


class JobChange(BaseModel):
    """`PUT /v1/jobs/{user}/{name}` and `POST .../revert`: the version the job is at and what changed."""

    job: str
    version: int
    unchanged: bool = Field(description="the file is the one the job runs: nothing was written")
    created: bool = False
    dry_run: bool = False
    changed: list[str] = Field(description="the job file's fields that differ from the version before")
    plan: Plan
    max_unavailable: int
    file: dict[str, Any] = Field(description="the job file of this version")
    placements: list[WouldGo] | None = Field(None, description=(
        "dry run only: where each replaced or added task would go, by the leader's own passes on a copy of the"
        " cell (the rollout's waves, each replacement taken as started), as `POST /v1/jobs?dry_run=true` says"
        " for a new job; the seed is 0, so on a cell larger than the scheduler samples the machine may differ"
    ))  # fmt: skip
    task_count_kept: int | None = Field(None, description=(
        "an autoscaled job's count kept instead of the file's: the file declares the count it declared before, so"
        " the count the autoscaler set stands (within the file's autoscale min and max); null: the file's count"
    ))  # fmt: skip


class Version(BaseModel):
    version: int
    at: float = Field(description="when it was written (seconds since the epoch)")
    changed: list[str]
    current: bool
    file: dict[str, Any] = Field(description="the job file of that version")


class JobHistory(BaseModel):
    """`GET /v1/jobs/{user}/{name}/history`: the kept versions, newest first."""

    job: str
    version: int
    versions: list[Version]
    revision: int


class RevertBody(BaseModel):
    """`POST /v1/jobs/{user}/{name}/revert`: the version whose file to run again (as a new version)."""

    model_config = ConfigDict(extra="forbid")
    version: int = Field(ge=0)


def plan(state: CellState, old: Job | None, new: Job) -> Plan:
    """Which indices a change from `old` to `new` replaces, changes in place, adds or kills."""
    if old is None:
        return Plan(replaced=[], in_place=[], added=list(range(new.task_count)), removed=[])
    live = state.live_indices(new.key)
    replaced, in_place = [], []
    for i, t in sorted(live.items()):
        if i >= new.task_count or t.state is not TaskState.RUNNING:
            continue
        if is_stale(t, new):
            replaced.append(i)
        elif i < old.task_count and (t.priority != new.priority or old != new):
            in_place.append(i)
    added = [i for i in range(old.task_count, new.task_count)]
    removed = [i for i in range(new.task_count, old.task_count) if (t := live.get(i)) is not None and t.state is not TaskState.DEAD]
    return Plan(replaced=replaced, in_place=in_place, added=added, removed=removed)


def parse_for(key: str, payload: Any) -> JobSpec:
    """The job file of a PUT to `key`; ApiError 422 when it is invalid or names another job."""
    try:
        spec = parse_job(payload)
    except JobFileError as err:
        raise ApiError(422, err.errors[0]["field"], err.errors[0]["error"], err.errors) from None
    if spec.key != key:
        field = "user" if spec.user != key.split("/")[0] else "name"
        raise ApiError(422, field, f"the file is job {spec.key}, the path names {key}: make them the same")
    return spec


def put_job(d: Draft, key: str, payload: Any) -> dict[str, Any]:
    """Create the job, or change it to the file `payload` (a new version); a file the job runs already changes nothing."""
    spec = parse_for(key, payload)
    old = d.state.jobs.get(key)
    if old is None:
        submit_job(d, spec.canonical())
        new = d.state.jobs[key]
        return answer(key, new.version, False, versions.changed_fields(None, spec.canonical()), plan(d.state, None, new), new, spec, created=True)
    info = d.jobs[key]
    current = info.spec.canonical()
    declared = spec.task_count
    kept = kept_count(info, old, spec)
    if kept is not None:
        spec = spec.model_copy(update={"task_count": kept})
    if spec.canonical() == current:
        return answer(key, old.version, True, [], plan(d.state, old, old), old, spec, kept)
    new = spec.to_spec_job(version=old.version)
    if new.alloc is not None:
        check_alloc_set(d.state, new.alloc, new.task_count)
    admission = admit(d.state, new)
    if not admission:
        raise ApiError(403, "request", admission.reason)
    the_plan = plan(d.state, old, new)
    if not d.step("update", key, None, None, new, reason=f"job updated to version {old.version + 1}"):
        raise ApiError(409, "max_unavailable", f"the cell refuses this change of {key}: a rolling update holds more of its tasks down than the new max_unavailable {new.max_unavailable}; wait until it settles")
    version = d.state.jobs[key].version
    d.jobs[key] = dataclasses.replace(versions.recorded(info, spec, d.now, version), declared_count=declared)
    retry_now(d, key)
    return answer(key, version, False, list(versions.changed_fields(current, spec.canonical())), the_plan, new, spec, kept)


def planned(d: Draft, key: str, payload: Any) -> dict[str, Any]:
    """A dry run of `put_job` on draft `d`: its answer, and where the tasks it replaces or adds would go."""
    before = d.state
    body = put_job(d, key, payload)
    if not body["unchanged"]:
        body["placements"] = whatif(d, key, Plan.model_validate(body["plan"]), before)
    return body


def kept_count(info: JobInfo, old: Job, spec: JobSpec) -> int | None:
    """The task count a PUT keeps instead of its file's: an autoscaled job (its file and the
    new one name `autoscale`) whose new file declares the count its last file declared keeps
    the count the autoscaler (or a resize) set since, within the new file's min and max, as
    `kubectl apply` leaves a field alone that the file did not change. None: the file's count
    stands (it changed the count, or the job is not autoscaled)."""
    scale = spec.autoscale
    if scale is None or info.spec.autoscale is None or info.declared_count is None:
        return None
    if spec.task_count != info.declared_count:
        return None
    return min(max(old.task_count, scale.min), scale.max)


#: Waves of a rollout a dry run follows at most: a rollout of more waves is followed taking
#: more tasks at once than its max_unavailable, so a what-if costs at most this many passes.
WHATIF_WAVES = 10


def whatif(d: Draft, key: str, the_plan: Plan, before: CellState) -> list[dict[str, Any]]:
    """Where the tasks `the_plan` replaces or adds would go: after a dry run's `put_job` on
    draft `d` (`before`: the cell it started from), the leader's passes run on `d`, each
    replacement taken as started and healthy at once (a copy has no borglet), until nothing of
    the job is left to roll or place."""
    from reference.master.dryrun import one_pass  # the leader's pass: imported by dry runs only
    from reference.scheduler import SchedulerConfig

    job = d.state.jobs.get(key)
    indices = sorted({*the_plan.replaced, *the_plan.added})
    if job is None or not indices:
        return []
    waves = -(-len(the_plan.replaced) // job.max_unavailable)
    if waves > WHATIF_WAVES:
        wider = dataclasses.replace(job, max_unavailable=-(-len(the_plan.replaced) // WHATIF_WAVES))
        d.state = d.state.with_(jobs=d.state.jobs.set(key, wider))
    for _ in range(WHATIF_WAVES + 1):
        result = one_pass(d, SchedulerConfig())
        for t in d.state.live_indices(key).values():
            if t.state is TaskState.RUNNING:
                d.tasks[t.id] = dataclasses.replace(d.task_info(t.id), seen=True, borglet_state="RUNNING", pid=1,
                                                    started_at=0.0, healthy=True)  # fmt: skip
        if not (result.rolled or result.placed):
            break
    out = []
    for i in indices:
        t = d.state.latest(key, i)
        old = before.latest(key, i)
        if t is None:
            continue
        out.append(WouldGo(
            index=i, task=str(t.id), was_on=old.machine if i in the_plan.replaced and old is not None else None,
            machine=t.machine if t.state is TaskState.RUNNING else None,
            reason="" if t.state is TaskState.RUNNING else (d.task_info(t.id).pending or "not placed by the dry run's passes"),
        ).model_dump(mode="json"))  # fmt: skip
    return out


def retry_now(d: Draft, key: str) -> None:
    """A new version is a new program: the tasks of the job waiting out a crash loop's back-off
    (master/backoff.py) are tried again at once, with their count of failures reset."""
    for t in d.state.live_indices(key).values():
        info = d.task_info(t.id)
        if t.state is TaskState.DEAD and (info.failures or info.retry_at):
            d.tasks[t.id] = dataclasses.replace(info, failures=0, retry_at=0.0)


def answer(key: str, version: int, unchanged: bool, changed: Any, the_plan: Plan, job: Job, spec: JobSpec,
           kept: int | None = None, created: bool = False) -> dict[str, Any]:  # fmt: skip
    return JobChange(
        job=key, version=version, unchanged=unchanged, created=created, changed=list(changed), plan=the_plan,
        max_unavailable=job.max_unavailable, file=spec.canonical(), task_count_kept=kept,
    ).model_dump(mode="json")  # fmt: skip


def revert_job(d: Draft, key: str, payload: Any) -> dict[str, Any]:
    """Run the file of an earlier kept version again, as a new version."""
    if not isinstance(payload, dict):
        raise ApiError(422, "", 'the body must be a JSON object such as {"version": 2}')
    version = payload.get("version")
    if isinstance(version, float) and version.is_integer():
        version = int(version)  # JSON has one number type: 2.0 is the version 2
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ApiError(422, "version", "must be a version number (0 or more), as `job history` lists them")
    if set(payload) - {"version"}:
        raise ApiError(422, sorted(set(payload) - {"version"})[0], "unknown field; the body is {\"version\": N}")
    info = d.jobs.get(key)
    if key not in d.state.jobs or info is None:
        raise ApiError(404, "job", f"no job {key}")
    file = versions.find(info, version)
    if file is None:
        kept = ", ".join(str(v[0]) for v in info.versions) or "none"
        raise ApiError(404, "version", f"job {key} keeps no version {version} (kept: {kept})")
    return put_job(d, key, file)


def history(cell: Cell, key: str) -> dict[str, Any] | None:
    job, info = cell.state.jobs.get(key), cell.jobs.get(key)
    if job is None or info is None:
        return None
    kept = versions.listing(info, job.version)
    if not kept:  # a job submitted before versions were kept: its current file only
        kept = [{"version": job.version, "at": info.submitted_at, "changed": [], "current": True, "file": info.spec.canonical()}]
    return {"job": key, "version": job.version, "versions": kept, "revision": cell.revision}


Write = Callable[[Request, Any, Callable[[Draft], Any], Callable[[Any, int], JSONResponse]], Any]


def register(app: FastAPI, replica: Any, write: Write, read: Callable[..., Any], stamped: Callable[..., JSONResponse]) -> None:
    """Add the routes; `write`, `read` and `stamped` are api.py's."""
    contract.BODIES[("put", "/v1/jobs/{user}/{name}")] = JobSpec
    contract.BODIES[("post", "/v1/jobs/{user}/{name}/revert")] = RevertBody

    def rendered(body: dict[str, Any], rev: int) -> JSONResponse:
        cell = replica.cache.cell()
        job = cell.state.jobs.get(body["job"])
        if job is not None:
            body["rollout"] = rollout.status(cell, job.key, time.time(), replica.ready_word())
        return stamped(body, rev, 201 if body.get("created") else 200)

    @app.put("/v1/jobs/{user}/{name}", responses={
        **contract.answers(403, 404, 409, 503),
        200: {"model": JobChange, "description": "the job's new version, or `unchanged`; with dry_run=true nothing is written"},
        201: {"model": JobChange, "description": "the job was created, as version 0"},
    })  # fmt: skip
    async def put(user: str, name: str, request: Request, payload: Any = Body(None), dry_run: bool = False) -> Response:
        key = f"{user}/{name}"
        if dry_run:
            return await run_in_threadpool(would, lambda d: planned(d, key, payload))
        return await write(request, payload, lambda d: put_job(d, key, payload), rendered)

    @app.post("/v1/jobs/{user}/{name}/revert", responses={
        **contract.answers(403, 404, 409, 503), 200: {"model": JobChange, "description": "the job's new version"},
    })  # fmt: skip
    async def revert(user: str, name: str, request: Request, payload: Any = Body(None)) -> Response:
        key = f"{user}/{name}"
        return await write(request, payload, lambda d: revert_job(d, key, payload), rendered)

    @read("/v1/jobs/{user}/{name}/history", responses={**contract.answers(404, 503), 200: {"model": JobHistory, "description": "the kept versions, newest first"}})
    async def get_history(user: str, name: str) -> JSONResponse:
        cell = replica.cache.cell()
        found = history(cell, f"{user}/{name}")
        if found is None:
            return JSONResponse(status_code=404, content={"detail": [{"field": "job", "error": f"no job {user}/{name}"}]})
        return stamped(found, cell.revision)

    def would(change: Callable[[Draft], dict[str, Any]]) -> JSONResponse:
        """The change run on a throwaway draft of the cached cell: its answer, nothing written."""
        cell = replica.cache.cell()
        try:
            body = change(Draft(cell, time.time()))
        except ApiError as err:
            return JSONResponse(status_code=err.status, content={"detail": err.errors})
        except (ValueError, TypeError, OverflowError) as err:
            return JSONResponse(status_code=422, content={"detail": [{"field": "", "error": f"the body cannot be read: {err}"}]})
        body["dry_run"] = True
        return stamped(body, cell.revision, 200)
