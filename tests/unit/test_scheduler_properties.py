"""Properties: every plan, applied through the spec's transitions, keeps every spec invariant; admission agrees with fits_quota."""

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference.scheduler import POLICIES, SchedulerConfig, admit, plan_for, plan_steps
from spec.actions import apply, fits_quota, submit
from spec.invariants import check_state, check_step
from spec.model import (
    Band,
    CellState,
    Constraint,
    ConstraintOp,
    Job,
    Machine,
    QuotaKey,
    Resources,
)

GiB = 2**30
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

machines = st.lists(
    st.builds(
        lambda i, cpu, ram, gpus, zone, dom: Machine(
            f"m{i}",
            Resources.of(cpu=cpu, ram=ram * GiB, gpu=gpus * 1000, ports=4),
            (("zone", zone),),
            dom,
        ),
        st.integers(0, 10**6),
        st.sampled_from([1000, 2000, 4000]),
        st.sampled_from([1, 2, 4]),
        st.integers(0, 2),
        st.sampled_from(["x", "y"]),
        st.sampled_from(["", "r1", "r2"]),
    ),
    min_size=0,
    max_size=5,
    unique_by=lambda m: m.name,
)

jobs = st.lists(
    st.builds(
        lambda user, name, prio, n, cpu, ram, gpu, ports, cons: Job(
            user, name, prio, n, Resources.of(cpu=cpu, ram=ram * GiB // 2, gpu=gpu, ports=ports), cons
        ),
        st.sampled_from(["ann", "bo", "cy"]),
        st.sampled_from(["a", "b", "c", "d", "e"]),
        st.sampled_from([0, 50, 100, 150, 200, 250, 300]),
        st.integers(1, 4),
        st.sampled_from([100, 500, 1000, 2500]),
        st.integers(0, 3),
        st.sampled_from([0, 0, 250, 700, 1000, 2000]),
        st.integers(0, 2),
        st.sampled_from(
            [(), (Constraint("zone", ConstraintOp.EQ, ("x",)),), (Constraint("zone", ConstraintOp.NOT_IN, ("x",)),)]
        ),
    ),
    max_size=6,
)

configs = st.builds(
    lambda policy, ec, sc, rr, limit: SchedulerConfig(
        policy=policy,
        equivalence_classes=ec,
        score_cache=sc,
        relaxed_randomization=rr,
        relaxed_min_feasible=2,
        max_disruptions_per_job=limit,
    ),
    st.sampled_from(sorted(POLICIES)),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.sampled_from([None, 1, 3]),
)


def _cell(ms, js) -> CellState:
    s = CellState()
    for m in ms:
        s = s.with_(machines=s.machines.set(m.name, m))
    for j in js:
        s = submit(s, j) or s
    return s


def _apply_checked(s: CellState, plan) -> CellState:
    for step in plan_steps(plan):
        nxt = apply(s, step)
        assert nxt is not None, f"the spec refuses {step}"
        assert not check_step(s, step, nxt), check_step(s, step, nxt)
        s = nxt
    assert not check_state(s), check_state(s)
    return s


@SETTINGS
@given(machines, jobs, jobs, configs, st.integers(0, 2**16))
def test_plans_keep_every_invariant(ms, first, second, cfg, seed):
    s = _cell(ms, first)
    s = _apply_checked(s, plan_for(s, cfg, seed))
    # A second wave, often of higher priority, exercises preemption on a loaded cell.
    for j in second:
        s = submit(s, replace(j, name=j.name + "2")) or s
    plan = plan_for(s, cfg, seed + 1)
    placed = {p.task for p in plan.placements}
    unsched = {u.task for u in plan.unschedulable}
    assert not placed & unsched
    for u in plan.unschedulable:
        assert u.reasons and all(str(r) for r in u.reasons)
    s = _apply_checked(s, plan)
    # Victims go back to PENDING, never DEAD.
    for p in plan.preemptions:
        assert s.tasks[p.victim].state.value == "PENDING"


@SETTINGS
@given(jobs, st.lists(st.tuples(st.sampled_from(["ann", "bo", "*"]), st.sampled_from(list(Band)), st.integers(0, 8000)), max_size=4))
def test_admission_agrees_with_fits_quota(js, quotas):
    s = CellState()
    for user, band, cpu in quotas:
        s = s.with_(quotas=s.quotas.set(QuotaKey(user, band), Resources.of(cpu=cpu, ram=64 * GiB, gpu=10**6, ports=100)))
    for j in js:
        verdict = admit(s, j)
        assert verdict.ok == fits_quota(s, j)
        assert verdict.ok or verdict.reason
        if verdict.ok:
            s = submit(s, j) or s
