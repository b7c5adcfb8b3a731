"""Table tests of the scoring policies, with the arithmetic a reader can check by hand."""

import pytest

from reference.scheduler.fragmentation import ShapeMix, fgd_place, fgd_score, fragmentation, usable
from reference.scheduler.policies import (
    POLICY_NAMES,
    best_fit,
    borg_hybrid,
    dot_prod,
    gpu_clustering,
    gpu_packing,
    k8s_balanced,
    k8s_least_allocated,
    policy_named,
    random_fit,
    worst_fit,
)

# Vectors are (cpu milli, ram units); capacity 0 means the machine lacks that resource.
CASES = [
    # best_fit: leftovers (2000-1000)/4000 = 0.25, (4000-2000)/8000 = 0.25; 100 * (1 - 0.25) = 75
    (best_fit, (1000, 2000), (2000, 4000), (4000, 8000), 0.0, 75.0),
    # best_fit on an empty machine: leftovers 3000/4000 = 0.75, 6000/8000 = 0.75; 100 * 0.25 = 25
    (best_fit, (1000, 2000), (4000, 8000), (4000, 8000), 0.0, 25.0),
    # worst_fit: same leftovers 0.25, 0.25; 100 * 0.25 = 25
    (worst_fit, (1000, 2000), (2000, 4000), (4000, 8000), 0.0, 25.0),
    # worst_fit, third dimension absent on the machine (cap 0) is ignored: 0.75, 0.75 -> 75
    (worst_fit, (1000, 2000, 0), (4000, 8000, 0), (4000, 8000, 0), 0.0, 75.0),
    # borg_hybrid balanced: leftovers 0.25, 0.25; lmin 0.25, stranded 0.25 - 0.25 = 0;
    # 100 * (1 - 0.25) - 4 * 100 * 0 * 0.75 = 75
    (borg_hybrid, (1000, 2000), (2000, 4000), (4000, 8000), 0.0, 75.0),
    # borg_hybrid unbalanced: leftovers 1000/4000 = 0.25, 5000/8000 = 0.625; lmin 0.25;
    # mean 0.4375, stranded 0.4375 - 0.25 = 0.1875, dominant taken 1 - 0.25 = 0.75;
    # 100 * 0.75 - 4 * 100 * 0.1875 * 0.75 = 75 - 56.25 = 18.75
    (borg_hybrid, (1000, 1000), (2000, 6000), (4000, 8000), 0.0, 18.75),
    # borg_hybrid, the same excess on a nearly empty machine strands little: leftovers
    # 7000/8000 = 0.875, 15000/16000 = 0.9375; lmin 0.875, stranded 0.90625 - 0.875 = 0.03125;
    # 100 * 0.125 - 4 * 100 * 0.03125 * 0.125 = 12.5 - 1.5625 = 10.9375
    (borg_hybrid, (1000, 1000), (8000, 16000), (8000, 16000), 0.0, 10.9375),
    # k8s_least_allocated: requested cpu 4000-3000+1000 = 2000 -> (4000-2000)*100//4000 = 50;
    # requested mem 8000-6000+2000 = 4000 -> (8000-4000)*100//8000 = 50; (50+50)//2 = 50
    (k8s_least_allocated, (1000, 2000), (3000, 6000), (4000, 8000), 0.0, 50.0),
    # empty node: cpu (4000-3000)*100//4000 = 25, mem (10000-5000)*100//10000 = 50; 75//2 = 37
    (k8s_least_allocated, (3000, 5000), (4000, 10000), (4000, 10000), 0.0, 37.0),
    # k8s_balanced (the kube-scheduler doc example): fractions 3000/4000 = 0.75, 5000/10000 = 0.5;
    # std |0.75 - 0.5| / 2 = 0.125; int((1 - 0.125) * 100) = 87
    (k8s_balanced, (3000, 5000), (4000, 10000), (4000, 10000), 0.0, 87.0),
    # k8s_balanced, equal fractions 0.5, 0.5: std 0, score 100
    (k8s_balanced, (2000, 5000), (4000, 10000), (4000, 10000), 0.0, 100.0),
    # random_fit is the salt scaled: 100 * 0.3 = 30
    (random_fit, (1000, 2000), (2000, 4000), (4000, 8000), 0.3, 30.0),
    # dot_prod: (1000/4000)*(2000/4000) = 0.125, (2000/8000)*(4000/8000) = 0.125; mean 0.125;
    # 100 * (1 - 0.125) = 87.5
    (dot_prod, (1000, 2000), (2000, 4000), (4000, 8000), 0.0, 87.5),
    # dot_prod on an empty machine: 0.25 * 1 = 0.25 twice; 100 * (1 - 0.25) = 75 (the fuller one wins)
    (dot_prod, (1000, 2000), (4000, 8000), (4000, 8000), 0.0, 75.0),
]


@pytest.mark.parametrize("policy, req, free, cap, salt, want", CASES)
def test_policy_table(policy, req, free, cap, salt, want):
    assert policy(req, free, cap, salt) == pytest.approx(want)


# gpu_packing(whole, share, per-GPU free milli)
GPU_PACKING = [
    # no GPU asked: 0
    (0, 0, [1000, 1000], 0.0),
    # every GPU idle, 8 of them: 100 // 3 - 8 = 25, at least 8 -> 25
    (1, 0, [1000] * 8, 25.0),
    # every GPU idle, 2 of them: 33 - 2 = 31
    (0, 500, [1000, 1000], 31.0),
    # 2 whole GPUs on a machine in use: 100 // 2 - 2 = 48, at least 33 -> 48
    (2, 0, [1000, 1000, 1000, 300], 48.0),
    # a share of 500 on a machine in use: fullest GPU that fits has 600 free;
    # 600 * 100 // 1000 = 60; 100 - 60 // 10 = 94
    (0, 500, [1000, 600, 200, 1000], 94.0),
    # a share of 700: only idle GPUs fit, so one is taken: 50 - 1 = 49
    (0, 700, [1000, 600, 200, 1000], 49.0),
]


@pytest.mark.parametrize("whole, share, gfree, want", GPU_PACKING)
def test_gpu_packing_table(whole, share, gfree, want):
    assert gpu_packing(whole, share, gfree) == want


# gpu_clustering(kind, kinds on the machine, free GPU milli, largest machine's GPU milli)
GPU_CLUSTERING = [
    # only this kind here, 6000 of 8000 free: 25 * 2000 // 8000 = 6; 75 + 6 = 81
    ((0, 500), {(0, 500)}, 6000, 8000, 81.0),
    # this kind among others: 50 + 6 = 56
    ((0, 500), {(0, 500), (1, 0)}, 6000, 8000, 56.0),
    # an idle machine: 25 + 25 * 0 // 8000 = 25
    ((0, 500), set(), 8000, 8000, 25.0),
    # only other kinds, 4000 free: 0 + 25 * 4000 // 8000 = 12
    ((0, 500), {(1, 0)}, 4000, 8000, 12.0),
    # no GPU asked: 0
    (None, {(1, 0)}, 4000, 8000, 0.0),
]


@pytest.mark.parametrize("kind, here, free, most, want", GPU_CLUSTERING)
def test_gpu_clustering_table(kind, here, free, most, want):
    assert gpu_clustering(kind, here, free, most) == want


# The mix for the fragmentation tables: shares of 500 milli asking 2000 and 8000 milli-CPU,
# one whole GPU asking 4000, and one task without GPUs: 4 tasks.
MIX = (((0, 500, ()), [2000, 8000]), ((1, 0, ()), [4000]))


def test_usable_gpu_per_shape():
    # a share of 500 fits on the GPUs with 1000 and 600 free: 1600; not on the one with 200
    assert usable([1000, 600, 200], 0, 500) == 1600
    # two whole GPUs need two untouched ones; there is one: 0
    assert usable([1000, 600, 200], 2, 0) == 0
    assert usable([1000, 1000, 200], 2, 0) == 2000


def test_fragmentation_by_hand():
    # GPUs [1000, 300] free, 6000 milli-CPU free; free GPU 1300. Per task of the mix:
    # share 500 @ 2000 CPU fits on GPU 0: 300 left unusable; share 500 @ 8000 CPU: no CPU, all 1300;
    # whole @ 4000 CPU takes GPU 0: 300 unusable; the CPU-only task uses no GPU: 1300.
    # mean (300 + 1300 + 300 + 1300) / 4 = 800
    assert fragmentation(6000, [1000, 300], MIX, 4) == pytest.approx(800.0)
    # a group whose constraints do not hold here counts all free GPU: (300 + 1300 + 1300 + 1300) / 4
    assert fragmentation(6000, [1000, 300], MIX, 4, [True, False]) == pytest.approx(1050.0)


def test_fgd_places_the_share_where_fragmentation_grows_least():
    # A share of 300 asking 1000 CPU on GPUs [1000, 300], 6000 CPU free (F before = 800, above).
    # On GPU 0 -> [700, 300], 5000 CPU: share 500 @ 2000 uses 700, whole finds no idle GPU:
    #   F = 1000 - 700 / 4 = 825.  On GPU 1 -> [1000, 0]: share and whole use 1000 each:
    #   F = 1000 - 2000 / 4 = 500.  GPU 1 wins; 100 * sigmoid((800 - 500) / 1000) = 57.44
    score, picks = fgd_place(6000, 1000, [1000, 300], 0, 300, MIX, 4)
    assert picks == [(1, 300)]
    assert score == pytest.approx(57.444, abs=1e-3)
    assert fgd_score(800, 800) == 50.0  # no change in fragmentation: the middle of the range


def test_shape_mix_moves_only_past_its_threshold():
    mix = ShapeMix(threshold=0.5)
    assert mix.add((0, 500, ()), 2000) and mix.version == 1  # the first task always freezes
    # a second, identical task: the distribution is unchanged (L1 0)
    assert not mix.add((0, 500, ()), 2000)
    # a new shape: 1/3 of the mass moves; L1 = |2/3 - 1| + 1/3 = 0.667 > 0.5
    assert mix.add(None, 1000) and mix.version == 2 and mix.frozen_total == 3


def test_every_policy_has_a_name_the_engine_knows():
    assert {"fgd", "dot_prod", "gpu_packing", "gpu_clustering"} <= set(POLICY_NAMES)
    assert policy_named("fgd") is None  # GPU-aware: scored by the engine's adapter


def test_best_fit_prefers_the_fuller_machine_worst_fit_the_emptier():
    req, cap = (1000, 2000), (4000, 8000)
    fuller, emptier = (2000, 4000), (4000, 8000)
    assert best_fit(req, fuller, cap) > best_fit(req, emptier, cap)
    assert worst_fit(req, fuller, cap) < worst_fit(req, emptier, cap)


def test_hybrid_prefers_the_machine_that_strands_less():
    # Both machines end with 25% CPU left; one keeps 25% RAM, the other 62.5% that would strand.
    req, cap = (1000, 1000), (4000, 8000)
    assert borg_hybrid(req, (2000, 3000), cap) > borg_hybrid(req, (2000, 6000), cap)


def test_unknown_policy_says_what_exists():
    with pytest.raises(ValueError, match="best_fit"):
        policy_named("tightest")


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
