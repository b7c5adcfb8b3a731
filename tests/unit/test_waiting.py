"""wait_until on a made-up clock: what it returns, when it gives up, what it ignores; no real sleep."""

from __future__ import annotations

import pytest

from reference.waiting import wait_until


class FakeTime:
    """A clock that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def answers(*values: object):
    """A check that gives `values` in turn (raising those that are exceptions)."""
    it = iter(values)

    def check() -> object:
        value = next(it)
        if isinstance(value, Exception):
            raise value
        return value

    return check


def test_returns_the_first_truthy_answer_without_sleeping_after_it() -> None:
    t = FakeTime()
    found = wait_until(answers(None, 0, [], "leader"), 10.0, "a leader", 0.5, clock=t.clock, sleep=t.sleep)
    assert found == "leader"
    assert t.slept == [0.5, 0.5, 0.5]  # three falsy answers, one sleep after each


def test_an_answer_at_once_needs_no_sleep() -> None:
    t = FakeTime()
    assert wait_until(answers(7), 0.0, "seven", clock=t.clock, sleep=t.sleep) == 7
    assert t.slept == []


def test_gives_up_at_the_deadline_naming_what_and_the_last_answer() -> None:
    t = FakeTime()
    with pytest.raises(TimeoutError, match=r"after 1s waiting for the borglet \(last: False\)"):
        wait_until(lambda: False, 1.0, "the borglet", 0.25, clock=t.clock, sleep=t.sleep)
    # Checked at 0, 0.25, 0.5, 0.75 and 1.0: the answer at the deadline is the last.
    assert t.slept == [0.25] * 4
    assert t.now == 101.0


def test_ignored_errors_count_as_not_yet_and_show_as_the_last_answer() -> None:
    t = FakeTime()
    check = answers(ConnectionError("refused"), KeyError("role"), "up")
    assert wait_until(check, 5.0, "a master", ignore=(OSError, KeyError), clock=t.clock, sleep=t.sleep) == "up"
    with pytest.raises(TimeoutError, match=r"last: ConnectionError\('refused'\)"):
        wait_until(answers(*[ConnectionError("refused")] * 3), 0.5, "a master", 0.25, ignore=(OSError,),
                   clock=t.clock, sleep=t.sleep)  # fmt: skip


def test_other_errors_end_the_wait() -> None:
    t = FakeTime()
    with pytest.raises(ValueError, match="exited"):
        wait_until(answers(None, ValueError("exited")), 5.0, "a master", ignore=(OSError,),
                   clock=t.clock, sleep=t.sleep)  # fmt: skip
    assert t.slept == [0.1]
