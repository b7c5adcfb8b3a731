"""One scheduling pass: the queue limit cuts the ordered queue, and the score cache rescores
only for the class's next task (its hits counted only with the cache on)."""

import pytest

from reference.scheduler import SchedulerConfig, Snapshot, plan_pass
from tests.unit.scheduler_cells import machine, pending


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


def test_score_cache_hits_are_counted_only_with_the_cache_on():
    # Four identical tasks on ten machines: after the first placement the class's scores
    # come from the cache (versions unchanged on the machines not chosen).
    snap = Snapshot(tuple(machine(f"m{i}") for i in range(10)),
                    pending=tuple(pending("u/j", 100, 100, i) for i in range(4)))  # fmt: skip
    on = plan_pass(snap, SchedulerConfig(score_cache=True))
    off = plan_pass(snap, SchedulerConfig(score_cache=False))
    assert len(on.placements) == len(off.placements) == 4
    assert on.stats.cache_hits > 0 and off.stats.cache_hits == 0
