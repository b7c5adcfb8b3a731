"""How fresh a replica's watch cache is, and whether a read may be answered from it (pure functions).

A replica's cache is only as current as the last message its etcd watch delivered: an event,
or a progress notification (our members send one a second on an idle watch). Its age is
measured on the replica's own monotonic clock from that moment. A read is refused (503 with
Retry-After) when the age exceeds the replica's bound, unless the client asked for a possibly
stale answer; a read carrying a revision floor (`X-Minborg-Min-Revision` or `min_revision`)
is answered only once the cache has reached that revision.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MIN_REVISION_HEADER = "X-Minborg-Min-Revision"
MIN_REVISION_QUERY = "min_revision"
MIN_REVISION_PATTERN = r"^\s*[0-9]*\s*$"  # what parse_min_revision takes (blank: no floor)
ALLOW_STALE_HEADER = "X-Minborg-Allow-Stale"
ALLOW_STALE_QUERY = "allow_stale"

# Three progress intervals: one late notification on a loaded host is not an outage.
DEFAULT_MAX_STALENESS_S = 3.0
# How long a read waits for the cache to reach a client's revision floor. A healthy
# replica's watch delivers a committed write within milliseconds; waiting longer would only
# hold the client on a replica that is behind.
MIN_REVISION_WAIT_S = 1.0

# Retry-After on a refused read: a cut-off replica may recover any moment, and a client with
# other replicas should move on to them at once rather than wait here.
RETRY_AFTER_S = 1

_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Refusal:
    """Why a read is not answered: always 503, with Retry-After in whole seconds."""

    field: str
    error: str
    retry_after_s: int


def cache_age(now: float, heard_at: float | None) -> float:
    """Seconds since etcd was last heard (infinite if never); never negative."""
    if heard_at is None:
        return math.inf
    return max(0.0, now - heard_at)


def parse_min_revision(header: str | None, query: str | None) -> int | None:
    """The client's revision floor from the header or the query (the larger if both); ValueError if malformed."""
    floors = []
    for where, text in ((MIN_REVISION_HEADER, header), (MIN_REVISION_QUERY, query)):
        if text is None or text.strip() == "":
            continue
        if not re.fullmatch(r"-?[0-9]+", text.strip()):  # not int()'s '+5', '1_000' or other scripts' digits
            raise ValueError(f"{where} must be a whole etcd revision, got {text!r}")
        floor = int(text.strip())
        if floor < 0:
            raise ValueError(f"{where} must not be negative, got {floor}")
        floors.append(floor)
    return max(floors) if floors else None


def allows_stale(header: str | None, query: str | None) -> bool:
    """Whether the client accepts an answer from a cache of any age (like a Consul `?stale` read)."""
    return any(v is not None and v.strip().lower() in _TRUE for v in (header, query))


def too_old(age_s: float, bound_s: float) -> Refusal | None:
    """A refusal if the cache is older than the bound, else None."""
    if age_s <= bound_s:
        return None
    heard = "has never heard from etcd" if math.isinf(age_s) else f"has not heard from etcd for {age_s:.1f} s"
    return Refusal(
        "",
        f"this replica {heard} (bound {bound_s:g} s): its cache may be stale; retry or ask another replica",
        RETRY_AFTER_S,
    )


def below_floor(revision: int, floor: int | None) -> Refusal | None:
    """A refusal if the cache has not reached the client's revision floor, else None."""
    if floor is None or revision >= floor:
        return None
    return Refusal(
        MIN_REVISION_QUERY,
        f"this replica's cache is at revision {revision}, below the requested {floor}; retry or ask another replica",
        RETRY_AFTER_S,
    )


def needs_wait(revision: int, floor: int | None) -> bool:
    """Whether a read must wait for the cache to catch up before it can be answered."""
    return floor is not None and revision < floor


def readiness(age_s: float, bound_s: float, revision: int) -> dict[str, object]:
    """The readiness fields of /healthz and /readyz."""
    refusal = too_old(age_s, bound_s)
    body: dict[str, object] = {
        "ready": refusal is None,
        "revision": revision,
        "cache_age_s": None if math.isinf(age_s) else round(age_s, 3),
        "max_staleness_s": bound_s,
    }
    if refusal is not None:
        body["reason"] = refusal.error
    return body
