"""Preemption: never inside the production bands, fewest and lowest victims first, disruption limits."""

import pytest

from reference.scheduler import (
    PendingTask,
    SchedulerConfig,
    Snapshot,
    apply_plan,
    plan_for,
    plan_pass,
)
from reference.scheduler.snapshot import RunningTask
from spec.actions import submit
from spec.invariants import check_state
from spec.model import CellState, Job, Machine, Resources, TaskId

GiB = 2**30


def m(name, cpu=4000):
    return Machine(name, Resources.of(cpu=cpu, ram=8 * GiB))


def run(job, prio, cpu, machine, i=0):
    return RunningTask(TaskId(job, i), machine, prio, Resources.of(cpu=cpu))


def pend(job, prio, cpu, i=0):
    return PendingTask(TaskId(job, i), job.split("/")[0], prio, Resources.of(cpu=cpu))


def test_prod_never_preempts_prod():
    snap = Snapshot((m("a"),), (run("p/old", 200, 4000, "a"),), (pend("q/new", 399, 1000),))
    plan = plan_pass(snap)
    assert not plan.placements and not plan.preemptions
    assert "counting preemptible" in str(plan.unschedulable[0])


def test_equal_priority_never_preempts():
    snap = Snapshot((m("a"),), (run("b/old", 100, 4000, "a"),), (pend("b/new", 100, 1000),))
    assert not plan_pass(snap).placements


def test_fewest_and_lowest_victims_preferred():
    # a: four small best-effort tasks; b: one big batch task; c: one big best-effort task.
    running = (
        *(run("be/small", 0, 1000, "a", i) for i in range(4)),
        run("batch/big", 150, 4000, "b"),
        run("be/big", 10, 4000, "c"),
    )
    snap = Snapshot((m("a"), m("b"), m("c")), running, (pend("prod/x", 200, 3000),))
    plan = plan_pass(snap, SchedulerConfig(policy="best_fit"))
    (p,) = plan.placements
    # c needs one victim of priority 10; a would need three, b one of priority 150.
    assert p.machine == "c" and p.victims == (TaskId("be/big", 0),)


def test_reprieve_keeps_unneeded_victims():
    running = (run("be/a", 0, 1000, "a"), run("be/b", 5, 3000, "a"))
    snap = Snapshot((m("a"),), running, (pend("prod/x", 200, 3000),))
    (p,) = plan_pass(snap).placements
    assert p.victims == (TaskId("be/b", 0),)  # evicting the 3000m task alone is enough


def test_disruption_limit_per_job():
    running = tuple(run("be/svc", 0, 4000, f"m{i}", i) for i in range(3))
    snap = Snapshot(tuple(m(f"m{i}") for i in range(3)), running, tuple(pend("prod/x", 200, 4000, i) for i in range(3)))
    cfg = SchedulerConfig(max_disruptions_per_job=2)
    assert len(plan_pass(snap, cfg).preemptions) == 2
    assert len(plan_pass(snap, cfg, recent_disruptions={"be/svc": 1}).preemptions) == 1
    assert len(plan_pass(snap, cfg, recent_disruptions={"be/svc": 2}).preemptions) == 0
    assert len(plan_pass(snap, SchedulerConfig()).preemptions) == 3


def test_preemption_through_the_spec_sends_victims_back_to_pending():
    s = CellState()
    s = s.with_(machines=s.machines.set("a", m("a")))
    s = submit(s, Job("bob", "be", 0, 2, Resources.of(cpu=2000)))
    s = apply_plan(s, plan_for(s))
    s = submit(s, Job("alice", "web", 200, 1, Resources.of(cpu=3000)))
    plan = plan_for(s)
    assert len(plan.preemptions) == 2
    after = apply_plan(s, plan)
    assert not check_state(after)
    states = {t.id.job: t.state.value for t in after.tasks.values() if t.id.job == "bob/be"}
    assert states == {"bob/be": "PENDING"}


def test_preemption_is_the_last_resort():
    # a is full of best effort that prod could evict; b has room. The sample takes machines
    # that need victims only once none fits as it is: prod goes to b, nothing is preempted.
    snap = Snapshot((m("a"), m("b", cpu=64000)), (run("be/fill", 0, 4000, "a"),), (pend("prod/x", 200, 1000),))
    for cfg in (SchedulerConfig(policy="best_fit"), SchedulerConfig(policy="best_fit").without_techniques()):
        plan = plan_pass(snap, cfg)
        assert [p.machine for p in plan.placements] == ["b"] and not plan.preemptions


@pytest.mark.parametrize(
    ("limit", "recent", "placed"),
    [
        # a: cpu 4000, two be/svc tasks of 2000 each; prod/x asks 4000, so it needs both.
        (None, {}, True),  # no limit
        (2, {}, True),  # 0 recent + 2 victims = 2 <= 2
        (3, {}, True),  # 0 + 2 = 2 <= 3
        (3, {"be/svc": 1}, True),  # 1 + 2 = 3 <= 3
        (1, {}, False),  # the second victim would make 0 + 2 = 2 > 1
        (2, {"be/svc": 1}, False),  # 1 + 2 = 3 > 2
        (2, {"other/job": 5}, True),  # another job's disruptions do not count
    ],
)
def test_disruption_limit_counts_victims_of_one_placement(limit, recent, placed):
    snap = Snapshot(
        (m("a"),),
        (run("be/svc", 0, 2000, "a", 0), run("be/svc", 0, 2000, "a", 1)),
        (pend("prod/x", 200, 4000),),
    )
    plan = plan_pass(snap, SchedulerConfig(max_disruptions_per_job=limit), recent_disruptions=recent)
    if placed:
        (p,) = plan.placements
        assert p.machine == "a"
        assert set(p.victims) == {TaskId("be/svc", 0), TaskId("be/svc", 1)}
    else:
        assert not plan.placements and not plan.preemptions


def test_fgd_preempts_a_gpu_share_holder():
    # One GPU: be/x holds 700 milli, u/y's first task takes the other 300; its second task
    # fits only by evicting be/x. Its score is fgd's on the GPU as the eviction leaves it
    # (700 free), where the commit then places it (on the GPUs as they are, 0 free, fgd
    # would find no room: the pass raised).
    g = Machine("g", Resources.of(cpu=2000, gpu=1000))
    running = (RunningTask(TaskId("be/x", 0), "g", 0, Resources.of(cpu=250, gpu=700)),)
    pending = tuple(PendingTask(TaskId("u/y", i), "u", 100, Resources.of(cpu=250, gpu=300)) for i in range(2))
    plan = plan_pass(Snapshot((g,), running, pending), SchedulerConfig(policy="fgd"))
    assert plan.placements[1].victims == (TaskId("be/x", 0),)
