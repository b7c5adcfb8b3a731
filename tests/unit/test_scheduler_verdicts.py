"""The scheduler's verdicts are values: admission and unschedulable results are immutable and
hashable, and an over-quota refusal says by how much."""

from dataclasses import FrozenInstanceError

import pytest

from reference.scheduler.admission import Admission
from reference.scheduler.plan import Unschedulable
from spec.model import Resources, TaskId

GiB = 2**30


def test_admission_is_an_immutable_value():
    a = Admission(False, "over quota")
    assert not a and Admission(True)
    assert hash(a) == hash(Admission(False, "over quota"))
    with pytest.raises(FrozenInstanceError):
        a.ok = True  # type: ignore[misc]
    u = Unschedulable(TaskId("web/x", 0), ())
    assert hash(u) == hash(Unschedulable(TaskId("web/x", 0), ()))
    with pytest.raises(FrozenInstanceError):
        u.reasons = ()  # type: ignore[misc]


def test_an_over_quota_refusal_says_by_how_much():
    # Quota 1000m for alice's batch jobs; a job of 2 x 600m asks 1200m: short by 200m.
    from reference.scheduler.admission import admit
    from spec.fmap import FMap
    from spec.model import Band, CellState, Job, QuotaKey

    state = CellState(quotas=FMap({QuotaKey("alice", Band.BATCH): Resources.of(cpu=1000, ram=GiB)}))
    verdict = admit(state, Job("alice", "j", 100, 2, Resources.of(cpu=600)))
    assert not verdict
    assert "cpu 1200 > 1000 (short by 200)" in verdict.reason
