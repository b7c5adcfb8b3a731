"""Table tests of the borglet's pure decisions: reconcile, restart policy, backoff, what follows an
exit, re-adoption after a restart, victims."""

import pytest

from reference.borglet.decisions import (
    Candidate,
    Exit,
    Fence,
    Plan,
    Readoption,
    Saved,
    after_exit,
    backoff_delay,
    desired_after,
    ended_state,
    memory_pressure_victims,
    readoption,
    reconcile,
    restart_attempt,
    should_restart,
    sync_refusal,
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
    ("attempt", "ran_for", "used"), [(0, 0.5, 0), (4, 9.9, 4), (4, 10.0, 0), (7, 3600, 0)]
)
def test_a_long_run_resets_the_backoff(attempt, ran_for, used):
    assert restart_attempt(attempt, ran_for) == used


@pytest.mark.parametrize(
    ("policy", "exit_code", "oom", "kill_reason", "attempt", "ran_for", "after"),
    [
        # First failure: attempt 0, restart at 100 + 0.1 * 2**0 = 100.1; the next one is attempt 1.
        ("on_failure", 1, False, None, 0, 0.5, Exit("STARTING", "exit 1", 100.1, 1)),
        # Third quick failure: attempt 2, 100 + 0.1 * 2**2 = 100.4.
        ("on_failure", 1, False, None, 2, 0.5, Exit("STARTING", "exit 1", 100.4, 3)),
        # Ran 10 s, long enough to count as healthy: back to attempt 0, 100.1.
        ("always", 0, False, None, 6, 10.0, Exit("STARTING", "exit 0", 100.1, 1)),
        # Attempt 7: 0.1 * 2**7 = 12.8 s, capped at 10 s: 110.
        ("always", -11, False, None, 7, 1.0, Exit("STARTING", "signal 11", 110.0, 8)),
        # An OOM kill whose exit code reads 0 is still a failure for on_failure.
        ("on_failure", 0, True, None, 0, 1.0, Exit("STARTING", "oom", 100.1, 1)),
        # A clean exit under on_failure ends it; the attempt count stays as it was.
        ("on_failure", 0, False, None, 3, 1.0, Exit("FINISHED", None, None, 3)),
        ("never", 2, False, None, 0, 1.0, Exit("FAILED", "exit 2", None, 0)),
        # The borglet's own kill is never undone, whatever the policy.
        ("always", -15, False, "not_desired", 0, 1.0, Exit("KILLED", "not_desired", None, 0)),
    ],
)
def test_after_exit(policy, exit_code, oom, kill_reason, attempt, ran_for, after):
    got = after_exit(policy, exit_code, oom, kill_reason, attempt, ran_for, now=100.0)
    assert got == Exit(after.phase, after.reason, pytest.approx(after.restart_at), after.attempt)


def saved(phase="RUNNING", reason=None, *, launching=False, pid=True, kill=None, backoff=False,
          checked=False, found=False, alive=False) -> Saved:  # fmt: skip
    ended = phase in ("FINISHED", "FAILED", "KILLED")
    return Saved(phase, reason, ended, launching, pid, kill, backoff, checked, found, alive)


@pytest.mark.parametrize(
    ("task", "verdict"),
    [
        # Ended before the restart: reported as it was.
        (saved("FINISHED"), Readoption("ended", "FINISHED", None)),
        (saved("FAILED", "exit 1", pid=False), Readoption("ended", "FAILED", "exit 1")),
        # Still queued: queued again; queued and killed before it started: killed, never started.
        (saved("QUEUED", pid=False), Readoption("queue", "QUEUED", None)),
        (saved("QUEUED", pid=False, kill="not_desired"), Readoption("cancel", "KILLED", "not_desired")),
        # Saved just before its spawn and its process found by its marker: adopted as started.
        (saved("QUEUED", launching=True, pid=False, found=True, alive=True), Readoption("adopt", "RUNNING", None)),
        (
            saved("QUEUED", launching=True, pid=False, checked=True, found=True, alive=True),
            Readoption("adopt", "STARTING", None),
        ),
        # ... and no process found: it never started, so it is queued again (never spawned twice
        # is the shell's part: it was not spawned).
        (saved("QUEUED", launching=True, pid=False), Readoption("queue", "QUEUED", None)),
        # Found, but gone before its start time was read: lost.
        (saved("QUEUED", launching=True, pid=False, found=True), Readoption("lost", "FAILED", "lost_on_restart")),
        # Its process outlived the borglet: adopted as it was, a kill under way kept.
        (saved("RUNNING", alive=True), Readoption("adopt", "RUNNING", None)),
        (saved("RUNNING", "not_desired", kill="not_desired", alive=True), Readoption("adopt", "RUNNING", "not_desired")),
        # Its process died while the borglet was down: lost, or killed if the kill was decided.
        (saved("RUNNING"), Readoption("lost", "FAILED", "lost_on_restart")),
        (saved("RUNNING", kill="memory_pressure"), Readoption("lost", "KILLED", "memory_pressure")),
        # Between restarts (no process, a backoff saved): the backoff ends at once.
        (saved("STARTING", "exit 1", pid=False, backoff=True), Readoption("resume", "STARTING", "exit 1")),
        # ... unless it was being killed: killed.
        (saved("STARTING", pid=False, backoff=True, kill="not_desired"), Readoption("lost", "KILLED", "not_desired")),
    ],
)
def test_readoption(task, verdict):
    assert readoption(task) == verdict


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


@pytest.mark.parametrize(
    ("delta_base", "has_base", "epoch", "seq", "want"),
    [
        (None, False, 1, 6, None),  # a whole set applies without a base
        (5, True, 1, 6, None),  # a delta on the last sync applied
        (4, True, 1, 6, "need_full"),  # on an older one
        (5, False, 1, 6, "need_full"),  # no whole set applied since the borglet started
        (5, True, 2, 1, "need_full"),  # a new leader's delta on the old leader's sync
        (5, True, 1, 5, "stale_seq"),  # the ordering refusal comes first
    ],
)
def test_sync_refusal_adds_need_full_for_deltas(delta_base, has_base, epoch, seq, want) -> None:
    fence = Fence(1, 5, 100)
    assert sync_refusal(fence, epoch, seq, 100, delta_base, has_base) == want


def test_desired_after_a_delta() -> None:
    base = {"a": 1, "b": 2}
    assert desired_after(base, ["a", "zz"], [("c", 3), ("b", 20)]) == {"b": 20, "c": 3}
    assert base == {"a": 1, "b": 2}  # the base is not changed
