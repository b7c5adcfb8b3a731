"""When the leader's poller contacts each machine, and when it declares one down (pure functions of one machine's schedule and the time).

A machine is synced every `interval` seconds (the poller's `sync_every`), and at once when its desired set changed. One
whose report blocks a held-back task is synced every `HOLD_POLL_S` meanwhile; a refused sync
(an answer: the machine is alive) is retried within `REFUSED_RETRY_S`. A removed machine whose
syncs went unanswered `down_after` times in a row is taken as down (the link shards tell
whether a machine in the cell is, `reach.judge`). Usage alone is written every `USAGE_WRITE_EVERY_S`.

Times are the poller's clock (monotonic); each function returns the new schedule and changes
nothing, so the poller applies it under its lock.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

USAGE_WRITE_EVERY_S = 10.0  # usage alone is written this rarely: it changes every second
HOLD_POLL_S = 0.2  # how often a machine whose task blocks a held one is polled
REFUSED_RETRY_S = 0.2  # a refused sync (not of a newer epoch) is retried this soon
# What each machine should run is brought up to date when the cell or a report changed,
# which during a burst is every turn: from the changed keys (master/desired.py), or from the
# whole cell where they are not known (a reload). A rebuild is followed by a pause of this many
# times its own length, so rebuilding takes at most a fifth of the leader's time: a whole-cell
# rebuild of 10,000 tasks took about 0.1 s, syncs then went out every half second instead of
# every 50 ms, and the lease, the API and the writer kept the rest.
REBUILD_PAUSE_FACTOR = 4.0
REBUILD_PAUSE_MAX_S = 2.0
# A rebuild's pause is also at least this many times the CPU it used: paced on its wall time
# alone, a leader whose session weighs more than the machines' (reference/cpuweight.py)
# rebuilt as fast as it got the CPU, a fifth of a core through a 10,000-task start, taken
# from the starts. Paced on both, rebuilding costs at most a tenth of a core.
REBUILD_CPU_PAUSE_FACTOR = 9.0


@dataclass(frozen=True)
class Schedule:
    """One machine's poll times as the poller keeps them."""

    next_at: float = 0.0  # the next regular poll
    sent_at: float = 0.0  # when the last sync was sent
    misses: int = 0  # polls in a row without an answer
    usage_written_at: float = 0.0


def sync_due(s: Schedule, now: float, blocking: bool) -> bool:
    """Whether a machine's poll time came: its next regular poll, or, when it blocks a held
    task, `HOLD_POLL_S` after its last sync. (A changed desired set is sent at once, due or not.)"""
    due = min(s.next_at, s.sent_at + HOLD_POLL_S) if blocking else s.next_at
    return now >= due


def sync_sent(s: Schedule, now: float, interval: float) -> Schedule:
    """A sync went out at `now` (built directly, not with dataclasses.replace: it runs for
    every sync sent)."""
    return Schedule(now + interval, now, s.misses, s.usage_written_at)


def sync_skipped(s: Schedule, now: float, interval: float) -> Schedule:
    """A regular sync came due at `now` and was not sent (the borglet holds the set it would
    carry): the next is due `interval` later."""
    return replace(s, next_at=now + interval)


def answered(s: Schedule) -> Schedule:
    """The machine answered a sync: it is alive."""
    return replace(s, misses=0)


def refused(s: Schedule, now: float) -> Schedule:
    """The machine refused a sync (not for a newer epoch): alive, and retried soon."""
    return replace(s, misses=0, next_at=min(s.next_at, now + REFUSED_RETRY_S))


def missed(s: Schedule) -> Schedule:
    """A poll got no answer (or a refusal for a newer epoch, which this leader cannot fix)."""
    return replace(s, misses=s.misses + 1)


def is_down(s: Schedule, down_after: int) -> bool:
    """Whether the machine missed enough polls in a row to be declared down."""
    return s.misses >= down_after


def usage_due(s: Schedule, now: float) -> bool:
    """Whether an answer at `now` also writes the machine's and its tasks' usage."""
    return now - s.usage_written_at >= USAGE_WRITE_EVERY_S


def usage_written(s: Schedule, now: float) -> Schedule:
    """The usage was written at `now`."""
    return replace(s, usage_written_at=now)


def next_rebuild(now: float, took: float, cpu: float = 0.0) -> float:
    """When the desired sets may be rebuilt again after a rebuild that started at `now`, took
    `took` seconds and `cpu` seconds of its thread's CPU: a pause of REBUILD_PAUSE_FACTOR times
    its length or REBUILD_CPU_PAUSE_FACTOR times its CPU, the longer, at most
    REBUILD_PAUSE_MAX_S."""
    return now + took + min(REBUILD_PAUSE_MAX_S, max(REBUILD_PAUSE_FACTOR * took, REBUILD_CPU_PAUSE_FACTOR * cpu))
