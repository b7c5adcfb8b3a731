"""Table tests of the borglet's pure decisions: reconcile, restart policy, backoff, victims."""

import pytest

from reference.borglet.decisions import (
    Candidate,
    Plan,
    backoff_delay,
    ended_state,
    memory_pressure_victims,
    next_attempt,
    reconcile,
    should_restart,
)


@pytest.mark.parametrize(
    ("desired", "active", "ended_before", "plan"),
    [
        # Nothing known: start everything listed, in the order listed.
        (["a", "b"], {}, [], Plan(start=("a", "b"))),
        # Already running and still listed: nothing to do.
        (["a"], {"a": True}, [], Plan()),
        # Running but no longer listed (a duplicate after a partition, a user's kill): kill.
        ([], {"a": True}, [], Plan(kill=("a",))),
        # Ended and still listed: stays in the report, is not started again.
        (["a"], {"a": False}, [], Plan()),
        # Ended and no longer listed: forget it.
        ([], {"a": False}, [], Plan(forget=("a",))),
        # Forgotten, then listed again: a task id runs at most once, so restore it as ended.
        (["a"], {}, ["a"], Plan(restore=("a",))),
        # Duplicates in the desired list are started once.
        (["a", "a"], {}, [], Plan(start=("a",))),
        # Everything at once.
        (
            ["keep", "new"],
            {"keep": True, "old": True, "done": False},
            [],
            Plan(start=("new",), kill=("old",), forget=("done",)),
        ),
    ],
)
def test_reconcile(desired, active, ended_before, plan):
    assert reconcile(desired, active, ended_before) == plan


@pytest.mark.parametrize(
    ("policy", "exit_code", "killed", "restart"),
    [
        ("never", 1, False, False),
        ("never", 0, False, False),
        ("on_failure", 1, False, True),
        ("on_failure", -9, False, True),  # killed by a signal (an OOM kill) is a failure
        ("on_failure", None, False, True),  # an adopted process whose exit was not observed
        ("on_failure", 0, False, False),
        ("always", 0, False, True),
        ("always", 3, False, True),
        # A kill the borglet made (sync without it, memory pressure) is never restarted.
        ("always", -15, True, False),
        ("on_failure", -9, True, False),
    ],
)
def test_should_restart(policy, exit_code, killed, restart):
    assert should_restart(policy, exit_code, killed) is restart


@pytest.mark.parametrize(
    ("attempt", "delay"),
    [(0, 0.1), (1, 0.2), (2, 0.4), (3, 0.8), (6, 6.4), (7, 10.0), (50, 10.0), (10**6, 10.0)],
)
def test_backoff_doubles_from_100ms_to_a_10s_cap(attempt, delay):
    assert backoff_delay(attempt) == pytest.approx(delay)


def test_backoff_rejects_negative_attempts():
    with pytest.raises(ValueError):
        backoff_delay(-1)


@pytest.mark.parametrize(
    ("previous", "ran_for", "attempt"), [(0, 0.5, 1), (4, 9.9, 5), (4, 10.0, 0), (7, 3600, 0)]
)
def test_a_long_run_resets_the_backoff(previous, ran_for, attempt):
    assert next_attempt(previous, ran_for) == attempt


@pytest.mark.parametrize(
    ("exit_code", "oom", "kill_reason", "result"),
    [
        (0, False, None, ("FINISHED", None)),
        (1, False, None, ("FAILED", "exit 1")),
        (-11, False, None, ("FAILED", "signal 11")),
        (-9, True, None, ("FAILED", "oom")),
        (None, False, None, ("FAILED", "exit_unobserved")),
        (-15, False, "not_desired", ("KILLED", "not_desired")),
        (-9, True, "memory_pressure", ("KILLED", "memory_pressure")),  # our kill names the cause
        (0, False, "not_desired", ("KILLED", "not_desired")),  # exited cleanly on SIGTERM
    ],
)
def test_ended_state(exit_code, oom, kill_reason, result):
    assert ended_state(exit_code, oom, kill_reason) == result


MiB = 1024 * 1024


@pytest.mark.parametrize(
    ("candidates", "capacity", "victims"),
    [
        # Under capacity: nobody dies.
        ([Candidate("a", 100, 50 * MiB, 1.0)], 100 * MiB, []),
        # Exactly at capacity is not over it.
        ([Candidate("a", 100, 100 * MiB, 1.0)], 100 * MiB, []),
        # 60 + 60 = 120 MiB > 100 MiB: the lower priority (100 < 200) goes, leaving 60 MiB.
        (
            [Candidate("hi", 200, 60 * MiB, 1.0), Candidate("lo", 100, 60 * MiB, 2.0)],
            100 * MiB,
            ["lo"],
        ),
        # 3 x 50 = 150 MiB > 60 MiB: kill lowest first until 50 MiB remain.
        (
            [
                Candidate("p300", 300, 50 * MiB, 1.0),
                Candidate("p0", 0, 50 * MiB, 1.0),
                Candidate("p100", 100, 50 * MiB, 1.0),
            ],
            60 * MiB,
            ["p0", "p100"],
        ),
        # Same priority: the youngest (latest started_at) goes first.
        (
            [Candidate("old", 100, 60 * MiB, 1.0), Candidate("young", 100, 60 * MiB, 9.0)],
            100 * MiB,
            ["young"],
        ),
        # A small low-priority task is killed even if that alone is not enough.
        (
            [Candidate("big", 200, 90 * MiB, 1.0), Candidate("small", 100, 20 * MiB, 1.0)],
            50 * MiB,
            ["small", "big"],
        ),
    ],
)
def test_memory_pressure_victims_lowest_priority_first(candidates, capacity, victims):
    assert memory_pressure_victims(candidates, capacity) == victims
