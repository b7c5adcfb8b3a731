"""A task's typed events, derived from what the master records: the spec steps it applies and the facts its borglet reports.

Pure functions, no I/O. An event is `(n, at, kind, detail)`: `n` counts the events of one
task incarnation from 1 (a reader that has seen n=5 knows which are new), `at` is the
master's wall clock when it learned of it, `kind` one of KINDS, `detail` a sentence.

    step (reason)                          -> kind
    submit / update adds the task          -> submitted
    restart (a new incarnation)            -> restarted   (by the job's restart policy)
    schedule                               -> scheduled   "on m3"
    evict (preempted, drained, reclaimed)  -> evicted     "preempted by alice/web/0#0 ..."
    finish                                 -> finished
    fail, reason "exit N"                  -> exited      "exit code N"
    fail, reason "signal N"                -> signaled
    fail, reason "oom"                     -> oom
    fail, reason "spawn: ..." / "setup: .."-> spawn_failed
    lost (machine down, borglet forgot it) -> lost
    kill                                   -> killed
    leader: a death seen, restart delayed  -> backoff     "next incarnation in 4s (failure 3 in a row)"
    borglet: a new process                 -> started     "pid 4711 on m3, port 30001"
    borglet: exited, to restart in place   -> exited / signaled / oom / spawn_failed, every time
    borglet: restarts went up              -> restarted   "in place by its borglet"
    borglet: health changed                -> healthy / unhealthy

Every exit carries how the process ended ("exit code 3"): the borglet reports the last one
(`last_exit`) beside its restart count, so exits between two polls are not lost, and a
process that started and ended between two polls is not reported as `started`.
"""

from __future__ import annotations

from typing import Any

from reference.master import backoff

Event = tuple[int, float, str, str]

KINDS = (
    "submitted", "scheduled", "started", "healthy", "unhealthy", "exited", "signaled", "oom",
    "spawn_failed", "restarted", "backoff", "evicted", "lost", "finished", "killed",
)  # fmt: skip
# The kinds that mean something went wrong: the dashboard and `task show` mark them.
WARNINGS = frozenset(
    {"unhealthy", "exited", "signaled", "oom", "spawn_failed", "backoff", "evicted", "lost", "killed"}
)
EVENTS_LIMIT = 40  # kept per task incarnation, newest last


def exit_kind(reason: str) -> tuple[str, str]:
    """(kind, detail) of a process's end as its borglet words it: 'exit 3', 'signal 9', 'oom',
    'spawn: [Errno 2] ...', 'setup: ...'."""
    if reason == "oom":
        return "oom", "killed by the kernel: over its RAM limit (OOM)"
    if reason.startswith(("spawn:", "setup:")):
        return "spawn_failed", f"could not start its process: {reason}"
    if reason.startswith("signal "):
        return "signaled", f"killed by {reason}"
    if reason.startswith("exit "):
        return "exited", f"exit code {reason.removeprefix('exit ')}"
    return "exited", reason or "failed"


def from_step(
    action: str, reason: str, before: Any, after: Any, restart_policy: str | None = None
) -> tuple[str, str] | None:
    """The event of one spec step on one task (`before`/`after`: spec Tasks, None if absent)."""
    if after is None:
        return None
    state = after.state.value
    if before is None:
        if action == "restart":
            policy = f" (policy {restart_policy})" if restart_policy else ""
            return "restarted", f"new incarnation {after.id.incarnation}{policy}: {reason}"
        return "submitted", reason
    if before.state is after.state:
        return None
    if state == "RUNNING":
        return "scheduled", f"on {after.machine}"
    if state == "PENDING":
        return "evicted", f"from {before.machine}: {reason}"
    cause = after.cause.value if after.cause is not None else ""
    if cause == "finished":
        return "finished", "exit code 0"
    if cause == "failed":
        return exit_kind(reason)
    if cause == "lost":
        return "lost", f"{reason} (was on {before.machine})" if before.machine else reason
    return "killed", reason


ENDS = frozenset({"exited", "signaled", "oom", "spawn_failed", "lost", "finished"})  # how a task died


def started(info: Any) -> bool:
    """Whether a task's process runs as its borglet last said (reports.confirmed, which this
    module cannot import)."""
    return info.seen and info.borglet_state in ("STARTING", "RUNNING") and not backing_off(info)


def backing_off(info: Any) -> bool:
    """Whether a task's borglet reports its process gone and its restart in place to come."""
    return info.borglet_state == "STARTING" and not info.pid and bool(info.reason)


def crash_loop(state: str, info: Any, now: float, restarts: bool = False) -> dict[str, Any] | None:
    """A task's crash loop as `task list`, `job show` and Sigma show it, or None: the task
    waits out a restart back-off, of its borglet (RUNNING, its process gone) or of the master
    (DEAD, a new incarnation to come), or is the not yet started next try of an index that
    failed twice or more in a row. `state` is the spec's (RUNNING, DEAD, ...). `restarts`:
    its job's policy restarts this DEAD task, so a death the leader has not counted yet
    (retry_at 0) shows the back-off it will get (master/backoff.py), when that is a second
    failure or more in a row; without it such a death is no loop (it may stay dead)."""
    retry_at, failures = info.retry_at, info.failures
    if state == "DEAD" and retry_at <= 0 and restarts:
        failures, retry_at = backoff.of_death(info.failures, info.history, now)
        if failures < 2:
            return None
    if state == "DEAD" and retry_at > 0:
        by = "master"
    elif state == "RUNNING" and backing_off(info):
        by, failures = "borglet", info.restarts + 1
    elif state in ("PENDING", "RUNNING") and info.failures >= 2 and not started(info):
        # The next try of an index that failed twice or more in a row, not started yet: still
        # the loop, though not waiting now (its record carries the count and the last exit).
        by = "retry"
    else:
        return None
    last = info.last_exit or info.reason
    if by == "master" and info.retry_at <= 0 and info.history and info.history[-1][0] == "DEAD":
        last = info.history[-1][2] or last  # not counted yet: its fail step's reason, as the leader takes it
    # A death is told by its own event (a loss is no exit); a process restarting in place, and
    # a death no event names, by how its last process ended.
    ends = [e for e in info.events if e[2] in ENDS] if by == "master" else []
    if ends:
        kind, detail = ends[-1][2], ends[-1][3]
    else:
        kind, detail = exit_kind(last) if last else ("exited", "failed")
    loop = {
        "by": by,
        "last_exit": last or None,
        "reason": detail,
        "kind": kind,
        "failures": failures,
        "retry_at": (retry_at or None) if by != "retry" else None,
        "retry_in": round(max(retry_at - now, 0.0), 1) if retry_at and by != "retry" else None,
    }
    loop["text"] = crash_loop_text(loop)
    return loop


def crash_loop_text(loop: dict[str, Any]) -> str:
    """'exit code 3; failure 4, next try in 8s (restart in place)' for `task list` and `job show`."""
    when = f", next try in {loop['retry_in']:.0f}s" if loop.get("retry_in") is not None else ""
    if loop.get("by") == "retry":
        when = ", trying again now"
    how = "restart in place" if loop.get("by") == "borglet" else "new incarnation"
    return f"{loop['reason']}; failure {loop['failures']}{when} ({how})"


def from_report(old: Any, new: Any, machine: str | None) -> list[tuple[str, str]]:
    """Events in the borglet's facts of a running task (`old`/`new`: TaskInfo)."""
    out: list[tuple[str, str]] = []
    # Each restart in place follows an exit; a task backing off now has one more than its
    # restarts say, already counted if it was backing off at the last report.
    ended = new.restarts - old.restarts + backing_off(new) - backing_off(old)
    last = new.last_exit or (new.reason if backing_off(new) else "")
    if last and ended > 0:
        kind, detail = exit_kind(last)
        times = f" ({ended} times since the last report)" if ended > 1 else ""
        out.append((kind, f"{detail}{times}; its borglet restarts it in place"))
    if new.restarts > old.restarts:
        out.append(("restarted", f"in place by its borglet (restart {new.restarts})"))
    if new.started_at and new.started_at != old.started_at:
        where = f" on {machine}" if machine else ""
        port = f", port {new.port}" if new.port else ""
        if new.pid:
            out.append(("started", f"pid {new.pid}{where}{port}"))
        else:  # it ended before any report named its process
            out.append(("started", f"a process{where}{port}, ended before its borglet reported it"))
    if new.healthy is True and old.healthy is not True:
        out.append(("healthy", "its health check passes"))
    elif new.healthy is False and old.healthy is True:
        out.append(("unhealthy", "its health check fails"))
    return out


def append(events: tuple[Event, ...], at: float, items: list[tuple[str, str]]) -> tuple[Event, ...]:
    """The events with `items` added at `at`, numbered on, the oldest dropped past EVENTS_LIMIT."""
    if not items:
        return events
    n = events[-1][0] if events else 0
    added = tuple((n + i + 1, at, kind, detail) for i, (kind, detail) in enumerate(items))
    return (events + added)[-EVENTS_LIMIT:]


def as_json(events: tuple[Event, ...]) -> list[dict[str, Any]]:
    return [{"n": n, "at": at, "kind": kind, "detail": detail} for n, at, kind, detail in events]


def pending_summary(reasons: Any, machines: int) -> str:
    """The scheduler's reasons for one unschedulable task as one line:
    '0 of 4 machines fit: cpu: 1 of 4 machines have 8000m free; constraint ...'."""
    parts = "; ".join(str(r) for r in reasons) or "no reason given"
    return f"0 of {machines} machines fit: {parts}"
