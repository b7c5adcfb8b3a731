"""Lost windows: when a machine counts as declared lost, so a task seen running twice there is forgiven (pure: every time is an argument).

A machine is lost from the moment it stops answering (a borglet paused or killed, a machine
seen down) until its borglet is back and has had `LOST_GRACE_S` to hear from the master that
its old processes are unwanted and kill them. The stateful test keeps the machines lost now
(name -> since when) and hands each window it closes to the double-running check
(`harness.history.double_running`).
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import NamedTuple

from harness.observe import Observation
from spec.model import DeathCause, TaskState

#: How long after a machine is back (or a task on it was lost) its borglet may still run the
#: old process: one master poll to hear it is unwanted, plus the borglet's 3 s kill grace.
LOST_GRACE_S = 10.0
#: A machine first seen down in a poll went down a little before it: polls are this far apart.
SEEN_DOWN_LEAD_S = 2.0
#: A task seen lost between two polls was lost a little before the first: the poll's own length.
LOST_LEAD_S = 1.0


class Window(NamedTuple):
    """An interval during which `machine` counted as declared lost."""

    machine: str
    start: float
    end: float


def lost_from(down_since: Mapping[str, float], name: str, at: float) -> dict[str, float]:
    """`down_since` with `name` lost from `at`, unless it already is: its window starts earlier,
    and a new fault (paused again, its borglet killed) leaves the processes of before running
    as long as the new ones."""
    return dict(down_since) if name in down_since else {**down_since, name: at}


def back(
    down_since: Mapping[str, float], name: str, now: float, grace: float = LOST_GRACE_S
) -> tuple[dict[str, float], Window | None]:
    """`name` is back at `now`: it leaves `down_since`, and its window closes `grace` later
    (None if it was not lost)."""
    if name not in down_since:
        return dict(down_since), None
    rest = {k: v for k, v in down_since.items() if k != name}
    return rest, Window(name, down_since[name], now + grace)


def close_all(down_since: Mapping[str, float], now: float, grace: float = LOST_GRACE_S) -> list[Window]:
    """Every window still open, closed `grace` after `now` (an example ends: its machines are
    put back, and a machine left lost, removed or never seen up again, may still run old
    processes until its borglet hears it should not)."""
    return [Window(name, since, now + grace) for name, since in sorted(down_since.items())]


def seen(
    down_since: Mapping[str, float],
    up: Mapping[str, bool],
    faulted: Container[str],
    seen_at: float,
    now: float,
) -> tuple[dict[str, float], list[Window]]:
    """After a poll at `seen_at` showed each machine up or down (`up`): a machine seen down is
    lost from a little before the poll; one seen up again, and no longer paused or killed by the
    test (`faulted`), is back at `now`."""
    since = dict(down_since)
    closed: list[Window] = []
    for name, is_up in up.items():
        if not is_up and name not in since:
            since[name] = seen_at - SEEN_DOWN_LEAD_S
        elif is_up and name in since and name not in faulted:
            closed.append(Window(name, since.pop(name), now + LOST_GRACE_S))
    return since, closed


def bounced(name: str, now: float) -> Window:
    """A borglet stopped and started again at `now`: its tasks are lost one by one from just
    before, and its machine may run their old processes for `LOST_GRACE_S`."""
    return Window(name, now - LOST_LEAD_S, now + LOST_GRACE_S)


def declared_down(events: list[tuple[str, str]], prev_t: float, now: float, grace: float = LOST_GRACE_S) -> list[Window]:
    """Machines the cell declared down between two reads of its events (`machine` events):
    lost from a little before the first read until `grace` after now, even if no poll saw them down (a
    borglet slow for a second or two, down and up again in between): the master may have
    started elsewhere what their borglets still ran."""
    downs = sorted({m for m, kind in events if kind == "down"})
    return [Window(m, prev_t - SEEN_DOWN_LEAD_S, now + grace) for m in downs]


def lost_between(prev: Observation, obs: Observation) -> list[Window]:
    """Machines that lost a task between two polls: declared lost then, even if no poll saw the
    machine down, since its old process may outlive the new incarnation until the borglet
    hears from the master again. A window per task lost, from a little before the first poll."""
    windows = []
    for tid, t in prev.state.tasks.items():
        if t.state is not TaskState.RUNNING or t.machine is None:
            continue
        same = obs.state.tasks.get(tid)
        if same is not None and same.state is TaskState.DEAD and same.cause is DeathCause.LOST:
            lost = True
        else:  # the cell keeps only the newest incarnation: ask its history why it exists
            now = obs.state.latest(tid.job, tid.index)
            view = obs.task_views.get(now.id, {}) if now is not None and now.id != tid else {}
            lost = any(h.get("reason") == "restart after lost" for h in view.get("history", []))
        if lost:
            windows.append(Window(t.machine, prev.t - LOST_LEAD_S, obs.t + LOST_GRACE_S))
    return windows
