"""Small hand-built cells shared by the spec's tests."""

from __future__ import annotations

from spec.actions import machine_add, schedule, submit
from spec.fmap import FMap
from spec.model import (
    Band,
    CellState,
    Constraint,
    ConstraintOp,
    Job,
    Machine,
    QuotaKey,
    Resources,
    RestartPolicy,
    TaskId,
)

M0 = Machine("m0", Resources.of(cpu=2000, ram=4096), (("rack", "r0"),), "r0")
M1 = Machine("m1", Resources.of(cpu=2000, ram=4096), (("rack", "r1"),), "r1")


def cell(*machines: Machine, prod_quota: int | None = None) -> CellState:
    s = CellState()
    for m in machines or (M0, M1):
        s = machine_add(s, m)
        assert s is not None
    if prod_quota is not None:
        s = s.with_(quotas=FMap({QuotaKey("*", Band.PRODUCTION): Resources.of(cpu=prod_quota)}))
    return s


def job(
    name: str = "web",
    user: str = "alice",
    priority: int = 200,
    n: int = 1,
    cpu: int = 1000,
    policy: RestartPolicy = RestartPolicy.ON_FAILURE,
    rack: str | None = None,
    alloc: str | None = None,
) -> Job:
    constraints = (Constraint("rack", ConstraintOp.EQ, (rack,)),) if rack else ()
    return Job(
        user=user,
        name=name,
        priority=priority,
        task_count=n,
        request=Resources.of(cpu=cpu),
        constraints=constraints,
        restart_policy=policy,
        alloc=alloc,
    )


def tid(j: Job, index: int = 0, incarnation: int = 0) -> TaskId:
    return TaskId(j.key, index, incarnation)


def running(s: CellState, j: Job, machine: str = "m0", index: int = 0) -> CellState:
    """Submit `j` (if needed) and place task `index` on `machine`."""
    if j.key not in s.jobs:
        nxt = submit(s, j)
        assert nxt is not None, "submit refused"
        s = nxt
    latest = s.latest(j.key, index)
    assert latest is not None
    nxt = schedule(s, latest.id, machine)
    assert nxt is not None, "schedule refused"
    return nxt


SMALL = Resources.of(cpu=500)
LARGE = Resources.of(cpu=1000)


def cell_with_job(count: int = 2) -> CellState:
    """Machine m0 (4000m) and job u/j of `count` pending tasks of SMALL (500m) each."""
    base = CellState(machines=FMap({"m0": Machine("m0", Resources.of(cpu=4000))}))
    s = submit(base, Job("u", "j", 100, count, SMALL))
    assert s is not None
    return s
