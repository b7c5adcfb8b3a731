"""A link shard's book, pure: what it keeps per machine of its share, and what a poll's read, a relayed sync's answer and the leader's answer to a batch each change in it.

The shard (linkshard.py) holds the threads, the lock, the clock and the sockets; it calls these
under its lock, each on the records it keeps (`Polled`, one per machine), and they change only
those records and the counters handed in: no I/O, no clock, no thread. What each machine last
sent the leader is kept so that the next report goes as a difference from it (`shards.diff`),
named by its version; a machine is `dirty` while it has news the leader has not taken (a new
read, a miss, a refusal whose reason changed). A read after misses is news even if it reads the
same: the leader must hear that the machine is back. Whatever the leader may not hold (a new
leader or term, a batch that did not arrive, its `need_full`) goes whole again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from reference.master import shards
from reference.master.borgletreads import Refused


@dataclass
class Polled:
    report: dict[str, Any] | None = None  # the last report the leader was sent, whole or as a change
    version: int = 0  # counts the reports sent for this machine; a change names its base
    misses: int = 0
    polled_at: float | None = None
    latest: dict[str, Any] | None = None  # the last answer, not sent yet when `dirty`
    dirty: bool = False  # something to send: a new answer, or a miss
    refused: str = ""  # why the borglet refused the last poll (an answer: it is alive)
    synced: int = 0  # sync answers taken as the latest read: a read begun before one is older


def members(replicas: Iterable[str], name: str) -> list[str]:
    """The replicas the machines are shared among: the live ones listed, and `name` (a replica
    counts itself from its start, before its registration shows)."""
    return sorted(set(replicas) | {name})


def share(cell: Any, name: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The machines replica `name` polls, name -> borglet address: those it owns among the
    members of the cell view `cell`, and those the leader handed it (`extra`, reach.py) that are
    still in the cell."""
    owners = shards.pollers(members(cell.replicas, name), shards.leader_name(cell.leader))
    out: dict[str, str] = {}
    if name in owners:  # the leader, while another replica polls, owns none: only what is handed to it
        for m in cell.state.machines:
            address = cell.machines[m].address if m in cell.machines else ""
            if address and shards.top(m, owners) == name:
                out[m] = address
    for m, address in extra.items():
        if m in cell.state.machines and address:
            out.setdefault(m, address)
    return out


def new_term(machines: Iterable[Polled]) -> None:
    """A new leader holds none of the reports the changes would be based on; nor does a new
    term of the same replica (it lost its lease and won it again): all go whole, with any news."""
    for p in machines:
        p.report = None
        p.dirty = p.latest is not None or p.misses > 0


def take_read(p: Polled, reply: dict[str, Any] | Refused | None) -> None:
    """A poll's read of the machine: its state, a refusal, or None (no answer: a miss)."""
    if reply is None:
        p.misses += 1
        p.report = p.latest = None  # the answer after a silence goes whole
        p.refused = ""
        p.dirty = True
    elif isinstance(reply, Refused):
        # Alive, but refusing this cell's requests: not a miss. Its reason is news when it
        # changes (and after misses); the leader keeps it meanwhile.
        p.dirty = p.dirty or p.misses > 0 or p.refused != reply.reason
        p.misses = 0
        p.refused = reply.reason
        p.report = p.latest = None
    else:
        p.refused = ""
        p.dirty = p.dirty or p.misses > 0 or p.report is None or (reply is not p.latest and reply != p.latest)
        p.misses = 0
        p.latest = reply


def take_sync(p: Polled, state: dict[str, Any]) -> None:
    """A borglet's answer to a relayed sync (its state), taken as the machine's latest read: a
    read begun before it is older (`synced` tells the shell so)."""
    p.synced += 1
    p.dirty = p.dirty or p.misses > 0 or p.report is None or state != p.latest
    p.misses, p.refused, p.latest = 0, "", state


def whole_again(machines: Mapping[str, Polled], names: Iterable[str]) -> None:
    """The machines named go whole in the next batch: the leader may not hold their last report."""
    for m in names:
        if m in machines:
            machines[m].report = None
            machines[m].dirty = True


def batch_entries(
    machines: Mapping[str, Polled], sent: MutableMapping[str, int], limit: int
) -> tuple[dict[str, Any], dict[str, int], dict[str, str]]:
    """What changed since the last batch, for at most `limit` machines: the reports (whole, or
    a change naming its base), the machines' misses, and the refusals; `sent` counts them. The
    machines taken are no longer dirty, and what they are sent is their report from now on."""
    reports: dict[str, Any] = {}
    missed: dict[str, int] = {}
    refused: dict[str, str] = {}
    for m, p in machines.items():
        if len(reports) + len(missed) + len(refused) >= limit:
            break
        if not p.dirty:
            continue
        p.dirty = False
        if p.latest is None:
            if p.misses:
                missed[m] = p.misses
            elif p.refused:
                refused[m] = p.refused
            continue
        if p.report is None:
            p.version += 1
            reports[m] = {"version": p.version, "report": p.latest}
            sent["whole"] += 1
        else:
            change = shards.diff(p.report, p.latest)
            if not change:
                sent["unchanged"] += 1
                continue
            p.version += 1
            reports[m] = {"version": p.version, "base": p.version - 1, "change": change}
            sent["changes"] += 1
            sent["entries"] += shards.size(change)
        p.report = p.latest
    return reports, missed, refused


def percentiles(values: list[float]) -> dict[str, float | int]:
    """Nearest-rank percentiles of `values`, sorted."""
    if not values:
        return {"count": 0}

    def rank(q: float) -> float:
        return round(values[min(len(values) - 1, max(0, math.ceil(len(values) * q / 100) - 1))], 4)  # nearest rank

    return {
        "count": len(values),
        "p50": rank(50),
        "p95": rank(95),
        "p99": rank(99),
        "max": round(values[-1], 4),
    }
