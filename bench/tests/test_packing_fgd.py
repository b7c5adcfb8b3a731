"""Table tests of the FGD simulator's semantics (`--semantics fgd`), arithmetic in the comments."""

import random

import pytest

from bench.scheduler import packing_bench
from bench.scheduler.packing_fgd import (
    PAPER_SEEDS,
    FragMix,
    Node,
    Pod,
    alloc_at,
    arrival_order,
    arrivals,
    best_fit_score,
    best_gpu,
    dot_prod_score,
    engine_rows,
    exclusive,
    fgd_int,
    fits,
    gpu_clustering_score,
    gpu_packing_score,
    load,
    pod_of,
    random_gpu,
    simulate,
    summary,
)
from bench.scheduler.trace import read_machines, read_pods
from spec.model import Machine, Resources

GiB = 2**30


def node(gfree, cpu=64_000, mem=256 * GiB, model="T4", tags=None):
    n = Node(cpu, mem, len(gfree), model)
    n.gfree = list(gfree)
    n.tags = dict(tags or {})
    return n


SHARE = Pod(cpu=4000, mem=GiB, num=1, milli=500)
WHOLE2 = Pod(cpu=8000, mem=GiB, num=2, milli=1000)

# (free milli per GPU, share asked, GPU best-fit picks)
BEST_GPU = [
    # free 1000, 600, 700: room on all three; least free with room is 600 -> GPU 1
    ([1000, 600, 700], 500, 1),
    # free 400, 1000, 500: 400 < 500 has no room; 500 is the least with room -> GPU 2
    ([400, 1000, 500], 500, 2),
    # two GPUs at 600: the lowest index among equals -> GPU 0
    ([600, 600, 1000], 500, 0),
    # nothing with room -> -1
    ([400, 300], 500, -1),
]


@pytest.mark.parametrize("gfree,milli,want", BEST_GPU)
def test_best_fit_gpu_is_the_least_free_gpu_with_room(gfree, milli, want):
    assert best_gpu(gfree, milli) == want


def test_random_gpu_draws_only_gpus_with_room_and_each_of_them():
    # free 400 (no room for 500), 1000, 500: only GPUs 1 and 2 may come out, each about half the time
    rng = random.Random(1)
    picks = [random_gpu([400, 1000, 500], 500, rng) for _ in range(2000)]
    assert set(picks) == {1, 2}
    assert 800 < picks.count(1) < 1200
    assert random_gpu([400, 300], 500, rng) == -1


# (free milli per GPU, GPUs asked, the untouched GPUs taken)
EXCLUSIVE = [
    ([1000, 500, 1000, 1000], 2, [0, 2]),  # untouched are 0, 2, 3; the first two by index
    ([1000, 500], 2, []),  # one untouched GPU for two asked: none
]


@pytest.mark.parametrize("gfree,num,want", EXCLUSIVE)
def test_whole_gpus_are_the_first_untouched_ones(gfree, num, want):
    assert exclusive(gfree, num) == want


def test_feasibility_checks_cpu_memory_model_and_gpus():
    assert fits(node([1000, 600]), SHARE)
    assert not fits(node([400, 300]), SHARE)  # no GPU with 500 free
    assert not fits(node([1000, 1000], cpu=3000), SHARE)  # 4000 CPU asked, 3000 free
    assert not fits(node([1000, 1000], mem=GiB // 2), SHARE)
    assert not fits(node([1000, 1000], model="P100"), Pod(1000, 1, 1, 500, ("T4",)))
    assert fits(node([1000, 1000]), WHOLE2) and not fits(node([1000, 900]), WHOLE2)


SCORES = [
    # best_fit: left 0.5 * (64000 - 4000) / 128000 + 0.5 * (1600 - 500) / 8000 = 0.234375 + 0.06875
    # = 0.303125; int(100 * (1 - 0.303125)) = int(69.6875) = 69
    (best_fit_score, node([1000, 600]), SHARE, 69),
    # gpu_packing, idle 2-GPU machine: max(100 // 3 - 2, 2) = 31
    (gpu_packing_score, node([1000, 1000]), SHARE, 31),
    # gpu_packing, shared GPU used: least free first is 600 (room); free % 600 * 100 // 1000 = 60;
    # max(100 - 60 // 10, 50) = 94
    (gpu_packing_score, node([1000, 600]), SHARE, 94),
    # gpu_packing, an untouched GPU of a used machine: least free first 300 (no room), then 1000:
    # max(100 // 2 - 1, 100 // 3) = 49
    (gpu_packing_score, node([1000, 300]), SHARE, 49),
    # gpu_clustering, machine holding only shares: base 25 * (8000 - 1600) // 8000 = 20; 20 + 75 = 95
    (gpu_clustering_score, node([1000, 600], tags={"share": 1}), SHARE, 95),
    # gpu_clustering, shares and whole GPUs: 20 + 50 = 70
    (gpu_clustering_score, node([1000, 600], tags={"share": 1, "1-gpu": 1}), SHARE, 70),
    # gpu_clustering, idle: base 25 * (8000 - 2000) // 8000 = 18 (18.75 truncated); 18 + 25 = 43
    (gpu_clustering_score, node([1000, 1000]), SHARE, 43),
    # gpu_clustering, other kinds only: base 25 * (8000 - 1000) // 8000 = 21 (21.875); 21 + 0 = 21
    (gpu_clustering_score, node([1000, 0], tags={"1-gpu": 1}), SHARE, 21),
]


@pytest.mark.parametrize("score,n,p,want", SCORES)
def test_node_scores(score, n, p, want):
    assert score(n, p) == want


def test_dot_prod_merges_the_gpus_into_one_dimension():
    # cpu term (64000 / 128000) * (4000 / 128000) = 0.015625; GPU term, GPUs merged: (1600 / 8000)
    # * (500 / 8000) = 0.0125; int(100 * (1 - (0.015625 + 0.0125) / 2)) = int(98.59375) = 98
    assert dot_prod_score(node([1000, 600]), SHARE) == 98
    # an idle 8-GPU machine for 2 whole GPUs: cpu 0.5 * 8000 / 128000 = 0.03125, GPU (8000 / 8000)
    # * (2000 / 8000) = 0.25; int(100 * (1 - 0.28125 / 2)) = int(85.9375) = 85
    assert dot_prod_score(node([1000] * 8), WHOLE2) == 85


def test_fgd_puts_a_share_where_fragmentation_grows_least():
    # Mix: two shapes, 500-milli shares and whole GPUs, 2 CPUs each; total 2 tasks.
    mix = FragMix([Pod(2000, 1, 1, 500), Pod(2000, 1, 1, 1000)])
    # Machine GPUs free 1000, 700. F = free - E[usable]: share usable on both (1700), whole on the
    # untouched one (1000): F = 1700 - (1700 + 1000) / 2 = 350.
    n = node([1000, 700])
    assert mix.fragmentation("T4", n.cpu, (700, 1000)) == pytest.approx(350)
    # Share on GPU 0 -> free 500, 700: share usable 1200, whole 0: F = 1200 - 600 = 600 (+250)
    # Share on GPU 1 -> free 1000, 200: share usable 1000, whole 1000: F = 1200 - 1000 = 200 (-150)
    # int(100 * sigmoid(0.15)) = int(53.74) = 53 > int(100 * sigmoid(-0.25)) = 43: GPU 1
    assert mix.place(n, SHARE) == (53, [1])
    assert fgd_int(350, 200) == 53 and fgd_int(350, 600) == 43


def test_arrivals_inflate_up_to_the_ratio_without_passing_it_and_keep_every_pod():
    pods = [Pod(1000, 1, 1, 500), Pod(1000, 1, 0, 0), Pod(1000, 1, 2, 1000)]
    tasks = arrivals(pods, capacity=10_000, seed=3, ratio=1.3)
    asked = sum(p.gpu for p in tasks)
    # The draw that stops it would pass 13000 by its milli per GPU (at most 1000), so more than
    # 12000 is asked; the test adds 1000 for the 2-GPU pod whose total is 2000, so at most 14000.
    assert 12_000 < asked <= 14_000
    assert sum(p.gpu for p in arrivals(pods[:1], 10_000, seed=3)) == 13_000  # 500-milli shares: 26 of them
    for p in pods:
        assert p in tasks
    assert arrivals(pods, 10_000, seed=3) == tasks  # the seed decides


ROWS = [
    # capacity 10000 milli: arrived 9940 -> 99.4% rounds to 99; 9960 -> 99.6 -> 100; 10040 -> 100.4
    # -> 100; 10060 -> 100.6 -> 101. Rows at 100: alloc 9000 and 9100 -> 90% and 91%, mean 90.5
    ([(9940, 8900), (9960, 9000), (10040, 9100), (10060, 9150)], 100, 90.5),
    # no row rounds to 100: those within +-1 (99 and 101): 89% and 91.5%, mean 90.25
    ([(9940, 8900), (10060, 9150)], 100, 90.25),
]


@pytest.mark.parametrize("rows,pct,want", ROWS)
def test_alloc_at_is_merge_alloc_discretes_mean_at_an_arrive_ratio(rows, pct, want):
    assert alloc_at(rows, 10_000, pct) == pytest.approx(want)


def test_alloc_at_without_rows_near_the_ratio_is_an_error():
    with pytest.raises(ValueError, match="100%"):
        alloc_at([(5000, 5000)], 10_000)


@pytest.mark.parametrize("policy", ["random_fit", "best_fit", "gpu_packing", "dot_prod", "gpu_clustering", "fgd"])
def test_a_small_cell_is_packed_and_never_overcommitted(policy):
    machines = [Machine(f"m{i}", Resources.of(cpu=32_000, ram=64 * GiB, gpu=2000)) for i in range(4)]
    pods = [Pod(2000, GiB, 1, 300), Pod(2000, GiB, 1, 1000), Pod(4000, GiB, 1, 600)]
    tasks = arrivals(pods, 8000, seed=1)
    rows = simulate(policy, machines, tasks, FragMix(pods), seed=1, stop_pct=1000)
    allocated = [a for _, a in rows]
    assert allocated == sorted(allocated) and allocated[-1] <= 8000
    assert allocated[-1] >= 6000  # the cell fills: 300/600-milli shares and whole GPUs into 8 GPUs


def test_the_cli_refuses_a_policy_the_fgd_semantics_lacks(capsys):
    assert packing_bench.main(["--semantics", "fgd", "--policy", "borg_hybrid", "--seeds", "1"]) == 2
    assert "runs only" in capsys.readouterr().err


@pytest.mark.parametrize("policy", ["gpu_packing", "gpu_clustering", "best_fit"])
def test_ties_go_to_the_first_machine_of_the_seeds_order_not_a_fresh_draw(policy):
    # Four idle, identical machines; CPU-only tasks of 4 cores score alike everywhere under
    # gpu_packing and gpu_clustering (0) and under best_fit for the first task: 16 tasks of 4 cores
    # fill one 32-core machine (8 tasks), then the next one of the same order: 2 machines, not 4.
    machines = [Machine(f"m{i}", Resources.of(cpu=32_000, ram=64 * GiB, gpu=2000)) for i in range(4)]
    where: list[str] = []
    simulate(policy, machines, [Pod(4000, GiB, 0, 0)] * 16, None, seed=5, stop_pct=1000, where=where)
    assert len(set(where)) == 2 and where[:8] == [where[0]] * 8
    again: list[str] = []
    simulate(policy, machines, [Pod(4000, GiB, 0, 0)] * 16, None, seed=5, stop_pct=1000, where=again)
    assert again == where  # the seed fixes the order


def test_random_fit_draws_a_machine_per_task():
    machines = [Machine(f"m{i}", Resources.of(cpu=32_000, ram=64 * GiB, gpu=2000)) for i in range(4)]
    where: list[str] = []
    simulate("random_fit", machines, [Pod(1000, GiB, 0, 0)] * 16, None, seed=5, stop_pct=1000, where=where)
    assert len(set(where)) == 4  # 16 draws spread over all 4 machines (seed 5; a fixed order would use 1)


def _tiny(tmp_path):
    pods = tmp_path / "pods.csv"
    pods.write_text("cpu_milli,memory_mib,num_gpu,gpu_milli\n100,1,1,200\n100,1,0,0\n100,1,1,100\n200,1,1,150\n")
    nodes = tmp_path / "nodes.csv"  # 10 GPUs: each arrival moves the arrived share by 2% at most
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"m{i},4000,64,2,T4\n" for i in range(5)))
    return pods, nodes


@pytest.mark.parametrize("policy", ["fgd", "borg_hybrid"])
def test_minborgs_scheduler_on_these_terms_takes_the_simulators_arrivals(tmp_path, policy):
    pods_path, nodes_path = _tiny(tmp_path)
    machines, pods = read_machines(nodes_path), read_pods(pods_path)
    rows = engine_rows(policy, machines, pods, seed=42, stop_pct=1000)
    base = [pod_of(p) for p in pods]
    want = [base[i].gpu for i in arrival_order(base, 10_000, 42)]  # 5 machines x 2 GPUs
    assert [r[0] for r in rows] == [sum(want[: i + 1]) for i in range(len(want))]  # the same arrivals, in order
    allocated = [a for _, a in rows]
    assert allocated == sorted(allocated) and 9000 <= allocated[-1] <= 10_000  # fills, never overcommits


def test_the_cli_runs_minborgs_policies_with_engine_on_and_keeps_the_variant(tmp_path):
    pods, nodes = _tiny(tmp_path)
    args = ["--semantics", "fgd", "--pods", str(pods), "--nodes", str(nodes), "--out", str(tmp_path / "o"), "--seeds", "2"]
    assert packing_bench.main([*args, "--engine", "on", "--policy", "borg_hybrid"]) == 0
    assert packing_bench.main([*args, "--policy", "fgd", "--first-seed", "52", "--seeds", "1"]) == 0
    stored = load(tmp_path / "o" / "packing" / "fgd_results.json")
    assert sorted((p, v, s) for (_, p, v, s) in stored) == [("borg_hybrid", "on", 42), ("borg_hybrid", "on", 43), ("fgd", "simulator", 52)]
    rows = summary(stored.values(), ["pods.csv"], PAPER_SEEDS)
    assert [(r["policy"], r["variant"], r["n"], r["published"]) for r in rows] == [("borg_hybrid", "on", 2, None)]
