"""Quota-based admission control, a step before scheduling: is a job or an alloc set within its user's quota in its band?

What counts against a quota is `spec.model.CellState.quota_used`: the request of the user's jobs
outside alloc sets and the resources of its allocs; a job in an alloc set is charged nothing,
since its set was charged for what its tasks run in.
"""

from __future__ import annotations

from dataclasses import dataclass

from spec.actions import alloc_fits_quota, fits_quota, job_is_valid
from spec.model import Alloc, Band, CellState, Job, Resources


@dataclass(frozen=True, slots=True)
class Admission:
    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def admit(state: CellState, job: Job) -> Admission:
    """Admit when `spec.actions.fits_quota` does; otherwise say which resources are short and by how much."""
    if not job_is_valid(job):
        return Admission(False, f"job {job.key} is not valid (user, name, count, priority 0..399, request)")
    if fits_quota(state, job):
        return Admission(True)
    used = state.quota_used(job.user, job.band, excluding=job.key)
    return _over_quota(state, job.user, job.band, used, job.total_request(), "this job")


def admit_alloc_set(state: CellState, user: str, priority: int, resources: Resources, count: int) -> Admission:
    """Admit an alloc set of `count` allocs of `resources` when all of them, added one by one
    as `spec.actions.alloc_create` adds them, fit the user's quota in the set's band."""
    probe = _probe_alloc(user, priority, resources.scale(count))
    if alloc_fits_quota(state, probe):
        return Admission(True)
    return _over_quota(state, user, probe.band, state.quota_used(user, probe.band), probe.resources, "this alloc set")


def _probe_alloc(user: str, priority: int, resources: Resources) -> Alloc:
    """One alloc standing for a whole set: its quota guard reads only the user, band and resources."""
    return Alloc(f"{user}/-", 0, "", resources, priority, user)


def _over_quota(state: CellState, user: str, band: Band, used: Resources, asks: Resources, what: str) -> Admission:
    quota = state.quota_for(user, band)
    assert quota is not None, "a band without a quota admits everything"
    want = used + asks
    short = ", ".join(
        f"{name} {want.get(name)} > {quota.get(name)} (short by {want.get(name) - quota.get(name)})"
        for name in want.shortfall(quota)
    )
    return Admission(
        False,
        f"{user}'s {band.value} quota is exceeded: {short}; "
        f"other jobs and allocs use {used}, {what} asks {asks}",
    )
