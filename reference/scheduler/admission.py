"""Quota-based admission control, a step before scheduling: is a job within its user's quota in its band?"""

from __future__ import annotations

from dataclasses import dataclass

from spec.actions import fits_quota, job_is_valid
from spec.model import CellState, Job


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
    quota = state.quota_for(job.user, job.band)
    assert quota is not None, "fits_quota admits every job without a quota"
    used = state.quota_used(job.user, job.band, excluding=job.key)
    want = used + job.total_request()
    short = ", ".join(
        f"{name} {want.get(name)} > {quota.get(name)} (short by {want.get(name) - quota.get(name)})"
        for name in want.shortfall(quota)
    )
    return Admission(
        False,
        f"{job.user}'s {job.band.value} quota is exceeded: {short}; "
        f"other jobs use {used}, this one asks {job.total_request()}",
    )
