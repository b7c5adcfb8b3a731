"""The pending queue: high to low priority, round-robin across users within a priority."""

from reference.scheduler import PendingTask, QueueOrder
from reference.scheduler.queue import ordered
from spec.model import Resources, TaskId


def t(user, job, i, prio):
    return PendingTask(TaskId(f"{user}/{job}", i), user, prio, Resources.of(cpu=1))


def test_priority_then_round_robin_across_users():
    q = [
        *(t("carol", "big", i, 100) for i in range(3)),
        t("alice", "a", 0, 100),
        t("bob", "b", 0, 100),
        t("bob", "b", 1, 100),
        t("zed", "prod", 0, 200),
        t("amy", "free", 0, 0),
    ]
    got = [f"{x.id.job}/{x.id.index}" for x in ordered(q, QueueOrder.PRIORITY_ROUND_ROBIN)]
    assert got == [
        "zed/prod/0",  # priority 200 first
        "alice/a/0", "bob/b/0", "carol/big/0",  # round 1 of priority 100, users by name
        "bob/b/1", "carol/big/1",  # round 2
        "carol/big/2",  # round 3
        "amy/free/0",  # priority 0 last
    ]


def test_given_order_is_kept():
    q = [t("b", "x", 0, 0), t("a", "y", 0, 300)]
    assert ordered(q, QueueOrder.GIVEN) == q
