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


def test_the_first_n_in_the_queue_are_those_a_whole_pass_would_take_first():
    import random

    from reference.scheduler.adapter import snapshot_from_state
    from reference.scheduler.queue import first_in_queue
    from spec.fmap import FMap
    from spec.model import CellState, Job, Task, TaskState

    rng = random.Random(7)
    for trial in range(40):
        jobs, tasks = {}, {}
        for j in range(rng.randint(1, 6)):
            job = Job(rng.choice(["alice", "bob", "carol"]), f"j{j}", rng.choice([0, 100, 200]), rng.randint(1, 30),
                      Resources.of(cpu=1))  # fmt: skip
            key = job.key
            jobs[key] = job
            for i in range(job.task_count):
                tid = TaskId(key, i, rng.randint(0, 2))
                tasks[tid] = Task(tid, TaskState.PENDING, None, jobs[key].priority, Resources.of(cpu=1))
        state = CellState(jobs=FMap(jobs), tasks=FMap(tasks))
        ids = set(rng.sample(sorted(tasks), rng.randint(0, len(tasks))))
        snapshot = snapshot_from_state(state, pending_ids=ids, running_ids=set())
        whole = [p.id for p in ordered(snapshot.pending, QueueOrder.PRIORITY_ROUND_ROBIN)]
        assert set(whole) == ids
        for n in (0, 1, 5, 17, len(ids), len(ids) + 3):
            assert first_in_queue(state, ids, n) == set(whole[:n]), (trial, n)
