"""Small hand-checkable cases for scheduler corners the other scheduler tests leave open.

Each table row states its inputs and the expected outcome, with the arithmetic in a comment,
in the style of the kube-scheduler plugin tests. Equivalent mutants are not tested here: a
`return False` read as a boolean (`fits_free`), the initial value of score-cache versions
(always written before they are read), the salt seed's constant (any seed is as valid), and
`slots=` on frozen dataclasses (memory layout only).
"""

from dataclasses import FrozenInstanceError

import pytest

from reference.scheduler import PendingTask, SchedulerConfig, Snapshot, plan_pass
from reference.scheduler.admission import Admission
from reference.scheduler.cellview import CellView, gpu_layout, gpu_take, split_gpu
from reference.scheduler.plan import Unschedulable
from reference.scheduler.snapshot import RunningTask
from spec.model import Machine, Resources, TaskId

GiB = 2**30


def machine(name, cpu=4000, gpu=0):
    res = {"cpu": cpu, "ram": 8 * GiB} | ({"gpu": gpu} if gpu else {})
    return Machine(name, Resources.of(res))


def running(job, prio, cpu, where, i=0, gpu=0):
    res = {"cpu": cpu} | ({"gpu": gpu} if gpu else {})
    return RunningTask(TaskId(job, i), where, prio, Resources.of(res))


def pending(job, prio, cpu, i=0, package=""):
    return PendingTask(TaskId(job, i), job.split("/")[0], prio, Resources.of(cpu=cpu), package=package)


# --- GPU layout: whole GPUs of 1000 milli, a smaller last one ---------------------------------


@pytest.mark.parametrize(
    ("milli", "layout"),
    [
        (0, []),  # no GPU at all: not a GPU of 0 (nor of 1) milli
        (-500, []),  # a negative capacity is clamped to 0
        (1, [1]),  # 1 // 1000 = 0 whole, 1 left over
        (1000, [1000]),  # exactly one whole GPU, no remainder
        (2500, [1000, 1000, 500]),  # 2500 = 2 * 1000 + 500
    ],
)
def test_gpu_layout(milli, layout):
    assert gpu_layout(milli) == layout


@pytest.mark.parametrize(("milli", "split"), [(0, (0, 0)), (460, (0, 460)), (2300, (2, 300))])
def test_split_gpu(milli, split):
    assert split_gpu(milli) == split


@pytest.mark.parametrize(
    ("gfree", "whole", "share", "picks"),
    [
        # Two whole GPUs of 1000 each; `gfree` is what each has free.
        ([300, 1000], 0, 200, [(0, 200)]),  # fullest that fits: GPU 0 (300 >= 200)
        ([1000, 300], 0, 200, [(1, 200)]),  # the same, GPU 1 this time
        ([100, 1000], 0, 200, [(1, 200)]),  # GPU 0 has only 100 < 200
        ([400, 300], 0, 350, [(0, 350)]),  # only GPU 0 has 350 free
        ([1000, 1000], 1, 0, [(0, 1000)]),  # one whole, untouched GPU
        ([1000, 1000], 1, 500, [(0, 1000), (1, 500)]),  # the share may not reuse the whole one
        ([999, 1000], 2, 0, None),  # GPU 0 is touched, so only one whole GPU is left
        ([100, 100], 0, 200, None),  # no GPU has 200 free
    ],
)
def test_gpu_take(gfree, whole, share, picks):
    assert gpu_take(gfree, [1000, 1000], whole, share) == picks


def test_cellview_vec_reads_missing_dimensions_as_zero():
    cell = CellView(Snapshot((machine("a", gpu=1000),)), seed=0)
    assert cell.dims == ("cpu", "ram", "gpu")
    assert cell.vec({"cpu": 1000}) == (1000, 0, 0)
    assert cell.vec({}) == (0, 0, 0)


def test_cellview_machine_without_gpus_has_no_gpu_rows():
    # The cell has a GPU dimension (b has one GPU), so a's capacity vector reads gpu = 0:
    # a gets no GPUs at all, b one whole GPU.
    cell = CellView(Snapshot((machine("a"), machine("b", gpu=1000))), seed=0)
    assert cell.gcap == [[], [1000]]
    assert cell.gfree == [[], [1000]]


def test_overcommitted_gpu_reads_as_full():
    # One GPU of 1000 milli; two running tasks of 600 milli each (the spec's scalar accounting
    # is per machine, not per GPU, so the second one is overcommitted):
    #   first:  a share of 600 on GPU 0            -> free 1000 - 600 = 400
    #   second: no GPU has 600 free; take 400 from GPU 0, the remaining 200 goes to the GPU
    #           that had the most free (GPU 0)     -> free 400 - 400 - 200 = -200
    snap = Snapshot(
        (machine("a", gpu=1000),),
        (running("be/x", 0, 100, "a", 0, gpu=600), running("be/x", 0, 100, "a", 1, gpu=600)),
    )
    cell = CellView(snap, seed=0)
    assert cell.gfree == [[-200]]
    first, second = cell.victims[0]
    assert first.gpu_shares == [(0, 600)]
    assert second.gpu_shares == [(0, 400), (0, 200)]


def test_overcommit_remainder_goes_to_the_gpu_with_most_free():
    # Two GPUs. Running: 700 milli (GPU 0, free 300), 800 milli (GPU 1, free 200), then 900:
    #   no GPU has 900 free; order by free: GPU 0 (300), GPU 1 (200)
    #   take 300 from GPU 0 and 200 from GPU 1, 900 - 500 = 400 left -> onto GPU 0
    #   free: GPU 0 = 300 - 300 - 400 = -400, GPU 1 = 200 - 200 = 0
    snap = Snapshot(
        (machine("a", gpu=2000),),
        (
            running("be/x", 0, 100, "a", 0, gpu=700),
            running("be/x", 0, 100, "a", 1, gpu=800),
            running("be/x", 0, 100, "a", 2, gpu=900),
        ),
    )
    cell = CellView(snap, seed=0)
    assert cell.gfree == [[-400, 0]]
    assert cell.victims[0][2].gpu_shares == [(0, 300), (1, 200), (0, 400)]


def test_reclaimed_slack_is_what_prod_requested_beyond_its_reservation():
    # a: cpu 4000. A prod task requests 2000 and reserves 500 (Borg's estimate):
    #   free for prod     = 4000 - 2000         = 2000 (prod counts at its request)
    #   slack             = 2000 - 500          = 1500
    #   free for non-prod = 2000 + 1500         = 3500
    t = RunningTask(TaskId("p/web", 0), "a", 200, Resources.of(cpu=2000), reservation=Resources.of(cpu=500))
    cell = CellView(Snapshot((machine("a"),), (t,)), seed=0)
    assert cell.reclaimed == [True]
    assert cell.slack[0][0] == 1500
    assert cell.free_for(0, True)[0] == 2000
    assert cell.free_for(0, False)[0] == 3500


def test_running_tasks_in_allocs_or_off_the_cell_are_not_counted_twice():
    # In an alloc: counted through the alloc, not as a victim. Unknown machine: ignored.
    in_alloc = RunningTask(TaskId("be/x", 0), "a", 0, Resources.of(cpu=1000), in_alloc=True)
    elsewhere = running("be/y", 0, 1000, "zz")
    cell = CellView(Snapshot((machine("a"),), (in_alloc, elsewhere)), seed=0)
    assert cell.free[0][0] == 4000
    assert cell.victims == [[]]


@pytest.mark.parametrize(
    ("used_cpu", "bumped"),
    [
        # threshold 0.02 of cpu 4000 = 80 milli-cores of drift since the last bump
        (0, False),  # |4000 - 4000| = 0
        (80, False),  # |3920 - 4000| = 80, not more than 80
        (81, True),  # |3919 - 4000| = 81 > 80
        (-100, True),  # freed: |4100 - 4000| = 100 > 80
    ],
)
def test_touch_bumps_the_version_past_the_drift_threshold(used_cpu, bumped):
    cell = CellView(Snapshot((machine("a"),)), seed=0)
    cell.free[0][0] -= used_cpu
    assert cell.touch(0, 0.02) is bumped
    assert cell.version[0] == (1 if bumped else 0)
    assert cell.touch(0, 0.02) is False  # measured from the new reference now


# --- Disruption limit within one task's victim set --------------------------------------------


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
        (machine("a"),),
        (running("be/svc", 0, 2000, "a", 0), running("be/svc", 0, 2000, "a", 1)),
        (pending("prod/x", 200, 4000),),
    )
    plan = plan_pass(snap, SchedulerConfig(max_disruptions_per_job=limit), recent_disruptions=recent)
    if placed:
        (p,) = plan.placements
        assert p.machine == "a"
        assert set(p.victims) == {TaskId("be/svc", 0), TaskId("be/svc", 1)}
    else:
        assert not plan.placements and not plan.preemptions


# --- Package locality -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("package", "weight", "where"),
    [
        # worst_fit: 100 * mean leftover over (cpu, ram); the task asks cpu 1000, no ram.
        #   a (empty):          cpu (4000-1000)/4000 = 0.75, ram 1.0 -> 87.5
        #   b (1000 cpu used):  cpu (3000-1000)/4000 = 0.50, ram 1.0 -> 75.0
        ("pkg", 50.0, "b"),  # b holds the package: 75 + 50 = 125 > 87.5
        ("pkg", 0.0, "a"),  # no locality weight: 87.5 > 75
        ("", 50.0, "a"),  # the task names no package: no bonus anywhere
        ("other", 50.0, "a"),  # no machine holds this package
    ],
)
def test_package_locality(package, weight, where):
    snap = Snapshot(
        (machine("a"), machine("b")),
        (running("be/other", 0, 1000, "b"),),
        (pending("web/x", 100, 1000, package=package),),
        packages={"b": frozenset({"pkg"})},
    )
    cfg = SchedulerConfig(policy="worst_fit", locality_weight=weight, spread_weight=0.0)
    (p,) = plan_pass(snap, cfg).placements
    assert p.machine == where


@pytest.mark.parametrize(
    ("spread", "where"),
    [
        # best_fit: 100 * (1 - mean leftover over (cpu, ram)); web/x already runs 1000 on a.
        #   a: cpu (3000-1000)/4000 = 0.50, ram 1.0 -> 100 * (1 - 0.75)  = 25.0
        #   b: cpu (4000-1000)/4000 = 0.75, ram 1.0 -> 100 * (1 - 0.875) = 12.5
        # spreading subtracts weight / (placed + 1) * (job's tasks in the domain) = weight / 2 on a.
        (0.0, "a"),  # no spreading: 25 > 12.5
        (10.0, "a"),  # 25 - 5 = 20 > 12.5
        (40.0, "b"),  # 25 - 20 = 5 < 12.5
    ],
)
def test_failure_domain_spreading(spread, where):
    snap = Snapshot(
        (machine("a"), machine("b")),
        (running("web/x", 100, 1000, "a", 0),),
        (pending("web/x", 100, 1000, 1),),
    )
    cfg = SchedulerConfig(policy="best_fit", spread_weight=spread, locality_weight=0.0)
    (p,) = plan_pass(snap, cfg).placements
    assert p.machine == where


# --- The pass: queue limit, rescoring ---------------------------------------------------------


def three_small_tasks():
    return Snapshot((machine("a"),), (), tuple(pending("web/x", 100, 1000, i) for i in range(3)))


@pytest.mark.parametrize(("limit", "handled"), [(None, 3), (0, 0), (1, 1), (2, 2), (5, 3)])
def test_plan_pass_limit(limit, handled):
    # Three tasks of 1000 on a 4000 machine all fit; `limit` cuts the ordered queue.
    plan = plan_pass(three_small_tasks(), limit=limit)
    assert len(plan.placements) == handled
    assert plan.stats.processed == handled


def test_score_cache_rescores_only_for_the_class_next_task():
    # One class of 3 tasks, one machine: 1 evaluation when the sample is filled, then one
    # rescoring after each placement that leaves a task of the class to go: 1 + 2 = 3.
    plan = plan_pass(three_small_tasks())
    assert len(plan.placements) == 3
    assert plan.stats.evaluations == 3
    assert plan.stats.classes == 1


# --- Verdicts are values --------------------------------------------------------------


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


# --- tasks inside allocs ------------------------------------------------------------------------


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


# --- Kubernetes scores on machines without a resource, and over-requested ones ----------------


@pytest.mark.parametrize(
    "policy, req, free, cap, expected",
    [
        # least allocated, a machine with no RAM to speak of: cpu alone, (4000-2000)*100//4000 = 50
        ("k8s_least_allocated", (1000, 0), (3000, 0), (4000, 0), 50.0),
        # balanced, no RAM: one fraction, std 0, score 100
        ("k8s_balanced", (1000, 0), (3000, 0), (4000, 0), 100.0),
        # balanced, cpu over-requested: (4000-1000+3000)/4000 = 1.5 counts as 1.0; ram 0.5;
        # std |1.0-0.5|/2 = 0.25, score 75 (50 if 1.5 were not capped)
        ("k8s_balanced", (3000, 5000), (1000, 10000), (4000, 10000), 75.0),
    ],
)
def test_k8s_scores_skip_absent_resources_and_cap_fractions(policy, req, free, cap, expected):
    from reference.scheduler import policies

    assert getattr(policies, policy)(req, free, cap) == expected


def test_an_over_quota_refusal_says_by_how_much():
    # Quota 1000m for alice's batch jobs; a job of 2 x 600m asks 1200m: short by 200m.
    from reference.scheduler.admission import admit
    from spec.fmap import FMap
    from spec.model import Band, CellState, Job, QuotaKey

    state = CellState(quotas=FMap({QuotaKey("alice", Band.BATCH): Resources.of(cpu=1000, ram=GiB)}))
    verdict = admit(state, Job("alice", "j", 100, 2, Resources.of(cpu=600)))
    assert not verdict
    assert "cpu 1200 > 1000 (short by 200)" in verdict.reason


def test_score_cache_hits_are_counted_only_with_the_cache_on():
    # Four identical tasks on ten machines: after the first placement the class's scores
    # come from the cache (versions unchanged on the machines not chosen).
    snap = Snapshot(tuple(machine(f"m{i}") for i in range(10)),
                    pending=tuple(pending("u/j", 100, 100, i) for i in range(4)))  # fmt: skip
    on = plan_pass(snap, SchedulerConfig(score_cache=True))
    off = plan_pass(snap, SchedulerConfig(score_cache=False))
    assert len(on.placements) == len(off.placements) == 4
    assert on.stats.cache_hits > 0 and off.stats.cache_hits == 0


def test_the_snapshot_records_which_packages_each_machine_holds():
    # A running task of a job with a package puts that package on its machine (locality).
    from reference.scheduler.adapter import snapshot_from_state
    from spec.fmap import FMap
    from spec.model import CellState, Job, Task, TaskState

    job = Job("u", "web", 100, 1, Resources.of(cpu=100), package="web-v1")
    task = Task(TaskId("u/web", 0), TaskState.RUNNING, "m0", 100, Resources.of(cpu=100))
    state = CellState(machines=FMap({"m0": machine("m0")}), jobs=FMap({job.key: job}), tasks=FMap({task.id: task}))
    assert snapshot_from_state(state).packages == {"m0": frozenset({"web-v1"})}
