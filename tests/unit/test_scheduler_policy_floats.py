"""A policy rewritten for speed keeps its floats: borg_hybrid against its formula written as lists."""

import random

import pytest

from reference.scheduler.policies import MAX_SCORE, STRANDING_WEIGHT, borg_hybrid


def hybrid_as_written(req, free, cap):
    """The docstring's formula over the dimensions the machine has, with Python's own sum and min."""
    left = [(f - r) / c for r, f, c in zip(req, free, cap, strict=True) if c > 0]
    lmin = min(left)
    stranded = sum(left) / len(left) - lmin
    return MAX_SCORE * (1.0 - lmin) - STRANDING_WEIGHT * MAX_SCORE * stranded * (1.0 - lmin)


@pytest.mark.parametrize("seed", range(3))
def test_borg_hybrid_is_its_formula_float_for_float(seed):
    rng = random.Random(seed)
    for _ in range(20000):
        dims = rng.randint(1, 6)
        cap = [rng.choice([0, 1, 1000, 8000, 32000, 2**37]) for _ in range(dims)]
        if not any(cap):
            cap[0] = 1000
        free = [rng.randint(-c // 8, c) for c in cap]  # overcommitted machines read below 0
        req = [rng.randint(0, max(f, 0)) for f in free]
        assert borg_hybrid(req, free, cap) == hybrid_as_written(req, free, cap)


def test_a_machine_with_no_capacity_is_refused():
    with pytest.raises(ValueError):
        borg_hybrid((1,), (0,), (0,))
