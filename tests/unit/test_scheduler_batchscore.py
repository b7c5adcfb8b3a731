"""The numpy twins of the scalar policies give the same floats, bit for bit, so batching changes no choice."""

import random

import numpy as np
import pytest

from reference.scheduler.batchscore import BATCH_POLICIES
from reference.scheduler.policies import POLICIES


def machines(rng: random.Random, n: int, dims: int, lacking: bool) -> tuple[list, list, list]:
    caps, frees, salts = [], [], []
    for _ in range(n):
        cap = [rng.choice((4000, 64000, 96000, 262144, 1 << 36, 3)) for _ in range(dims)]
        if lacking:  # some machines lack a dimension past CPU (a CPU-only machine has no GPU)
            cap = [c if d == 0 or rng.random() < 0.7 else 0 for d, c in enumerate(cap)]
        caps.append(cap)
        frees.append([rng.randint(0, c) for c in cap])
        salts.append(rng.random())
    return caps, frees, salts


@pytest.mark.parametrize("name", sorted(BATCH_POLICIES))
@pytest.mark.parametrize("lacking", [False, True])
def test_batch_scores_equal_the_scalar_policy(name, lacking):
    rng = random.Random(f"{name}{lacking}")
    scalar, batch = POLICIES[name], BATCH_POLICIES[name]
    for dims in (2, 3, 4):
        caps, frees, salts = machines(rng, 300, dims, lacking)
        req = [rng.randint(0, 3000) for _ in range(dims)]
        frees = [[max(f, r) for f, r in zip(fr, req, strict=True)] for fr in frees]  # it fits: the engine asks no other
        got = batch(np.array(req), np.array(frees, dtype=np.int64), np.array(caps, dtype=np.int64), np.array(salts))
        want = [scalar(req, f, c, s) for f, c, s in zip(frees, caps, salts, strict=True)]
        assert got.tolist() == want  # equal floats, not approximately equal


def test_every_batched_policy_is_a_scalar_one():
    assert set(BATCH_POLICIES) <= set(POLICIES)


@pytest.mark.parametrize("policy", ["borg_hybrid", "best_fit", "random_fit"])
def test_a_pass_places_the_same_with_batches_or_one_machine_at_a_time(monkeypatch, policy):
    from reference.scheduler import PendingTask, SchedulerConfig, Snapshot, plan_pass, sample
    from spec.model import Machine, Resources, TaskId

    rng = random.Random(7)
    ms = tuple(
        Machine(f"m{i:03d}", Resources.of(cpu=rng.choice([8000, 16000]), ram=rng.choice([16, 64]) << 30, disk=1 << 40))
        for i in range(400)
    )
    pending = []
    for j in range(60):
        req = Resources.of(cpu=rng.choice([500, 1000, 2000]), ram=rng.choice([1, 2, 4]) << 30, disk=rng.choice([1, 5]) << 30)
        for i in range(rng.randint(1, 30)):
            pending.append(PendingTask(TaskId(f"u/j{j}", i), "u", rng.choice([100, 200]), req))
    snap = Snapshot(ms, pending=tuple(pending))
    cfg = SchedulerConfig(policy=policy)
    batched = plan_pass(snap, cfg, seed=3)
    monkeypatch.setattr(sample, "BATCH_MIN", 1 << 30)
    one_by_one = plan_pass(snap, cfg, seed=3)
    assert batched.placements == one_by_one.placements
    assert batched.stats.evaluations == one_by_one.stats.evaluations
