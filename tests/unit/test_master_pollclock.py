"""Table tests of the poller's timing (master/pollclock.py): when a machine is due, when it is down,
when usage is written. Every time is an argument: no clock, no sleep."""

import pytest

from reference.master import pollclock
from reference.master.pollclock import Schedule

INTERVAL = 1.0


@pytest.mark.parametrize(
    ("schedule", "now", "blocking", "due"),
    [
        # Regular poll at next_at = 11.
        (Schedule(next_at=11.0, sent_at=10.0), 10.5, False, False),
        (Schedule(next_at=11.0, sent_at=10.0), 11.0, False, True),
        # Blocking a held task: due at min(11, 10 + 0.2) = 10.2.
        (Schedule(next_at=11.0, sent_at=10.0), 10.19, True, False),
        (Schedule(next_at=11.0, sent_at=10.0), 10.2, True, True),
        # A refusal moved next_at before the hold's poll: min(10.1, 10.2) = 10.1.
        (Schedule(next_at=10.1, sent_at=10.0), 10.1, True, True),
    ],
)
def test_sync_due(schedule, now, blocking, due):
    assert pollclock.sync_due(schedule, now, blocking) is due


def test_a_send_moves_the_next_poll_one_interval_on():
    s = Schedule(next_at=3.0, sent_at=2.0, misses=2, usage_written_at=1.0)
    assert pollclock.sync_sent(s, 7.0, INTERVAL) == Schedule(8.0, 7.0, 2, 1.0)


@pytest.mark.parametrize(
    ("schedule", "now", "after"),
    [
        # Retried at min(11, 10 + 0.2) = 10.2; misses back to 0 (a refusal is an answer).
        (Schedule(next_at=11.0, misses=2), 10.0, Schedule(next_at=10.2, misses=0)),
        # Already due sooner: min(10.1, 10.2) = 10.1.
        (Schedule(next_at=10.1, misses=1), 10.0, Schedule(next_at=10.1, misses=0)),
    ],
)
def test_a_refused_sync_is_retried_soon(schedule, now, after):
    got = pollclock.refused(schedule, now)
    assert (got.next_at, got.misses) == (pytest.approx(after.next_at), after.misses)


def test_an_answer_resets_the_misses():
    s = Schedule(next_at=8.0, sent_at=7.0, misses=2, usage_written_at=1.0)
    assert pollclock.answered(s) == Schedule(8.0, 7.0, 0, 1.0)


@pytest.mark.parametrize(
    ("misses_before", "down_after", "down"),
    [
        (0, 3, False),  # 1 miss of 3
        (1, 3, False),  # 2 of 3
        (2, 3, True),  # 3 of 3: down
        (5, 3, True),  # still down (the poller marks it once: only an up machine is marked)
        (0, 1, True),
    ],
)
def test_a_machine_is_down_after_down_after_misses_in_a_row(misses_before, down_after, down):
    s = pollclock.missed(Schedule(misses=misses_before))
    assert s.misses == misses_before + 1
    assert pollclock.is_down(s, down_after) is down


@pytest.mark.parametrize(
    ("written_at", "now", "due"),
    [
        (0.0, 9.99, False),  # never written, but the clock starts near 0 in a test: 9.99 < 10
        (0.0, 10.0, True),
        (100.0, 109.0, False),  # 9 s since the last write
        (100.0, 110.0, True),  # 10 s
    ],
)
def test_usage_is_written_every_ten_seconds(written_at, now, due):
    assert pollclock.usage_due(Schedule(usage_written_at=written_at), now) is due
    assert pollclock.usage_written(Schedule(), now).usage_written_at == now


@pytest.mark.parametrize(
    ("now", "took", "cpu", "after"),
    [
        (100.0, 0.0, 0.0, 100.0),  # an instant rebuild (a small cell): the next turn may rebuild
        (100.0, 0.1, 0.02, 100.5),  # 0.1 s waiting for a CPU, 0.02 s on it: a fifth of the time
        (100.0, 0.1, 0.1, 101.0),  # 0.1 s, all on the CPU: a pause of 0.9 s, a tenth of a core
        (100.0, 1.0, 0.2, 103.0),  # the pause is capped at 2 s
    ],
)
def test_a_rebuild_of_the_desired_sets_is_paced_by_its_length_and_its_cpu(now, took, cpu, after):
    assert pollclock.next_rebuild(now, took, cpu) == pytest.approx(after)
