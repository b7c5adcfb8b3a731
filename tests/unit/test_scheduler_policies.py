"""Table tests of the scoring policies, with the arithmetic a reader can check by hand."""

import pytest

from reference.scheduler.policies import (
    best_fit,
    borg_hybrid,
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
    # 100 * (1 - 0.25) - 200 * 0 = 75
    (borg_hybrid, (1000, 2000), (2000, 4000), (4000, 8000), 0.0, 75.0),
    # borg_hybrid unbalanced: leftovers 1000/4000 = 0.25, 5000/8000 = 0.625; lmin 0.25;
    # mean 0.4375, stranded 0.4375 - 0.25 = 0.1875; 100 * 0.75 - 200 * 0.1875 = 75 - 37.5 = 37.5
    (borg_hybrid, (1000, 1000), (2000, 6000), (4000, 8000), 0.0, 37.5),
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
]


@pytest.mark.parametrize("policy, req, free, cap, salt, want", CASES)
def test_policy_table(policy, req, free, cap, salt, want):
    assert policy(req, free, cap, salt) == pytest.approx(want)


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
