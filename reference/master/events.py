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
    borglet: a new process                 -> started     "pid 4711 on m3, port 30001"
    borglet: exited, to restart in place   -> exited / signaled / oom
    borglet: restarts went up              -> restarted   "in place by its borglet"
    borglet: health changed                -> healthy / unhealthy
"""

from __future__ import annotations

from typing import Any

Event = tuple[int, float, str, str]

KINDS = (
    "submitted", "scheduled", "started", "healthy", "unhealthy", "exited", "signaled", "oom",
    "spawn_failed", "restarted", "evicted", "lost", "finished", "killed",
)  # fmt: skip
# The kinds that mean something went wrong: the dashboard and `task show` mark them.
WARNINGS = frozenset({"unhealthy", "exited", "signaled", "oom", "spawn_failed", "evicted", "lost", "killed"})
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


def from_report(old: Any, new: Any, machine: str | None) -> list[tuple[str, str]]:
    """Events in the borglet's facts of a running task (`old`/`new`: TaskInfo)."""
    out: list[tuple[str, str]] = []
    if new.borglet_state == "STARTING" and not new.pid and new.reason and new.reason != old.reason:
        kind, detail = exit_kind(new.reason)
        out.append((kind, f"{detail}; its borglet restarts it in place"))
    if new.restarts > old.restarts:
        out.append(("restarted", f"in place by its borglet (restart {new.restarts})"))
    if new.started_at and new.started_at != old.started_at:
        where = f" on {machine}" if machine else ""
        port = f", port {new.port}" if new.port else ""
        out.append(("started", f"pid {new.pid or '?'}{where}{port}"))
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
