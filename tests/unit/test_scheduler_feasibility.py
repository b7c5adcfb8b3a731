"""Feasibility: constraints, resources, GPU shares and whole GPUs, allocs, and the reasons a task fits nowhere."""

from reference.scheduler import PendingTask, Snapshot, plan_pass
from reference.scheduler.snapshot import RunningTask
from spec.model import Constraint, ConstraintOp, Machine, Resources, TaskId

GiB = 2**30


def machine(name, cpu=4000, ram=8 * GiB, gpu=0, **attrs):
    return Machine(name, Resources.of(cpu=cpu, ram=ram, gpu=gpu), tuple(sorted(attrs.items())))


def task(job, i=0, prio=100, user="u", constraints=(), **req):
    return PendingTask(TaskId(job, i), user, prio, Resources.of(req), tuple(constraints))


def test_constraints_eq_ne_in_not_in():
    ms = (machine("a", zone="x", gpu_model="V100"), machine("b", zone="y"), machine("c", zone="z"))
    cases = [
        (Constraint("zone", ConstraintOp.EQ, ("y",)), {"b"}),
        (Constraint("zone", ConstraintOp.NE, ("y",)), {"a", "c"}),
        (Constraint("zone", ConstraintOp.IN, ("x", "z")), {"a", "c"}),
        (Constraint("zone", ConstraintOp.NOT_IN, ("x", "z")), {"b"}),
        (Constraint("gpu_model", ConstraintOp.NE, ("V100",)), {"b", "c"}),  # absent attribute differs
    ]
    for c, allowed in cases:
        pend = tuple(task(f"j/{c.op}", i, constraints=[c], cpu=100) for i in range(6))
        plan = plan_pass(Snapshot(ms, pending=pend), seed=3)
        assert {p.machine for p in plan.placements} <= allowed
        assert len(plan.placements) == 6


def test_resources_fit_and_the_reason_names_what_is_short():
    ms = tuple(machine(f"m{i}", cpu=2000) for i in range(12))
    plan = plan_pass(Snapshot(ms, pending=(task("j/big", cpu=4000, ram=GiB),)))
    assert not plan.placements
    (u,) = plan.unschedulable
    assert [r.subject for r in u.reasons] == ["cpu"]
    assert "0 of 12 machines have 4000m free" in str(u)


def test_constraint_reason_counts_matching_machines():
    ms = tuple(machine(f"m{i}", gpu_model="V100" if i < 3 else "T4") for i in range(12))
    c = Constraint("gpu_model", ConstraintOp.IN, ("V100",))
    plan = plan_pass(Snapshot(ms, pending=(task("j/g", constraints=[c], cpu=8000),)))
    text = str(plan.unschedulable[0])
    assert "constraint gpu_model in V100: 3 of 12 machines match" in text
    assert "cpu: 0 of 3 machines have 8000m free" in text


def test_gpu_shares_must_fit_on_one_gpu():
    # Two GPUs, each 600 milli used: 800 milli free in total but only 400 on either GPU.
    m = machine("g", gpu=2000)
    running = (
        RunningTask(TaskId("r/a", 0), "g", 300, Resources.of(cpu=10, gpu=600)),
        RunningTask(TaskId("r/b", 0), "g", 300, Resources.of(cpu=10, gpu=600)),
    )
    snap = Snapshot((m,), running, (task("j/s", cpu=10, gpu=500), task("j/t", cpu=10, gpu=400)))
    plan = plan_pass(snap)
    assert [p.task.job for p in plan.placements] == ["j/t"]
    assert "a GPU with 500 milli free" in str(plan.unschedulable[0])


def test_whole_gpus_need_untouched_gpus_and_shares_pack_together():
    m = machine("g", cpu=64000, gpu=4000)
    # Three shares of 300 should share one GPU, leaving three whole GPUs for the 3-GPU task.
    pend = tuple(task("a/share", i, prio=200, cpu=10, gpu=300) for i in range(3)) + (
        task("b/whole", prio=100, cpu=10, gpu=3000),
    )
    plan = plan_pass(Snapshot((m,), pending=pend))
    assert len(plan.placements) == 4 and not plan.unschedulable
    pend2 = pend + (task("c/one-more", prio=50, cpu=10, gpu=1000),)
    plan2 = plan_pass(Snapshot((m,), pending=pend2))
    assert "1 whole free GPU(s)" in str(plan2.unschedulable[0])


def test_down_machines_are_never_used():
    ms = (Machine("dead", Resources.of(cpu=4000, ram=GiB), up=False), machine("ok"))
    plan = plan_pass(Snapshot(ms, pending=tuple(task("j/x", i, cpu=1000) for i in range(3))))
    assert {p.machine for p in plan.placements} == {"ok"}


def test_every_policy_and_technique_combination_places_the_same_feasible_load():
    from dataclasses import replace

    from reference.scheduler import POLICIES, SchedulerConfig

    ms = tuple(machine(f"m{i}", cpu=8000) for i in range(20))
    pend = tuple(task(f"u{i % 3}/j{i % 5}", i, user=f"u{i % 3}", cpu=1000) for i in range(100))
    for name in POLICIES:
        for flags in [(True, True, True), (False, False, False), (True, False, True), (False, True, False)]:
            cfg = SchedulerConfig(policy=name)
            cfg = replace(cfg, equivalence_classes=flags[0], score_cache=flags[1], relaxed_randomization=flags[2])
            plan = plan_pass(Snapshot(ms, pending=pend), cfg, seed=5)
            assert len(plan.placements) == 100, (name, flags)


def test_a_task_in_an_alloc_is_placed_on_its_machine_only_while_the_alloc_has_room():
    # Alloc a1 on m1 reserves 2000m, its tasks use 1500m: 500m free. A 500m task fits (placed
    # on m1, though m0 is empty); a 600m one does not, and the reason names the cpu short.
    from reference.scheduler.snapshot import AllocView

    a1 = AllocView("a1", "m1", Resources.of(cpu=2000), 200, Resources.of(cpu=1500))
    fits = PendingTask(TaskId("u/x", 0), "u", 200, Resources.of(cpu=500), alloc="a1")
    big = PendingTask(TaskId("u/y", 0), "u", 200, Resources.of(cpu=600), alloc="a1")
    plan = plan_pass(Snapshot((machine("m0"), machine("m1")), pending=(fits,), allocs=(a1,)))
    assert [(p.task, p.machine) for p in plan.placements] == [(fits.id, "m1")]
    plan = plan_pass(Snapshot((machine("m0"), machine("m1")), pending=(big,), allocs=(a1,)))
    assert plan.placements == []
    (u,) = plan.unschedulable
    assert u.task == big.id and "alloc a1: cpu 600m > 500m free" in str(u)


def test_task_i_of_a_job_in_an_alloc_set_is_placed_in_alloc_i():
    # Set u/s: alloc 0 on m1, alloc 1 on m0. The job's task 0 goes to m1 and task 1 to m0,
    # whatever the machines' scores: the index rule, read by the adapter from the spec state.
    from reference.scheduler.adapter import snapshot_from_state
    from spec.actions import alloc_create, machine_add, submit
    from spec.model import Alloc, CellState, Job

    s = CellState()
    for name in ("m0", "m1"):
        s = machine_add(s, machine(name))
    s = alloc_create(s, Alloc("u/s", 0, "m1", Resources.of(cpu=1000), 100, "u"))
    s = alloc_create(s, Alloc("u/s", 1, "m0", Resources.of(cpu=1000), 100, "u"))
    s = submit(s, Job("u", "j", 100, 2, Resources.of(cpu=500), alloc="u/s"))
    snap = snapshot_from_state(s)
    assert sorted((p.id.index, p.alloc) for p in snap.pending) == [(0, "u/s/0"), (1, "u/s/1")]
    plan = plan_pass(snap)
    assert sorted((p.task.index, p.machine) for p in plan.placements) == [(0, "m1"), (1, "m0")]
