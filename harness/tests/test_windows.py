"""Lost windows on hand-made times: when a machine counts as declared lost (harness/windows.py)."""

from __future__ import annotations

import pytest

from harness.api import parse_machine_events
from harness.observe import Observation
from harness.windows import (
    LOST_GRACE_S,
    SEEN_DOWN_LEAD_S,
    Window,
    back,
    bounced,
    close_all,
    declared_down,
    lost_between,
    lost_from,
    seen,
)
from spec.fmap import FMap
from spec.model import CellState, DeathCause, Task, TaskId, TaskState


def test_lost_from_keeps_the_earliest_start() -> None:
    assert lost_from({}, "m0", 5.0) == {"m0": 5.0}
    # Paused again, or paused, resumed and killed before a poll saw it up: the processes of the
    # first fault may still run, so the window still starts at 2.
    assert lost_from({"m0": 2.0}, "m0", 5.0) == {"m0": 2.0}


def test_close_all_closes_every_open_window_a_grace_later() -> None:
    # An example ends with m0 lost since 3 (removed while paused) and m1 since 7.
    assert close_all({"m0": 3.0, "m1": 7.0}, 20.0) == [Window("m0", 3.0, 30.0), Window("m1", 7.0, 30.0)]
    assert close_all({"m0": 3.0}, 20.0, grace=8.0) == [Window("m0", 3.0, 28.0)]
    assert close_all({}, 20.0) == []


def test_back_closes_the_window_a_grace_later() -> None:
    # Lost since 3, back at 20: the window ends 20 + 10 = 30.
    assert back({"m0": 3.0, "m1": 4.0}, "m0", 20.0) == ({"m1": 4.0}, Window("m0", 3.0, 30.0))
    assert back({"m0": 3.0}, "m0", 20.0, grace=8.0) == ({}, Window("m0", 3.0, 28.0))
    assert back({"m1": 4.0}, "m0", 20.0) == ({"m1": 4.0}, None)  # never lost: nothing to close


@pytest.mark.parametrize(
    ("down_since", "up", "faulted", "after", "closed"),
    [
        # Seen down in a poll at t=50: lost since 50 - 2 = 48.
        ({}, {"m0": False, "m1": True}, set(), {"m0": 48.0}, []),
        # Already lost since 40: stays so.
        ({"m0": 40.0}, {"m0": False}, set(), {"m0": 40.0}, []),
        # Seen up again: back at now=52, the window ends 52 + 10 = 62.
        ({"m0": 40.0}, {"m0": True}, set(), {}, [Window("m0", 40.0, 62.0)]),
        # Seen up but its borglet is still paused (or killed) by the test: still lost.
        ({"m0": 40.0}, {"m0": True}, {"m0"}, {"m0": 40.0}, []),
    ],
)
def test_seen(down_since, up, faulted, after, closed) -> None:
    assert seen(down_since, up, faulted, seen_at=50.0, now=52.0) == (after, closed)


def test_a_bounced_borglet_is_lost_from_a_second_before() -> None:
    assert bounced("m0", 100.0) == Window("m0", 99.0, 100.0 + LOST_GRACE_S)


A = TaskId("u/j", 0, 0)
B = TaskId("u/j", 0, 1)


def observation(t: float, tasks: list[Task], views: dict | None = None) -> Observation:
    return Observation(t, CellState(tasks=FMap({x.id: x for x in tasks})), views or {}, {})


def running(tid: TaskId, machine: str) -> Task:
    return Task(tid, TaskState.RUNNING, machine=machine)


@pytest.mark.parametrize(
    ("after", "windows"),
    [
        # Still running: nothing lost.
        (observation(20.0, [running(A, "m0")]), []),
        # Seen DEAD, cause LOST: m0 lost from 10 - 1 = 9 to 20 + 10 = 30.
        (observation(20.0, [Task(A, TaskState.DEAD, cause=DeathCause.LOST)]), [Window("m0", 9.0, 30.0)]),
        # Killed by a user: not a loss.
        (observation(20.0, [Task(A, TaskState.DEAD, cause=DeathCause.KILLED)]), []),
        # Replaced by incarnation 1 whose history says why: a loss, though A is gone from the view.
        (
            observation(20.0, [running(B, "m1")], {B: {"history": [{"reason": "restart after lost"}]}}),
            [Window("m0", 9.0, 30.0)],
        ),
        (observation(20.0, [running(B, "m1")], {B: {"history": [{"reason": "update"}]}}), []),
    ],
)
def test_lost_between(after, windows) -> None:
    assert lost_between(observation(10.0, [running(A, "m0")]), after) == windows


def test_a_machine_declared_down_between_reads_is_lost_from_before_the_first_until_the_grace() -> None:
    events = [("m1", "down"), ("m1", "up"), ("m2", "up"), ("m3", "removed"), ("m1", "down")]
    assert declared_down(events, 10.0, 14.0, grace=5.0) == [Window("m1", 10.0 - SEEN_DOWN_LEAD_S, 19.0)]
    assert declared_down([("m2", "up")], 10.0, 14.0) == []


def test_machine_events_are_read_from_the_stream_with_the_revision_reached() -> None:
    text = (
        'id: 41\nevent: task\ndata: {"task":"u/j/0#0","kind":"started"}\n\n'
        'id: 42\nevent: machine\ndata: {"machine":"m1","kind":"down"}\n\n'
        'id: 45\nevent: machine\ndata: {"machine":"m1","kind":"up"}\n\n'
        'id: 47\nevent: bookmark\ndata: {"revision":47}\n\n'
    )
    assert parse_machine_events(text, 40) == ([("m1", "down"), ("m1", "up")], 47)
    assert parse_machine_events("", 40) == ([], 40)
