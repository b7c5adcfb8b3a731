"""Allocs take quota (reference/scheduler/admission.py over spec.model.CellState.quota_used): an
alloc set is charged its allocs' resources in its band, and a job in an alloc set is charged
nothing, since its tasks run in what the set reserved."""

from __future__ import annotations

import pytest

from reference.scheduler import admit, admit_alloc_set
from spec.actions import alloc_create
from spec.fmap import FMap
from spec.model import Alloc, Band, CellState, Job, Machine, QuotaKey, Resources

#: alice's batch quota: 4000m. Production has none (unlimited).
QUOTA = FMap({QuotaKey("alice", Band.BATCH): Resources.of(cpu=4000)})


def cpu(m: int) -> Resources:
    return Resources.of(cpu=m)


def state(jobs: tuple[Job, ...] = (), allocs: tuple[Alloc, ...] = ()) -> CellState:
    return CellState(jobs=FMap({j.key: j for j in jobs}), allocs=FMap({a.name: a for a in allocs}), quotas=QUOTA)


def alloc(index: int, m: int, priority: int = 100, user: str = "alice", name: str = "logs") -> Alloc:
    return Alloc(f"{user}/{name}", index, f"m{index}", cpu(m), priority, user)


WEB = Job("alice", "web", 100, 2, cpu(500))  # 2 x 500m = 1000m, outside allocs
IN_SET = Job("alice", "saver", 100, 2, cpu(900), alloc="alice/logs")  # runs in alice/logs: charged nothing
LOGS = (alloc(0, 1000), alloc(1, 1000))  # 2 x 1000m = 2000m in batch


@pytest.mark.parametrize(
    "jobs, allocs, used",
    [
        ((), (), 0),
        ((WEB,), (), 1000),  # 2 x 500m
        ((WEB,), LOGS, 3000),  # 1000m of WEB + 2 x 1000m of the set
        ((WEB, IN_SET), LOGS, 3000),  # IN_SET's 2 x 900m is inside the set's 2000m: not counted again
        ((), (alloc(0, 1000, priority=200),), 0),  # production band: not batch's
        ((), (alloc(0, 1000, user="bob", name="x"),), 0),  # bob's alloc is not alice's
    ],
)
def test_what_counts_against_a_quota(jobs: tuple[Job, ...], allocs: tuple[Alloc, ...], used: int) -> None:
    assert state(jobs, allocs).quota_used("alice", Band.BATCH) == cpu(used)


@pytest.mark.parametrize(
    "jobs, allocs, count, each, admitted",
    [
        ((), (), 4, 1000, True),  # 4 x 1000m = 4000m <= 4000m
        ((), (), 3, 1500, False),  # 3 x 1500m = 4500m > 4000m
        ((WEB,), (), 3, 1000, True),  # 1000m + 3 x 1000m = 4000m
        ((WEB,), (), 2, 1600, False),  # 1000m + 2 x 1600m = 4200m > 4000m
        ((WEB,), LOGS, 1, 1000, True),  # 3000m + 1000m = 4000m
        ((WEB,), LOGS, 1, 1001, False),  # 3000m + 1001m = 4001m
    ],
)
def test_an_alloc_set_is_admitted_within_quota(
    jobs: tuple[Job, ...], allocs: tuple[Alloc, ...], count: int, each: int, admitted: bool
) -> None:
    s = state(jobs, allocs)
    verdict = admit_alloc_set(s, "alice", 100, cpu(each), count)
    assert bool(verdict) is admitted
    if not admitted:
        assert "alice's batch quota is exceeded" in verdict.reason and "this alloc set asks" in verdict.reason
    # The API's answer is the spec's: the allocs, created one by one on empty machines, pass
    # alloc_create's quota guard exactly when the whole set is admitted.
    for i in range(count):
        s = s.with_(machines=s.machines.set(f"x{i}", Machine(f"x{i}", cpu(8000))))
    for i in range(count):
        nxt = alloc_create(s, Alloc("alice/new", i, f"x{i}", cpu(each), 100, "alice"))
        if nxt is None:
            break
        s = nxt
    assert (len(s.alloc_set("alice/new")) == count) is admitted


def test_a_job_in_an_alloc_set_is_charged_nothing_and_one_outside_is_charged_beside_the_allocs() -> None:
    full = state((WEB,), (*LOGS, alloc(0, 1000, name="more")))  # 1000m + 3 x 1000m = 4000m: all used
    assert admit(full, Job("alice", "saver", 100, 2, cpu(900), alloc="alice/logs"))
    refused = admit(full, Job("alice", "extra", 100, 1, cpu(100)))  # 4000m + 100m > 4000m
    assert not refused and "cpu 4100 > 4000" in refused.reason and "other jobs and allocs use" in refused.reason
