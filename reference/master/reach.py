"""Whether a silent machine is down, and which replicas poll it meanwhile (pure functions of what the shards said).

A replica's link shard can lose its borglets while the borglets are fine: a partition between
that replica and the machines, not a machine failure. Borg cannot tell the two apart from one
observer, so it slows down what it does about unreachable machines; here a machine is declared
down only when no replica that should reach it can:

- Every replica's shard tells the leader, per machine it polls, the outcome of its last poll
  (a `Sighting`): answered (a report), refused (the borglet answered but refused the replica's
  signature: alive, but no channel) or how many polls in a row it missed. A shard sends a miss
  at once, so a replica heard from lately whose last word on a machine was an answer still
  reaches it. A refusal hands the machine over as a miss does, so that another replica's
  signature is tried, but it never counts towards down: what a machine refused by every
  replica comes to is shardreports.py's (the borglet is asked to stand down first).
- The owner (`shards.owner`) polls a machine alone while it answers. Once the owner misses it,
  the machine is handed to every replica (`pollers`): each polls it too, and the owner goes on
  polling to see it come back; once the owner answers again, it polls alone again.
- The machine is down when every replica heard from lately has missed it `down_after` polls in
  a row, or has had the hand-over for `grace_s` and still said nothing of it (an old replica, or
  one whose own polls cannot get through: it cannot vouch for the machine either way).

What replicas count is decided by the caller: the live replicas the leader heard a batch from
within its freshness bound. A replica the leader does not hear from cannot vouch, and cannot
hold a machine up. Times are the leader's clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from reference.master import shards


@dataclass(frozen=True)
class Sighting:
    """A replica's last word on one machine."""

    answered: bool
    misses: int = 0  # polls in a row without an answer (0 when answered)
    refused: str = ""  # the borglet answered but refused this replica's requests: why


@dataclass(frozen=True)
class Verdict:
    down: bool
    pollers: tuple[str, ...]  # the replicas that should poll it now, the owner first
    reason: str = ""


def ranked(machine: str, replicas: Iterable[str], leader: str | None = None) -> tuple[str, ...]:
    """The replicas by rendezvous weight for `machine`, highest (the owner) first; the `leader`
    last while another is there (it owns no machine then: `shards.pollers`)."""
    order = sorted(set(replicas), key=lambda r: (shards.weight(r, machine), r), reverse=True)
    if leader in order and len(order) > 1:
        order.remove(leader)
        order.append(leader)
    return tuple(order)


def judge(
    machine: str,
    replicas: Iterable[str],
    sightings: Mapping[str, Sighting],
    down_after: int,
    *,
    handed_at: float | None,
    now: float,
    grace_s: float,
    leader: str | None = None,
) -> Verdict:
    """Whether `machine` is down and who polls it, from the `replicas` that can vouch (heard
    from lately) and their `sightings` of it. `handed_at`: when the owner's miss handed it to
    the others (None while it has not)."""
    order = ranked(machine, replicas, leader)
    if not order:
        return Verdict(False, ())
    owner = order[0]
    said = {r: sightings[r] for r in order if r in sightings}
    own = said.get(owner)
    handed = own is not None and not own.answered
    pollers = order if handed else (owner,)
    if any(s.answered for s in said.values()):
        return Verdict(False, pollers)
    waited = handed_at is not None and now - handed_at >= grace_s
    for r in order:
        s = said.get(r)
        if s is None:
            if not waited:
                return Verdict(False, pollers)  # handed over lately: its polls are still to come
            continue
        if s.misses < down_after:
            return Verdict(False, pollers)
    if not said:
        return Verdict(False, pollers)
    counts = ", ".join(f"{r} {s.misses}" for r, s in said.items())
    return Verdict(True, pollers, f"no replica reached machine {machine} (polls missed in a row: {counts})")
